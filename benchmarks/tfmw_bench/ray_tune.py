"""Ray Tune over Ray Train: the sweep's trials, each a TensorflowTrainer.fit() (Keras 3).

Ray Train 2.x (V2) runs under Tune as its documentation says: each Tune trial is a
driver function that builds a TensorflowTrainer and calls fit(); the driver holds one
logical CPU while it waits for the trainer, whose 2 workers take one each (Ray is given
the cores plus that one), and one trial runs at a time, as the other contenders' do.
The workers run the same cell, apply the Keras 3 corrections tfmw's workers apply (as
the floor does), and report its times.
"""

from __future__ import annotations

import os
import time

from .common import RAY_TIMEOUT, WORKERS, BenchError

BENCH_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _train_loop(config):   # in Ray's training workers (TF_CONFIG set by Ray)
    import tensorflow as tf
    from ray import train

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    from tfmw_notebook.worker.corrections import keras3_corrections

    keras3_corrections.apply()
    namespace = {"tf": tf, "strategy": strategy, "lr": config["lr"]}
    with strategy.scope():
        exec(compile(config["cell"], "<bench job>", "exec"), namespace)
    train.report({"fit_seconds": namespace["bench_fit_seconds"],
                  "loss": namespace["bench_loss"]})


def _trial(config):   # one Tune trial: a Ray Train run of the cell with this lr
    from ray.train import RunConfig, ScalingConfig
    from ray.train.tensorflow import TensorflowTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    TensorflowTrainer(
        _train_loop, train_loop_config={"cell": config["cell"], "lr": config["lr"]},
        scaling_config=ScalingConfig(num_workers=WORKERS, use_gpu=False,
                                     resources_per_worker={"CPU": 1}),
        run_config=RunConfig(storage_path=config["storage"],
                             name=f"trial-{time.time_ns()}",
                             callbacks=[TuneReportCallback()])).fit()


def ray_init() -> float:
    import ray

    env = {"TF_USE_LEGACY_KERAS": "0", "CUDA_VISIBLE_DEVICES": "-1",
           "TF_CPP_MIN_LOG_LEVEL": "2",
           # Ray's workers import this module (the trial and the loop are pickled by name).
           "PYTHONPATH": os.pathsep.join(filter(None, [BENCH_DIR, os.environ.get("PYTHONPATH")]))}
    began = time.perf_counter()
    # One logical CPU more than the cores: the Tune trial's driver holds one while it
    # waits for its trainer's workers (Tune refuses a trial that asks for none).
    ray.init(num_cpus=(os.cpu_count() or 1) + 1, runtime_env={"env_vars": env},
             include_dashboard=False, log_to_driver=False)
    return time.perf_counter() - began


def ray_tune_sweep(job: str, rates, workdir: str) -> dict:
    """ray.init (not in the sweep's time, as tfmw's start is not), the Tuner's fit(),
    ray.shutdown."""
    import ray
    from ray import tune

    result = {"init": ray_init()}
    try:
        storage = os.path.join(workdir, "ray")
        tuner = tune.Tuner(
            tune.with_resources(_trial, {"CPU": 1}),
            param_space={"lr": tune.grid_search(list(rates)), "cell": job, "storage": storage},
            tune_config=tune.TuneConfig(max_concurrent_trials=1, time_budget_s=RAY_TIMEOUT),
            run_config=tune.RunConfig(storage_path=storage, name=f"sweep-{time.time_ns()}",
                                      verbose=0))
        began = time.perf_counter()
        grid = tuner.fit()
        result["wall"] = time.perf_counter() - began
        if grid.errors or len(grid) != len(rates):
            raise BenchError(f"ray tune: {len(grid)} trials, errors {grid.errors}")
        result["final_loss"] = [r.metrics.get("loss") for r in grid]
        result["fit_seconds"] = [r.metrics.get("fit_seconds") for r in grid]
    finally:
        ray.shutdown()
    return result
