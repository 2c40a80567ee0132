"""The IPython face: `%tfdist` / `%%tfdist`, one module per command group.

Light to import (`%load_ext tfmw_notebook` stays fast): no TensorFlow, and the
widgets only when a cell shows one. The session (session.py) is this kernel's one
piece of state.
"""
