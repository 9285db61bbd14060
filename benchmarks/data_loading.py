"""Seconds to load each named dataset and to generate the synthetic world (the speed the tests
used to assert with wall-clock bounds; speed belongs here, the tests check content only).

    python -m benchmarks.data_loading [--repeats 3] [--datasets ml-100k,gowalla,...]

→ out/data_loading.json: median and all timings per dataset, beside machine, date and command.
"""

from __future__ import annotations

import argparse
import statistics
import time

from benchmarks.common import write_result
from data.registry import default_data_dir, load_dataset
from data.synthetic import synthetic

NAMED = ("ml-100k", "gowalla", "ciao", "epinions", "filmtrust")


def timed(make, repeats: int) -> dict:
    seconds, size = [], None
    for _ in range(repeats):
        start = time.perf_counter()
        d = make()
        seconds.append(time.perf_counter() - start)
        size = {"users": d.n_users, "items": d.n_items, "train": len(d.train)}
    return {"median_s": statistics.median(seconds), "seconds": seconds, **size}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--datasets", default=",".join(NAMED))
    args = ap.parse_args()
    data = default_data_dir()
    figures: dict = {
        "synthetic (300 x 500, default)": timed(synthetic, args.repeats),
        "synthetic 10,000 x 5,000": timed(
            lambda: synthetic(n_users=10_000, n_items=5_000), args.repeats
        ),
    }
    for name in filter(None, args.datasets.split(",")):
        if data is None:
            figures[name] = {"skipped": "../shared/data not found"}
            continue
        figures[name] = timed(lambda n=name: load_dataset(n, data), args.repeats)
        print(name, figures[name], flush=True)
    write_result("data_loading", figures)


if __name__ == "__main__":
    main()
