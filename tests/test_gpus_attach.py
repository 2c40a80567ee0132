"""GPUs by default on `%tfdist attach`: engines a user started with `ipcluster start`,
each cluster's engines with a fake `nvidia-smi` on their PATH (tests/fake_gpus.py).

The fake reads its GPU count from a file, so engines already running find another
count at the next handshake: a split refused in the handshake leaves the engines
fresh for the next attach. Layouts: 3 then 4 GPUs for 2 workers; a user's
CUDA_VISIBLE_DEVICES=2,3 on the engines (3 GPUs: only "2" is a GPU, too few; then
4); no GPUs. Real engines, real TensorFlow.
"""

from __future__ import annotations

import os

import pytest
from tfmw_notebook import ClusterSetupError, TFCluster

import fake_gpus
from kernel_session import kernel_with_extension
from test_attach import ExternalCluster

pytestmark = pytest.mark.timeout(300)

CVD = "import os\nos.environ['CUDA_VISIBLE_DEVICES']"
REDUCE = "float(strategy.reduce('SUM', strategy.run(lambda: tf.constant(1.0)), axis=None))"


@pytest.fixture(scope="module")
def externals(ipython_dir, tmp_path_factory):
    """`ipcluster start -n 2` three times: fake GPUs, fake GPUs with the engines'
    CUDA_VISIBLE_DEVICES=2,3, and a fake that lists none."""
    root = tmp_path_factory.mktemp("gpu-attach")
    layouts = {"plain": (3, None), "user_set": (3, "2,3"), "none": (0, None)}
    started: dict[str, tuple[ExternalCluster, str]] = {}
    try:
        for name, (count, visible) in layouts.items():
            directory = fake_gpus.install(str(root / name), count)
            with pytest.MonkeyPatch.context() as patch:   # what ipcluster passes on
                patch.setenv("PATH", fake_gpus.path_with(directory))
                if visible is None:
                    patch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
                else:
                    patch.setenv("CUDA_VISIBLE_DEVICES", visible)
                started[name] = (ExternalCluster(ipython_dir, root, n=2), directory)
        for external, _ in started.values():
            external.wait_ready()
        yield started
    finally:
        for external, _ in started.values():
            external.kill()


def attach(external: ExternalCluster) -> TFCluster:
    try:
        return TFCluster.attach(profile=external.profile, cluster_id=external.cluster_id, n=2,
                                timeout=120)
    except ClusterSetupError as exc:
        if "did not finish" not in str(exc):
            raise
        # Once seen in a whole-suite run, never alone: the engines' side, for the next time.
        raise AssertionError(f"{exc}\n{cluster_logs(external)}") from exc


def cluster_logs(external: ExternalCluster) -> str:
    """ipcluster's output, then the tail of its controller's and engines' log files."""
    parts = [f"ipcluster:\n{external.log()}"]
    log_dir = os.path.join(external.profile_dir, "log")
    for name in sorted(os.listdir(log_dir)) if os.path.isdir(log_dir) else []:
        with open(os.path.join(log_dir, name), errors="replace") as f:
            parts.append(f"{name}:\n{f.read()[-3000:]}")
    return "\n".join(parts)


def test_uneven_then_even_gpus_on_attach_with_the_start_line_and_status(externals,
                                                                        tmp_path):
    external, directory = externals["plain"]
    with pytest.raises(ClusterSetupError) as caught:
        attach(external)
    assert "has 3 GPUs for 2 workers, which do not split evenly" in str(caught.value)
    assert "\n" not in str(caught.value)

    fake_gpus.set_count(directory, 4)
    with kernel_with_extension(str(tmp_path)) as kernel:
        out = kernel.ok(f"%tfdist attach --profile {external.profile} "
                        f"--cluster-id {external.cluster_id} -n 2", timeout=180)
        assert "devices: GPU 0,1 | GPU 2,3 (NCCL all-reduce)" in out.stdout, out.stdout
        lines = kernel.ok("%tfdist status").stdout.strip().splitlines()
        assert "GPU 0,1" in lines[1] and "GPU 2,3" in lines[2], lines
        assert kernel.ok("%%tfdist\n" + REDUCE).results[-1]["text/plain"] == "2.0"
        kernel.ok("%tfdist stop")

    # Attached again, the same workers are reused: their GPUs are those they were given.
    again = attach(external)
    try:
        assert [w.devices for w in again.workers] == ["0,1", "2,3"]
        assert again.describe().endswith("devices: GPU 0,1 | GPU 2,3 (NCCL all-reduce)")
    finally:
        again.stop()


def test_the_engines_own_cuda_visible_devices_is_what_is_shared(externals):
    external, directory = externals["user_set"]
    # With 3 GPUs, CUDA_VISIBLE_DEVICES=2,3 names one GPU (3 does not exist): too few.
    with pytest.raises(ClusterSetupError, match="has 1 GPU for 2 workers"):
        attach(external)
    fake_gpus.set_count(directory, 4)
    cluster = attach(external)
    try:
        assert [w.devices for w in cluster.workers] == ["2", "3"]
        assert [row["devices"] for row in cluster.status()] == ["GPU 2", "GPU 3"]
        assert cluster.run(CVD).display["data"]["text/plain"] == "'2'"   # the chief's
        assert cluster.run(REDUCE).display["data"]["text/plain"] == "2.0"
    finally:
        cluster.stop()


def test_no_gpus_on_attach_is_the_cpu(externals):
    external, _ = externals["none"]
    cluster = attach(external)
    try:
        assert [w.devices for w in cluster.workers] == ["-1", "-1"]
        assert cluster.describe().endswith("; devices: CPU")
        assert cluster.run(CVD).display["data"]["text/plain"] == "'-1'"
    finally:
        cluster.stop()
    assert external.alive()   # attached: ours to let go of, not to end
