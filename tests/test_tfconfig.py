import json

import pytest
from tfmw_notebook.protocol import devices, tfconfig
from tfmw_notebook.protocol.tfconfig import EngineReport

pytestmark = [pytest.mark.unit, pytest.mark.timeout(30)]


def report(eid, host="a", address="10.0.0.1", port=None, pid=100):
    return EngineReport(engine_id=eid, host=host, address=address, port=port or 5000 + eid,
                        pid=pid + eid)


def test_ranks_are_stable_whatever_order_engines_answer_in():
    answers = [report(3, "b"), report(1, "a"), report(2, "b"), report(0, "a")]
    ranked = tfconfig.order_ranks(answers)
    assert [r.engine_id for r in ranked] == [0, 1, 2, 3]
    assert [r.engine_id for r in tfconfig.order_ranks(list(reversed(answers)))] == [0, 1, 2, 3]


def test_hosts_are_grouped_and_local_ranks_count_per_host():
    ranked = tfconfig.order_ranks([report(0, "b"), report(1, "a"), report(2, "b"), report(3, "a")])
    assert [(r.host, r.engine_id) for r in ranked] == [("a", 1), ("a", 3), ("b", 0), ("b", 2)]
    assert tfconfig.local_ranks(ranked) == [0, 1, 0, 1]


def test_tf_config_lists_every_worker_and_names_the_rank():
    ranked = tfconfig.order_ranks([report(0), report(1, address="::1")])
    config = tfconfig.tf_config(ranked, 1)
    assert config == {"cluster": {"worker": ["10.0.0.1:5000", "[::1]:5001"]},
                      "task": {"type": "worker", "index": 1}}
    with pytest.raises(ValueError, match="rank 2 out of range for 2 workers"):
        tfconfig.tf_config(ranked, 2)


def test_duplicate_engines_or_endpoints_are_refused():
    with pytest.raises(ValueError, match="duplicate engine ids"):
        tfconfig.order_ranks([report(0), report(0)])
    with pytest.raises(ValueError, match="both reported 10.0.0.1:7000"):
        tfconfig.check_endpoints([report(0, port=7000), report(1, port=7000)])


def test_gpus_hidden_unless_asked_and_split_per_local_rank():
    assert devices.visible_devices(0, 0) == "-1"
    assert devices.visible_devices(1, 0) == "-1"
    assert devices.visible_devices(0, 2) == "0,1"
    assert devices.visible_devices(1, 2) == "2,3"
    with pytest.raises(ValueError):
        devices.visible_devices(0, -1)


def test_worker_environment_is_complete_before_tensorflow_loads():
    ranked = tfconfig.order_ranks([report(0), report(1), report(2, host="b")])
    env = tfconfig.worker_environment(ranked, 2, devices="0", keras=2)
    assert json.loads(env["TF_CONFIG"])["task"]["index"] == 2
    assert env["TF_USE_LEGACY_KERAS"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == "0"
    assert env["TF_CPP_MIN_LOG_LEVEL"] == "2"
    assert all(isinstance(v, str) for v in env.values())
    assert tfconfig.worker_environment(ranked, 0)["CUDA_VISIBLE_DEVICES"] == "-1"


def test_engines_that_already_are_workers_are_reused_in_their_own_order():
    def config(index):
        return json.dumps({"cluster": {"worker": ["h:1", "h:2"]},
                           "task": {"type": "worker", "index": index}})

    fresh = [report(0), report(1)]
    assert tfconfig.existing_workers(fresh) is None
    reused = tfconfig.existing_workers([
        EngineReport(7, "h", "x", 9, 70, config(1), devices="1"),
        EngineReport(8, "h", "x", 9, 80, config(0), devices="0")])
    assert [(r.engine_id, r.endpoint) for r in reused] == [(8, "h:1"), (7, "h:2")]
    assert [r.devices for r in reused] == ["0", "1"]   # what each worker was given
    with pytest.raises(ValueError, match="already are TensorFlow workers"):
        tfconfig.existing_workers([EngineReport(7, "h", "x", 9, 70, config(1)), report(1)])


def test_the_keras_choice_is_in_the_environment_tensorflow_reads_at_import():
    ranked = tfconfig.order_ranks([report(0), report(1)])
    assert tfconfig.worker_environment(ranked, 0, keras=3)["TF_USE_LEGACY_KERAS"] == "0"
    assert tfconfig.worker_environment(ranked, 0, keras=2)["TF_USE_LEGACY_KERAS"] == "1"
    assert tfconfig.launch_environment(0, keras=3)["TF_USE_LEGACY_KERAS"] == "0"
    with pytest.raises(ValueError, match="Expected one of"):
        tfconfig.keras_environment(1)


def test_launch_environment_lets_tensorflow_be_imported_early_whatever_the_gpus():
    env = tfconfig.launch_environment(0, keras=2)
    assert env == {"TF_USE_LEGACY_KERAS": "1", "TF_CPP_MIN_LOG_LEVEL": "2",
                   "CUDA_VISIBLE_DEVICES": "-1"}
    assert "TF_CONFIG" not in env  # not known before the handshake, not needed at import
    # GPUs wanted: each worker's CUDA_VISIBLE_DEVICES comes at its bootstrap, and the
    # engine's own (a user's) must reach the handshake untouched.
    for wanted in ("auto", 1):
        assert tfconfig.launch_environment(wanted, keras=3) == {
            "TF_USE_LEGACY_KERAS": "0", "TF_CPP_MIN_LOG_LEVEL": "2"}


def test_grpc_options_add_a_fast_first_reconnect_and_keep_the_engines_own():
    assert tfconfig.grpc_options(None) == "grpc.initial_reconnect_backoff_ms=50"
    assert tfconfig.grpc_options("") == "grpc.initial_reconnect_backoff_ms=50"
    assert tfconfig.grpc_options("grpc.keepalive_time_ms=60000") == (
        "grpc.keepalive_time_ms=60000,grpc.initial_reconnect_backoff_ms=50")
    # A value the engine's environment already sets is theirs to keep.
    assert tfconfig.grpc_options("grpc.initial_reconnect_backoff_ms=500,a=1") == (
        "grpc.initial_reconnect_backoff_ms=500,a=1")
