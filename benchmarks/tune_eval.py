#!/usr/bin/env python3
"""The tuning table's choice against exhaustive search on the device.

For every linear-layer shape of the given model presets and every token
count M of the evaluation (1..16 each, then points across 17..512: the ends
of the 64-row blocks, the rows just past them and points inside), each
candidate tile is timed on the device: the et.linear configurations (rows
per tile x unroll; the rows are 8, 16, 32, 64 and the wave-sized ones of
`tuning.linear_candidates`) up to 16 tokens, which is what et.linear
serves, and the et.matmul configurations of `tuning.gemm_candidates`
(tensor-core tiles; 16-row tiles up to 64 tokens) at every M. Each launch
reads another copy of the weights (256 MiB in all, so they come from HBM
as in a model step, not from L2), in `--passes` interleaved passes whose
median is kept (one timing per point was too noisy); the best is the
exhaustive-search answer. Launches are queued back to back behind a sleep
kernel (`tuner.queued_seconds`): timed one at a time, the small shapes
measured the host's launch work instead of the kernel. The table (from
`event-tensor tune`, with `--gemm` for M past 16), the heuristic fallback
and, past 16 tokens, the shipped GEMM wave models each pick a tile without
measuring; the report gives their speed as a fraction of the best one
(geometric mean and worst case), beside the time the exhaustive search
took on the device.

    # here (MLIR): one kernel per shape and configuration, with a runtime M
    .venv/bin/python benchmarks/tune_eval.py prepare .device/tune-eval --models llama-3.2-1b,qwen3-0.6b,llama-3.1-8b
    # there (runtime only)
    PYTHONPATH=python:benchmarks python3 benchmarks/tune_eval.py measure .device/tune-eval --json eval.json
    # here: the comparison with a table
    .venv/bin/python benchmarks/tune_eval.py report eval.json --table table.json --json report.json

`prepare --m-max 16` evaluates et.linear alone, as before the GEMM
candidates (results of that form still load in `report`).
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
LINEAR_M = 16  # et.linear serves at most 16 tokens
# Token counts past 16: the ends of the 64-row blocks (where the GEMM tiles'
# counts change), the first M past them, and points inside.
GEMM_MS = (17, 24, 32, 40, 48, 63, 64, 65, 80, 96, 112, 127, 128, 129, 160, 192, 193, 224, 255, 256, 257, 288,
           320, 352, 383, 384, 385, 416, 448, 480, 511, 512)


def eval_ms(m_max: int) -> list[int]:
    return list(range(1, min(m_max, LINEAR_M) + 1)) + [m for m in GEMM_MS if m <= m_max]


def kernel_ms(kern: dict) -> list[int]:
    """The M a kernel of the plan is timed at (plans from before the GEMM
    candidates list none: M 1..16)."""
    return kern.get("ms") or list(range(1, LINEAR_M + 1))


def linear_key(rows: int, unroll: int) -> str:
    return f"linear-r{rows}-u{unroll}"


def prepare(out: Path, models: list[str], workers: int, threads: int, m_max: int) -> None:
    from event_tensor import compile as et_compile
    from event_tensor.ir import Context
    from event_tensor.tuner import _kernel, gemm_artifact, model_shapes
    from event_tensor.tuning import gemm_candidates, gemm_m_max, heuristic_gemm, heuristic_linear, linear_candidates

    out.mkdir(parents=True, exist_ok=True)
    shapes = model_shapes(models)
    ms = eval_ms(m_max)
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
            kernels.append({"dir": name, "kind": "linear", "config": linear_key(rows, unroll), "n": n, "k": k,
                            "rows": rows, "unroll": unroll, "ms": [m for m in ms if m <= LINEAR_M]})
        if m_max > LINEAR_M:
            cands = gemm_candidates(n, k)
            assert all(heuristic_gemm(m, n, k, workers) in cands for m in ms if m > LINEAR_M)
            for cfg in cands:
                name = f"n{n}-k{k}-{cfg.key()}"
                if not (out / name / "metadata.json").exists():
                    gemm_artifact(n, k, cfg, target="cuda", workers=workers, fmt="bin").copy_to(out / name)
                kernels.append({"dir": name, "kind": "gemm", "config": cfg.key(), "n": n, "k": k,
                                "ms": [m for m in ms if m <= gemm_m_max(cfg, m_max)]})
        print(f"prepared {n}x{k}", flush=True)
    (out / "eval.json").write_text(json.dumps({"models": models, "workers": workers, "threads": threads,
                                               "m_max": m_max, "ms": ms, "kernels": kernels}, indent=1))


def measure(root: Path, out_json: Path, reps: int, passes: int) -> None:
    import torch

    from event_tensor import runtime
    from event_tensor.tuner import cold_copies, queued_seconds
    from event_tensor.tuning import GemmConfig

    plan = json.loads((root / "eval.json").read_text())
    m_top = max(plan.get("ms") or [plan["m_max"]])
    result = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "workers": plan["workers"],
              "threads": plan["threads"], "passes": passes, "m_max": plan["m_max"], "rows": []}
    by_shape = {}
    for kern in plan["kernels"]:
        by_shape.setdefault((kern["n"], kern["k"]), []).append(kern)
    t_start = time.perf_counter()
    for (n, k), kernels in by_shape.items():
        # Consecutive launches read different weight copies, so that the
        # weights come from HBM as in a model step and not from L2 (which
        # holds a small shape's weights after one launch).
        ws = [(torch.randn(n, k, device="cuda") / math.sqrt(k)).to(torch.bfloat16) for _ in range(cold_copies(n, k))]
        x = torch.randn(m_top, k, device="cuda").to(torch.bfloat16)
        y = torch.zeros(m_top, n, device="cuda")
        ref = torch.nn.functional.linear(x.float(), ws[0].float())
        launches = [runtime.load(root / kern["dir"]).launcher() for kern in kernels]
        splits = [GemmConfig.from_key(kern["config"]).split_k if kern.get("kind") == "gemm" else 1
                  for kern in kernels]
        parts = {}  # (split, M) -> the partial products of split-K kernels (contiguous)

        def args(i, m, w):
            if kernels[i].get("kind") != "gemm":
                return (x[:m], w, y[:m])
            s = splits[i]
            if s > 1 and (s, m) not in parts:
                parts[(s, m)] = torch.zeros(s, m, n, device="cuda")
            return (x[:m], w, y[:m], m) + ((parts[(s, m)],) if s > 1 else ())

        # One launch at the largest M first: a plain call sizes the
        # counter buffer for the most blocks (bound launches do not).
        for i, launch in enumerate(launches):
            launch(*args(i, max(kernel_ms(kernels[i])), ws[0]))
        # Launches per timed batch: enough to hide the host's launch work
        # behind short kernels; the long ones (>= 32 MiB of weights, 8 us
        # and more) need few.
        inner = 16 if n * k < (16 << 20) else 4
        # Passes interleave the configurations, so that a slow stretch of
        # the device does not land on one configuration's timings only.
        times = {}
        for _ in range(passes):
            for i, launch in enumerate(launches):
                for m in kernel_ms(kernels[i]):
                    turn = itertools.cycle([launch.bind(*args(i, m, w)) for w in ws])
                    times.setdefault((i, m), []).append(queued_seconds(lambda: next(turn)(), inner=inner, reps=reps))
        for i, (kern, launch) in enumerate(zip(kernels, launches)):
            for m in kernel_ms(kern):
                y.zero_()
                launch.bind(*args(i, m, ws[0]))()
                launch.check()
                err = float((y[:m] - ref[:m]).norm() / ref[:m].norm())
                row = {"n": n, "k": k, "kind": kern.get("kind", "linear"), "config": kern["config"], "m": m,
                       "seconds": statistics.median(times[(i, m)]), "passes": times[(i, m)], "rel_err": err}
                if row["kind"] == "linear":
                    row.update(rows=kern["rows"], unroll=kern["unroll"])
                result["rows"].append(row)
            launch.close()
        del ws, parts
        torch.cuda.empty_cache()
        print(f"{n}x{k}: {len(kernels)} configurations timed, {passes} passes "
              f"({time.perf_counter() - t_start:.0f} s)", flush=True)
        # Written after each shape, so that a run cut short keeps its shapes.
        result["wall_s"] = time.perf_counter() - t_start
        out_json.write_text(json.dumps(result, indent=1))


def _geomean(rs):
    return math.exp(sum(math.log(r) for r in rs) / len(rs))


def report(measured: Path, table_path: str | None, out_json: Path | None) -> None:
    from event_tensor.tuning import TuningTable, choose_tile, shipped_gemm_models

    data = json.loads(measured.read_text())
    table = TuningTable.load(table_path) if table_path else None
    models = shipped_gemm_models(data["device"])
    times, per_pass = {}, {}
    configs = {}  # (shape, M) -> every measured configuration key
    for r in data["rows"]:
        key = r.get("config") or linear_key(r["rows"], r["unroll"])  # older files: et.linear only
        at = (r["n"], r["k"], r["m"])
        times[(*at, key)] = r["seconds"]
        per_pass[(*at, key)] = r.get("passes") or [r["seconds"]]
        configs.setdefault(at, set()).add(key)
    points = sorted(configs)
    passes = min(len(v) for v in per_pass.values())
    # f32 accumulation over K terms: the error grows about as sqrt(K).
    bad = [r for r in data["rows"] if not r["rel_err"] < 1e-5 * max(1.0, math.sqrt(r["k"] / 4096))]
    entries, self_ratios = [], []
    ratios = {"table": [], "heuristic": [], "GEMM wave models": []}
    by_range = {}  # (chooser, "M <= 16" | "M > 16") -> ratios
    search_s = 0.0
    for n, k, m in points:
        cands = {c: times[(n, k, m, c)] for c in configs[(n, k, m)]}
        search_s += sum(cands.values())
        # How far the oracle agrees with itself: each pass's best, timed by
        # the median of the other passes, as a fraction of their best.
        for p in range(passes if passes > 1 else 0):
            mine = {c: per_pass[(n, k, m, c)][p] for c in cands}
            rest = {c: statistics.median(v for q, v in enumerate(per_pass[(n, k, m, c)]) if q != p) for c in cands}
            self_ratios.append(min(rest.values()) / rest[min(mine, key=mine.get)])
        best_cfg, best = min(cands.items(), key=lambda kv: kv[1])
        row = {"n": n, "k": k, "m": m, "best": best_cfg, "best_us": best * 1e6}
        picks = {}
        if table is not None:
            kind, cfg, source = choose_tile(n, k, m, table=table, workers=data["workers"])
            picks["table"] = (kind, cfg, source)
        picks["heuristic"] = choose_tile(n, k, m, table=None, workers=data["workers"])
        if models is not None and m > LINEAR_M:
            picks["GEMM wave models"] = ("gemm", models.choose(m, n, k), f"models {models.gpu}")
        for name, (kind, cfg, source) in picks.items():
            key = linear_key(cfg.rows, cfg.unroll) if kind == "linear" else cfg.key()
            if key not in cands:
                row[name] = {"config": key, "source": source, "measured": False}
                continue
            ratio = best / cands[key]
            ratios[name].append(ratio)
            by_range.setdefault((name, "M <= 16" if m <= LINEAR_M else "M > 16"), []).append(ratio)
            row[name] = {"config": key, "fraction_of_best": ratio, "source": source}
        entries.append(row)
    summary = {}
    for name, rs in ratios.items():
        if rs:
            summary[name] = {"geomean": _geomean(rs), "worst": min(rs), "points": len(rs)}
    for (name, part), rs in sorted(by_range.items()):
        summary[f"{name}, {part}"] = {"geomean": _geomean(rs), "worst": min(rs), "points": len(rs)}
    if self_ratios:
        summary["one pass of exhaustive search"] = {"geomean": _geomean(self_ratios), "worst": min(self_ratios),
                                                    "points": len(self_ratios)}
    unmeasured = sum(1 for e in entries for v in e.values() if isinstance(v, dict) and v.get("measured") is False)
    out = {"device": data["device"], "date": data["date"], "summary": summary,
           "exhaustive_search_device_s": search_s, "measure_wall_s": data.get("wall_s"),
           "numerics_failures": len(bad), "unmeasured_choices": unmeasured, "entries": entries}
    for name, s in summary.items():
        print(f"{name}: geometric mean {100 * s['geomean']:.1f}% of the exhaustive best, worst "
              f"{100 * s['worst']:.1f}% over {s['points']} (shape, M) points")
    shapes = len({(n, k) for n, k, _ in points})
    print(f"exhaustive search: {search_s:.3f} s of kernel time on the device ({shapes} shapes x {len(points) // shapes} "
          f"M x {sum(map(len, configs.values())) / len(points):.1f} configurations); {len(bad)} numerics failures; "
          f"{unmeasured} choices outside the measured candidates")
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
    p.add_argument("--m-max", type=int, default=512,
                   help="largest M evaluated (default 512; 16 evaluates et.linear alone)")
    p = sub.add_parser("measure")
    p.add_argument("root")
    p.add_argument("--json", required=True)
    p.add_argument("--reps", type=int, default=3, help="batches of queued launches per point and pass")
    p.add_argument("--passes", type=int, default=2, help="interleaved passes; the median of them is kept")
    p = sub.add_parser("report")
    p.add_argument("measured")
    p.add_argument("--table")
    p.add_argument("--json")
    args = parser.parse_args()
    if args.cmd == "prepare":
        prepare(Path(args.out), args.models.split(","), args.workers, args.threads, args.m_max)
    elif args.cmd == "measure":
        measure(Path(args.root), Path(args.json), args.reps, args.passes)
    else:
        report(Path(args.measured), args.table, Path(args.json) if args.json else None)


if __name__ == "__main__":
    main()
