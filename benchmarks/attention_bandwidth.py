#!/usr/bin/env python3
"""Split-KV decode attention bandwidth (Llama-3.2-1B heads: 32 query heads,
8 KV heads, D = 64) over 1k, 4k and 8k contexts and several split lengths and thread counts, on a CUDA machine without MLIR
(kernels from utils/prepare_gpu_suite.py): 16 independent layers per launch,
each reading its own K and V cache; bandwidth = KV bytes / time, against the
copy bandwidth measured in the same run. Each kernel is timed one launch at a
time (launch latency included) and 20 launches back to back (per launch);
consecutive launches read different sets of caches, 256 MiB in all, so that
none of a launch's rows is still in L2.

    PYTHONPATH=python python3 benchmarks/attention_bandwidth.py .device/tiles --json results.json
"""

import argparse
import itertools
import json
import time
from pathlib import Path

import torch

from event_tensor import runtime
from gpu_timing import batched_seconds, copy_bandwidth, median_seconds


# Cache bytes that the launches of one timing cycle through (several sets
# of caches where one set is smaller), so that L2 (50 MB on the H100 and the
# H200) holds none of a launch's rows when it starts.
ROTATE_BYTES = 256 << 20


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
        nbytes = 2 * layers * ctx * hkv * d * 2
        # Enough sets of caches that consecutive launches never find their
        # cache rows in L2 (50 MB): each launch reads the next set.
        sets = max(1, -(-ROTATE_BYTES // nbytes))
        caches = [[torch.randn(ctx, hkv, d, device="cuda").to(torch.bfloat16) for _ in range(2 * layers)]
                  for _ in range(sets)]
        o = torch.zeros(entries, hq, d, device="cuda")
        lse = torch.zeros(entries, hq, device="cuda")
        launch = runtime.load(root / cfg["name"]).launcher(timeout_s=5)
        bound = itertools.cycle([launch.bind(q, *c, o, lse) for c in caches])
        step = lambda: next(bound)()
        t = median_seconds(step, reps=20 * sets, warmup=3 * sets)
        # Launches back to back: the next launch's start overlaps this one's end.
        tb = batched_seconds(step, inner=20 * sets)
        launch.check()
        bw, bwb = nbytes / t, nbytes / tb
        results["rows"].append({**cfg, "cache_sets": sets, "time_us": t * 1e6, "tb_s": bw / 1e12,
                                "fraction_of_copy": bw / copy_bw, "time_us_back_to_back": tb * 1e6,
                                "fraction_of_copy_back_to_back": bwb / copy_bw})
        print(f"context {ctx}, split_len {split_len}, {cfg['threads']} threads, {cfg.get('variant', 'plain')}: "
              f"{layers} layers in "
              f"{t * 1e6:.1f} us, {bw / 1e12:.2f} TB/s, {100 * bw / copy_bw:.1f}% of copy; back to back "
              f"{tb * 1e6:.1f} us, {100 * bwb / copy_bw:.1f}%")
        launch.close()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
