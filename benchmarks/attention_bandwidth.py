#!/usr/bin/env python3
"""Split-KV decode attention bandwidth (Llama-3.2-1B heads: 32 query heads,
8 KV heads, D = 64) over 1k to 8k contexts and several split lengths, thread
counts and workers per SM, on a CUDA machine without MLIR (kernels from
utils/prepare_gpu_suite.py --parts tiles): 16 independent layers per launch,
each reading its own K and V cache; bandwidth = KV bytes / time, against the
copy bandwidth measured in the same run.

Each kernel is timed three ways: one launch at a time (launch latency
included); 20 launches back to back from Python (per launch: the next
launch's host work overlaps this one); and, for kernels without events, 20
launches captured in a CUDA graph (per launch: no host work between them).
Consecutive launches read different sets of caches, 256 MiB in all, so that
none of a launch's rows is still in L2. Profiled builds (variant "-prof")
report the span of their tiles inside the launch (first tile's start to last
tile's end) instead: what the same tiles cost inside a megakernel, without
the launch. An empty kernel (a tile per worker that does nothing) gives the
launch's own cost.

    PYTHONPATH=python python3 benchmarks/attention_bandwidth.py .device/tiles --json results.json
"""

import argparse
import itertools
import json
import statistics
import time
from pathlib import Path

import torch

from event_tensor import runtime
from gpu_timing import batched_seconds, copy_bandwidth, median_seconds


# Cache bytes that the launches of one timing cycle through (several sets
# of caches where one set is smaller), so that L2 (50 MB on the H100 and the
# H200) holds none of a launch's rows when it starts.
ROTATE_BYTES = 256 << 20


def graph_seconds(launch, bound_args: list[tuple], inner: int) -> float | None:
    """Seconds per launch of `inner` launches (cycling through
    `bound_args`) captured in one CUDA graph and replayed; None where the
    capture fails. Only for kernels whose events are never signalled: the
    launch number that picks the counter bank is packed once, at capture."""
    stream = torch.cuda.Stream()
    try:
        steps = [launch.bind(*a, stream=stream.cuda_stream) for a in bound_args]
        with torch.cuda.stream(stream):
            steps[0]()
            stream.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=stream):
                for i in range(inner):
                    steps[i % len(steps)]()
        launch.check(stream.cuda_stream)
    except Exception as e:  # a capture that fails must not lose the other timings
        print(f"  (no CUDA graph timing: {e!r})")
        return None
    return batched_seconds(graph.replay, inner=5) / inner


def tile_span(launch, bound_args: list[tuple], rounds: int) -> dict:
    """Median over `rounds` profiled launches of the span from the first
    tile's start to the last tile's end, and the tiles' own durations."""
    spans, durations, busiest = [], [], []
    for i in range(rounds + len(bound_args)):
        launch(*bound_args[i % len(bound_args)])
        if i < len(bound_args):
            continue  # the first pass warms up
        records = launch.last_trace.records
        spans.append(max(r[5] for r in records) - min(r[3] for r in records))
        durations += [r[5] - r[3] for r in records]
        per_worker = {}
        for r in records:
            per_worker[r[0]] = per_worker.get(r[0], 0) + r[5] - r[3]
        busiest.append(max(per_worker.values()))
    return {"span_us": statistics.median(spans) / 1e3, "tile_us_median": statistics.median(durations) / 1e3,
            "tile_us_min": min(durations) / 1e3, "tile_us_max": max(durations) / 1e3,
            "busiest_worker_us": statistics.median(busiest) / 1e3, "tiles": len(records)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--json")
    parser.add_argument("--only", help="comma-separated name prefixes of the kernels to time")
    args = parser.parse_args()
    root = Path(args.root)
    info = json.loads((root / "attention-bw.json").read_text())
    copy_bw = copy_bandwidth()
    print(f"copy bandwidth: {copy_bw / 1e12:.2f} TB/s")
    results = {"device": torch.cuda.get_device_name(), "date": time.strftime("%Y-%m-%d"),
               "copy_bandwidth_tb_s": copy_bw / 1e12, "rows": []}
    if info.get("empty"):
        launch = runtime.load(root / info["empty"]).launcher(timeout_s=5)
        o = torch.zeros(launch.metadata["workers"], device="cuda")
        t = median_seconds(launch.bind(o), reps=200, warmup=10)
        tb = batched_seconds(launch.bind(o), inner=200)
        tg = graph_seconds(launch, [(o,)], 200)
        launch.check()
        results["empty"] = {"time_us": t * 1e6, "time_us_back_to_back": tb * 1e6,
                            "time_us_graph": None if tg is None else tg * 1e6}
        print(f"empty kernel: one launch {t * 1e6:.2f} us, back to back {tb * 1e6:.2f} us, in a CUDA graph "
              f"{'-' if tg is None else f'{tg * 1e6:.2f}'} us")
        launch.close()
    hq, hkv, d, layers = info["hq"], info["hkv"], info["d"], info["layers"]
    only = args.only.split(",") if args.only else None
    for cfg in info["configs"]:
        if only and not any(cfg["name"].startswith(p) for p in only):
            continue
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
        bound_args = [(q, *c, o, lse) for c in caches]
        launch = runtime.load(root / cfg["name"]).launcher(timeout_s=5)
        label = (f"context {ctx}, split_len {split_len}, {cfg['threads']} threads, "
                 f"{cfg.get('workers', '?')} workers ({cfg.get('mode', 'static')}), {cfg.get('variant', 'plain')}")
        row = {**cfg, "cache_sets": sets}
        if launch.profile:
            span = tile_span(launch, bound_args, 3 * sets)
            row.update(span, fraction_of_copy_span=nbytes / (span["span_us"] * 1e-6) / copy_bw)
            print(f"{label}: tiles span {span['span_us']:.1f} us, {100 * row['fraction_of_copy_span']:.1f}% of "
                  f"copy; a tile {span['tile_us_median']:.2f} us (median; {span['tile_us_min']:.2f}-"
                  f"{span['tile_us_max']:.2f}), busiest worker {span['busiest_worker_us']:.1f} us")
        else:
            bound = itertools.cycle([launch.bind(*a) for a in bound_args])
            step = lambda: next(bound)()
            t = median_seconds(step, reps=20 * sets, warmup=3 * sets)
            # Launches back to back: the next launch's start overlaps this one's end.
            tb = batched_seconds(step, inner=20 * sets)
            launch.check()
            # A kernel whose events are never signalled has nothing that
            # depends on the launch number packed at capture.
            tg = None if launch.signals_events else graph_seconds(launch, bound_args, 20 * sets)
            bw, bwb = nbytes / t, nbytes / tb
            row.update(time_us=t * 1e6, tb_s=bw / 1e12, fraction_of_copy=bw / copy_bw, time_us_back_to_back=tb * 1e6,
                       fraction_of_copy_back_to_back=bwb / copy_bw)
            graph = ""
            if tg is not None:
                row.update(time_us_graph=tg * 1e6, fraction_of_copy_graph=nbytes / tg / copy_bw)
                graph = f"; in a CUDA graph {tg * 1e6:.1f} us, {100 * row['fraction_of_copy_graph']:.1f}%"
            print(f"{label}: {layers} layers in {t * 1e6:.1f} us, {bw / 1e12:.2f} TB/s, {100 * bw / copy_bw:.1f}% "
                  f"of copy; back to back {tb * 1e6:.1f} us, {100 * bwb / copy_bw:.1f}%{graph}")
        results["rows"].append(row)
        launch.close()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
