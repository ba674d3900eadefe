#!/usr/bin/env python3
"""Split-KV decode attention bandwidth (Llama-3.2-1B heads: 32 query heads,
8 KV heads, D = 64) over 1k and 8k contexts and several split lengths and thread counts, on a CUDA machine without MLIR
(kernels from utils/prepare_gpu_suite.py): 16 independent layers per launch,
each reading its own K and V cache; bandwidth = KV bytes / time, against the
copy bandwidth measured in the same run. Each kernel is timed one launch at a
time (launch latency included) and 20 launches back to back (per launch).

    PYTHONPATH=python python3 benchmarks/attention_bandwidth.py .device/tiles --json results.json
"""

import argparse
import json
import time
from pathlib import Path

import torch

from event_tensor import runtime
from gpu_timing import batched_seconds, copy_bandwidth, launch_seconds


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--json")
    args = parser.parse_args()
    root = Path(args.root)
    info = json.loads((root / "attention-bw.json").read_text())
    copy_bw = copy_bandwidth()
    print(f"copy bandwidth: {copy_bw / 1e12:.2f} TB/s")
    results = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
               "copy_bandwidth_tb_s": copy_bw / 1e12, "rows": []}
    hq, hkv, d, layers = info["hq"], info["hkv"], info["d"], info["layers"]
    for cfg in info["configs"]:
        ctx, split_len = cfg["context"], cfg["split_len"]
        entries = ctx // split_len
        q = torch.randn(hq, d, device="cuda")
        caches = [torch.randn(ctx, hkv, d, device="cuda").to(torch.bfloat16) for _ in range(2 * layers)]
        o = torch.zeros(entries, hq, d, device="cuda")
        lse = torch.zeros(entries, hq, device="cuda")
        launch = runtime.load(root / cfg["name"]).launcher(timeout_s=5)
        t = launch_seconds(launch, q, *caches, o, lse)
        # Launches back to back: the next launch's start overlaps this one's end.
        tb = batched_seconds(launch.bind(q, *caches, o, lse), inner=20)
        launch.check()
        nbytes = sum(c.numel() * 2 for c in caches)
        bw, bwb = nbytes / t, nbytes / tb
        results["rows"].append({**cfg, "time_us": t * 1e6, "tb_s": bw / 1e12, "fraction_of_copy": bw / copy_bw,
                                "time_us_back_to_back": tb * 1e6, "fraction_of_copy_back_to_back": bwb / copy_bw})
        print(f"context {ctx}, split_len {split_len}, {cfg['threads']} threads, {cfg.get('variant', 'plain')}: "
              f"{layers} layers in "
              f"{t * 1e6:.1f} us, {bw / 1e12:.2f} TB/s, {100 * bw / copy_bw:.1f}% of copy; back to back "
              f"{tb * 1e6:.1f} us, {100 * bwb / copy_bw:.1f}%")
        launch.close()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
