"""Events across GPUs: signal-to-wake latency between devices, the cost of
the end-of-launch barrier, and a one-shot all-reduce built from tasks
(event_tensor.collectives), with its numerics against torch.

Two steps, because the GPU machine has no MLIR:

    # here: compile the kernels into a folder that travels
    python benchmarks/cross_device.py --prepare .device/cross_device
    # there (2 GPUs):
    PYTHONPATH=python:benchmarks python3 benchmarks/cross_device.py .device/cross_device --json out.json

Prints one line per measurement and saves them (with the GPUs, the link and
the command) as JSON.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

HOPS = (32, 512)
ALLREDUCE = [(rows, 4096) for rows in (1, 16, 64)] + [(16, 2048)]
WORKERS = 132
THREADS = 128


def prepare(out: Path, devices: int) -> None:
    from event_tensor.build import compile_kernel
    from event_tensor.kernels import allreduce_kernel, hop_kernel

    out.mkdir(parents=True, exist_ok=True)
    kernels = {}
    for hops in HOPS:
        kernels[f"hops-remote-{hops}"] = hop_kernel(devices, hops, peer=1)
        kernels[f"hops-local-{hops}"] = hop_kernel(devices, hops, peer=None)
    kernels["hops-one-device-1"] = hop_kernel(1, 1, peer=None)
    kernels["hops-remote-1"] = hop_kernel(devices, 1, peer=1)
    for rows, cols in ALLREDUCE:
        kernels[f"allreduce-{rows}x{cols}"] = allreduce_kernel(devices, rows, cols, dtype="bf16", block=512)
    # An error on one device (an event element out of bounds on device 1):
    # device 0, which waits for device 1's signal, must stop at once. The
    # kernel is the CPU test's.
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "multi_device_tests", Path(__file__).resolve().parents[1] / "test" / "unit" / "test_multi_device.py")
    tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tests)
    kernels["abort-check"] = tests.OUT_OF_BOUNDS_ON_ONE
    for name, text in kernels.items():
        art = compile_kernel(text, target="cuda", workers=WORKERS, threads_per_worker=THREADS)
        art.copy_to(out / name)
        print(f"compiled {name}")


def run(folder: Path, json_out: Path | None, iters: int) -> None:
    import torch

    from event_tensor.runtime import load
    from gpu_timing import batched_seconds

    n = torch.cuda.device_count()
    results = {"date": time.strftime("%Y-%m-%d"), "command": " ".join(sys.argv),
               "gpus": [torch.cuda.get_device_name(i) for i in range(n)], "measurements": []}
    try:
        topo = subprocess.run(["nvidia-smi", "topo", "-m"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as err:
        topo = f"nvidia-smi topo -m failed: {err}"
    results["topology"] = topo
    print(topo)
    if n < 2:
        raise SystemExit(f"needs 2 GPUs, found {n}")
    print("peer access 0->1:", torch.cuda.can_device_access_peer(0, 1), "1->0:", torch.cuda.can_device_access_peer(1, 0))

    # Peer-to-peer copy bandwidth through torch (64 MiB), for reference.
    src = torch.randn(32 << 20, dtype=torch.bfloat16, device="cuda:0")
    dst = torch.empty_like(src, device="cuda:1")
    seconds = batched_seconds(lambda: dst.copy_(src), inner=10, reps=5)
    p2p = src.numel() * 2 / seconds
    print(f"p2p copy 0->1 (torch, 64 MiB): {p2p / 1e9:.1f} GB/s")
    results["p2p_copy_gbps"] = p2p / 1e9

    def record(name, **fields):
        fields["name"] = name
        results["measurements"].append(fields)
        print(json.dumps(fields))

    def launch_time(launcher, args):
        fn = launcher.bind(*args)
        s = batched_seconds(fn, inner=iters, reps=7)
        launcher.check()
        return s

    # Hops: the slope between two chain lengths is the latency per tile.
    sinks = [[torch.zeros(1, dtype=torch.int32, device=f"cuda:{d}") for d in range(2)]]
    times = {}
    for name in sorted(p.name for p in folder.iterdir() if p.name.startswith("hops-")):
        art = load(folder / name)
        devices = int(art.metadata.get("devices", 1))
        launcher = art.launcher(timeout_s=10)
        args = sinks[0][:devices] if devices > 1 else [sinks[0][0]]
        times[name] = launch_time(launcher, [args] if devices > 1 else args)
        record(name, seconds=times[name], devices=devices)
    for kind in ("remote", "local"):
        a, b = times[f"hops-{kind}-{HOPS[0]}"], times[f"hops-{kind}-{HOPS[1]}"]
        per = (b - a) / (2 * (HOPS[1] - HOPS[0]))
        record(f"latency per tile ({kind} signal)", seconds=per)
    record("end-of-launch barrier (2-device launch with one hop minus 1-device launch)",
           seconds=times["hops-remote-1"] - times["hops-one-device-1"])

    # All-reduce: numerics (bit-exact against the f32 sum in device order,
    # rounded to bf16) over several launches with fresh data, then time.
    for name in sorted(p.name for p in folder.iterdir() if p.name.startswith("allreduce-")):
        art = load(folder / name)
        rows, cols = (int(v) for v in name.split("-")[1].split("x"))
        launcher = art.launcher(timeout_s=10)
        xs = [torch.empty(rows, cols, dtype=torch.bfloat16, device=f"cuda:{d}") for d in range(2)]
        inbox = [torch.zeros(2, rows, cols, dtype=torch.bfloat16, device=f"cuda:{d}") for d in range(2)]
        ys = [torch.zeros(rows, cols, dtype=torch.bfloat16, device=f"cuda:{d}") for d in range(2)]
        mismatches = 0
        for check in range(20):
            for x in xs:
                x.normal_()
            launcher(xs, inbox, ys)
            ref = (xs[0].float() + xs[1].float().to("cuda:0")).bfloat16()
            for d in range(2):
                mismatches += int((ys[d].to("cuda:0") != ref).sum())
        seconds = launch_time(launcher, [xs, inbox, ys])
        record(name, seconds=seconds, rows=rows, cols=cols, checks=20, mismatched_elements=mismatches,
               bytes_per_device=rows * cols * 2)
        if mismatches:
            print(f"FAIL {name}: {mismatches} elements differ from the reference")

    # An error on one device stops the other (it would otherwise wait for
    # its own 10 s watchdog).
    from event_tensor.runtime.errors import KernelError

    launcher = load(folder / "abort-check").launcher(timeout_s=10)
    launcher(0)
    start = time.perf_counter()
    try:
        launcher([0, 5])
        message = "no error"
    except KernelError as err:
        message = str(err)
    elapsed = time.perf_counter() - start
    launcher(0)
    record("error on device 1, device 0 waiting on it", seconds=elapsed, error=message)

    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(results, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("folder", type=Path, nargs="?", help="prepared kernels (run mode)")
    parser.add_argument("--prepare", type=Path, help="compile the kernels into this folder (needs MLIR)")
    parser.add_argument("--devices", type=int, default=2)
    parser.add_argument("--iters", type=int, default=50, help="launches per timed batch")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.prepare:
        prepare(args.prepare, args.devices)
        return
    if not args.folder:
        parser.error("give the prepared folder, or --prepare FOLDER")
    run(args.folder, args.json, args.iters)


if __name__ == "__main__":
    main()
