#!/usr/bin/env python
"""tfmw_notebook against hand-started TensorFlow processes (and Ray Train), side by side.

The entry point; the benchmark itself is the package next to this file, `tfmw_bench`
(its docstring lists the contenders). See benchmarks/README.md.
"""

import sys

from tfmw_bench.cli import main

if __name__ == "__main__":
    sys.exit(main())
