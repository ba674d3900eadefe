"""The decode linear tile (`et.linear`, `rows` lowering) at a runtime number
of tokens M = 1..16: numerics against float64 and the time per launch, for
the N x K shapes of Llama-3.1-8B split over two GPUs (one device's share).

    # here
    python benchmarks/linear_batches.py --prepare .device/linear_batches
    # there
    PYTHONPATH=python:benchmarks python3 benchmarks/linear_batches.py .device/linear_batches --json out.json

The kernel: one task of about one tile per worker, each an `et.linear` over
its rows of y = x w^T (f32 output), M taken from x at launch. With
`--gemm`, also `kernels.gemm_kernel` with BM = 16 tiles (mma.sync) over the
same shapes, M given at launch. The weight
bytes over the time give the share of the copy bandwidth (measured in the
same run).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

SHAPES = [(7168, 4096), (4096, 7168), (3072, 4096)]  # gate/up share, down share, qkv share
WORKERS = 132
MS = (1, 2, 3, 4, 5, 8, 9, 16)
# --gemm: the tensor-core tile (`et.matmul`, mma.sync at BM = 16) on the same
# shapes: (BM, BN, BK), stages, threads per worker, split-K.
GEMMS = [((16, 64, 64), 4, 128, 1), ((16, 64, 64), 6, 128, 1), ((16, 32, 128), 4, 128, 1),
         ((16, 64, 128), 4, 128, 2), ((16, 128, 64), 4, 256, 2), ((16, 32, 64), 6, 64, 1),
         # 512 threads per worker, as in the model kernels:
         ((16, 64, 64), 4, 512, 1), ((16, 64, 128), 4, 512, 1), ((16, 64, 128), 6, 512, 1),
         ((16, 128, 128), 4, 512, 1), ((16, 64, 128), 4, 256, 1)]


def kernel_text(n: int, k: int, workers: int) -> str:
    from event_tensor.dialects import arith, et
    from event_tensor.ir import (BF16Type, Context, F32Type, IndexType, InsertionPoint, Location, MemRefType, Module,
                                 ShapedType, Attribute)

    rows = -(-n // workers)
    with Context(), Location.unknown():
        dyn = ShapedType.get_dynamic_size()
        bf16, f32, idx = BF16Type.get(), F32Type.get(), IndexType.get()
        module = Module.create()
        with InsertionPoint(module.body):
            kernel = et.KernelOp("linear", [MemRefType.get([dyn, k], bf16), MemRefType.get([n, k], bf16),
                                            MemRefType.get([dyn, n], f32)])
            with InsertionPoint(kernel.entry_block):
                x, w, y = kernel.arguments
                task = et.TaskOp("rows", [-(-n // rows)])
                task.attributes["et.cost"] = Attribute.parse(f"#et.cost<bytes = {2 * rows * k}, flops = {2 * rows * k}>")
                with InsertionPoint(task.entry_block):
                    (t,) = task.tile_ids
                    r0 = arith.MulIOp(t, arith.ConstantOp(idx, rows).result).result
                    et.linear(x, w, y, r0, arith.ConstantOp(idx, rows).result)
        return module.operation.get_asm(print_generic_op_form=True)


def prepare(out: Path, gemm: bool) -> None:
    from event_tensor import compile as et_compile
    from event_tensor.kernels import gemm_kernel

    for n, k in SHAPES:
        art = et_compile(kernel_text(n, k, WORKERS), target="cuda", workers=WORKERS, threads_per_worker=512,
                         tile_unroll=4)
        art.copy_to(out / f"{n}x{k}")
        print(f"compiled {n}x{k}")
        if not gemm:
            continue
        for tile, stages, threads, split in GEMMS:
            name = f"gemm-{n}x{k}-{tile[0]}x{tile[1]}x{tile[2]}-s{stages}-t{threads}-k{split}"
            art = et_compile(gemm_kernel(k, n, tile=tile, stages=stages, split_k=split), target="cuda",
                             workers=WORKERS, threads_per_worker=threads, tile_mma="sync")
            art.copy_to(out / name)
            print(f"compiled {name}")


def run(root: Path, json_out: Path | None, iters: int) -> None:
    import torch

    from event_tensor.runtime import load
    from gpu_timing import copy_bandwidth, launch_seconds

    copy_bw = copy_bandwidth()
    results = {"date": time.strftime("%Y-%m-%d"), "device": torch.cuda.get_device_name(),
               "copy_bandwidth_tb_s": copy_bw / 1e12, "rows": []}
    print(f"{results['device']}: copy bandwidth {copy_bw / 1e12:.2f} TB/s")
    g = torch.Generator(device="cuda").manual_seed(0)
    for d in sorted(p for p in root.iterdir() if p.is_dir()):
        gemm = d.name.startswith("gemm-")
        n, k = (int(v) for v in d.name.split("-")[1 if gemm else 0].split("x"))
        split = int(d.name.split("-k")[-1]) if gemm else 1
        launcher = load(d).launcher()
        w = (torch.randn(n, k, device="cuda", generator=g) / k ** 0.5).bfloat16()
        for m in MS:
            x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
            y = torch.zeros(m, n, device="cuda")
            args = [x, w, y] + ([m] if gemm else []) + ([torch.zeros(split, m, n, device="cuda")] if split > 1 else [])
            launcher(*args)
            ref = x.double() @ w.double().T
            err = float((y.double() - ref).abs().max() / ref.abs().max())
            t = launch_seconds(launcher, *args, reps=iters)
            row = {"kernel": d.name, "n": n, "k": k, "m": m, "ms": t * 1e3,
                   "fraction_of_copy": n * k * 2 / t / copy_bw, "relative_error": err}
            results["rows"].append(row)
            print(f"{d.name} M={m:2d}: {t * 1e6:8.1f} us ({100 * row['fraction_of_copy']:5.1f}% of copy), "
                  f"relative error {err:.1e}")
            if err > 1e-2:
                print(f"FAIL {n}x{k} M={m}: relative error {err:.2e}")
    if json_out:
        json_out.parent.mkdir(parents=True, exist_ok=True)
        json_out.write_text(json.dumps(results, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("root", type=Path, nargs="?")
    parser.add_argument("--prepare", type=Path)
    parser.add_argument("--gemm", action="store_true", help="prepare: also the et.matmul variants")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if args.prepare:
        prepare(args.prepare, args.gemm)
        return
    if not args.root:
        parser.error("give the prepared folder, or --prepare FOLDER")
    run(args.root, args.json, args.iters)


if __name__ == "__main__":
    main()
