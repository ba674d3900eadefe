#!/usr/bin/env python3
"""How well the wave model picks GEMM tile configurations, from a
`gemm_throughput.py` results file (every configuration timed at every
point on the device; no GPU needed here).

For each shape, one WaveModel per configuration is fitted on the other
shapes' points only (leave one shape out), and the configuration with the
lowest prediction is chosen at each of the held-out shape's points. The
score of a choice is best time / chosen time, where best is the fastest
configuration measured at that point (exhaustive search over the same
configurations). The heuristic fallback is scored the same way when its
choice was measured. Optionally writes the models fitted on every point.

    .venv/bin/python benchmarks/tune_gemm_eval.py benchmarks/results/2026-11-22-h200-gemm-final.json \
        --json out.json --models gemm-models.json
"""

import argparse
import json
import math
import time
from pathlib import Path

import numpy as np

from event_tensor.tuning import GemmConfig, GemmModels, heuristic_gemm


def _config(c) -> GemmConfig:
    return GemmConfig(tuple(c["tile"]), c["stages"], c["threads"], c["mma"], c.get("order", "auto"),
                      c.get("split_k", 1))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("results")
    parser.add_argument("--json")
    parser.add_argument("--models", help="write the models fitted on every point here")
    parser.add_argument("--workers", type=int, default=132)
    args = parser.parse_args()
    data = json.loads(Path(args.results).read_text())
    points = []  # (m, n, k, {cfg: time_us})
    cublas = {}
    for row in data["rows"]:
        times = {_config(c): c["time_us"] for c in row["configs"] if c["correct"]}
        if times:
            points.append((row["m"], row["n"], row["k"], times))
            cublas[(row["m"], row["n"], row["k"])] = row["cublas_us"]
    configs = sorted({cfg for *_, times in points for cfg in times}, key=GemmConfig.key)
    shapes = sorted({(n, k) for _, n, k, _ in points})

    def fit(rows):
        samples = {cfg: [(m, n, k, t[cfg]) for m, n, k, t in rows if cfg in t] for cfg in configs}
        return GemmModels.fit(data.get("device", "gpu"), args.workers, {c: s for c, s in samples.items() if len(s) >= 6})

    out = {"results": args.results, "date": time.strftime("%Y-%m-%d"), "points": []}
    model_scores, heuristic_scores, decision_ns, vs_cublas = [], [], [], []
    print(f"{'N x K':>13} {'M':>5} {'chosen (model)':>30} {'score':>6} {'heuristic':>30} {'score':>6}")
    for shape in shapes:
        models = fit([p for p in points if (p[1], p[2]) != shape])
        for m, n, k, times in (p for p in points if (p[1], p[2]) == shape):
            best = min(times.values())
            start = time.perf_counter_ns()
            chosen = models.choose(m, n, k)
            decision_ns.append(time.perf_counter_ns() - start)
            score = best / times[chosen]
            model_scores.append(score)
            vs_cublas.append(cublas[(m, n, k)] / times[chosen])
            h = heuristic_gemm(m, n, k, args.workers)
            h_score = best / times[h] if h in times else None
            if h_score is not None:
                heuristic_scores.append(h_score)
            print(f"{n:>6} x {k:<6} {m:>5} {chosen.key():>30} {score:>6.3f} {h.key():>30} "
                  f"{'not measured' if h_score is None else f'{h_score:.3f}':>6}")
            out["points"].append({"m": m, "n": n, "k": k, "best_us": best, "model": chosen.key(),
                                  "model_score": score, "heuristic": h.key(), "heuristic_score": h_score})

    def summary(name, scores, what):
        if not scores:
            return
        gmean = float(math.exp(np.mean(np.log(scores))))
        out[name] = {"geomean": gmean, "worst": float(min(scores)), "points": len(scores)}
        print(f"{name}: geometric mean {gmean:.3f} {what}, worst {min(scores):.3f} ({len(scores)} points)")

    summary("model", model_scores, "of the exhaustive best")
    summary("heuristic", heuristic_scores, "of the exhaustive best")
    summary("model_vs_cublas", vs_cublas, "of cuBLAS's speed (the model's choice)")
    out["decision_us_median"] = float(np.median(decision_ns)) / 1e3
    print(f"decision time (Python, {len(configs)} configurations): median {out['decision_us_median']:.1f} us")
    if args.models:
        fit(points).save(args.models)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
