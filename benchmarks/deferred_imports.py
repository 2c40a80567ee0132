"""What an engine's `import tensorflow` costs with Keras' optional extras deferred
(worker/boot/deferred_imports.py) and without, in fresh processes taking turns.

    python benchmarks/deferred_imports.py [--rounds 9]

Each round runs both in turn (order alternating), each in a new Python with
TF_USE_LEGACY_KERAS=0 (Keras 3, the default start); prints the CPU seconds and wall
seconds of the import, medians and ranges, and the ratio.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys

IMPORT = r'''
import json, sys, time
if sys.argv[1] == "deferred":
    from tfmw_notebook.worker.boot import deferred_imports
    deferred_imports.install()
cpu, wall = time.process_time(), time.perf_counter()
import tensorflow
print(json.dumps({"cpu": time.process_time() - cpu, "wall": time.perf_counter() - wall,
                  "sklearn": "sklearn" in sys.modules}))
'''

KINDS = ("eager", "deferred")


def one(kind: str) -> dict:
    env = {**os.environ, "TF_USE_LEGACY_KERAS": "0", "TF_CPP_MIN_LOG_LEVEL": "3"}
    done = subprocess.run([sys.executable, "-c", IMPORT, kind], capture_output=True, text=True,
                          env=env, timeout=300, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=9)
    rounds = parser.parse_args().rounds
    found: dict[str, list[dict]] = {kind: [] for kind in KINDS}
    for number in range(rounds):
        for kind in (KINDS if number % 2 == 0 else KINDS[::-1]):
            found[kind].append(one(kind))
        print(f"round {number + 1}/{rounds}: " + ", ".join(
            f"{kind} {found[kind][-1]['cpu']:.2f} CPU s" for kind in KINDS), flush=True)
    print(f"\n`import tensorflow` (Keras 3), {rounds} rounds; scikit-learn installed: "
          f"{found['eager'][0]['sklearn']}")
    print(f"{'':10} {'CPU s':>22} {'wall s':>22}")
    medians = {}
    for kind in KINDS:
        cpu = [r["cpu"] for r in found[kind]]
        wall = [r["wall"] for r in found[kind]]
        medians[kind] = (statistics.median(cpu), statistics.median(wall))
        print(f"{kind:10} {medians[kind][0]:6.2f} [{min(cpu):.2f}-{max(cpu):.2f}]      "
              f"{medians[kind][1]:6.2f} [{min(wall):.2f}-{max(wall):.2f}]")
    print(f"{'ratio':10} {medians['deferred'][0] / medians['eager'][0]:6.2f}x"
          f"{'':16}{medians['deferred'][1] / medians['eager'][1]:6.2f}x")


if __name__ == "__main__":
    main()
