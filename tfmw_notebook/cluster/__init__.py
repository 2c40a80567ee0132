"""The notebook process driving the engines, showing nothing.

`TFCluster` (tfcluster.py) starts or attaches an ipyparallel engine group, makes each
engine a TensorFlow worker, runs cells on all of them and recovers from failures.
worker_calls.py is the only door into the engines' worker code.
"""
