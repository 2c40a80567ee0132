"""GPUs by default, the pure parts: each host's GPUs split evenly among its workers
(protocol/devices.py), and how an engine finds the GPUs it may share
(worker/boot/gpus.py) with a fake `nvidia-smi` or a fake NVML module.

The same layouts run on real engines in test_gpus_start.py, test_gpus_attach.py and
test_gpus_multihost.py.
"""

from __future__ import annotations

import os
import sys
import time
import types

import pytest
from tfmw_notebook.protocol import devices
from tfmw_notebook.protocol.devices import DeviceSplitError, assign_devices
from tfmw_notebook.protocol.tfconfig import EngineReport, order_ranks
from tfmw_notebook.worker.boot import gpus, handshake

import fake_gpus

pytestmark = [pytest.mark.unit, pytest.mark.timeout(60)]


def found(count: int, tag: str = "0", names: list[str] | None = None):
    """What an engine reports: (CUDA_VISIBLE_DEVICES value, UUID) per GPU it may share."""
    values = names or [str(i) for i in range(count)]
    return tuple((value, f"GPU-{tag}-{i}") for i, value in enumerate(values))


def workers(*hosts: tuple[str, int, tuple]) -> list[EngineReport]:
    """(host, workers, gpus each reports) -> ranked reports."""
    reports, eid = [], 0
    for host, count, seen in hosts:
        for _ in range(count):
            reports.append(EngineReport(eid, host, "10.0.0.1", 5000 + eid, 100 + eid,
                                        gpus=seen))
            eid += 1
    return order_ranks(reports)


# -- the split -----------------------------------------------------------------


def test_four_gpus_two_workers_two_each():
    assert assign_devices(workers(("a", 2, found(4))), "auto") == ["0,1", "2,3"]


def test_two_hosts_with_two_gpus_and_two_workers_each():
    ranked = workers(("a", 2, found(2, "a")), ("b", 2, found(2, "b")))
    assert assign_devices(ranked, "auto") == ["0", "1", "0", "1"]


def test_three_gpus_two_workers_is_one_line_saying_what_to_pass():
    with pytest.raises(DeviceSplitError) as caught:
        assign_devices(workers(("a", 2, found(3))), "auto")
    assert str(caught.value) == (
        "host a has 3 GPUs for 2 workers, which do not split evenly (never two workers on one "
        "GPU): pass --gpus-per-worker 1 (leaves 1 idle), -n 3 (one GPU each), or "
        "--gpus-per-worker 0 to train on the CPU")


def test_fewer_gpus_than_workers_never_puts_two_on_one():
    with pytest.raises(DeviceSplitError, match=r"host a has 1 GPU for 2 workers.*: pass -n 1 "):
        assign_devices(workers(("a", 2, found(1))), "auto")
    # Two hosts: the -n that fixes it counts every worker.
    with pytest.raises(DeviceSplitError, match=r"host b has 2 GPUs for 3 workers, .*: pass -n 4 "
                                               r"with 2 workers on b \(one GPU each\)"):
        assign_devices(workers(("a", 2, found(2, "a")), ("b", 3, found(2, "b"))), "auto")


def test_a_users_cuda_visible_devices_is_the_set_to_share():
    # The engines report what their CUDA_VISIBLE_DEVICES=2,3 names (see shareable below).
    ranked = workers(("a", 2, found(2, names=["2", "3"])))
    assert assign_devices(ranked, "auto") == ["2", "3"]


def test_no_gpus_is_the_cpu_as_before():
    assert assign_devices(workers(("a", 2, ())), "auto") == ["-1", "-1"]
    # A host without GPUs next to one with: each as it is.
    assert assign_devices(workers(("a", 1, found(2)), ("b", 1, ())), "auto") == ["0,1", "-1"]


def test_zero_hides_every_gpu():
    assert assign_devices(workers(("a", 2, found(4))), 0) == ["-1", "-1"]


def test_an_explicit_count_is_checked_against_the_gpus_found():
    assert assign_devices(workers(("a", 2, found(4))), 1) == ["0", "1"]
    assert assign_devices(workers(("a", 2, found(4))), 2) == ["0,1", "2,3"]
    with pytest.raises(DeviceSplitError) as caught:
        assign_devices(workers(("a", 2, found(4))), 3)
    assert str(caught.value) == ("2 workers x 3 GPUs need 6 GPUs on host a, which has 4: "
                                 "pass --gpus-per-worker 2 or -n 1 or --gpus-per-worker 0 "
                                 "for the CPU")
    # None found (no nvidia-smi, no NVML): trusted by position per host, as before.
    assert assign_devices(workers(("a", 2, ()), ("b", 1, ())), 2) == ["0,1", "2,3", "0,1"]


def test_engines_of_one_host_with_their_own_gpus_each_keep_theirs():
    # A batch system gave each task its own GPU (each engine sees a different one).
    ranked = order_ranks([EngineReport(0, "a", "x", 1, 1, gpus=(("0", "GPU-A"),)),
                          EngineReport(1, "a", "x", 2, 2, gpus=(("0", "GPU-B"),))])
    assert assign_devices(ranked, "auto") == ["0", "0"]
    overlapping = order_ranks([EngineReport(0, "a", "x", 1, 1, gpus=found(2)),
                               EngineReport(1, "a", "x", 2, 2, gpus=found(1))])
    with pytest.raises(DeviceSplitError, match="on host a see overlapping but different GPUs"):
        assign_devices(overlapping, "auto")


def test_bad_values_are_refused():
    for bad in (-1, "many", True, 1.5):
        with pytest.raises(ValueError, match="Invalid value for argument `gpus_per_worker`"):
            assign_devices(workers(("a", 1, ())), bad)


def test_devices_are_shown_as_gpu_numbers_or_cpu_and_nccl_needs_all_on_gpus():
    assert devices.describe_devices("0,1") == "GPU 0,1"
    assert devices.describe_devices("-1") == "CPU"
    assert devices.describe_devices(None) == "CPU"
    assert devices.resolve_communication("auto", ["0", "1"]) == "nccl"
    assert devices.resolve_communication("auto", ["0", "-1"]) == "auto"
    assert devices.resolve_communication("ring", ["0", "1"]) == "ring"
    assert devices.devices_line(["0,1", "2,3"], "auto") == (
        "devices: GPU 0,1 | GPU 2,3 (NCCL all-reduce)")
    assert devices.devices_line(["-1", "-1"], "auto") == "devices: CPU"
    assert devices.devices_line(["0", "-1"], "auto") == "devices: GPU 0 | CPU (AUTO all-reduce)"


# -- finding an engine's GPUs ------------------------------------------------------


def test_nvidia_smi_lines_are_read_and_mig_lines_skipped():
    text = fake_gpus.listing(2) + "  MIG 1g.5gb Device 0: (UUID: MIG-abc)\nGPU 7: Old\n"
    listed = gpus.parse_nvidia_smi(text)
    assert [(g.index, g.uuid) for g in listed] == [
        ("0", "GPU-00000000-0000-4000-8000-000000000000"),
        ("1", "GPU-00000000-0000-4000-8000-000000000001"), ("7", "")]


def test_cuda_visible_devices_is_read_as_cuda_reads_it():
    host = [gpus.Gpu(str(i), f"GPU-{i}aa") for i in range(4)]
    assert [v for v, _ in gpus.shareable(host, None)] == ["0", "1", "2", "3"]
    assert gpus.shareable(host, "2,3") == [("2", "GPU-2aa"), ("3", "GPU-3aa")]
    assert gpus.shareable(host, "GPU-1") == [("GPU-1", "GPU-1aa")]   # a UUID prefix
    assert gpus.shareable(host, "1,9,2") == [("1", "GPU-1aa")]   # CUDA stops at 9
    assert gpus.shareable(host, "-1") == []
    assert gpus.shareable(host, "") == []


@pytest.fixture
def fake_smi(tmp_path, monkeypatch):
    directory = fake_gpus.install(str(tmp_path / "bin"), 4)
    monkeypatch.setenv("PATH", fake_gpus.path_with(directory))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setitem(sys.modules, "pynvml", None)   # no NVML: nvidia-smi answers
    return directory


def test_the_handshake_reports_the_gpus_nvidia_smi_lists(fake_smi, monkeypatch):
    reply = handshake.describe_engine("127.0.0.1", gpus_per_worker="auto")
    assert [value for value, _ in reply["gpus"]] == ["0", "1", "2", "3"]
    assert reply["devices"] is None   # not a worker yet
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    reply = handshake.describe_engine("127.0.0.1", gpus_per_worker="auto")
    assert [value for value, _ in reply["gpus"]] == ["2", "3"]
    # None wanted: not even looked for.
    assert handshake.describe_engine("127.0.0.1", gpus_per_worker=0)["gpus"] == []


def test_no_nvidia_smi_and_no_nvml_is_no_gpus(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))   # nothing there
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert gpus.engine_gpus() == []


def test_an_nvidia_smi_without_a_driver_is_no_gpus(fake_smi):
    with open(os.path.join(fake_smi, "nvidia-smi"), "w") as script:
        script.write("#!/bin/sh\necho 'NVIDIA-SMI has failed because it couldn't "
                     "communicate with the NVIDIA driver.'\nexit 9\n")
    assert gpus.engine_gpus() == []


def test_an_nvidia_smi_that_hangs_ends_the_handshake_in_time_with_a_clear_line(fake_smi,
                                                                               monkeypatch):
    fake_gpus.hang(fake_smi)
    began = time.monotonic()
    with pytest.raises(gpus.GpuProblem) as caught:
        gpus.engine_gpus(timeout=1.0)
    assert time.monotonic() - began < 5
    assert "`nvidia-smi -L` did not answer within 1 s" in str(caught.value)
    assert "--gpus-per-worker K" in str(caught.value) and "\n" not in str(caught.value)
    # With a count given, the host's GPUs are trusted as before instead.
    monkeypatch.setattr(gpus, "FIND_SECONDS", 1.0)
    assert handshake.describe_engine("127.0.0.1", gpus_per_worker=1)["gpus"] == []


def test_nvml_is_asked_first_where_it_imports(fake_smi, monkeypatch):
    calls = []
    fake = types.SimpleNamespace(
        nvmlInit=lambda: calls.append("init"), nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: 2, nvmlDeviceGetHandleByIndex=lambda i: i,
        nvmlDeviceGetUUID=lambda handle: f"GPU-nvml-{handle}".encode())
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    assert gpus.engine_gpus() == [("0", "GPU-nvml-0"), ("1", "GPU-nvml-1")]
    assert calls == ["init", "shutdown"]

    def no_driver():
        raise RuntimeError("NVML Shared Library Not Found")

    # NVML without a driver: nvidia-smi (the fake, 4 GPUs) is asked instead.
    monkeypatch.setitem(sys.modules, "pynvml", types.SimpleNamespace(nvmlInit=no_driver))
    assert len(gpus.engine_gpus()) == 4
