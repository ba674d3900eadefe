#!/usr/bin/env python3
"""Decode-step latency on a CUDA machine: the EventTensor megakernel against
Hugging Face transformers eager and torch.compile(mode="reduce-overhead")
with a static cache (CUDA graphs), in the same run (no MLIR; artifacts from
utils/prepare_gpu_suite.py --parts models ...).

For each artifact: random bf16 weights and random KV caches (never zeros),
then decode steps at every batch size and context of the sweep that the
artifact serves (the decoded token at position context - 1, attending over
the whole context). One artifact serves the whole sweep. The time is CUDA
events around one launch whose arguments were packed beforehand, median of
--iters. The fraction of the copy bandwidth (measured in the same run) is
(weight bytes + KV bytes) / time / copy bandwidth.

The peers run the same model shape with the same weights in bf16 (sdpa
attention; for a model with experts another draw of the same
distribution, since both sets do not fit one GPU), at the --peer-points
(BATCHxCONTEXT) given: a random prompt of
context - 1 tokens fills the static cache, then the timed step decodes the
next token; the cache is rewound outside the timed interval. Their warm-up
is the time of the first three steps (compilation and graph capture).

Warm-up of the megakernel: the compile time here (model.json's compile_s,
taken on the machine that compiled it) and the warm start on the device
(artifact load + launcher, which includes the driver's JIT for PTX).

For an artifact compiled with profiling, writes the step's trace (Chrome
JSON, Gantt PNG) and the time per task kind; with --trace-steps N > 1, of
one launch of N decode steps (the kernel feeding each token back; the
chart marks where each step starts).

    PYTHONPATH=python:benchmarks python3 benchmarks/decode.py .device/models --json results.json --out DIR
"""

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

from event_tensor import runtime
from event_tensor.model import DecodeSession, ModelConfig
from gpu_timing import (copy_bandwidth, kv_bytes, launch_seconds, median_seconds, random_model_weights,
                        random_packed_weights, save_trace, to_numpy_bf16)


def time_megakernel(session: DecodeSession, batch: int, position: int, iters: int) -> float:
    tokens = np.arange(batch) % session.config.vocab_size
    for _ in range(2):
        session.step(tokens, [position] * batch)
    # The launcher and arguments step() used last, packed once.
    return launch_seconds(session.launcher, *session._arguments(batch), reps=iters)


def time_peer(config, weights, batch: int, context: int, compiled: bool, iters: int) -> dict:
    from hf_models import PeerDecoder

    t0 = time.perf_counter()
    peer = PeerDecoder(config, weights, batch=batch, context=context, compiled=compiled)
    setup_s = time.perf_counter() - t0
    warm_s = peer.warm_up()

    def step():
        peer.step()

    # Rewinding is one small kernel before each timed step.
    times = []
    for _ in range(iters):
        peer.rewind()
        times.append(median_seconds(step, reps=1, warmup=0))
    del peer
    torch.cuda.empty_cache()
    return {"seconds": float(np.median(times)), "warmup_s": warm_s, "setup_s": setup_s}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--batches", default="1,2,4,8,16")
    parser.add_argument("--contexts", default="1024")
    parser.add_argument("--peers", default="eager,compiled", help="peers to run ('' for none)")
    parser.add_argument("--peer-points", default="1x1024", help="BATCHxCONTEXT points the peers run at")
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--json")
    parser.add_argument("--out", help="directory for traces of profiled artifacts")
    parser.add_argument("--trace-batch", type=int, default=1, help="batch of the traced step")
    parser.add_argument("--trace-steps", type=int, default=1,
                        help="decode steps of the traced launch (a kernel with steps on the device)")
    args = parser.parse_args()
    copy_bw = copy_bandwidth()
    results = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
               "torch": torch.__version__, "copy_bandwidth_tb_s": copy_bw / 1e12, "rows": []}
    print(f"{results['device']}: copy bandwidth {copy_bw / 1e12:.2f} TB/s")
    batches = [int(b) for b in args.batches.split(",")]
    contexts = [int(c) for c in args.contexts.split(",")]
    peers = [p for p in args.peers.split(",") if p]
    points = [tuple(int(v) for v in p.split("x")) for p in args.peer_points.split(",") if p]

    def save():
        if args.json:  # after every row, so a run cut short keeps what it measured
            Path(args.json).write_text(json.dumps(results, indent=2))

    def record(row, config, t):
        # A model with experts: the weights of the distinct experts the
        # step's last layer chose, for every layer.
        nbytes = config.weight_bytes(row.get("distinct_experts")) + kv_bytes(config, row["batch"], row["context"])
        row.update(ms_per_step=t * 1e3, bytes=nbytes, floor_ms=nbytes / copy_bw * 1e3,
                   fraction_of_copy=nbytes / t / copy_bw)
        results["rows"].append(row)
        save()
        print(f"{row['model']} [{row['system']}]: batch {row['batch']}, context {row['context']}: "
              f"{t * 1e3:.3f} ms per step, floor {row['floor_ms']:.3f} ms, "
              f"{100 * row['fraction_of_copy']:.1f}% of copy bandwidth")

    peers_done = set()
    for path in sorted(p for p in Path(args.root).iterdir() if (p / "model.json").exists()):
        info = json.loads((path / "model.json").read_text())
        config = ModelConfig.from_dict(info["config"])
        # Warm start: load the artifact and create its launcher (for PTX the
        # driver JIT-compiles it here).
        t0 = time.perf_counter()
        for variant in info.get("variants") or [{"dir": "."}]:
            runtime.load(path / variant["dir"]).launcher().close()
        load_s = time.perf_counter() - t0
        warm = {"compile_s_here": info.get("compile_s"), "load_s": load_s}
        results.setdefault("warmup", {})[path.name] = warm
        print(f"{path.name}: compiled in {info.get('compile_s')} s (2-core machine); artifact load + launcher "
              f"{load_s:.2f} s on the device")
        # Trace records of a profiled launch: a step's fit in 1 << 16.
        capacity = (1 << 16) * max(1, args.trace_steps)
        if config.moe:
            # Too large to hold twice (named and packed): packed on the GPU.
            first = runtime.load(path / (info.get("variants") or [{"dir": "."}])[0]["dir"])
            weights = None
            session = DecodeSession(path, random_packed_weights(first.metadata["arguments"], 0),
                                    profile_capacity=capacity)
        else:
            weights = random_model_weights(config, 0)
            session = DecodeSession(path, to_numpy_bf16(weights), profile_capacity=capacity)
        for name in ("k_cache", "v_cache"):
            buf = session.buffers[name]
            buf.copy_(torch.randn(buf.shape, device="cuda").to(torch.bfloat16))
        profiled = bool(session.artifact.metadata.get("profile"))
        for context in contexts:
            if context > session.max_context:
                continue
            for batch in batches:
                if batch > session.max_batch:
                    continue
                t = time_megakernel(session, batch, context - 1, args.iters)
                row = {"model": path.name, "system": "eventtensor", "profiled": profiled, "batch": batch,
                       "context": context}
                if config.moe:
                    row["distinct_experts"] = int(session.buffers["expert_ids"][:batch].unique().numel())
                record(row, config, t)
        if profiled and args.out:
            context = min(contexts[0], session.max_context)
            tb = min(args.trace_batch, session.max_batch)
            if args.trace_steps > 1 and session.steps_on_device:
                n = args.trace_steps
                session.decode_launch(list(range(tb)), list(range(1, tb + 1)), [context - n] * tb, [n] * tb,
                                      np.full((tb, 1), -1, np.int32), n)
                what = f"one launch of {n} decode steps (batch {tb})"
            else:
                session.step(list(range(1, tb + 1)), [context - 1] * tb)
                what = f"one decode step (batch {tb})"
            save_trace(session.last_trace, args.out, path.name, f"{path.name}: {what}", results, path.name)
        session.close()
        del session
        torch.cuda.empty_cache()
        key = json.dumps(info["config"], sort_keys=True)
        if profiled or key in peers_done or not peers:
            continue
        peers_done.add(key)
        if weights is None:
            # A model with experts: the peers' weights under Hugging Face
            # names, drawn once the kernel's packed ones are freed (both do
            # not fit one GPU); another draw of the same distribution.
            weights = random_model_weights(config, 0)
        for peer in peers:
            for batch, context in points:
                try:
                    r = time_peer(config, weights, batch, context, peer == "compiled", args.iters)
                except Exception as e:  # a peer failing must not lose the megakernel's results
                    print(f"{path.name} [{peer}]: batch {batch}, context {context}: failed: {e!r}")
                    results.setdefault("peer_errors", []).append(
                        {"model": path.name, "system": peer, "batch": batch, "context": context, "error": repr(e)})
                    continue
                record({"model": path.name, "system": f"transformers-{peer}", "batch": batch, "context": context,
                        "warmup_s": r["warmup_s"], "setup_s": r["setup_s"]}, config, r["seconds"])
                print(f"  warm-up (first 3 steps) {r['warmup_s']:.1f} s")
        del weights
        torch.cuda.empty_cache()
    save()


if __name__ == "__main__":
    main()
