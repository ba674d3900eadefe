#!/usr/bin/env python3
"""The sampling filters on the GPU: draws of `et.sample_threshold` +
`et.argmax ... above` over one row of 1024 random logits, many seeds,
against the distribution top-k / top-p / min-p leave (chi-square over the
kept tokens, none outside them), and the thresholds against numpy's.

Here (needs MLIR):   .venv/bin/python benchmarks/check_sampling.py --prepare .device/sampling
There (runtime only): PYTHONPATH=python:benchmarks python3 benchmarks/check_sampling.py .device/sampling --json out.json
"""

import argparse
import json
from pathlib import Path

import numpy as np

from event_tensor.reference import sampling_filter_probs

WIDTH, PARTS = 1024, 8
KERNEL = f"""
et.kernel @draw_filtered(%x: memref<?x{WIDTH}xf32>, %pv: memref<?x{PARTS}xf32>, %pi: memref<?x{PARTS}xi32>,
                         %v: memref<?x1xf32>, %i: memref<?x1xi32>, %t: memref<?xf32>, %s: memref<?xi64>,
                         %c: memref<?xi32>, %k: memref<?xi32>, %p: memref<?xf32>, %mp: memref<?xf32>,
                         %tau: memref<?xf32>, %n: index) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %cw = arith.constant {WIDTH // PARTS} : index
  %cp = arith.constant {PARTS} : index
  %filtered = et.event.create() : !et.event<>
  et.task @filter tiles(%m) in (%n) {{
    et.sample_threshold %x token(%m) temperature(%t) top_k(%k) top_p(%p) min_p(%mp) into(%tau)
        : memref<?x{WIDTH}xf32>, memref<?xf32>, memref<?xi32>, memref<?xf32>, memref<?xf32>, memref<?xf32>
    et.event.signal %filtered[] : !et.event<>
  }}
  %parts = et.event.create() : !et.event<>
  et.task @part tiles(%q) in (%cp) {{
    et.event.wait %filtered[] : !et.event<>
    %col0 = arith.muli %q, %cw : index
    et.argmax %x, %pv, %pi cols(%col0, %cw) slot(%q)
        sample(%t, %s, %c : memref<?xf32>, memref<?xi64>, memref<?xi32>) above(%tau : memref<?xf32>)
        : memref<?x{WIDTH}xf32>, memref<?x{PARTS}xf32>, memref<?x{PARTS}xi32>
    et.event.signal %parts[] : !et.event<>
  }}
  et.task @final tiles(%q) in (%c1) {{
    et.event.wait %parts[] : !et.event<>
    et.argmax %pv, %v, %i cols(%c0, %cp) slot(%c0) from(%pi)
        : memref<?x{PARTS}xf32>, memref<?x1xf32>, memref<?x1xi32>, memref<?x{PARTS}xi32>
  }}
}}
"""
CASES = [dict(top_k=20), dict(top_p=0.5), dict(min_p=0.05), dict(top_k=40, top_p=0.8), dict(top_p=0.9, min_p=0.02)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("artifact")
    parser.add_argument("--prepare", action="store_true", help="compile the kernel into ARTIFACT (needs MLIR)")
    parser.add_argument("--rows", type=int, default=8192)
    parser.add_argument("--launches", type=int, default=4)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.prepare:
        import event_tensor as et

        art = et.compile(KERNEL, target="cuda", workers=132, threads_per_worker=256, format="bin")
        art.copy_to(args.artifact)
        print(f"wrote {args.artifact}")
        return
    import torch

    from event_tensor import runtime

    launch = runtime.load(args.artifact).launcher(timeout_s=30)
    logits = np.random.default_rng(0).normal(0, 2.0, WIDTH).astype(np.float32)
    n, dev = args.rows, "cuda"
    x = torch.from_numpy(np.tile(logits, (n, 1))).to(dev)
    results = []
    for case in CASES:
        counts = np.zeros(WIDTH, np.int64)
        taus = []
        for launch_no in range(args.launches):
            t = lambda v, dt: torch.full((n,), v, dtype=dt, device=dev)  # noqa: E731
            seeds = torch.arange(n, dtype=torch.int64, device=dev) * 7919 + launch_no * n + 1
            out = torch.full((n, 1), -1, dtype=torch.int32, device=dev)
            tau = torch.zeros(n, dtype=torch.float32, device=dev)
            launch(x, torch.zeros((n, PARTS), device=dev), torch.zeros((n, PARTS), dtype=torch.int32, device=dev),
                   torch.zeros((n, 1), device=dev), out, t(args.temperature, torch.float32), seeds,
                   t(5, torch.int32), t(case.get("top_k", 0), torch.int32), t(case.get("top_p", 1.0), torch.float32),
                   t(case.get("min_p", 0.0), torch.float32), tau, n)
            counts += np.bincount(out[:, 0].cpu().numpy(), minlength=WIDTH)
            taus.append(tau.cpu().numpy())
        total = int(counts.sum())
        want = sampling_filter_probs(logits, args.temperature, **case)
        live = want > 0
        # Tokens expected fewer than 5 times are pooled into one cell.
        big = live & (total * want >= 5)
        obs = np.append(counts[big], counts[live & ~big].sum())
        exp = np.append(total * want[big], total * want[live & ~big].sum())
        keep = exp > 0
        chi2 = float(((obs - exp) ** 2 / np.where(keep, exp, 1))[keep].sum())
        dof = int(keep.sum()) - 1
        y = logits.astype(np.float64) / args.temperature
        tau = np.concatenate(taus)
        # The threshold separates what is kept from what is not.
        row = {"case": case, "draws": total, "kept_tokens": int(live.sum()), "outside": int(counts[~live].sum()),
               "chi2": chi2, "dof": dof, "chi2_per_dof": chi2 / max(dof, 1),
               "tau_equal_rows": bool((tau == tau[0]).all()), "tau": float(tau[0]),
               "least_kept_y": float(y[live].min()), "most_dropped_y": float(y[~live].max())}
        eps = 1e-5 * max(1.0, abs(row["least_kept_y"]))
        row["ok"] = row["outside"] == 0 and row["chi2_per_dof"] < 1.5 and row["tau_equal_rows"] \
            and row["most_dropped_y"] < row["tau"] <= row["least_kept_y"] + eps
        print(json.dumps(row), flush=True)
        results.append(row)
    out = {"gpu": torch.cuda.get_device_name(), "temperature": args.temperature, "cases": results,
           "ok": all(r["ok"] for r in results)}
    print(("OK" if out["ok"] else "MISMATCH"), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
