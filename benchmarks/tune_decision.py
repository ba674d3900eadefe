#!/usr/bin/env python3
"""Decision time of the tuning-table lookup (`choose_linear`), the part of
the tuner that runs per launch for dynamic batch sizes. Host only.

    .venv/bin/python benchmarks/tune_decision.py [--table TABLE.json] [--json results.json]
"""

import argparse
import json
import platform
import time
from pathlib import Path

from event_tensor.tuning import TuningTable, choose_linear


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--table", help="a table from `event-tensor tune` (default: a synthetic 8-shape table)")
    parser.add_argument("--json")
    parser.add_argument("--calls", type=int, default=200_000)
    args = parser.parse_args()
    if args.table:
        table = TuningTable.load(args.table)
    else:
        shapes = [(2048, 2048), (512, 2048), (2048, 8192), (8192, 2048), (128256, 2048), (4096, 4096),
                  (1024, 1024), (151936, 1024)]
        table = TuningTable("synthetic", 132, 512, {s: ([(16, 1)] * 512, [4] * 512) for s in shapes})
    shapes = list(table.linear)
    m_max = min(len(v[0]) for v in table.linear.values())
    queries = [(shapes[i % len(shapes)], 1 + (i * 7) % m_max) for i in range(1024)]
    rows = {}
    for label, fn in [("TuningTable.lookup", lambda n, k, m: table.lookup(n, k, m)),
                      ("choose_linear", lambda n, k, m: choose_linear(n, k, m, table=table, workers=132))]:
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for i in range(args.calls):
                (n, k), m = queries[i & 1023]
                fn(n, k, m)
            best = min(best, (time.perf_counter() - start) / args.calls)
        rows[label] = best * 1e9
        print(f"{label}: {best * 1e9:.0f} ns per decision (best of 5 x {args.calls} calls, {len(shapes)} shapes, "
              f"M up to {m_max})")
    if args.json:
        Path(args.json).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "host": platform.processor()
                                               or platform.machine(), "ns_per_decision": rows}, indent=2))


if __name__ == "__main__":
    main()
