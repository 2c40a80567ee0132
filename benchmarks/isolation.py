"""What the private network costs: `%tfdist start` plus one cell, with and without it.

    python benchmarks/isolation.py [--rounds 6]

Each round starts a 2-worker cluster both ways (the order alternates between rounds),
runs one trivial cell, and stops it; prints the times, their medians and the ratio.
"""

import argparse
import statistics
import time

from tfmw_notebook import TFCluster


def start_and_run(isolate: bool) -> float:
    began = time.perf_counter()
    cluster = TFCluster.start(2, isolate=isolate)
    try:
        cluster.run("x = 1")
        return time.perf_counter() - began
    finally:
        cluster.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    rounds = parser.parse_args().rounds
    times: dict[bool, list[float]] = {True: [], False: []}
    for round_ in range(rounds):
        for isolate in (True, False) if round_ % 2 == 0 else (False, True):
            times[isolate].append(start_and_run(isolate))
    for isolate, label in ((True, "private network"), (False, "host network")):
        print(f"{label:<16} median {statistics.median(times[isolate]):5.2f} s  "
              f"[{', '.join(f'{t:.2f}' for t in times[isolate])}]")
    ratio = statistics.median(times[True]) / statistics.median(times[False])
    print(f"private / host: {ratio:.2f}x")


if __name__ == "__main__":
    main()
