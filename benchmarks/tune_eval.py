#!/usr/bin/env python3
"""The tuning table's choice against exhaustive search on the device.

For every linear-layer shape of the given model presets and every token
count M in 1..16 (`et.linear` serves at most 16 tokens), each candidate
configuration (rows per tile x unroll; the rows are 8, 16, 32, 64 and the
wave-sized ones of `tuning.linear_candidates`) is timed on the device, each launch
on another copy of the weights (256 MiB in all, so they come from HBM as in a
model step, not from L2), in `--passes` interleaved passes whose median is
kept (one timing per point was too noisy); the best is the exhaustive-search
answer. Launches are queued back to back behind a sleep kernel
(`tuner.queued_seconds`): timed one at a time, the small shapes measured the
host's launch work instead of the kernel. The table (from `event-tensor tune`) and the
heuristic fallback each pick a configuration without measuring; the report
gives their speed as a fraction of the best one (geometric mean and worst
case), beside the time the exhaustive search took on the device.

    # here (MLIR): one kernel per shape and configuration, with a runtime M
    .venv/bin/python benchmarks/tune_eval.py prepare .device/tune-eval --models llama-3.2-1b,qwen3-0.6b,llama-3.1-8b
    # there (runtime only)
    PYTHONPATH=python:benchmarks python3 benchmarks/tune_eval.py measure .device/tune-eval --json eval.json
    # here: the comparison with a table
    .venv/bin/python benchmarks/tune_eval.py report eval.json --table table.json --json report.json
"""

import argparse
import itertools
import json
import math
import statistics
import time
from pathlib import Path

ROWS = (8, 16, 32, 64)
UNROLLS = (4, 8)
M_MAX = 16


def prepare(out: Path, models: list[str], workers: int, threads: int) -> None:
    from event_tensor import compile as et_compile
    from event_tensor.ir import Context
    from event_tensor.tuner import _kernel, model_shapes
    from event_tensor.tuning import heuristic_linear, linear_candidates

    out.mkdir(parents=True, exist_ok=True)
    shapes = model_shapes(models)
    kernels = []
    for n, k in shapes:
        # Every configuration a table can choose (the tuner's candidates:
        # fixed and wave-sized rows), which includes the heuristic's own.
        configs = [(rows, unroll) for rows in linear_candidates(n, workers, ROWS) for unroll in UNROLLS]
        fallback = heuristic_linear(n, k, 1, workers)
        assert (fallback.rows, fallback.unroll) in configs
        for rows, unroll in configs:
            name = f"n{n}-k{k}-r{rows}-u{unroll}"
            if not (out / name / "metadata.json").exists():  # else kept from an earlier prepare
                with Context():
                    text = _kernel(n, k, rows).operation.get_asm(print_generic_op_form=True)
                art = et_compile(text, target="cuda", workers=workers, mode="static", threads_per_worker=threads,
                                 tile_unroll=unroll, format="bin")
                art.copy_to(out / name)
            kernels.append({"dir": name, "n": n, "k": k, "rows": rows, "unroll": unroll})
        print(f"prepared {n}x{k}", flush=True)
    (out / "eval.json").write_text(json.dumps({"models": models, "workers": workers, "threads": threads,
                                               "m_max": M_MAX, "kernels": kernels}, indent=1))


def measure(root: Path, out_json: Path, reps: int, passes: int) -> None:
    import torch

    from event_tensor import runtime
    from event_tensor.tuner import cold_copies, queued_seconds

    plan = json.loads((root / "eval.json").read_text())
    result = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "workers": plan["workers"],
              "threads": plan["threads"], "passes": passes, "rows": []}
    by_shape = {}
    for kern in plan["kernels"]:
        by_shape.setdefault((kern["n"], kern["k"]), []).append(kern)
    t_start = time.perf_counter()
    for (n, k), kernels in by_shape.items():
        # Consecutive launches read different weight copies, so that the
        # weights come from HBM as in a model step and not from L2 (which
        # holds a small shape's weights after one launch).
        ws = [(torch.randn(n, k, device="cuda") / math.sqrt(k)).to(torch.bfloat16) for _ in range(cold_copies(n, k))]
        x = torch.randn(M_MAX, k, device="cuda").to(torch.bfloat16)
        y = torch.zeros(M_MAX, n, device="cuda")
        ref = torch.nn.functional.linear(x.float(), ws[0].float())
        launches = [runtime.load(root / kern["dir"]).launcher() for kern in kernels]
        # Launches per timed batch: enough to hide the host's launch work
        # behind short kernels; the long ones (>= 32 MiB of weights, 8 us
        # and more) need few.
        inner = 16 if n * k < (16 << 20) else 4
        # Passes interleave the configurations, so that a slow stretch of
        # the device does not land on one configuration's timings only.
        times = {}
        for _ in range(passes):
            for i, launch in enumerate(launches):
                for m in range(1, M_MAX + 1):
                    bound = [launch.bind(x[:m], w, y[:m]) for w in ws]
                    turn = itertools.cycle(bound)
                    times.setdefault((i, m), []).append(queued_seconds(lambda: next(turn)(), inner=inner, reps=reps))
        for i, (kern, launch) in enumerate(zip(kernels, launches)):
            for m in range(1, M_MAX + 1):
                y.zero_()
                launch.bind(x[:m], ws[0], y[:m])()
                launch.check()
                err = float((y[:m] - ref[:m]).norm() / ref[:m].norm())
                result["rows"].append({"n": n, "k": k, "rows": kern["rows"], "unroll": kern["unroll"], "m": m,
                                       "seconds": statistics.median(times[(i, m)]), "passes": times[(i, m)],
                                       "rel_err": err})
            launch.close()
        del ws
        torch.cuda.empty_cache()
        print(f"{n}x{k}: {len(kernels)} configurations x M 1..{M_MAX} timed, {passes} passes", flush=True)
    result["wall_s"] = time.perf_counter() - t_start
    out_json.write_text(json.dumps(result, indent=1))


def report(measured: Path, table_path: str | None, out_json: Path | None) -> None:
    from event_tensor.tuning import TuningTable, choose_linear

    data = json.loads(measured.read_text())
    table = TuningTable.load(table_path) if table_path else None
    times, per_pass = {}, {}
    configs = {}  # shape -> every measured (rows, unroll): the grid and the heuristic's own
    for r in data["rows"]:
        times[(r["n"], r["k"], r["m"], r["rows"], r["unroll"])] = r["seconds"]
        per_pass[(r["n"], r["k"], r["m"], r["rows"], r["unroll"])] = r.get("passes") or [r["seconds"]]
        configs.setdefault((r["n"], r["k"]), set()).add((r["rows"], r["unroll"]))
    shapes = sorted(configs)
    # How far the oracle agrees with itself: each pass's best, timed by the
    # median of the other passes, as a fraction of their best.
    self_ratios = []
    passes = min(len(v) for v in per_pass.values())
    bad = [r for r in data["rows"] if not r["rel_err"] < 1e-5]
    entries, ratios = [], {"table": [], "heuristic": []}
    search_s = 0.0
    for n, k in shapes:
        for m in range(1, M_MAX + 1):
            cands = {c: times[(n, k, m, *c)] for c in configs[(n, k)] if (n, k, m, *c) in times}
            search_s += sum(cands.values())
            for p in range(passes if passes > 1 else 0):
                mine = {c: per_pass[(n, k, m, *c)][p] for c in cands}
                rest = {c: statistics.median(v for q, v in enumerate(per_pass[(n, k, m, *c)]) if q != p)
                        for c in cands}
                self_ratios.append(min(rest.values()) / rest[min(mine, key=mine.get)])
            best_cfg, best = min(cands.items(), key=lambda kv: kv[1])
            row = {"n": n, "k": k, "m": m, "best": list(best_cfg), "best_us": best * 1e6}
            for name, tab in (("table", table), ("heuristic", None)):
                if name == "table" and tab is None:
                    continue
                cfg, source = choose_linear(n, k, m, table=tab, workers=data["workers"])
                key = (cfg.rows, cfg.unroll)
                if key not in cands:  # a choice outside the measured grid: nearest rows, same unroll
                    key = min(cands, key=lambda c: (abs(c[0] - cfg.rows), c[1] != cfg.unroll))
                ratio = best / cands[key]
                ratios[name].append(ratio)
                row[name] = {"config": list(key), "fraction_of_best": ratio, "source": source}
            entries.append(row)
    summary = {}
    for name, rs in ratios.items():
        if rs:
            summary[name] = {"geomean": math.exp(sum(math.log(r) for r in rs) / len(rs)), "worst": min(rs),
                             "points": len(rs)}
    if self_ratios:
        summary["one pass of exhaustive search"] = {
            "geomean": math.exp(sum(math.log(r) for r in self_ratios) / len(self_ratios)),
            "worst": min(self_ratios), "points": len(self_ratios)}
    out = {"device": data["device"], "date": data["date"], "summary": summary,
           "exhaustive_search_device_s": search_s, "measure_wall_s": data.get("wall_s"),
           "numerics_failures": len(bad), "entries": entries}
    for name, s in summary.items():
        print(f"{name}: geometric mean {100 * s['geomean']:.1f}% of the exhaustive best, worst "
              f"{100 * s['worst']:.1f}% over {s['points']} (shape, M) points")
    print(f"exhaustive search: {search_s:.3f} s of kernel time on the device ({len(shapes)} shapes x M 1..{M_MAX} "
          f"x {sum(map(len, configs.values())) / len(shapes):.1f} configurations); {len(bad)} numerics failures")
    if out_json:
        out_json.write_text(json.dumps(out, indent=1))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("out")
    p.add_argument("--models", default="llama-3.2-1b,qwen3-0.6b,llama-3.1-8b")
    p.add_argument("--workers", type=int, default=132)
    p.add_argument("--threads", type=int, default=512)
    p = sub.add_parser("measure")
    p.add_argument("root")
    p.add_argument("--json", required=True)
    p.add_argument("--reps", type=int, default=3, help="batches of queued launches per point and pass")
    p.add_argument("--passes", type=int, default=3, help="interleaved passes; the median of them is kept")
    p = sub.add_parser("report")
    p.add_argument("measured")
    p.add_argument("--table")
    p.add_argument("--json")
    args = parser.parse_args()
    if args.cmd == "prepare":
        prepare(Path(args.out), args.models.split(","), args.workers, args.threads)
    elif args.cmd == "measure":
        measure(Path(args.root), Path(args.json), args.reps, args.passes)
    else:
        report(Path(args.measured), args.table, Path(args.json) if args.json else None)


if __name__ == "__main__":
    main()
