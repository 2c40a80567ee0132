"""What both processes import: the notebook's kernel and the engines (the workers).

Standard library only (an import-linter contract and tests/test_events.py keep it
so): the training-event protocol, the options a cell's Keras calls get, the on-disk
checkpoint layout, TF_CONFIG helpers, the workers' temp directories, the warning
category.
"""
