#!/usr/bin/env python3
"""Decode-step latency of compiled model megakernels on a CUDA machine (no
MLIR; artifacts from utils/prepare_gpu_suite.py --models ...).

For each artifact: random bf16 weights and random KV caches (never zeros),
then decode steps at the given batch sizes and context (the decoded token at
position context - 1, attending over the whole context). Reports ms per
step (CUDA events around the launch, median of --iters) and the fraction of
the copy bandwidth measured in the same run that the weight + KV bytes of a
step represent. For an artifact compiled with profiling, writes the step's
trace (Chrome JSON, Gantt PNG) and the time per task kind.

This is the EventTensor column only; the peers (transformers eager,
torch.compile with CUDA graphs) are not run yet.

    PYTHONPATH=python python3 benchmarks/decode.py .device/models --json results.json --out DIR
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from event_tensor.model import DecodeSession, ModelConfig
from gpu_timing import copy_bandwidth, random_model_weights, to_numpy_bf16


def time_steps(session: DecodeSession, batch: int, position: int, iters: int) -> float:
    tokens = np.arange(batch) % session.config.vocab_size
    for _ in range(3):
        session.step(tokens, [position] * batch)
    args = session._arguments(batch)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(iters):
        start.record()
        session.launcher.launch_async(*args)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    session.launcher.check()
    return float(np.median(times))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--batches", default="1,4")
    parser.add_argument("--context", type=int, default=1024)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json")
    parser.add_argument("--out", help="directory for traces of profiled artifacts")
    args = parser.parse_args()
    copy_bw = copy_bandwidth()
    results = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
               "copy_bandwidth_tb_s": copy_bw / 1e12, "context": args.context, "rows": []}
    print(f"{results['device']}: copy bandwidth {copy_bw / 1e12:.2f} TB/s")
    for path in sorted(p for p in Path(args.root).iterdir() if (p / "model.json").exists()):
        info = json.loads((path / "model.json").read_text())
        config = ModelConfig.from_dict(info["config"])
        # Warm start: load the artifact and create its launcher (the driver
        # JIT-compiles the PTX the first time it sees it).
        t0 = time.perf_counter()
        from event_tensor import runtime

        runtime.load(path).launcher().close()
        load_s = time.perf_counter() - t0
        print(f"{path.name}: artifact load + launcher {load_s:.2f} s")
        results.setdefault("load_s", {})[path.name] = load_s
        session = DecodeSession(path, to_numpy_bf16(random_model_weights(config, 0)))
        for name in ("k_cache", "v_cache"):
            session.buffers[name].copy_(torch.randn(session.buffers[name].shape, device="cuda").to(torch.bfloat16))
        profiled = bool(session.artifact.metadata.get("profile"))
        context = min(args.context, session.max_context)
        for batch in [int(b) for b in args.batches.split(",")]:
            if batch > session.max_batch:
                continue
            t = time_steps(session, batch, context - 1, args.iters)
            kv = 2 * config.num_layers * batch * context * config.num_kv_heads * config.head_dim * 2
            nbytes = config.weight_bytes() + kv
            row = {"model": path.name, "profiled": profiled, "batch": batch, "context": context,
                   "ms_per_step": t * 1e3, "bytes": nbytes, "floor_ms": nbytes / copy_bw * 1e3,
                   "fraction_of_copy": nbytes / t / copy_bw}
            results["rows"].append(row)
            print(f"{path.name}{' (profiled)' if profiled else ''}: batch {batch}, context {context}: "
                  f"{t * 1e3:.3f} ms per step, floor {row['floor_ms']:.3f} ms, "
                  f"{100 * row['fraction_of_copy']:.1f}% of copy bandwidth")
        if profiled and args.out:
            session.step([1], [context - 1])
            trace = session.last_trace
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            trace.chrome_trace(out / f"{path.name}.trace.json")
            trace.gantt_png(out / f"{path.name}.gantt.png", title=f"{path.name}: one decode step (batch 1)")
            kinds = trace.breakdown()
            total = trace.workers * trace.makespan_ns
            results.setdefault("breakdown", {})[path.name] = {"makespan_us": trace.makespan_ns / 1e3,
                                                             "kinds": kinds}
            print(f"  trace: makespan {trace.makespan_ns / 1e3:.1f} us; per task kind (work / wait, % of "
                  f"{trace.workers} workers x makespan):")
            for kind, row in sorted(kinds.items(), key=lambda kv: -(kv[1]["wait_ns"] + kv[1]["work_ns"])):
                print(f"    {kind:12s} {row['tiles']:6d} tiles  work {100 * row['work_ns'] / total:5.1f}%  "
                      f"wait {100 * row['wait_ns'] / total:5.1f}%")
        session.close()
        del session
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
