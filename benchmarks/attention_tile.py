#!/usr/bin/env python3
"""Latency of one decode attention tile: how long a split-KV tile of the
one-row decode kernels takes after its wait, measured with the in-kernel
profiler on a small kernel of that tile alone (no megakernel around it).

The kernel is the GPU suite's attention case with a `stable` position (its
tiles wait on a task before them, so `tile_kv_prefetch="shared"` stages
their KV rows before that wait), with the heads, splits and threads of a
model's one-row decode kernel: splits of 128 positions over a 2048-position
cache, the row 1024 positions long, so that 8 of a KV head's 16 splits have
work, as at context 1024 in a `max_context` 2048 decode kernel. The caches
stay in L2 from launch to launch: this measures the tile's work, not the
memory system.

    .venv/bin/python benchmarks/attention_tile.py --prepare .device/attn-tile     # here (needs MLIR)
    PYTHONPATH=python:benchmarks python3 benchmarks/attention_tile.py .device/attn-tile --json tile.json   # there
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
from pathlib import Path

# (query heads, KV heads, head dim, threads per worker): the presets' heads and
# their one-row decode kernels' threads (model_threads).
MODELS = {"llama-3.2-1b": (32, 8, 64, 512), "qwen3-0.6b": (16, 8, 128, 384)}
CACHE, SPLITS, SPLIT_LEN, LENGTH = 2048, 16, 128, 1024
LIVE_SPLITS = -(-LENGTH // SPLIT_LEN)  # splits of a KV head with work


def prepare(out: Path) -> None:
    import event_tensor as et

    # The kernel text of the GPU suite's attention cases (as utils/prepare_gpu_suite.py loads it).
    spec = importlib.util.spec_from_file_location(
        "tile_tests", Path(__file__).resolve().parents[1] / "test" / "unit" / "test_tile_ops.py")
    tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tests)
    for name, (hq, hkv, d, threads) in MODELS.items():
        art = et.compile(tests._attention_kernel(hq, hkv, d, CACHE, SPLITS, SPLIT_LEN, stable=True), target="cuda",
                         workers=132, mode="static", threads_per_worker=threads, tile_kv_prefetch="shared",
                         tile_prefetch_bytes=64 * 1024, profile=True, format="bin")
        art.copy_to(out / name)
        print(f"{name}: {out / name}")


def run(root: Path, launches: int, json_path: str | None) -> None:
    import torch

    from event_tensor import runtime

    results = {"device": torch.cuda.get_device_name(), "split_len": SPLIT_LEN, "length": LENGTH, "kernels": {}}
    for name, (hq, hkv, d, _) in MODELS.items():
        if not (root / name).is_dir():
            continue
        launch = runtime.load(root / name).launcher(timeout_s=5)
        q = torch.randn(hq, d, device="cuda")
        k = torch.randn(CACHE, hkv, d, device="cuda").to(torch.bfloat16)
        v = torch.randn(CACHE, hkv, d, device="cuda").to(torch.bfloat16)
        o = torch.zeros(SPLITS, hq, d, device="cuda")
        lse = torch.zeros(SPLITS, hq, device="cuda")
        out = torch.zeros(hq, d, device="cuda")
        work, before = [], []
        for i in range(launches):
            launch(q, k, v, o, lse, out, LENGTH, LENGTH - 1)
            trace = launch.last_trace
            if i < 5:  # warm-up
                continue
            for _, task, tile, start, ready, end in trace.records:
                if trace.tasks[task] == "split" and tile % SPLITS < LIVE_SPLITS:
                    work.append((end - ready) / 1e3)
                    before.append((ready - start) / 1e3)
        launch.close()
        work.sort()
        row = {"work_us_median": statistics.median(work), "work_us_p10": work[len(work) // 10],
               "work_us_p90": work[9 * len(work) // 10], "before_wait_us_median": statistics.median(before),
               "tiles": len(work)}
        results["kernels"][name] = row
        print(f"{name}: a split tile with work takes {row['work_us_median']:.2f} us after its wait (median; "
              f"p10 {row['work_us_p10']:.2f}, p90 {row['work_us_p90']:.2f}; {row['tiles']} tiles), "
              f"{row['before_wait_us_median']:.2f} us before it")
    if json_path:
        Path(json_path).write_text(json.dumps(results, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("root")
    parser.add_argument("--prepare", action="store_true", help="compile the kernels into ROOT (here)")
    parser.add_argument("--launches", type=int, default=20)
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.prepare:
        prepare(Path(args.root))
    else:
        run(Path(args.root), args.launches, args.json)


if __name__ == "__main__":
    main()
