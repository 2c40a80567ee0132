"""The Ray Train contender: TensorflowTrainer.fit() of the same job, twice."""

from __future__ import annotations

import os
import time

from .common import WORKERS


def ray_available() -> bool:
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


def _ray_train_loop(config):  # runs in Ray's workers (TF_CONFIG set by Ray)
    import time as _time

    import tensorflow as tf
    from ray import train

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    namespace = {"tf": tf, "strategy": strategy}
    began = _time.perf_counter()
    with strategy.scope():
        exec(compile(config["cell"], "<bench job>", "exec"), namespace)
    train.report({"cell_seconds": _time.perf_counter() - began,
                  "fit_seconds": namespace["bench_fit_seconds"]})


def run_ray(job: str, workdir: str) -> dict:
    """ray.init, then two TensorflowTrainer.fit() of the job, then ray.shutdown."""
    import ray
    from ray.train import RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer

    env = {"TF_USE_LEGACY_KERAS": "1", "CUDA_VISIBLE_DEVICES": "-1", "TF_CPP_MIN_LOG_LEVEL": "2"}
    began = time.perf_counter()
    ray.init(num_cpus=os.cpu_count(), runtime_env={"env_vars": env}, include_dashboard=False,
             log_to_driver=False)
    result = {"init": time.perf_counter() - began}
    try:
        for name in ("first", "second"):
            trainer = TensorflowTrainer(
                _ray_train_loop, train_loop_config={"cell": job},
                # Ray Train 2.x (V2) rejects `trainer_resources`: its controller is an
                # actor of its own that asks for no CPU.
                scaling_config=ScalingConfig(num_workers=WORKERS, use_gpu=False,
                                             resources_per_worker={"CPU": 1}),
                run_config=RunConfig(storage_path=os.path.join(workdir, "ray"),
                                     name=f"bench-{name}-{time.time_ns()}"))
            began = time.perf_counter()
            fitted = trainer.fit()
            result[name] = time.perf_counter() - began
            result[f"{name}_fit_inside"] = (fitted.metrics or {}).get("fit_seconds")
    finally:
        ray.shutdown()
    return result
