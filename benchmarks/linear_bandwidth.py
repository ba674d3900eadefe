#!/usr/bin/env python3
"""Linear-layer (GEMV) bandwidth of the persistent kernel at decode (M = 1,
bf16 weights, f32 accumulation), on a CUDA machine without MLIR (kernels
from utils/prepare_gpu_suite.py).

Each kernel holds 8 independent linear tasks with their own N x K weight
matrix (268 MB for every shape, several times the L2), tiled by 32 or 64
rows, with 4 or 8 16-byte loads per lane in flight, 1024 threads per worker. Measured in the same run: the device's copy bandwidth (a 1 GiB
device-to-device copy, bytes read plus written) and, as a peer, the same 8
products through torch (cuBLAS) launched back to back. Also checks the
numerics case (M = 3, N = 1000, K = 1800, unroll 8) against its float64 reference.

Each kernel is timed one launch at a time (the launch latency included) and
20 launches back to back (per launch: the next launch's start overlaps this
one's end). Inside a decode megakernel the linear tiles run within one
launch and pay no launch latency, as in the attention benchmark.

    PYTHONPATH=python python3 benchmarks/linear_bandwidth.py .device/linear --json results.json
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from event_tensor import runtime
from gpu_timing import copy_bandwidth, launch_seconds, median_seconds


THREADS = (1024,)  # threads per worker (CTA size), as compiled


# Launches per batch of the back-to-back timing, and batches.
BACK_TO_BACK, BACK_TO_BACK_REPS = 20, 7


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--json")
    args = parser.parse_args()
    root = Path(args.root)
    info = json.loads((root / "linear.json").read_text())
    results = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"), "rows": []}

    # Numerics first.
    case = np.load(root / "linear-numerics" / "case.npz")
    x = torch.from_numpy(case["x"].copy()).view(torch.bfloat16).cuda()
    w = torch.from_numpy(case["w"].copy()).view(torch.bfloat16).cuda()
    y = torch.full((x.shape[0], w.shape[0]), float("nan"), device="cuda")
    runtime.load(root / "linear-numerics").launcher()(x, w, y)
    got = y.cpu().double().numpy()
    ref = case["ref"]
    err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
    results["numerics_rel_err"] = err
    print(f"numerics (M=3, N=1000, K=1800, unroll 8): relative error {err:.2e} "
          f"({'ok' if err < 1e-5 and not np.isnan(got).any() else 'FAIL'})")
    # A runtime M and accumulate: M = 1, 2 and 6.
    for lowering in ("rows",):
        if not (root / f"linear-numerics-{lowering}").exists():
            continue
        case = np.load(root / f"linear-numerics-{lowering}" / "case.npz")
        launch = runtime.load(root / f"linear-numerics-{lowering}").launcher(threads=512)
        for m in (1, 2, 6):
            x = torch.from_numpy(case["x"][:m].copy()).view(torch.bfloat16).cuda()
            w = torch.from_numpy(case["w"].copy()).view(torch.bfloat16).cuda()
            y = torch.from_numpy(case["y0"][:m].copy()).cuda()
            launch(x, w, y)
            got = y.cpu().double().numpy()
            ref = case["ref"][:m]
            err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
            results[f"numerics_{lowering}_m{m}_rel_err"] = err
            print(f"numerics ({lowering}, runtime M={m}, N=1000, K=1024, accumulate): relative error {err:.2e} "
                  f"({'ok' if err < 1e-5 and not np.isnan(got).any() else 'FAIL'})")

    copy_bw = copy_bandwidth()
    results["copy_bandwidth_tb_s"] = copy_bw / 1e12
    print(f"copy bandwidth: {copy_bw / 1e12:.2f} TB/s")
    layers = info["layers"]
    print(f"{'shape N x K':>14} {'rows/unr/thr':>12} {'time us':>9} {'TB/s':>6} {'% copy':>7} {'b2b':>7}"
          f" {'':6s}   torch (cuBLAS) TB/s")
    for n, k in info["shapes"]:
        x = torch.randn(1, k, device="cuda").to(torch.bfloat16)
        ws = [torch.randn(n, k, device="cuda").to(torch.bfloat16) for _ in range(layers)]
        ys = [torch.zeros(1, n, device="cuda") for _ in range(layers)]
        nbytes = layers * n * k * 2
        ref = [torch.nn.functional.linear(x.float(), w.float()) for w in ws]
        torch_t = median_seconds(lambda: [torch.nn.functional.linear(x, w) for w in ws])
        variants = [(v, t, "rows") for v in info["variants"] for t in THREADS]
        for (rows, unroll), threads, lowering in variants:
            launch = runtime.load(root / f"linear-{n}x{k}-r{rows}-u{unroll}").launcher(timeout_s=5, threads=threads)
            launch(x, *ws, *ys)
            ok = all(torch.allclose(y, r, rtol=1e-3, atol=1e-3) for y, r in zip(ys, ref))
            t = launch_seconds(launch, x, *ws, *ys)
            tb = launch_seconds(launch, x, *ws, *ys, inner=BACK_TO_BACK, reps=BACK_TO_BACK_REPS)
            bw, b2b = nbytes / t, nbytes / tb / copy_bw
            results["rows"].append({"n": n, "k": k, "rows_per_tile": rows, "unroll": unroll, "threads": threads,
                                    "lowering": lowering,
                                    "time_us": t * 1e6,
                                    "tb_s": bw / 1e12, "fraction_of_copy": bw / copy_bw,
                                    "back_to_back_us": tb * 1e6, "back_to_back_fraction_of_copy": b2b,
                                    "torch_tb_s": nbytes / torch_t / 1e12, "correct": ok})
            print(f"{n:>6} x {k:<6} {rows:>3}/{unroll}/{threads:<4} {t * 1e6:>9.1f} {bw / 1e12:>6.2f} {100 * bw / copy_bw:>6.1f}%"
                  f" {100 * b2b:>6.1f}% {lowering:6s}"
                  f"   {nbytes / torch_t / 1e12:.2f}{'' if ok else '  WRONG RESULT'}")
            launch.close()
        del ws, ys
        torch.cuda.empty_cache()
    # Dependent layers: each layer's tiles wait for all of the previous
    # layer's output; weights loaded only after the wait, or their first
    # chunks before it (into registers or L2).
    n, layers, rows = info["chain"]
    x = torch.randn(1, n, device="cuda").to(torch.bfloat16)
    ws = [(torch.randn(n, n, device="cuda") / n ** 0.5).to(torch.bfloat16) for _ in range(layers)]
    ys = [torch.zeros(1, n, device="cuda", dtype=torch.bfloat16) for _ in range(layers)]
    ref = x.float()
    for w in ws:
        ref = torch.nn.functional.linear(ref, w.float()).to(torch.bfloat16).float()
    nbytes = layers * n * n * 2
    for prefetch, unroll in info["chain_variants"]:
        variant = f"{prefetch}-u{unroll}"
        for y in ys:
            y.zero_()
        launch = runtime.load(root / f"linear-chain-{variant}").launcher(timeout_s=5)
        launch(x, *ws, *ys)
        ok = torch.allclose(ys[-1].float(), ref, rtol=2e-2, atol=2e-2)
        t = launch_seconds(launch, x, *ws, *ys)
        tb = launch_seconds(launch, x, *ws, *ys, inner=BACK_TO_BACK, reps=BACK_TO_BACK_REPS)
        b2b = nbytes / tb / copy_bw
        results[f"chain_{variant}"] = {"time_us": t * 1e6, "tb_s": nbytes / t / 1e12,
                                       "fraction_of_copy": nbytes / t / copy_bw, "back_to_back_us": tb * 1e6,
                                       "back_to_back_fraction_of_copy": b2b, "correct": ok}
        print(f"chain of {layers} dependent {n}x{n} layers, {variant}: {t * 1e6:.1f} us, "
              f"{nbytes / t / 1e12:.2f} TB/s, {100 * nbytes / t / copy_bw:.1f}% of copy; back to back "
              f"{100 * b2b:.1f}%{'' if ok else '  WRONG RESULT'}")
        launch.close()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
