#!/usr/bin/env python3
"""GEMM tiles (et.matmul on tensor cores) of the persistent kernel against
torch.matmul (cuBLAS) in the same run, on a CUDA machine without MLIR
(kernels from `utils/prepare_gpu_suite.py --parts gemm`).

For each linear-layer shape N x K of Llama-3.2-1B and Llama-3.1-8B and each
M (tokens of a prompt), y = x * w^T with bf16 x, w and y: the time of every
prepared tile configuration (one kernel each; M is a runtime argument), the
best of them, and cuBLAS's time for the same product. Throughput is
2 * M * N * K / time, each time the median over batches of 20 launches
back to back (per launch: the host's launch work overlaps the device's).
First the numerics cases (partial tiles, both output
types, accumulate, one stage, idle warps) against float64 references.

    PYTHONPATH=python python3 benchmarks/gemm_throughput.py .device/gemm --json results.json
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from event_tensor import runtime
from gpu_timing import batched_seconds

M_VALUES = (128, 512, 1024, 2048, 4096)


def _name(n, k, tile, stages, threads, mma, order, split) -> str:
    return f"gemm-{n}x{k}-{tile[0]}x{tile[1]}x{tile[2]}-s{stages}-t{threads}-{mma}-{order}-k{split}"


def numerics(root: Path, count: int) -> list[dict]:
    rows = []
    for i in range(count):
        case = np.load(root / f"numerics{i}" / "case.npz")
        x = torch.from_numpy(case["x"].copy()).view(torch.bfloat16).cuda()
        w = torch.from_numpy(case["w"].copy()).view(torch.bfloat16).cuda()
        bf16 = str(case["out"]) == "bf16"
        y = (torch.from_numpy(case["y0"].copy()).cuda() if bool(case["accumulate"])
             else torch.full((x.shape[0], w.shape[0]), float("nan"), device="cuda"))
        if bf16:
            y = y.to(torch.bfloat16)
        split = int(case["split_k"]) if "split_k" in case.files else 1
        atomic = "atomic" in case.files and bool(case["atomic"])
        # The parts of an atomic split add into y itself: no part buffer.
        extra = [torch.full((split, x.shape[0], w.shape[0]), float("nan"), device="cuda")] \
            if split > 1 and not atomic else []
        art = runtime.load(root / f"numerics{i}")
        art.launcher(timeout_s=5)(x, w, y, x.shape[0], *extra)
        got = y.double().cpu().numpy()
        ref = case["ref"]
        err = float(np.linalg.norm(got - ref) / np.linalg.norm(ref))
        ok = not np.isnan(got).any() and err < (1e-2 if bf16 else 1e-5)
        opts = art.metadata["options"]
        print(f"numerics {i} ({case['mma']}, split-K {split}{' atomic' if atomic else ''}): M={x.shape[0]} K={x.shape[1]} N={w.shape[0]} out={case['out']} "
              f"accumulate={bool(case['accumulate'])} threads={opts['threads_per_worker']}: "
              f"relative error {err:.2e} ({'ok' if ok else 'FAIL'})")
        rows.append({"case": i, "mma": str(case["mma"]), "m": x.shape[0], "k": x.shape[1], "n": w.shape[0],
                     "rel_err": err, "ok": ok})
    return rows


def profiles(root: Path, shapes) -> list[dict]:
    """Per-tile times of profiled 128x256x64 wgmma kernels at M = 4096: how
    long a tile takes against the launch's makespan."""
    out = []
    for n, k in shapes:
        m = 4096
        x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
        w = (torch.randn(n, k, device="cuda") / k ** 0.5).to(torch.bfloat16)
        y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        launch = runtime.load(root / f"profiled-{n}x{k}").launcher(timeout_s=10)
        for _ in range(3):
            launch(x, w, y, m)
        trace = launch.last_trace
        durations = sorted(r[5] - r[3] for r in trace.records)
        starts = sorted(r[3] for r in trace.records)
        per_worker = {}
        for r in trace.records:
            per_worker.setdefault(r[0], []).append(r)
        gaps = []
        for recs in per_worker.values():
            recs.sort(key=lambda r: r[3])
            gaps += [b[3] - a[5] for a, b in zip(recs, recs[1:])]
        row = {"n": n, "k": k, "m": m, "tiles": len(durations), "makespan_us": trace.makespan_ns / 1e3,
               "tile_us_median": durations[len(durations) // 2] / 1e3, "tile_us_max": durations[-1] / 1e3,
               "last_start_us": starts[-1] / 1e3,
               "gap_us_median": (sorted(gaps)[len(gaps) // 2] / 1e3) if gaps else 0.0,
               "tile_tflops": 2 * 128 * 256 * k / (durations[len(durations) // 2] * 1e-9) / 1e12}
        print(f"profile {n} x {k}, M = {m}: {row['tiles']} tiles, makespan {row['makespan_us']:.1f} us, "
              f"tile median {row['tile_us_median']:.1f} us (max {row['tile_us_max']:.1f}; "
              f"{row['tile_tflops']:.2f} TFLOP/s per worker), gap between a worker's tiles "
              f"{row['gap_us_median']:.2f} us")
        out.append(row)
        launch.close()
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--json")
    parser.add_argument("--m", default=",".join(map(str, M_VALUES)), help="token counts (comma-separated)")
    args = parser.parse_args()
    root = Path(args.root)
    info = json.loads((root / "gemm.json").read_text())
    results = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
               "numerics": numerics(root, info["numerics"]), "rows": []}
    results["profiles"] = profiles(root, info.get("profiled", []))
    m_values = [int(v) for v in args.m.split(",")]
    print(f"{'N x K':>13} {'M':>5} {'best tile':>28} {'us':>8} {'TFLOP/s':>8} {'cuBLAS':>8} {'ratio':>6}")
    for n, k in info["shapes"]:
        w = (torch.randn(n, k, device="cuda") / k ** 0.5).to(torch.bfloat16)
        launchers = {}
        for tile, stages, threads, mma, order, split in info["configs"]:
            name = _name(n, k, tile, stages, threads, mma, order, split)
            launchers[name] = runtime.load(root / name).launcher(timeout_s=10)
        for m in m_values:
            x = torch.randn(m, k, device="cuda").to(torch.bfloat16)
            y = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            ref = torch.matmul(x, w.t())
            flops = 2 * m * n * k
            torch_t = batched_seconds(lambda: torch.matmul(x, w.t()))
            configs = []
            parts = {}
            for (tile, stages, threads, mma, order, split), (name, launch) in zip(info["configs"], launchers.items()):
                if split > 1 and split not in parts:
                    parts[split] = torch.empty(split, m, n, device="cuda")
                extra = [parts[split]] if split > 1 else []
                y.fill_(float("nan"))
                launch(x, w, y, m, *extra)
                err = float(((y.float() - ref.float()).norm() / ref.float().norm()).item())
                t = batched_seconds(launch.bind(x, w, y, m, *extra))
                launch.check()
                configs.append({"tile": tile, "stages": stages, "threads": threads, "mma": mma, "order": order, "split_k": split,
                                "time_us": t * 1e6,
                                "tflops": flops / t / 1e12, "rel_err_vs_cublas": err, "correct": err < 1e-2})
            best = min((c for c in configs if c["correct"]), key=lambda c: c["time_us"], default=None)
            row = {"n": n, "k": k, "m": m, "cublas_us": torch_t * 1e6, "cublas_tflops": flops / torch_t / 1e12,
                   "configs": configs}
            if best is None:
                print(f"{n:>6} x {k:<6} {m:>5}   every configuration WRONG")
            else:
                row["best"] = best
                row["fraction_of_cublas"] = torch_t * 1e6 / best["time_us"]
                label = "x".join(map(str, best["tile"])) + f" s{best['stages']} t{best['threads']} {best['mma']}"
                if best["order"] != "auto":
                    label += " " + best["order"]
                if best["split_k"] > 1:
                    label += f" k{best['split_k']}"
                print(f"{n:>6} x {k:<6} {m:>5} {label:>28} {best['time_us']:>8.1f} {best['tflops']:>8.1f} "
                      f"{flops / torch_t / 1e12:>8.1f} {row['fraction_of_cublas']:>6.2f}")
            results["rows"].append(row)
        for launch in launchers.values():
            launch.close()
        del w
        torch.cuda.empty_cache()
    fractions = [r["fraction_of_cublas"] for r in results["rows"] if "fraction_of_cublas" in r]
    if fractions:
        gmean = float(np.exp(np.mean(np.log(fractions))))
        results["geomean_fraction_of_cublas"] = gmean
        print(f"geometric mean of the best configuration's speed / cuBLAS: {gmean:.3f} "
              f"(min {min(fractions):.3f}, max {max(fractions):.3f})")
    for ci, (tile, stages, threads, mma, order, split) in enumerate(info["configs"]):
        ratios = [r["cublas_us"] / r["configs"][ci]["time_us"] for r in results["rows"] if r["configs"][ci]["correct"]]
        if ratios:
            print(f"  {'x'.join(map(str, tile))} s{stages} t{threads} {mma} {order} split-K {split}: geometric mean "
                  f"{float(np.exp(np.mean(np.log(ratios)))):.3f} of cuBLAS over {len(ratios)} points")
    for mma in sorted({c[3] for c in info["configs"]}):
        ratios = []
        for r in results["rows"]:
            times = [c["time_us"] for c in r["configs"] if c["mma"] == mma and c["correct"]]
            if times:
                ratios.append(r["cublas_us"] / min(times))
        if ratios:
            gmean = float(np.exp(np.mean(np.log(ratios))))
            results[f"geomean_fraction_of_cublas_{mma}"] = gmean
            print(f"  best {mma} configuration only: {gmean:.3f} (min {min(ratios):.3f}, max {max(ratios):.3f})")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
