#!/usr/bin/env python3
"""Synchronization microbenchmarks of the persistent kernel, run on a CUDA
machine without MLIR (kernels from utils/prepare_gpu_suite.py):

- cross-SM wait-to-wake latency: a chain of one-tile tasks, task k on worker
  k mod W and waiting for task k-1 (on the previous SM); per hop, the chain's
  time minus the same tasks without the waits, over the number of hops;
- per-task dispatch overhead: empty tiles, W*K of them (K per worker), with a
  static (cyclic formula) and a dynamic (ticket queue) schedule; per tile,
  (T(K) - T(1)) / (K - 1).

Times are CUDA-event medians over many launches. Prints a table and writes
JSON (to the path given by --json).

    PYTHONPATH=python python3 benchmarks/sync_latency.py .device/bench --json results.json
"""

import argparse
import json
import time
from pathlib import Path

import torch

from event_tensor import runtime
from gpu_timing import launch_seconds


def timed(launch, args, reps=50, warmup=5):
    """Median microseconds of one launch."""
    return launch_seconds(launch, *args, reps=reps, warmup=warmup) * 1e6


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("bench")
    parser.add_argument("--json")
    args = parser.parse_args()
    root = Path(args.bench)
    info = json.loads((root / "bench.json").read_text())
    workers, rounds = info["workers"], info["rounds"]
    hops = workers * rounds
    results = {"device": torch.cuda.get_device_name(), "workers": workers, "date": time.strftime("%Y-%m-%d")}

    chain = runtime.load(root / "hops-chain").launcher(timeout_s=5)
    free = runtime.load(root / "hops-free").launcher(timeout_s=5)
    t_chain, t_free = timed(chain, ()), timed(free, ())
    results["chain_us"] = t_chain
    results["free_us"] = t_free
    results["wait_to_wake_us"] = (t_chain - t_free) / hops
    print(f"chain of {hops} cross-SM hops: {t_chain:.1f} us; same tasks without waits: {t_free:.1f} us")
    print(f"  wait-to-wake latency per hop: {results['wait_to_wake_us'] * 1e3:.0f} ns")

    for mode in ("static", "dynamic"):
        launch = runtime.load(root / f"dispatch-{mode}").launcher(timeout_s=5)
        per_k = {}
        for k in (1, 256, 1024, 4096):
            per_k[k] = timed(launch, (workers * k,), reps=20)
        slope = (per_k[4096] - per_k[1]) / (4096 - 1)
        results[f"dispatch_{mode}_ns"] = slope * 1e3
        results[f"dispatch_{mode}_us_by_tiles_per_worker"] = per_k
        print(f"dispatch ({mode}): " + ", ".join(f"K={k}: {t:.1f} us" for k, t in per_k.items())
              + f"  -> {slope * 1e3:.0f} ns per tile per worker")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
