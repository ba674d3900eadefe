"""Timing and bandwidth helpers shared by the GPU benchmark scripts (torch
CUDA events; imported from the scripts' own folder)."""

import statistics

import torch


def median_seconds(fn, reps=20, warmup=3):
    """Median time of `fn()` in seconds, between CUDA events, after warm-up."""
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    return statistics.median(times)


def copy_bandwidth(elements=1 << 29):
    """Device copy bandwidth in bytes/s (bytes read plus written), 1 GiB of bf16."""
    src = torch.empty(elements, dtype=torch.bfloat16, device="cuda").normal_()
    dst = torch.empty_like(src)
    seconds = median_seconds(lambda: dst.copy_(src))
    return 2 * src.numel() * src.element_size() / seconds
