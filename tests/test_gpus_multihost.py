"""GPUs by default across hosts: two simulated hosts (sim_hosts.py) x two engines started
by hand, each host with a fake `nvidia-smi` of its own (tests/fake_gpus.py) listing 2
GPUs; `%tfdist attach` splits each host's GPUs between that host's workers.

First the second host lists 3 GPUs: the one-line refusal names that host and the -n
that fits; the engines stay fresh, and with 2 GPUs there the attach goes through.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

import fake_gpus
from kernel_session import kernel_with_extension
from sim_hosts import sim_hosts_or_skip
from test_multihost import ENGINES_PER_HOST, REDUCE, HandStarted, status

pytestmark = pytest.mark.timeout(300)


class EnginesWithFakeGpus(HandStarted):
    """HandStarted's controller; engines whose PATH starts with their host's fake."""

    def start_engines_with(self, fakes: dict[str, str]) -> None:
        for host in self.sim.hosts:
            env = {**os.environ, "PATH": fake_gpus.path_with(fakes[host.hostname])}
            env.pop("CUDA_VISIBLE_DEVICES", None)
            command = [sys.executable, "-m", "ipyparallel.engine",
                       f"--file={self.engine_file}", "--log-level=ERROR"]
            for _ in range(ENGINES_PER_HOST):
                self.engines.append(self.sim.popen(host, command, env=env,
                                                   stdout=subprocess.DEVNULL,
                                                   stderr=subprocess.DEVNULL))


@pytest.fixture(scope="module")
def sim():
    with sim_hosts_or_skip(2) as hosts:
        yield hosts


@pytest.fixture(scope="module")
def fakes(sim, tmp_path_factory):
    root = tmp_path_factory.mktemp("fake-gpus")
    return {host.hostname: fake_gpus.install(str(root / host.hostname), 2, tag=str(index))
            for index, host in enumerate(sim.hosts)}


@pytest.fixture(scope="module")
def manual(sim, fakes, tmp_path_factory):
    cluster = EnginesWithFakeGpus(sim, str(tmp_path_factory.mktemp("manual-gpus")))
    cluster.start_engines_with(fakes)
    yield cluster
    cluster.stop()


def test_each_hosts_gpus_are_split_between_its_own_workers(sim, fakes, manual, tmp_path):
    first, second = (host.hostname for host in sim.hosts)
    fake_gpus.set_count(fakes[second], 3, tag="1")
    with kernel_with_extension(str(tmp_path)) as kernel:
        attach = f"%tfdist attach --url-file {manual.url_file} -n 4"
        out = kernel.execute(attach, timeout=180)
        assert out.status == "error" and out.error["ename"] == "ClusterSetupError", out
        message = out.error["evalue"]
        assert f"host {second} has 3 GPUs for 2 workers, which do not split evenly" in message
        assert f"-n 5 with 3 workers on {second} (one GPU each)" in message

        fake_gpus.set_count(fakes[second], 2, tag="1")
        out = kernel.ok(attach, timeout=180)
        assert "4 workers ready" in out.stdout, out.stdout
        assert "devices: GPU 0 | GPU 1 | GPU 0 | GPU 1 (NCCL all-reduce)" in out.stdout

        rows = status(kernel)
        assert [(row["host"], row["devices"]) for row in rows] == [
            (first, "GPU 0"), (first, "GPU 1"), (second, "GPU 0"), (second, "GPU 1")]
        out = kernel.ok("%%tfdist\nimport os, socket\n"
                        "seen = [socket.gethostname(), os.environ['CUDA_VISIBLE_DEVICES']]")
        out = kernel.ok("import json\nfrom tfmw_notebook import active_cluster\n"
                        "print(json.dumps([active_cluster().pull(['seen'], rank=r)['seen'] "
                        "for r in range(4)]))")
        assert json.loads(out.stdout.strip().splitlines()[-1]) == [
            [first, "0"], [first, "1"], [second, "0"], [second, "1"]]
        # One all-reduce across both hosts with the NCCL choice (on the CPU here).
        assert kernel.ok(REDUCE, timeout=60).results[-1]["text/plain"] == "4.0"
