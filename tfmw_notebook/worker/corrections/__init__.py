"""Corrections to TensorFlow and Keras: code written for one process runs on every worker."""
