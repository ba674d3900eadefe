#!/usr/bin/env python3
"""The sampling filters on the GPU: draws over one row of 1024 random
logits, many seeds, against the distribution top-k / top-p / min-p leave
(chi-square over the kept tokens, none outside them), and the thresholds
against numpy's, both ways the op finds the threshold:

- `row`: `et.sample_threshold` over the row, then `et.argmax ... above` in
  a tile per chunk and one over the chunks' results;
- `candidates` (the decode kernel's way): a tile per chunk reduces every
  row's chunk to its largest logits and sums (`et.top_candidates`); a tile
  per row finds the threshold from those (`candidates(...)`, a scan of the
  row where they do not decide it) and draws over the candidates where
  they hold every kept column (`covered`), else over the row. Its
  thresholds must equal the row way's bit for bit; the share of covered
  draws is reported (top_k 100 and top_p 0.99 reach below the floors).

Here (needs MLIR):   .venv/bin/python benchmarks/check_sampling.py --prepare .device/sampling
There (runtime only): PYTHONPATH=python:benchmarks python3 benchmarks/check_sampling.py .device/sampling --json out.json
"""

import argparse
import json
import math
from pathlib import Path

import numpy as np

from event_tensor.reference import sampling_filter_probs

WIDTH, PARTS, PER_CHUNK = 1024, 8, 64
ROW_KERNEL = f"""
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
N_CAND = PARTS * PER_CHUNK
_ROW = "strided<[{0}, 1], offset: ?>"
_ONE = "strided<[1], offset: ?>"
# (%cif / %cvf are %ci / %cv again, seen as one row of candidates.)
CANDIDATES_KERNEL = f"""
et.kernel @draw_candidates(%x: memref<?x{WIDTH}xf32>, %v: memref<?x1xf32>, %i: memref<?x1xi32>,
                           %t: memref<?xf32>, %s: memref<?xi64>, %c: memref<?xi32>, %k: memref<?xi32>,
                           %p: memref<?xf32>, %mp: memref<?xf32>, %tau: memref<?xf32>,
                           %ci: memref<?x{PARTS}x{PER_CHUNK}xi32>, %cv: memref<?x{PARTS}x{PER_CHUNK}xf32>,
                           %cs: memref<?x{PARTS}x4xf32>, %cov: memref<?xi32>, %cif: memref<?x{N_CAND}xi32>,
                           %cvf: memref<?x{N_CAND}xf32>, %n: index) {{
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %zero = arith.constant 0 : i32
  %cw = arith.constant {WIDTH // PARTS} : index
  %cp = arith.constant {PARTS} : index
  %cn = arith.constant {N_CAND} : index
  %cwidth = arith.constant {WIDTH} : index
  %reduced = et.event.create() : !et.event<>
  et.task @chunk tiles(%q) in (%cp) {{
    %col0 = arith.muli %q, %cw : index
    scf.for %m = %c0 to %n step %c1 {{
      et.top_candidates %x token(%m) cols(%col0, %cw) temperature(%t) into(%ci, %cv, %cs) slot(%q)
          : memref<?x{WIDTH}xf32>, memref<?xf32>, memref<?x{PARTS}x{PER_CHUNK}xi32>,
            memref<?x{PARTS}x{PER_CHUNK}xf32>, memref<?x{PARTS}x4xf32>
    }}
    et.event.signal %reduced[] : !et.event<>
  }}
  et.task @row tiles(%m) in (%n) {{
    et.event.wait %reduced[] : !et.event<>
    et.sample_threshold %x token(%m) temperature(%t) top_k(%k) top_p(%p) min_p(%mp) into(%tau)
        candidates(%ci, %cv, %cs, %cov : memref<?x{PARTS}x{PER_CHUNK}xi32>, memref<?x{PARTS}x{PER_CHUNK}xf32>,
                   memref<?x{PARTS}x4xf32>, memref<?xi32>)
        : memref<?x{WIDTH}xf32>, memref<?xf32>, memref<?xi32>, memref<?xf32>, memref<?xf32>, memref<?xf32>
    %tm = memref.subview %t[%m] [1] [1] : memref<?xf32> to memref<1xf32, {_ONE}>
    %sm = memref.subview %s[%m] [1] [1] : memref<?xi64> to memref<1xi64, {_ONE}>
    %cm = memref.subview %c[%m] [1] [1] : memref<?xi32> to memref<1xi32, {_ONE}>
    %taum = memref.subview %tau[%m] [1] [1] : memref<?xf32> to memref<1xf32, {_ONE}>
    %vm = memref.subview %v[%m, 0] [1, 1] [1, 1] : memref<?x1xf32> to memref<1x1xf32, {_ROW.format(1)}>
    %im = memref.subview %i[%m, 0] [1, 1] [1, 1] : memref<?x1xi32> to memref<1x1xi32, {_ROW.format(1)}>
    %covered32 = memref.load %cov[%m] : memref<?xi32>
    %covered = arith.cmpi ne, %covered32, %zero : i32
    scf.if %covered {{
      %xs = memref.subview %cvf[%m, 0] [1, {N_CAND}] [1, 1] : memref<?x{N_CAND}xf32> to memref<1x{N_CAND}xf32, {_ROW.format(N_CAND)}>
      %ids = memref.subview %cif[%m, 0] [1, {N_CAND}] [1, 1] : memref<?x{N_CAND}xi32> to memref<1x{N_CAND}xi32, {_ROW.format(N_CAND)}>
      et.argmax %xs, %vm, %im cols(%c0, %cn) slot(%c0) from(%ids)
          sample(%tm, %sm, %cm : memref<1xf32, {_ONE}>, memref<1xi64, {_ONE}>, memref<1xi32, {_ONE}>)
          above(%taum : memref<1xf32, {_ONE}>)
          : memref<1x{N_CAND}xf32, {_ROW.format(N_CAND)}>, memref<1x1xf32, {_ROW.format(1)}>,
            memref<1x1xi32, {_ROW.format(1)}>, memref<1x{N_CAND}xi32, {_ROW.format(N_CAND)}>
    }} else {{
      %xs = memref.subview %x[%m, 0] [1, {WIDTH}] [1, 1] : memref<?x{WIDTH}xf32> to memref<1x{WIDTH}xf32, {_ROW.format(WIDTH)}>
      et.argmax %xs, %vm, %im cols(%c0, %cwidth) slot(%c0)
          sample(%tm, %sm, %cm : memref<1xf32, {_ONE}>, memref<1xi64, {_ONE}>, memref<1xi32, {_ONE}>)
          above(%taum : memref<1xf32, {_ONE}>)
          : memref<1x{WIDTH}xf32, {_ROW.format(WIDTH)}>, memref<1x1xf32, {_ROW.format(1)}>,
            memref<1x1xi32, {_ROW.format(1)}>
    }}
  }}
}}
"""
# (top_k 100 and top_p 0.99 keep columns below the candidates' floors: the
# candidates way scans the row for them.)
CASES = [dict(top_k=20), dict(top_p=0.5), dict(min_p=0.05), dict(top_k=40, top_p=0.8), dict(top_p=0.9, min_p=0.02),
         dict(top_k=100), dict(top_p=0.99)]


#: A way's draws fail where their chi-square has a p-value below this.
P_MIN = 1e-3


def chi_square(counts: np.ndarray, want: np.ndarray) -> tuple[float, int]:
    """Chi-square of draw counts against the probabilities `want` (tokens
    expected fewer than 5 times pooled into one cell) and its degrees of
    freedom."""
    total, live = int(counts.sum()), want > 0
    big = live & (total * want >= 5)
    obs = np.append(counts[big], counts[live & ~big].sum())
    exp = np.append(total * want[big], total * want[live & ~big].sum())
    keep = exp > 0
    return float(((obs - exp) ** 2 / np.where(keep, exp, 1))[keep].sum()), int(keep.sum()) - 1


def p_value(chi2: float, dof: int) -> float:
    """The chi-square's upper tail, by the Wilson-Hilferty approximation
    (the cube root of chi2 / dof is nearly normal; no scipy on the GPU
    machine). A bound on chi2 / dof instead (1.5 once) fails a correct
    sampler about one time in 14 at 20 degrees of freedom, and the cases
    share their noise (same seeds), so they fail together."""
    z = ((chi2 / dof) ** (1 / 3) - (1 - 2 / (9 * dof))) / math.sqrt(2 / (9 * dof))
    return 0.5 * math.erfc(z / math.sqrt(2))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("artifact", help="directory of the two kernels (row/, candidates/)")
    parser.add_argument("--prepare", action="store_true", help="compile the kernels into ARTIFACT (needs MLIR)")
    parser.add_argument("--rows", type=int, default=4096)
    parser.add_argument("--launches", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--seed", type=int, default=1, help="first seed of the draws (others: other noise)")
    parser.add_argument("--json")
    args = parser.parse_args()
    root = Path(args.artifact)
    if args.prepare:
        import event_tensor as et

        for name, text in (("row", ROW_KERNEL), ("candidates", CANDIDATES_KERNEL)):
            art = et.compile(text, target="cuda", workers=132, threads_per_worker=256, format="bin")
            art.copy_to(root / name)
        print(f"wrote {root}/row and {root}/candidates")
        return
    import torch

    from event_tensor import runtime

    row_launch = runtime.load(root / "row").launcher(timeout_s=30)
    cand_launch = runtime.load(root / "candidates").launcher(timeout_s=30)
    logits = np.random.default_rng(0).normal(0, 2.0, WIDTH).astype(np.float32)
    n, dev = args.rows, "cuda"
    x = torch.from_numpy(np.tile(logits, (n, 1))).to(dev)
    y = logits.astype(np.float64) / args.temperature
    results = []
    for case in CASES:
        want = sampling_filter_probs(logits, args.temperature, **case)
        live = want > 0
        row = {"case": case, "kept_tokens": int(live.sum()), "least_kept_y": float(y[live].min()),
               "most_dropped_y": float(y[~live].max())}
        eps = 1e-5 * max(1.0, abs(row["least_kept_y"]))
        taus = {}
        for way in ("row", "candidates"):
            counts = np.zeros(WIDTH, np.int64)
            got, covered = [], 0
            for launch_no in range(args.launches):
                t = lambda v, dt: torch.full((n,), v, dtype=dt, device=dev)  # noqa: E731
                seeds = torch.arange(n, dtype=torch.int64, device=dev) * 7919 + launch_no * n + args.seed
                out = torch.full((n, 1), -1, dtype=torch.int32, device=dev)
                tau = torch.zeros(n, dtype=torch.float32, device=dev)
                sampling = (t(args.temperature, torch.float32), seeds, t(5, torch.int32),
                            t(case.get("top_k", 0), torch.int32), t(case.get("top_p", 1.0), torch.float32),
                            t(case.get("min_p", 0.0), torch.float32), tau)
                if way == "row":
                    row_launch(x, torch.zeros((n, PARTS), device=dev),
                               torch.zeros((n, PARTS), dtype=torch.int32, device=dev), torch.zeros((n, 1), device=dev),
                               out, *sampling, n)
                else:
                    ci = torch.zeros((n, PARTS, PER_CHUNK), dtype=torch.int32, device=dev)
                    cv = torch.zeros((n, PARTS, PER_CHUNK), device=dev)
                    cov = torch.full((n,), -1, dtype=torch.int32, device=dev)
                    cand_launch(x, torch.zeros((n, 1), device=dev), out, *sampling, ci, cv,
                                torch.zeros((n, PARTS, 4), device=dev), cov, ci.view(n, N_CAND), cv.view(n, N_CAND), n)
                    covered += int((cov != 0).sum())
                counts += np.bincount(out[:, 0].cpu().numpy(), minlength=WIDTH)
                got.append(tau.cpu().numpy())
            chi2, dof = chi_square(counts, want)
            tau = np.concatenate(got)
            taus[way] = tau
            r = {"draws": int(counts.sum()), "outside": int(counts[~live].sum()), "chi2": chi2, "dof": dof,
                 "p_value": p_value(chi2, max(dof, 1)), "tau_equal_rows": bool((tau == tau[0]).all()),
                 "tau": float(tau[0])}
            # The threshold separates what is kept from what is not.
            r["ok"] = r["outside"] == 0 and r["p_value"] >= P_MIN and r["tau_equal_rows"] \
                and row["most_dropped_y"] < r["tau"] <= row["least_kept_y"] + eps
            if way == "candidates":
                r["covered_draws"] = covered
            row[way] = r
        row["tau_same_both_ways"] = bool(np.array_equal(taus["row"], taus["candidates"]))
        row["ok"] = row["row"]["ok"] and row["candidates"]["ok"] and row["tau_same_both_ways"]
        print(json.dumps(row), flush=True)
        results.append(row)
    out = {"gpu": torch.cuda.get_device_name(), "temperature": args.temperature, "cases": results,
           "ok": all(r["ok"] for r in results)}
    print(("OK" if out["ok"] else "MISMATCH"), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    raise SystemExit(0 if out["ok"] else 1)


if __name__ == "__main__":
    main()
