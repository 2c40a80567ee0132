"""An engine that already is a worker says so in its handshake (its TF_CONFIG), so that
`attach` keeps it as it is rather than bootstrap it again ("this engine is already a
worker"). Pure: the shared strategy is a stand-in object, set and cleared by the test."""

import pytest
from tfmw_notebook.worker.boot import handshake
from tfmw_notebook.worker.common import shared_strategy

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


@pytest.fixture
def installed():
    before = shared_strategy._installed.shared
    yield shared_strategy._installed
    shared_strategy._installed.shared = before


def test_a_fresh_engine_has_no_worker_config(installed, monkeypatch):
    installed.shared = None
    monkeypatch.setenv("TF_CONFIG", '{"cluster": {}}')
    assert handshake.current_tf_config() is None


def test_a_worker_engine_gives_its_tf_config(installed, monkeypatch):
    installed.shared = object()     # what the bootstrap installs: the cluster's one strategy
    monkeypatch.setenv("TF_CONFIG", '{"task": {"type": "worker", "index": 1}}')
    assert handshake.current_tf_config() == '{"task": {"type": "worker", "index": 1}}'
