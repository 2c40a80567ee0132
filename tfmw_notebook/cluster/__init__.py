"""The notebook process driving the engines, showing nothing.

`TFCluster` (tfcluster.py) starts or attaches an ipyparallel engine group, makes each
engine a TensorFlow worker, runs cells on all of them and recovers from failures. Its
rooms: launch/ (engine processes), cells/ (a cell's run, watch and recovery; its
worker_calls.py is the only door into the engines' worker code), runs/ (records, sweeps,
tracking), data/ (notebook data to the workers).
"""
