"""`ipcluster start` run as a recipe of docs/several-machines.md says, on the login node
(this machine).

The recipe's `c.X = ...` lines become the profile's `ipcluster_config.py`, its
`ipcluster start ...` runs in a login shell (this virtualenv active, the site's settings in
`env`), and its `ipcluster stop ...` ends it (tests/doc_recipes.py reads the recipe).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

from doc_recipes import Recipe
from test_multihost import wait_for

# `ipcluster start` tears its whole cluster down when its engines stop within this many
# seconds of their start (IPClusterStart.early_shutdown); a user's job is older.
EARLY_SHUTDOWN_SECONDS = 30


def login_shell_env(site: dict[str, str]) -> dict[str, str]:
    """A shell on the login node: this virtualenv active, the site's settings (`site`)."""
    path = os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", "")
    return dict(os.environ, PATH=path, **site)


class RecipeIpcluster:
    """The recipe's `ipcluster start`, its config in `profile_dir`, its output in a log."""

    def __init__(self, recipe: Recipe, profile_dir: str, workdir: str, site: dict[str, str]):
        self.recipe, self.env = recipe, login_shell_env(site)
        os.makedirs(profile_dir, exist_ok=True)
        self.config = os.path.join(profile_dir, "ipcluster_config.py")
        assert not os.path.exists(self.config), f"another test left {self.config}"
        with open(self.config, "w") as f:
            f.write("c = get_config()  # noqa: F821\n" + "\n".join(recipe.config) + "\n")
        (command,) = [c for c in recipe.commands if c.startswith("ipcluster start ")]
        (self.stop_command,) = [c for c in recipe.commands if c.startswith("ipcluster stop ")]
        self.log = os.path.join(workdir, "ipcluster.log")
        self.started = time.monotonic()
        with open(self.log, "ab") as log:
            self.process = subprocess.Popen(
                ["sh", "-c", command], cwd=workdir, stdin=subprocess.DEVNULL, stdout=log,
                stderr=log, env=self.env, start_new_session=True)
        cluster_id = command.split("--cluster-id=")[1].split()[0]
        self.cluster_file = os.path.join(profile_dir, "security", f"cluster-{cluster_id}.json")
        wait_for(lambda: os.path.exists(self.cluster_file) or self.process.poll() is not None,
                 60, "ipcluster's cluster file")
        assert self.process.poll() is None, self.output()

    def wait_past_early_shutdown(self) -> None:
        """Until ipcluster no longer takes an ended job for engines that failed to start
        (it logs so; its clock starts once the launcher runs, after the controller's start)."""
        wait_for(lambda: "Engines appear to have started successfully" in self.output(tail=10**7),
                 EARLY_SHUTDOWN_SECONDS + 60, "ipcluster's early-shutdown window to pass")

    def output(self, tail: int = 3000) -> str:
        with open(self.log, errors="replace") as f:
            return f.read()[-tail:]

    def stop(self) -> subprocess.CompletedProcess:
        """The recipe's way to end the cluster (`ipcluster stop --cluster-id=...`)."""
        done = subprocess.run(["sh", "-c", self.stop_command], capture_output=True, text=True,
                              timeout=90, env=self.env)
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, 9)
            self.process.wait(timeout=10)
        return done

    def close(self) -> None:
        """Stop it if it still runs, and remove the config this test wrote."""
        try:
            if self.process.poll() is None:
                self.stop()
        finally:
            if os.path.exists(self.config):   # a test may close it before its fixture does
                os.remove(self.config)


def named_at(out, text: str, ended: float) -> float:
    """When the cell first showed `text`: in a stream, else in its error (at its end)."""
    for when, _, chunk in out.stream_times:
        if text in chunk:
            return when
    assert text in out.error_text, f"{text!r} never shown:\n{out.stderr}\n{out.error_text}"
    return ended
