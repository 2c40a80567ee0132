"""Browser tests: real JupyterLab 4 / Notebook 7 pages in Chromium, driven by Playwright.

They skip only where no Chromium is installed (`.ci/run` installs Debian's). Screenshots
go to test-output/browser/ at the repository's root.
"""

import json
import os

import pytest
from jupyter_app import JupyterApp, chromium_path, copy_notebooks

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCREENSHOTS = os.path.join(ROOT, "test-output", "browser")
# Every cell rendered (JupyterLab 4 renders only the cells in view by default), no pop-ups.
USER_SETTINGS = {
    "@jupyterlab/notebook-extension/tracker.jupyterlab-settings": {"windowingMode": "none"},
    "@jupyterlab/apputils-extension/notification.jupyterlab-settings": {
        "fetchNews": "false", "checkForUpdates": False},
}


def pytest_configure(config):
    config.addinivalue_line("markers", "browser: drives JupyterLab / Notebook 7 in Chromium")


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/browser/" in str(item.fspath).replace(os.sep, "/"):
            item.add_marker(pytest.mark.browser)


@pytest.fixture(scope="session")
def browser():
    path = chromium_path()
    if path is None:
        pytest.skip("no Chromium here: `apt-get install chromium` (Debian) to run browser tests")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=path, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


@pytest.fixture
def screenshots(request):
    folder = os.path.join(SCREENSHOTS, request.node.name)
    os.makedirs(folder, exist_ok=True)
    return folder


def _settings_dir(path):
    for name, values in USER_SETTINGS.items():
        plugin, file = name.rsplit("/", 1)
        os.makedirs(os.path.join(path, plugin), exist_ok=True)
        with open(os.path.join(path, plugin, file), "w") as out:
            json.dump(values, out)
    return path


@pytest.fixture
def start_app(tmp_path, ipython_dir):
    """start_app("lab" | "notebook") -> a running server over a copy of notebooks/."""
    started = []

    def start(app):
        root = copy_notebooks(os.path.join(ROOT, "notebooks"), str(tmp_path / f"{app}-root"))
        env = {"JUPYTERLAB_SETTINGS_DIR": _settings_dir(str(tmp_path / f"{app}-settings")),
               # A workspace of its own: no tabs (and kernels) restored from another test.
               "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / f"{app}-workspaces"),
               "JUPYTER_RUNTIME_DIR": str(tmp_path / f"{app}-runtime"),
               "IPYTHONDIR": ipython_dir}
        server = JupyterApp(app, root, env=env)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
