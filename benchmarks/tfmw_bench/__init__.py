"""tfmw_notebook against hand-started TensorFlow processes (and Ray Train), side by side.

One fixed job (2 workers, MultiWorkerMirroredStrategy, tf-keras, Dense(64, relu) ->
Dense(1) on generated data, 32 features, global batch 64, epochs x steps_per_epoch =
150 steps, verbose=0) is run by every contender, round-robin, `--repeat` times:

  floor        2 plain Python processes started here with TF_CONFIG (no ipyparallel)
  tfmw cold    TFCluster.start(2) -> the training cell -> stop
  tfmw warm    the training cell again on that cluster (the model is rebuilt in the cell)
  trivial      cluster.run("x = 1") round trip on the warm cluster
  dashboard    the training cell with the magic's reporting and live dashboard on vs off
  ray          TensorflowTrainer.fit() twice, only when `import ray` works
  threads      (--threads-experiment) floor processes with TF's default thread pools vs
               intra = inter = cores // workers

Prints medians [min-max] and ratios, writes JSON (--json). See benchmarks/README.md.
The parent never imports TensorFlow.

Modules: common (the job, deadlines, cleanup), floor, tfmw, ray_train, threads (the
contenders), report (machine, summary, goals, JSON), table (the printed table), cli (main).
"""
