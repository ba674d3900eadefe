#!/usr/bin/env python3
"""Decision time of the tuning-table lookup (`choose_linear`; with a table
that has et.matmul entries, also `choose_tile` over M 1..512, which picks
the kind of tile), the part of the tuner that runs per launch for dynamic
batch sizes, and of the GEMM
choice from the shipped H200 models (`choose_gemm`: warm, and the first
call of a block of M, which evaluates every configuration). Host only.

    .venv/bin/python benchmarks/tune_decision.py [--table TABLE.json] [--json results.json]
"""

import argparse
import json
import platform
import time
from pathlib import Path

from event_tensor.tuning import TuningTable, choose_gemm, choose_linear, choose_tile, shipped_gemm_models


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
    cases = [("TuningTable.lookup", lambda n, k, m: table.lookup(n, k, m), queries, m_max),
             ("choose_linear", lambda n, k, m: choose_linear(n, k, m, table=table, workers=132), queries, m_max)]
    if table.gemm:
        tile_max = min(len(v[1]) for v in table.gemm.values())
        tile_queries = [(shapes[i % len(shapes)], 1 + (i * 37) % tile_max) for i in range(1024)]
        cases += [("TuningTable.lookup_tile", lambda n, k, m: table.lookup_tile(n, k, m), tile_queries, tile_max),
                  ("choose_tile", lambda n, k, m: choose_tile(n, k, m, table=table, workers=132), tile_queries,
                   tile_max)]
    for label, fn, qs, top in cases:
        best = float("inf")
        for _ in range(5):
            start = time.perf_counter()
            for i in range(args.calls):
                (n, k), m = qs[i & 1023]
                fn(n, k, m)
            best = min(best, (time.perf_counter() - start) / args.calls)
        rows[label] = best * 1e9
        print(f"{label}: {best * 1e9:.0f} ns per decision (best of 5 x {args.calls} calls, {len(shapes)} shapes, "
              f"M up to {top})")
    gemm = shipped_gemm_models("NVIDIA H200")
    gemm_shapes = [(3072, 2048), (2048, 2048), (16384, 2048), (2048, 8192), (6144, 4096), (28672, 4096)]
    gemm_queries = [(gemm_shapes[i % len(gemm_shapes)], 1 + (i * 37) % 4096) for i in range(1024)]
    start = time.perf_counter()
    for (n, k), m in gemm_queries:
        choose_gemm(m, n, k, models=gemm, workers=132)
    rows["choose_gemm, first pass"] = (time.perf_counter() - start) / len(gemm_queries) * 1e9
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for i in range(args.calls):
            (n, k), m = gemm_queries[i & 1023]
            choose_gemm(m, n, k, models=gemm, workers=132)
        best = min(best, (time.perf_counter() - start) / args.calls)
    rows["choose_gemm"] = best * 1e9
    print(f"choose_gemm: {rows['choose_gemm, first pass']:.0f} ns per decision on the first pass over "
          f"{len(gemm_queries)} queries (every block of M evaluated once), then {best * 1e9:.0f} ns "
          f"(best of 5 x {args.calls} calls, {len(gemm_shapes)} shapes, M up to 4096, {len(gemm.models)} "
          "configurations)")
    if args.json:
        Path(args.json).write_text(json.dumps({"date": time.strftime("%Y-%m-%d"), "host": platform.processor()
                                               or platform.machine(), "ns_per_decision": rows}, indent=2))


if __name__ == "__main__":
    main()
