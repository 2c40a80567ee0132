"""Clusters across hosts: two simulated hosts x two engines, the notebook and the
controller on this host (see sim_hosts.py).

Engines started by hand (`ipengine --file`) and attached by connection file: training,
addresses and hostnames; a remote engine killed mid-fit; the controller dying.
"""

from __future__ import annotations

import ipaddress
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from kernel_session import kernel_with_extension, per_worker
from sim_hosts import sim_hosts_or_skip

pytestmark = pytest.mark.timeout(300)

ENGINES_PER_HOST = 2
QUICK_FIT = '''
import numpy as np
rng = np.random.default_rng(0)
x = rng.normal(size=(1024, 8)).astype("float32")
y = (x @ rng.normal(size=(8, 1))).astype("float32")
with strategy.scope():
    model = tf.keras.Sequential([tf.keras.layers.Input((8,)), tf.keras.layers.Dense(1)])
    model.compile(optimizer=tf.keras.optimizers.SGD(0.05), loss="mse")
dataset = tf.data.Dataset.from_tensor_slices((x, y)).repeat().batch(64)
'''
FIT_WITH_MARKER = '''
import os, signal, time
class Mark(tf.keras.callbacks.Callback):
    def on_train_batch_end(self, batch, logs=None):
        if tfdist.rank == {rank} and batch == 5 and not os.path.exists({marker!r}):
            with open({marker!r}, "w") as f:
                f.write(repr(time.time()))
            {action}
model.fit(dataset, epochs={epochs}, steps_per_epoch=40, verbose=0, callbacks=[Mark()])
'''
REDUCE = ("%%tfdist\nfloat(strategy.reduce('SUM', strategy.run(lambda: tf.constant(1.0)), "
          "axis=None))")


def wait_for(predicate, seconds: float, what: str):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out after {seconds} s waiting for {what}")


class HandStarted:
    """A controller with ipyparallel's default settings on the bridge address, and engines
    started by hand on each host, as a user would."""

    def __init__(self, sim, workdir: str):
        self.sim = sim
        self.profile_dir = os.path.join(workdir, "profile_manual")
        self.engines: list[subprocess.Popen] = []
        self.start_controller()

    def start_controller(self) -> None:
        security = os.path.join(self.profile_dir, "security")
        for name in ("ipcontroller-client.json", "ipcontroller-engine.json"):
            if os.path.exists(os.path.join(security, name)):
                os.remove(os.path.join(security, name))   # a killed one leaves its own
        self.controller = subprocess.Popen(
            [sys.executable, "-m", "ipyparallel.controller", f"--ip={self.sim.bridge_address}",
             f"--profile-dir={self.profile_dir}", "--log-level=ERROR"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True)   # its schedulers are child processes: one group
        self.url_file = os.path.join(security, "ipcontroller-client.json")
        self.engine_file = os.path.join(security, "ipcontroller-engine.json")
        wait_for(lambda: os.path.exists(self.url_file) and os.path.exists(self.engine_file),
                 60, "the controller's connection files")

    def start_engines(self, hide_on_second_host: str | None = None) -> None:
        """`hide_on_second_host`: a directory the second host's engines see empty (a
        private tmpfs over it), as a host without the shared disk would."""
        for index, host in enumerate(self.sim.hosts):
            command = [sys.executable, "-m", "ipyparallel.engine",
                       f"--file={self.engine_file}", "--log-level=ERROR"]
            if index == 1 and hide_on_second_host:
                command = ["unshare", "--mount", "sh", "-c",
                           'mount -t tmpfs tmpfs "$0" && exec "$@"', hide_on_second_host,
                           *command]
            for _ in range(ENGINES_PER_HOST):
                self.engines.append(self.sim.popen(host, command, stdout=subprocess.DEVNULL,
                                                   stderr=subprocess.DEVNULL))

    def kill_controller(self) -> None:
        os.killpg(self.controller.pid, signal.SIGKILL)

    def stop(self) -> None:
        if self.controller.poll() is None:
            self.kill_controller()
        for process in [self.controller, *self.engines]:
            if process.poll() is None:
                process.kill()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


@pytest.fixture(scope="module")
def sim():
    with sim_hosts_or_skip(2) as hosts:
        yield hosts


@pytest.fixture(scope="module")
def manual(sim, tmp_path_factory):
    cluster = HandStarted(sim, str(tmp_path_factory.mktemp("manual")))
    cluster.start_engines()
    yield cluster
    cluster.stop()


@pytest.fixture(scope="module")
def kernel(tmp_path_factory):
    with kernel_with_extension(str(tmp_path_factory.mktemp("multihost-kernel"))) as session:
        yield session


def status(kernel) -> list[dict]:
    out = kernel.ok("import json\nfrom tfmw_notebook import active_cluster\n"
                    "print(json.dumps(active_cluster().status()))")
    return json.loads(out.stdout.strip().splitlines()[-1])


def host_pids(sim) -> dict[str, list[int]]:
    return {host.hostname: sim.pids(host) for host in sim.hosts}


def commands(pids_by_host: dict[str, list[int]]) -> dict[str, list[str]]:
    """{host: ["pid command line", ...]}: what a failed wait for processes to end shows."""
    def command(pid: int) -> str:
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                return f"{pid} " + f.read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return f"{pid} (gone)"
    return {host: [command(pid) for pid in pids] for host, pids in pids_by_host.items()}


def test_engines_started_by_hand_train_across_two_hosts(sim, manual, kernel):
    began = time.monotonic()
    out = kernel.ok(f"%tfdist attach --url-file {manual.url_file} -n 4", timeout=180)
    assert "4 workers ready" in out.stdout, out.stdout
    attach_seconds = time.monotonic() - began

    kernel.ok("%%tfdist --no-checkpoint\n" + QUICK_FIT)
    out = kernel.ok("%%tfdist --no-checkpoint\n"
                    "history = model.fit(dataset, epochs=2, steps_per_epoch=10, verbose=0)\n"
                    "import json, os\n"
                    "json.loads(os.environ['TF_CONFIG'])['cluster']['worker']", timeout=120)
    workers = eval(out.results[-1]["text/plain"])
    assert len(workers) == 4
    addresses = {w.rsplit(":", 1)[0] for w in workers}
    assert addresses == {host.address for host in sim.hosts}, workers
    test_net = ipaddress.ip_network("198.18.0.0/15")   # the simulated hosts' range
    assert all(ipaddress.ip_address(a) in test_net for a in addresses), addresses

    rows = status(kernel)
    names = [host.hostname for host in sim.hosts]
    assert [row["host"] for row in rows] == [names[0]] * 2 + [names[1]] * 2
    assert [row["local_rank"] for row in rows] == [0, 1, 0, 1]
    assert all(row["alive"] for row in rows)
    text = kernel.ok("%tfdist status").stdout
    assert names[0] in text and names[1] in text
    print(f"attach across 2 hosts x 2 engines: {attach_seconds:.1f} s")


def test_shards_reach_workers_on_other_hosts_straight_from_the_notebook(sim, manual, kernel):
    """`--shard` to engines on other hosts: each reads its rows from the notebook's sender
    (not through the controller), and a fit on them runs in step."""
    out = kernel.ok("import numpy as np\nfrom tfmw_notebook import active_cluster\n"
                    "wide = np.arange(1001 * 8, dtype=np.float32).reshape(1001, 8)\n"
                    "print([r['via'] for r in active_cluster().shard({'wide': wide})])")
    assert out.stdout.strip().splitlines()[-1] == str(["stream"] * 4)
    kernel.ok("%%tfdist --no-checkpoint\nfirst, count = float(wide[0, 0]), len(wide)\n"
              "before = int(model.optimizer.iterations.numpy())\n"
              "model.fit(wide, wide[:, :1], batch_size=64, epochs=1, verbose=0)\n"
              "steps = int(model.optimizer.iterations.numpy()) - before", timeout=120)
    assert per_worker(kernel, "count") == [251, 250, 250, 250]
    assert per_worker(kernel, "first") == [0.0, 251 * 8.0, 501 * 8.0, 751 * 8.0]
    assert per_worker(kernel, "steps") == [16] * 4   # ceil(1001 / 64), in step
    kernel.ok("%%tfdist --no-checkpoint\ndel wide")


def test_a_remote_worker_holding_the_gil_is_busy_not_lost(sim, manual, kernel):
    """Its heartbeat cannot beat for 12 s; its TensorFlow server (gRPC's threads, no GIL)
    answers the probe: the cell ends on the same processes, its names kept."""
    before = status(kernel)
    out = kernel.execute("%%tfdist --no-checkpoint\nimport ctypes\nheld_here = tfdist.rank\n"
                         "if tfdist.rank == 2:\n    ctypes.PyDLL(None).sleep(12)", timeout=120)

    assert out.status == "ok", out.error_text + out.stderr
    assert "not heard from" not in out.stderr, out.stderr
    assert [row["pid"] for row in status(kernel)] == [row["pid"] for row in before]
    assert per_worker(kernel, "held_here") == [0, 1, 2, 3]


def test_killed_remote_engine_is_named_with_its_host_and_the_user_told_what_to_run(
        sim, manual, kernel, tmp_path):
    rows = status(kernel)
    victim = rows[2]   # the first worker on the second host
    marker = str(tmp_path / "killed")
    code = FIT_WITH_MARKER.format(rank=2, marker=marker, epochs=20,
                                  action="os.kill(os.getpid(), signal.SIGKILL)")
    out = kernel.execute("%%tfdist --no-checkpoint\n" + code, timeout=180)

    assert out.status == "error" and out.error["ename"] == "WorkerFailed", out.error_text
    message = out.error["evalue"]
    assert f"worker 2 (pid {victim['pid']} on {victim['host']}" in message, message
    killed_at = float(open(marker).read())
    noticed = next(when for when, _, text in out.stream_times if "worker 2" in text)
    assert noticed - killed_at <= 10.0, noticed - killed_at
    print(f"remote engine killed -> named: {noticed - killed_at:.2f} s")

    # Engines started by hand cannot be restarted from here: the message says what to run.
    for host in sim.hosts:
        assert f"on {host.hostname}, 2 x `ipengine --file={manual.engine_file}`" in message
    assert f"%tfdist attach --url-file {manual.url_file}" in message
    # Every old worker was killed (through its nanny), on both hosts.
    wait_for(lambda: not any(host_pids(sim).values()), 15, "no process left on the hosts")

    # What the message said; this time the second host does not see the notebook's
    # directory (no shared disk), and the workers advertise their eth0 by name.
    manual.start_engines(hide_on_second_host=kernel.cwd)
    out = kernel.ok(f"%tfdist attach --url-file {manual.url_file} -n 4 --interface eth0",
                    timeout=180)
    assert "4 workers ready" in out.stdout
    assert kernel.ok(REDUCE, timeout=60).results[-1]["text/plain"] == "4.0"
    rows = status(kernel)
    assert [row["address"].rsplit(":", 1)[0] for row in rows] == [
        host.address for host in sim.hosts for _ in range(ENGINES_PER_HOST)]


def test_a_host_that_does_not_see_the_checkpoint_directory_is_named(sim, kernel):
    kernel.ok("%%tfdist --no-checkpoint\n" + QUICK_FIT)
    out = kernel.execute("%%tfdist\nmodel.fit(dataset, epochs=1, steps_per_epoch=5, verbose=0)",
                         timeout=120)
    assert out.status == "error" and out.error["ename"] == "WorkerFailed", out.error_text
    message = out.error["evalue"]
    assert "RunDirNotShared" in message and "workers 2, 3 do not see" in message, message
    assert "--checkpoint-dir" in message and "workers were kept" in message, message
    second, first = sim.hosts[1].hostname, sim.hosts[0].hostname
    assert f"on {second} that directory is missing" in out.error_text, out.error_text
    assert f"the chief's ({first}) checkpoint storage" in out.error_text
    # Kept: the model is still there, and training without checkpoints goes on.
    kernel.ok("%%tfdist --no-checkpoint\nmodel.fit(dataset, epochs=1, steps_per_epoch=5, "
              "verbose=0)", timeout=120)


# Its checks are deadlines (the cell, the later call and the engines each end within 30 s);
# beside another module's load the engines outlived theirs in a fresh-clone run.
@pytest.mark.alone
def test_dead_controller_ends_the_cell_and_every_later_call_within_30s(
        sim, manual, kernel, tmp_path):
    kernel.ok("%%tfdist --no-checkpoint\n" + QUICK_FIT)
    marker = str(tmp_path / "training")
    code = FIT_WITH_MARKER.format(rank=0, marker=marker, epochs=200, action="pass")
    killed = {}

    def kill_controller_when_training():
        deadline = time.monotonic() + 120
        while not os.path.exists(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        killed["at"] = time.time()
        manual.kill_controller()

    killer = threading.Thread(target=kill_controller_when_training)
    killer.start()
    out = kernel.execute("%%tfdist --no-checkpoint\n" + code, timeout=180)
    killer.join(timeout=30)
    ended = time.time()

    assert out.status == "error", out.stdout
    assert "controller" in out.error["evalue"] and "does not answer" in out.error["evalue"]
    assert ended - killed["at"] <= 30.0, ended - killed["at"]
    print(f"controller killed -> cell ended: {ended - killed['at']:.1f} s")

    began = time.monotonic()
    later = kernel.execute("%%tfdist\n1 + 1", timeout=60)
    assert later.status == "error" and "does not answer" in later.error["evalue"]
    assert time.monotonic() - began <= 30.0
    # Workers that lost their controller mid-cell end themselves (an engine cannot join
    # a controller again), instead of training on for nobody.
    try:
        wait_for(lambda: not any(host_pids(sim).values()), 30, "the engines to end")
    except AssertionError as timed_out:
        raise AssertionError(f"{timed_out}; still running: {commands(host_pids(sim))}") from None
    print(f"controller killed -> engines ended: {time.time() - killed['at']:.1f} s")

    # Controller and engines started again, as the message says: attach works again.
    manual.start_controller()
    manual.start_engines()
    out = kernel.ok(f"%tfdist attach --url-file {manual.url_file} -n 4", timeout=180)
    assert "4 workers ready" in out.stdout
    assert kernel.ok(REDUCE, timeout=60).results[-1]["text/plain"] == "4.0"
