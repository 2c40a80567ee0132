"""Code that runs inside the ipyparallel engines (the workers).

This is the only part of tfmw_notebook that imports TensorFlow, and it does so
lazily, after the environment is in place.
"""
