#!/usr/bin/env python3
"""Compiles what the GPU machine runs (it has no MLIR) into .device/:

    .device/suite/<case>/        random task graphs with computing bodies: a
                                 CUDA artifact, the inputs and the sequential
                                 reference (case.npz); plus a planted deadlock
    .device/bench/<name>/        the synchronization microbenchmarks' kernels
    .device/families/<model>/    every dense shape family's decode kernels
                                 (--parts families)

Then on the GPU machine (device tool, carry .device):
    python3 test/Integration/GPU/run_gpu_suite.py .device/suite
    python3 benchmarks/sync_latency.py .device/bench
    python3 test/Integration/GPU/run_families.py .device/families
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import time
from pathlib import Path

import numpy as np

import event_tensor as et
from event_tensor.testing import (STEPS_KERNEL, logit_ops_kernel, planted_deadlock, reference_plan, top_logprobs_case,
                                  top_logprobs_kernel)
from event_tensor import reference as numpy_refs
from event_tensor.dag import random_kernel, reference, with_bodies

ROOT = Path(__file__).resolve().parent.parent


def _copy_artifact(art, dest: Path) -> None:
    if dest.exists():
        shutil.rmtree(dest)
    art.copy_to(dest)


def suite(out: Path, seeds: int, cache: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    cases = []
    for seed in range(seeds):
        rng = random.Random(5000 + seed)
        rk = random_kernel(seed, max_tasks=rng.choice([3, 6, 9]), dynamic=seed % 3 != 0)
        text = with_bodies(rk)
        plan = reference_plan(text, rk.bindings)
        outs, data = reference(plan)
        for mode in ("static", "dynamic"):
            workers = rng.choice([8, 32, 132])
            art = et.compile(text, target="cuda", workers=workers, mode=mode, cache_dir=cache)
            name = f"graph{seed:03d}-{mode}-w{workers}"
            _copy_artifact(art, out / name)
            np.savez(out / name / "case.npz",
                     sizes=np.array([rk.bindings[f"arg{i}"] for i in range(len(rk.args))], np.int64),
                     data_sizes=np.array([max(e["size"], 1) for e in plan["events"]], np.int64),
                     out_sizes=np.array([t["num_tiles"] for t in plan["tasks"]], np.int64),
                     **{f"out{t}": np.array(o, np.int64) for t, o in enumerate(outs)},
                     **{f"data{e}": np.array(d, np.int64) for e, d in enumerate(data)})
            cases.append(name)
        if seed == 2:
            # A cubin built here by ptxas (format=bin) instead of PTX.
            art = et.compile(text, target="cuda", workers=64, mode="static", format="bin", cache_dir=cache)
            _copy_artifact(art, out / f"graph{seed:03d}-cubin")
            shutil.copy(out / name / "case.npz", out / f"graph{seed:03d}-cubin" / "case.npz")
            cases.append(f"graph{seed:03d}-cubin")
        if seed == 1:
            # The same graph with in-kernel profiling.
            art = et.compile(text, target="cuda", workers=32, mode="dynamic", profile=True, cache_dir=cache)
            _copy_artifact(art, out / "profiled")
            shutil.copy(out / name / "case.npz", out / "profiled" / "case.npz")
    # A split-K GEMM, whose event elements grow with M: a bound launch at a
    # large M finds the launcher's first counter buffer too small.
    from event_tensor.kernels import gemm_kernel

    art = et.compile(gemm_kernel(512, 256, tile=(64, 128, 64), stages=4, out="f32", split_k=2), target="cuda",
                     workers=132, mode="static", threads_per_worker=128, cache_dir=cache)
    _copy_artifact(art, out / "bound-capacity")
    # More workers than an H100 or H200 holds at once (1024 threads each: at
    # most two per SM), with tiles that wait on other workers': the launcher
    # must refuse it instead of starting a launch that cannot finish.
    wide = ("et.kernel @wide(%x: memref<4xi32>) {\n  %n = arith.constant 1056 : index\n"
            "  %e = et.event.create() : !et.event<>\n"
            "  et.task @producer tiles(%i) in (%n) {\n    et.event.signal %e[] : !et.event<>\n  }\n"
            "  et.task @consumer tiles(%i) in (%n) {\n    et.event.wait %e[] : !et.event<>\n  }\n}\n")
    art = et.compile(wide, target="cuda", workers=528, mode="static", threads_per_worker=1024, cache_dir=cache)
    _copy_artifact(art, out / "oversubscribed")
    # Steps in one launch (et.repeat), over a static and a dynamic schedule.
    for mode, workers in (("static", 8), ("dynamic", 32)):
        art = et.compile(STEPS_KERNEL, target="cuda", workers=workers, mode=mode, cache_dir=cache)
        _copy_artifact(art, out / f"steps-{mode}")
    deadlock = planted_deadlock(4)
    art = et.compile(deadlock, target="cuda", workers=4, mode="keep", verify=False, cache_dir=cache)
    _copy_artifact(art, out / "planted-deadlock")
    (out / "cases.json").write_text(json.dumps(cases, indent=1))
    print(f"suite: {len(cases)} random-graph cases and a planted deadlock in {out}")


def _hop_chain(workers: int, rounds: int, waits: bool) -> str:
    """A chain of workers*rounds one-tile tasks, task k on worker k mod W:
    each waits for the previous one (on the previous worker) when `waits`.
    (One event per link: a task may not wait on an event it signals.)"""
    n = workers * rounds
    lines = ["et.kernel @hops() {", "  %c1 = arith.constant 1 : index"]
    lines += [f"  %e{k} = et.event.create() : !et.event<>" for k in range(n + 1)]
    lines += ["  et.task @start tiles(%i) in (%c1) {", "    et.event.signal %e0[] : !et.event<>", "  }"]
    for k in range(n):
        lines.append(f"  et.task @hop{k} tiles(%i) in (%c1) {{")
        if waits:
            lines.append(f"    et.event.wait %e{k}[] : !et.event<>")
        lines.append(f"    et.event.signal %e{k + 1}[] : !et.event<>")
        lines.append("  }")
    lines.append(f"  et.schedule static workers({workers}) {{")
    for w in range(workers):
        lines.append(f"    et.worker {w} {{")
        if w == 0:
            lines.append("      et.run @start tiles [0]")
        for k in range(w, n, workers):
            lines.append(f"      et.run @hop{k} tiles [0]")
        lines.append("    }")
    lines += ["  }", "}"]
    return "\n".join(lines) + "\n"


DISPATCH = """
et.kernel @dispatch(%n: index) {
  et.task @empty tiles(%i) in (%n) {
  }
}
"""


def bench(out: Path, workers: int, cache: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    rounds = 2
    for waits in (True, False):
        name = "hops-chain" if waits else "hops-free"
        art = et.compile(_hop_chain(workers, rounds, waits), target="cuda", workers=workers, mode="keep",
                         cache_dir=cache)
        _copy_artifact(art, out / name)
    for mode in ("static", "dynamic"):
        art = et.compile(DISPATCH, target="cuda", workers=workers, mode=mode, cache_dir=cache)
        _copy_artifact(art, out / f"dispatch-{mode}")
    (out / "bench.json").write_text(json.dumps({"workers": workers, "rounds": rounds}))
    print(f"bench: kernels for {workers} workers in {out}")


LINEAR_SHAPES = [(2048, 8192), (8192, 2048), (4096, 4096)]  # N x K


def _linear_layers(n: int, k: int, layers: int, rows: int) -> str:
    """`layers` independent linear tasks (one weight matrix each) in one
    persistent kernel: a weight stream larger than L2."""
    ws = ", ".join(f"%w{i}: memref<{n}x{k}xbf16>" for i in range(layers))
    ys = ", ".join(f"%y{i}: memref<1x{n}xf32>" for i in range(layers))
    lines = [f"et.kernel @linear(%x: memref<1x{k}xbf16>, {ws}, {ys}) {{",
             f"  %ct = arith.constant {n // rows} : index", f"  %cr = arith.constant {rows} : index"]
    for i in range(layers):
        lines += [f"  et.task @layer{i} tiles(%t) in (%ct) {{",
                  "    %r0 = arith.muli %t, %cr : index",
                  f"    et.linear %x, %w{i}, %y{i} rows(%r0, %cr) : memref<1x{k}xbf16>, "
                  f"memref<{n}x{k}xbf16>, memref<1x{n}xf32>",
                  "  }"]
    lines.append("}")
    return "\n".join(lines) + "\n"


def _linear_chain(n: int, layers: int, rows: int) -> str:
    """`layers` n x n linear layers where layer i+1 reads layer i's output:
    every tile of a layer waits for all tiles of the previous one."""
    ws = ", ".join(f"%w{i}: memref<{n}x{n}xbf16>" for i in range(layers))
    ys = ", ".join(f"%y{i}: memref<1x{n}xbf16>" for i in range(layers))
    lines = [f"et.kernel @chain(%x: memref<1x{n}xbf16>, {ws}, {ys}) {{",
             f"  %ct = arith.constant {n // rows} : index", f"  %cr = arith.constant {rows} : index"]
    lines += [f"  %e{i} = et.event.create() : !et.event<>" for i in range(layers)]
    for i in range(layers):
        src = "%x" if i == 0 else f"%y{i - 1}"
        lines += [f"  et.task @layer{i} tiles(%t) in (%ct) {{", "    %r0 = arith.muli %t, %cr : index"]
        if i > 0:
            lines.append(f"    et.event.wait %e{i - 1}[] : !et.event<>")
        lines += [f"    et.linear {src}, %w{i}, %y{i} rows(%r0, %cr) : memref<1x{n}xbf16>, memref<{n}x{n}xbf16>, "
                  f"memref<1x{n}xbf16>", f"    et.event.signal %e{i}[] : !et.event<>", "  }"]
    lines.append("}")
    return "\n".join(lines) + "\n"


def linear(out: Path, workers: int, cache: Path) -> None:
    """Linear-layer bandwidth kernels, and a numerics case with inputs and a
    float64 reference."""
    out.mkdir(parents=True, exist_ok=True)
    layers = 8
    variants = [(rows, unroll) for rows in (32, 64) for unroll in (4, 8)]
    for n, k in LINEAR_SHAPES:
        for rows, unroll in variants:
            art = et.compile(_linear_layers(n, k, layers, rows), target="cuda", workers=workers, mode="static",
                             threads_per_worker=1024, tile_unroll=unroll, cache_dir=cache)
            _copy_artifact(art, out / f"linear-{n}x{k}-r{rows}-u{unroll}")
    # A chain of dependent layers (each needs all of the previous output),
    # with each way of loading weights before the wait.
    chain_variants = [(p, u) for p in ("none", "registers", "l2", "shared") for u in (4, 8)]
    for prefetch, unroll in chain_variants:
        art = et.compile(_linear_chain(4096, layers, 32), target="cuda", workers=workers, mode="static",
                         threads_per_worker=1024, tile_prefetch=prefetch, tile_unroll=unroll, cache_dir=cache)
        _copy_artifact(art, out / f"linear-chain-{prefetch}-u{unroll}")
    (out / "linear.json").write_text(json.dumps({"shapes": LINEAR_SHAPES, "layers": layers,
                                                 "variants": variants,
                                                 "chain": [4096, layers, 32],
                                                 "chain_variants": chain_variants}))
    # Numerics: M = 3 tokens, N = 1000, K = 1800 (not a multiple of the
    # unrolled step).
    import ml_dtypes

    # K = 1800 at unroll 8: no group of 8 chunks (2048 columns) fits, so the
    # loops of 4 and 2 chunks and the one-chunk remainder all run.
    m, n, k = 3, 1000, 1800
    rng = np.random.default_rng(7)
    x = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(ml_dtypes.bfloat16)
    ref = x.astype(np.float64) @ w.astype(np.float64).T
    text = f"""
et.kernel @lin(%x: memref<{m}x{k}xbf16>, %w: memref<{n}x{k}xbf16>, %y: memref<{m}x{n}xf32>) {{
  %ct = arith.constant {-(-n // 16)} : index
  %cr = arith.constant 16 : index
  et.task @rows tiles(%t) in (%ct) {{
    %r0 = arith.muli %t, %cr : index
    et.linear %x, %w, %y rows(%r0, %cr) : memref<{m}x{k}xbf16>, memref<{n}x{k}xbf16>, memref<{m}x{n}xf32>
  }}
}}
"""
    art = et.compile(text, target="cuda", workers=workers, mode="dynamic", tile_unroll=8, cache_dir=cache)
    _copy_artifact(art, out / "linear-numerics")
    np.savez(out / "linear-numerics" / "case.npz", x=x.view(np.uint16), w=w.view(np.uint16), ref=ref)
    # A runtime M, accumulate, and an N that leaves the last tile short.
    m, n, k = 6, 1000, 1024
    x = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
    w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(ml_dtypes.bfloat16)
    y0 = rng.standard_normal((m, n)).astype(np.float32)
    ref = y0.astype(np.float64) + x.astype(np.float64) @ w.astype(np.float64).T
    text = f"""
et.kernel @lin(%x: memref<?x{k}xbf16>, %w: memref<{n}x{k}xbf16>, %y: memref<?x{n}xf32>) {{
  %ct = arith.constant {-(-n // 48)} : index
  %cr = arith.constant 48 : index
  et.task @rows tiles(%t) in (%ct) {{
    %r0 = arith.muli %t, %cr : index
    et.linear %x, %w, %y rows(%r0, %cr) accumulate : memref<?x{k}xbf16>, memref<{n}x{k}xbf16>, memref<?x{n}xf32>
  }}
}}
"""
    art = et.compile(text, target="cuda", workers=workers, mode="static", threads_per_worker=512, cache_dir=cache)
    _copy_artifact(art, out / "linear-numerics-rows")
    np.savez(out / "linear-numerics-rows" / "case.npz", x=x.view(np.uint16), w=w.view(np.uint16), y0=y0, ref=ref)
    print(f"linear: {len(LINEAR_SHAPES) * 2} bandwidth kernels and a numerics case in {out}")


# et.linear tiles that tile_linear="spread" lays out over every warp (see
# tile_numerics).
LINEAR_SPREAD = """
et.kernel @lin(%x: memref<?x3072xbf16>, %wd: memref<1004x3072xbf16>, %y1: memref<?x1004xf32>,
               %x2: memref<?x2048xbf16>, %w4: memref<64x2048xbf16>, %y4: memref<?x64xf32>,
               %x3: memref<?x1024xbf16>, %wm: memref<1000x1024xbf16>, %y2: memref<?x1000xf32>,
               %wg: memref<600x1024xbf16>, %wu: memref<600x1024xbf16>, %y3: memref<?x600xbf16>,
               %xs: memref<3x1024xbf16>, %y5: memref<3x1000xf32>,
               %h: memref<?x1024xf32>, %ln: memref<1024xbf16>, %xn: memref<16x3x1024xbf16>,
               %y6: memref<?x1000xf32>) {
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  %c24 = arith.constant 24 : index
  %c64 = arith.constant 64 : index
  %c25 = arith.constant 25 : index
  %c32 = arith.constant 32 : index
  %c125 = arith.constant 125 : index
  %c126 = arith.constant 126 : index
  et.task @split2 tiles(%t) in (%c126) {
    %r0 = arith.muli %t, %c8 : index
    et.linear %x, %wd, %y1 rows(%r0, %c8) accumulate : memref<?x3072xbf16>, memref<1004x3072xbf16>, memref<?x1004xf32>
  }
  et.task @split4 tiles(%t) in (%c16) {
    %r0 = arith.muli %t, %c4 : index
    et.linear %x2, %w4, %y4 rows(%r0, %c4) : memref<?x2048xbf16>, memref<64x2048xbf16>, memref<?x64xf32>
  }
  et.task @multi tiles(%t) in (%c32) {
    %r0 = arith.muli %t, %c32 : index
    et.linear %x3, %wm, %y2 rows(%r0, %c32) : memref<?x1024xbf16>, memref<1000x1024xbf16>, memref<?x1000xf32>
  }
  et.task @gated tiles(%t) in (%c25) {
    %r0 = arith.muli %t, %c24 : index
    et.linear %x3, %wg, %y3 rows(%r0, %c24) gated(%wu) : memref<?x1024xbf16>, memref<600x1024xbf16>, memref<?x600xbf16>, memref<600x1024xbf16>
  }
  et.task @static tiles(%t) in (%c125) {
    %r0 = arith.muli %t, %c8 : index
    et.linear %xs, %wm, %y5 rows(%r0, %c8) : memref<3x1024xbf16>, memref<1000x1024xbf16>, memref<3x1000xf32>
  }
  %norm = et.event.create() : !et.event<>
  et.task @norm tiles(%t) in (%c1) {
    et.event.signal %norm[] : !et.event<>
  }
  et.task @normed tiles(%t) in (%c16) {
    et.event.wait %norm[] : !et.event<>
    %c0 = arith.constant 0 : index
    %m = memref.dim %h, %c0 : memref<?x1024xf32>
    %xt = memref.subview %xn[%t, 0, 0] [1, %m, 1024] [1, 1, 1] : memref<16x3x1024xbf16> to memref<?x1024xbf16, strided<[1024, 1], offset: ?>>
    et.rmsnorm %h, %ln, %xt eps(1.0e-06) : memref<?x1024xf32>, memref<1024xbf16>, memref<?x1024xbf16, strided<[1024, 1], offset: ?>>
    %r0 = arith.muli %t, %c64 : index
    et.linear %xt, %wm, %y6 rows(%r0, %c64) : memref<?x1024xbf16, strided<[1024, 1], offset: ?>>, memref<1000x1024xbf16>, memref<?x1000xf32>
  }
}
"""


def linear_spread(out: Path, workers: int, cache: Path, rng) -> None:
    """et.linear in the spread layout (tile_linear="spread", 16 warps): K
    split 2 and 4 ways (runtime M, accumulate, a last tile of 4 rows), two
    rows per trip (a last tile of 8 of 32 rows), a gated tile whole in one
    trip, a split K with a static M of 3, and two groups of two rows per
    warp whose first loads go out before the tile's norm."""
    import ml_dtypes

    bf = ml_dtypes.bfloat16
    out.mkdir(parents=True, exist_ok=True)
    spread_dir = out / "linear-spread"
    art = et.compile(LINEAR_SPREAD, target="cuda", workers=workers, mode="dynamic", threads_per_worker=512,
                     tile_unroll=8, tile_linear="spread", cache_dir=cache)
    _copy_artifact(art, spread_dir)
    shapes = {"x": (3, 3072), "wd": (1004, 3072), "x2": (3, 2048), "w4": (64, 2048), "x3": (3, 1024),
              "wm": (1000, 1024), "wg": (600, 1024), "wu": (600, 1024), "xs": (3, 1024)}
    arrays = {n: (rng.standard_normal(shape) / (np.sqrt(shape[1]) if n.startswith("w") else 1)).astype(bf)
              for n, shape in shapes.items()}
    arrays["ln"] = (1 + 0.1 * rng.standard_normal(1024)).astype(bf)
    y0 = rng.standard_normal((3, 1004)).astype(np.float32)
    h = rng.standard_normal((3, 1024)).astype(np.float32)
    f = {n: a.astype(np.float64) for n, a in arrays.items()}
    g = f["x3"] @ f["wg"].T
    # The norm's output is rounded to bf16 before the linear reads it.
    h64 = h.astype(np.float64)
    xn = (h64 / np.sqrt((h64 * h64).mean(axis=1, keepdims=True) + 1e-6) * f["ln"]).astype(bf).astype(np.float64)
    refs = {"y1": y0.astype(np.float64) + f["x"] @ f["wd"].T, "y4": f["x2"] @ f["w4"].T, "y2": f["x3"] @ f["wm"].T,
            "y3": g / (1 + np.exp(-g)) * (f["x3"] @ f["wu"].T), "y5": f["xs"] @ f["wm"].T, "y6": xn @ f["wm"].T}
    np.savez(spread_dir / "case.npz", y0=y0, h=h, **{n: a.view(np.uint16) for n, a in arrays.items()},
             **{f"ref_{n}": r for n, r in refs.items()})
    print(f"tile numerics: linear-spread case in {out}")


def tile_numerics(out: Path, workers: int, cache: Path) -> None:
    """RMSNorm (fused residual) and SiLU-mul on the GPU against float64."""
    import ml_dtypes

    out.mkdir(parents=True, exist_ok=True)
    m, h = 2, 2048
    text = f"""
et.kernel @k(%x: memref<{m}x{h}xbf16>, %w: memref<{h}xbf16>, %y: memref<{m}x{h}xf32>,
             %g: memref<{m}x{h}xbf16>, %u: memref<{m}x{h}xbf16>, %o: memref<{m}x{h}xf32>, %res: memref<{m}x{h}xf32>) {{
  %c1 = arith.constant 1 : index
  %c8 = arith.constant 8 : index
  %c256 = arith.constant 256 : index
  et.task @norm tiles(%t) in (%c1) {{
    et.rmsnorm %x, %w, %y eps(1.0e-05) residual(%res) : memref<{m}x{h}xbf16>, memref<{h}xbf16>, memref<{m}x{h}xf32>, memref<{m}x{h}xf32>
  }}
  et.task @act tiles(%t) in (%c8) {{
    %c0 = arith.muli %t, %c256 : index
    et.silu_mul %g, %u, %o cols(%c0, %c256) : memref<{m}x{h}xbf16>, memref<{m}x{h}xbf16>, memref<{m}x{h}xf32>
  }}
}}
"""
    rng = np.random.default_rng(3)
    bf = ml_dtypes.bfloat16
    x = rng.standard_normal((m, h)).astype(bf)
    w = (1 + 0.1 * rng.standard_normal(h)).astype(bf)
    g = rng.standard_normal((m, h)).astype(bf)
    u = rng.standard_normal((m, h)).astype(bf)
    res = rng.standard_normal((m, h)).astype(np.float32)
    h64 = x.astype(np.float64) + res
    ref_y = h64 / np.sqrt((h64 * h64).mean(axis=1, keepdims=True) + 1e-5) * w.astype(np.float64)
    g64 = g.astype(np.float64)
    ref_o = g64 / (1 + np.exp(-g64)) * u.astype(np.float64)
    art = et.compile(text, target="cuda", workers=workers, mode="static", threads_per_worker=256, cache_dir=cache)
    _copy_artifact(art, out / "norm-act")
    np.savez(out / "norm-act" / "case.npz", x=x.view(np.uint16), w=w.view(np.uint16), g=g.view(np.uint16),
             u=u.view(np.uint16), res=res, ref_y=ref_y, ref_o=ref_o, ref_res=h64)
    print(f"tile numerics: rmsnorm + silu_mul case in {out}")

    # A wide RMSNorm after a wait with a fixed thread count: each thread's
    # norm weights are loaded before the wait (1024 columns on 256 threads).
    hn = 1024
    text = f"""
et.kernel @k(%x: memref<1x{hn}xf32>, %w: memref<{hn}xbf16>, %y: memref<1x{hn}xf32>) {{
  %c1 = arith.constant 1 : index
  %e = et.event.create() : !et.event<>
  et.task @ready tiles(%t) in (%c1) {{
    et.event.signal %e[] : !et.event<>
  }}
  et.task @norm tiles(%t) in (%c1) {{
    et.event.wait %e[] : !et.event<>
    et.rmsnorm %x, %w, %y eps(1.0e-06) : memref<1x{hn}xf32>, memref<{hn}xbf16>, memref<1x{hn}xf32>
  }}
}}
"""
    xe = rng.standard_normal((1, hn)).astype(np.float32)
    we = (1 + 0.1 * rng.standard_normal(hn)).astype(bf)
    xe64 = xe.astype(np.float64)
    ref_e = xe64 / np.sqrt((xe64 * xe64).mean(axis=1, keepdims=True) + 1e-6) * we.astype(np.float64)
    art = et.compile(text, target="cuda", workers=2, mode="static", threads_per_worker=256, cache_dir=cache)
    _copy_artifact(art, out / "norm-early")
    np.savez(out / "norm-early" / "case.npz", x=xe, w=we.view(np.uint16), ref_y=ref_e)

    # The prompt tiles' row-wise ops with several rows in flight
    # (tile_rows_in_flight=8): a wide RMSNorm with the residual over 21 rows
    # (two whole groups of 8 in the first chunk of 16, then single rows), a
    # per-head RMSNorm over 136 rows of 128 (two rounds of 8 rows on 8
    # warps, then 8 single rows), and a KV append of 21 x 8 x 64 elements at
    # position 50 of a 64-row cache (whole trips, a rest, rows past the end).
    mw, mh, hd, cache_rows, at = 21, 136, 128, 64, 50
    text = f"""
et.kernel @k(%x: memref<{mw}x{h}xbf16>, %w: memref<{h}xbf16>, %y: memref<{mw}x{h}xf32>, %res: memref<{mw}x{h}xf32>,
             %hx: memref<{mh}x{hd}xf32>, %hw: memref<{hd}xbf16>, %hy: memref<{mh}x{hd}xf32>,
             %new: memref<{mw}x8x64xf32>, %cache: memref<{cache_rows}x8x64xbf16>) {{
  %c1 = arith.constant 1 : index
  %at = arith.constant {at} : index
  et.task @rows tiles(%t) in (%c1) {{
    et.rmsnorm %x, %w, %y eps(1.0e-05) residual(%res) : memref<{mw}x{h}xbf16>, memref<{h}xbf16>, memref<{mw}x{h}xf32>, memref<{mw}x{h}xf32>
    et.rmsnorm %hx, %hw, %hy eps(1.0e-06) : memref<{mh}x{hd}xf32>, memref<{hd}xbf16>, memref<{mh}x{hd}xf32>
    et.kv_append %new, %cache, %at : memref<{mw}x8x64xf32>, memref<{cache_rows}x8x64xbf16>
  }}
}}
"""
    x = rng.standard_normal((mw, h)).astype(bf)
    res = rng.standard_normal((mw, h)).astype(np.float32)
    hx = rng.standard_normal((mh, hd)).astype(np.float32)
    hw = (1 + 0.1 * rng.standard_normal(hd)).astype(bf)
    new = rng.standard_normal((mw, 8, 64)).astype(np.float32)
    h64 = x.astype(np.float64) + res
    ref_y = h64 / np.sqrt((h64 * h64).mean(axis=1, keepdims=True) + 1e-5) * w.astype(np.float64)
    hx64 = hx.astype(np.float64)
    ref_hy = hx64 / np.sqrt((hx64 * hx64).mean(axis=1, keepdims=True) + 1e-6) * hw.astype(np.float64)
    ref_cache = np.zeros((cache_rows, 8, 64))
    ref_cache[at:] = new[:cache_rows - at].astype(bf).astype(np.float64)
    art = et.compile(text, target="cuda", workers=workers, mode="static", threads_per_worker=256,
                     tile_rows_in_flight=8, cache_dir=cache)
    _copy_artifact(art, out / "rows-in-flight")
    np.savez(out / "rows-in-flight" / "case.npz", x=x.view(np.uint16), w=w.view(np.uint16), res=res, hx=hx,
             hw=hw.view(np.uint16), new=new, ref_y=ref_y, ref_res=h64, ref_hy=ref_hy, ref_cache=ref_cache)
    print(f"tile numerics: rows-in-flight case in {out}")

    linear_spread(out, workers, cache, rng)
    logit_ops(out, workers, cache, rng)
    top_logprobs(out, workers, cache, rng)

    # Embedding, RoPE (both variants), KV append, argmax: the CPU test's kernel.
    import importlib.util

    spec = importlib.util.spec_from_file_location("tile_tests", ROOT / "test" / "unit" / "test_tile_ops.py")
    tests = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(tests)
    art = et.compile(tests.DECODE_OPS, target="cuda", workers=workers, mode="dynamic", threads_per_worker=256,
                     cache_dir=cache)
    _copy_artifact(art, out / "decode-ops")
    # et.rope_into: per-head norms, rotation, stores at a row (in registers
    # for static D, loops for the dynamic one).
    art = et.compile(tests.ROPE_INTO, target="cuda", workers=workers, mode="dynamic", threads_per_worker=256,
                     cache_dir=cache)
    _copy_artifact(art, out / "rope-into")
    inputs, refs = tests.rope_into_case(rng)
    arrays = {n: (a.view(np.uint16) if a.dtype == bf else a) for n, a in inputs.items() if n != "at"}
    np.savez(out / "rope-into" / "case.npz", at=inputs["at"], **arrays, **{f"ref_{n}": r for n, r in refs.items()})
    # Split-K et.linear with atomic adds (short rows: four passes of loads;
    # three chunks on four lanes, the weights before a wait), M = 1 and 3.
    art = et.compile(tests.SPLIT_K, target="cuda", workers=workers, mode="dynamic", threads_per_worker=256,
                     tile_prefetch="registers", cache_dir=cache)
    _copy_artifact(art, out / "split-k")
    inputs, refs = tests.split_k_case(rng, 3)  # M = 1 takes the first row
    arrays = {n: (a.view(np.uint16) if a.dtype == bf else a) for n, a in inputs.items()}
    np.savez(out / "split-k" / "case.npz", **arrays, **{f"ref_{n}": r for n, r in refs.items()})
    # et.linear ... norm, in the spread layout (the squares with the first
    # row's loads; K split over warps) and one row per warp, M = 1 and 3.
    inputs, refs = tests.norm_linear_case(rng, 3)  # M = 1 takes the first row
    arrays = {n: (a.view(np.uint16) if a.dtype == bf else a) for n, a in inputs.items()}
    for layout in ("spread", "rows"):
        art = et.compile(tests.NORM_LINEAR, target="cuda", workers=workers, mode="dynamic", threads_per_worker=384,
                         tile_linear=layout, cache_dir=cache)
        _copy_artifact(art, out / f"norm-linear-{layout}")
        np.savez(out / f"norm-linear-{layout}" / "case.npz", **arrays, **{f"ref_{n}": r for n, r in refs.items()})
    # Split-KV attention and merge: Llama-3.2-1B heads (GQA 32/8, D = 64),
    # Qwen3 heads (16/8, D = 128) with two entries per split, and an empty
    # last split; at 256, 512 and 1024 threads per worker.
    # The cases with a `stable` position stage the cache rows below it in
    # shared memory before a wait (tile_kv_prefetch="shared", 64 KB: a
    # whole split): splits with staged rows and rows at or past `stable`;
    # empty splits; one head per group (four positions side by side in
    # P.V); four heads of D = 128 (two heads per lane in P.V); six heads of
    # D = 128 (a group that is not a power of two; three heads per lane in
    # P.V).
    attention_cases = [(32, 8, 64, 1024, 8, 128, 1000, 1, 256, None), (16, 8, 128, 1024, 4, 256, 777, 2, 512, None),
                       (32, 8, 64, 300, 4, 64, 200, 1, 1024, None), (32, 8, 64, 1024, 8, 128, 1000, 1, 512, 700),
                       (16, 8, 128, 1024, 8, 128, 1000, 1, 384, 999), (32, 8, 64, 1024, 8, 128, 600, 1, 512, 300),
                       (8, 8, 64, 512, 4, 128, 500, 1, 256, 400), (32, 8, 128, 1024, 8, 128, 1000, 1, 512, 1000),
                       (48, 8, 128, 1024, 8, 128, 1000, 1, 256, 900)]
    # On tensor cores (tile_kv_mma_bytes): groups of 4, 2, 16 and 8 heads
    # (16: both halves of the 16-row tile), D = 64 and 128, two entries per
    # split, a short last split, 7 to 10 warps with rings (the others idle).
    attention_cases += [(32, 8, 64, 1024, 8, 128, 1000, 1, 256, None, 64 * 1024),
                        (16, 8, 128, 1024, 4, 256, 777, 2, 512, None, 128 * 1024),
                        (32, 8, 64, 300, 4, 64, 200, 1, 512, None, 96 * 1024),
                        (32, 2, 64, 1024, 4, 256, 1000, 1, 256, None, 64 * 1024),
                        (16, 2, 128, 1024, 4, 256, 999, 1, 512, None, 160 * 1024)]
    for i, (hq, hkv, d, s_max, splits, split_len, length, sub, threads, stable, *mma) in enumerate(attention_cases):
        staged = dict(tile_kv_prefetch="shared", tile_prefetch_bytes=64 * 1024) if stable is not None else {}
        if mma:
            staged["tile_kv_mma_bytes"] = mma[0]
        art = et.compile(tests._attention_kernel(hq, hkv, d, s_max, splits, split_len, subsplits=sub,
                                                 stable=stable is not None), target="cuda",
                         workers=workers, mode="dynamic", threads_per_worker=threads, cache_dir=cache, **staged)
        case_dir = out / f"attention-{i}"
        _copy_artifact(art, case_dir)
        q = rng.standard_normal((hq, d)).astype(np.float32)
        kc = rng.standard_normal((s_max, hkv, d)).astype(bf)
        vc = rng.standard_normal((s_max, hkv, d)).astype(bf)
        extra = {"stable": stable} if stable is not None else {}
        np.savez(case_dir / "case.npz", q=q, k=kc.view(np.uint16), v=vc.view(np.uint16),
                 ref=numpy_refs.attention(q, kc, vc, length), length=length, entries=splits * sub, **extra)
    # Split-KV attention that appends this step's rows (`append`, from
    # per-tile shared memory): staged (the rows join the stage; one row, as
    # in a decode step, then four rows over a split boundary of which two
    # are past the length) and not staged (written to the caches first).
    append_cases = [(16, 8, 128, 1024, 8, 128, 1000, 999, 1, 384, True),
                    (32, 8, 64, 1024, 8, 128, 129, 127, 4, 512, True),
                    (32, 8, 64, 1024, 8, 128, 1000, 998, 2, 256, False)]
    for i, (hq, hkv, d, s_max, splits, split_len, length, stable, n_new, threads, staged) in enumerate(append_cases):
        opts = dict(tile_kv_prefetch="shared", tile_prefetch_bytes=64 * 1024) if staged else {}
        art = et.compile(tests._append_kernel(hq, hkv, d, s_max, splits, split_len, n_new), target="cuda",
                         workers=workers, mode="dynamic", threads_per_worker=threads, cache_dir=cache, **opts)
        case_dir = out / f"attention-append-{i}"
        _copy_artifact(art, case_dir)
        inputs, k_after, v_after = tests.append_case(rng, hq, hkv, d, s_max, length, stable, n_new)
        arrays = {n: (a.view(np.uint16) if a.dtype == bf else a) for n, a in inputs.items()}
        np.savez(case_dir / "case.npz", **arrays, length=length, stable=stable, entries=splits,
                 staged=staged, ref=numpy_refs.attention(inputs["q"], k_after, v_after, length),
                 k_after=k_after.view(np.uint16), v_after=v_after.view(np.uint16))
    # Attention bandwidth: 16 independent layers (Llama-3.2-1B heads) per
    # launch, over split lengths and threads per worker.
    # Variants: "plain" (no wait); "wait" (every tile first waits on a
    # one-tile task, and its op is marked `stable` over the whole cache);
    # "staged" (the same kernel with tile_kv_prefetch="shared": the rows
    # are copied into shared memory before that wait); "mma64" and "mma96"
    # (no wait, tensor-core tiles with 64 or 96 KiB of per-warp rings,
    # tile_kv_mma_bytes). At 256 threads and splits of 1024, "mma96" also
    # runs with two workers per SM ("-w2": static, "-w2d": a dynamic queue),
    # and profiled ("-prof": the benchmark reports the span of its tiles).
    layers, configs = 16, []
    hq, hkv, d = 32, 8, 64

    def attention_bw(ctx, split_len, waits):
        entries = ctx // split_len
        args = ", ".join(f"%k{i}: memref<{ctx}x{hkv}x{d}xbf16>, %v{i}: memref<{ctx}x{hkv}x{d}xbf16>"
                         for i in range(layers))
        lines = [f"et.kernel @attn(%q: memref<{hq}x{d}xf32>, {args}, %o: memref<{entries}x{hq}x{d}xf32>, "
                 f"%lse: memref<{entries}x{hq}xf32>) {{",
                 f"  %ckv = arith.constant {hkv} : index", f"  %cs = arith.constant {entries} : index",
                 f"  %cl = arith.constant {split_len} : index", f"  %len = arith.constant {ctx} : index",
                 "  %c1 = arith.constant 1 : index", "  %go = et.event.create() : !et.event<>"]
        if waits:
            lines += ["  et.task @ready tiles(%r) in (%c1) {", "    et.event.signal %go[] : !et.event<>", "  }"]
        for i in range(layers):
            lines += [f"  et.task @layer{i} tiles(%g, %s) in (%ckv, %cs) {{"]
            if waits:
                lines += ["    et.event.wait %go[] : !et.event<>"]
            lines += [f"    et.attention_split %q, %k{i}, %v{i}, %o, %lse kv_head(%g) split(%s) "
                      f"split_len(%cl) len(%len){' stable(%len)' if waits else ''} scale(0.125)",
                      f"        : memref<{hq}x{d}xf32>, memref<{ctx}x{hkv}x{d}xbf16>, "
                      f"memref<{ctx}x{hkv}x{d}xbf16>, memref<{entries}x{hq}x{d}xf32>, "
                      f"memref<{entries}x{hq}xf32>", "  }"]
        lines.append("}")
        return "\n".join(lines) + "\n"

    for ctx in (1024, 2048, 4096, 8192):
        for split_len in (256, 1024):
            for threads in (256, 512):
                variants = ["plain", "wait", "staged", "mma64", "mma96"]
                if threads == 256 and split_len == 1024:
                    variants += ["mma96-w2", "mma96-w2d", "mma96-prof"]
                for variant in variants:
                    if variant in ("wait", "staged") and threads != 512:
                        continue
                    waits = variant in ("wait", "staged")
                    opts = dict(tile_kv_prefetch="shared") if variant == "staged" else {}
                    if variant.startswith("mma"):
                        opts = dict(tile_kv_mma_bytes=int(variant[3:5]) * 1024)
                    kernel_workers = 2 * workers if "-w2" in variant else workers
                    mode = "dynamic" if variant.endswith("-w2d") else "static"
                    art = et.compile(attention_bw(ctx, split_len, waits), target="cuda", workers=kernel_workers,
                                     mode=mode, threads_per_worker=threads, cache_dir=cache, format="bin",
                                     profile=variant.endswith("-prof"), **opts)
                    name = f"attention-bw-{ctx}-l{split_len}-t{threads}" + ("" if variant == "plain" else f"-{variant}")
                    _copy_artifact(art, out / name)
                    configs.append({"name": name, "context": ctx, "split_len": split_len, "threads": threads,
                                    "variant": variant, "workers": kernel_workers, "mode": mode})
    # An empty launch: as many tiles as workers, each doing nothing (the
    # launch's own cost, against which the short contexts are measured).
    empty = (f"et.kernel @empty(%o: memref<{workers}xf32>) {{\n  %c = arith.constant {workers} : index\n"
             "  et.task @t tiles(%i) in (%c) {\n  }\n}\n")
    art = et.compile(empty, target="cuda", workers=workers, mode="static", threads_per_worker=256, cache_dir=cache,
                     format="bin")
    _copy_artifact(art, out / "attention-bw-empty")
    (out / "attention-bw.json").write_text(json.dumps({"configs": configs, "layers": layers, "hkv": hkv, "d": d,
                                                       "hq": hq, "empty": "attention-bw-empty"}))
    print(f"tile numerics: decode ops, attention and attention bandwidth kernels in {out}")


def logit_ops(out: Path, workers: int, cache: Path, rng) -> None:
    """`logit_ops_kernel` on all threads of a worker (its biases, penalties
    and greedy token, a row tile each), over a vocabulary of 1000; the numpy
    references' logits and tokens are in the case."""
    rows, vocab, slots, length, entries = 5, 1000, 3, 300, 256
    text = logit_ops_kernel(vocab, entries, slots, length)
    x = rng.standard_normal((rows, vocab)).astype(np.float32)
    ids = np.full((rows, entries), -1, np.int32)
    vals = np.zeros((rows, entries), np.float32)
    # Row 0: every entry, ids repeated and outside the vocabulary; row 1 a
    # ban and a force; row 2 none; rows 3 and 4 a few, with penalties.
    ids[0] = rng.integers(-20, vocab + 20, entries)
    vals[0] = rng.standard_normal(entries).astype(np.float32)
    ids[1, :2], vals[1, :2] = [int(np.argmax(x[1])), 17], [-100.0, 100.0]
    ids[3, :3], vals[3, :3] = [5, 6, 5], [2.0, -1.0, 0.5]
    ids[4, :1], vals[4, :1] = [int(np.argmax(x[4]))], [4.0]
    hist = rng.integers(-3, vocab + 3, (slots, length)).astype(np.int32)
    hist[:, :40] = rng.integers(0, 8, (slots, 40))  # repeats
    #            slot, length, outputs_from, repetition, frequency, presence
    table = [(0, 300, 100, 1.3, 0.5, 0.2), (1, 0, 0, 1.0, 0.0, 0.0), (2, 120, 10, 0.0, 0.0, 0.0),
             (1, 200, 0, 2.0, 0.4, 1.0), (2, 300, 299, 1.0, 0.0, 1.5)]
    col = lambda k, dt: np.array([t[k] for t in table], dt)  # noqa: E731
    ref_x = np.stack([numpy_refs.penalize(numpy_refs.logit_bias(x[b], ids[b], vals[b]), hist[s, :n], start,
                                          r if r > 0 else 1.0, f, p)
                      for b, (s, n, start, r, f, p) in enumerate(table)])
    art = et.compile(text, target="cuda", workers=workers, mode="static", threads_per_worker=256, cache_dir=cache)
    _copy_artifact(art, out / "logit-ops")
    np.savez(out / "logit-ops" / "case.npz", x=x, ids=ids, vals=vals, hist=hist, slots=col(0, np.int32),
             lengths=col(1, np.int32), outputs_from=col(2, np.int32), repetition=col(3, np.float32),
             frequency=col(4, np.float32), presence=col(5, np.float32), ref_x=ref_x,
             ref_tokens=ref_x.astype(np.float32).argmax(axis=1).astype(np.int32))
    print(f"tile numerics: logit bias and penalties case in {out}")


def top_logprobs(out: Path, workers: int, cache: Path, rng) -> None:
    """`top_logprobs_kernel` on all threads of a worker over a vocabulary of
    128256 with lists of 20 (`top_logprobs_case`: rows off, log-sum-exp
    only, ties at the n-th logit, -inf logits); the runner checks it
    against the numpy reference and times a row with 20 ids against one
    with none."""
    vocab, entries = 128256, 20
    x, counts, rows, lists = top_logprobs_case(vocab, entries, rng)
    art = et.compile(top_logprobs_kernel(vocab, entries), target="cuda", workers=workers, mode="static",
                     threads_per_worker=256, cache_dir=cache)
    _copy_artifact(art, out / "top-logprobs")
    np.savez(out / "top-logprobs" / "case.npz", x=x, counts=counts, rows=rows, lists=np.int64(lists))
    print(f"tile numerics: top log-probabilities case in {out}")


def models(out: Path, workers: int, cache: Path, names: list[str], profiled: list[str], threads: int = 512,
           layered: bool = True, max_batch: int = 4, max_context: int = 1024, fmt: str = "isa",
           tile_prefetch: str | None = None, fuse_norms: bool = True, tile_unroll: int | None = None,
           tile_linear: str = "rows", tile_prefetch_bytes: int | None = None,
           tile_kv_prefetch: str | None = None, prefill_rows: int = 0) -> None:
    """Decode-step megakernels of model presets, for
    benchmarks/check_transformers.py and benchmarks/decode.py (names in
    `profiled` also get a profiling build, `NAME-profiled`; without
    `layered`, one task per kind and layer, named `NAME-per-layer`). With
    `prefill_rows`, each also carries a prefill kernel for launches of that
    many prompt tokens (benchmarks/prefill.py)."""
    from event_tensor.model import compile_model, preset

    builds = [(n, False) for n in names] + [(n, True) for n in profiled]
    for name, profile in builds:
        start = time.perf_counter()
        config = preset(name)
        target = out / (name + ("" if layered else "-per-layer") + ("-profiled" if profile else ""))
        compile_model(config, target="cuda", max_batch=max_batch,
                      max_context=min(max_context, config.max_position_embeddings), workers=workers,
                      threads_per_worker=threads, out_dir=target, cache_dir=cache, profile=profile, layered=layered,
                      format=fmt, fuse_norms=fuse_norms,
                      tile_linear=tile_linear, prefill_rows=prefill_rows,
                      **({} if tile_prefetch_bytes is None else {"tile_prefetch_bytes": tile_prefetch_bytes}),
                      **({} if tile_prefetch is None else {"tile_prefetch": tile_prefetch}),
                      **({} if tile_unroll is None else {"tile_unroll": tile_unroll}),
                      **({} if tile_kv_prefetch is None else {"tile_kv_prefetch": tile_kv_prefetch}))
        print(f"models: {target.name} compiled in {time.perf_counter() - start:.1f} s")


#: The shape families every supported dense model falls into, compiled as a
#: user would (`event-tensor compile NAME --device cuda --specialize` with
#: tensor-core tiles from their batch): test/Integration/GPU/run_families.py
#: loads each kernel and runs a step at batch 1, 4 and 16.
FAMILIES = ("llama-3.2-1b", "llama-3.2-3b", "llama-3.1-8b", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b",
            "qwen3-14b")
FAMILY_BATCHES = (1, 4, 16)
FAMILY_CONTEXT = 2048


def families(out: Path, cache: Path, names=FAMILIES) -> None:
    """One artifact per shape family: a kernel per batch of FAMILY_BATCHES
    (`specialize`), `linear_tile="auto"`, cubins and the default prefill
    kernel (what must load on the GPU is what the default compile
    writes)."""
    from event_tensor.model import compile_model, preset
    from event_tensor.model.compile import default_prefill_rows

    out.mkdir(parents=True, exist_ok=True)
    for name in names:
        start = time.perf_counter()
        config = preset(name)
        compile_model(config, target="cuda", max_batch=max(FAMILY_BATCHES), max_context=FAMILY_CONTEXT,
                      linear_tile="auto", specialize={"batches": list(FAMILY_BATCHES)}, format="bin",
                      prefill_rows=default_prefill_rows(config, "cuda", FAMILY_CONTEXT), out_dir=out / name,
                      cache_dir=cache)
        print(f"families: {name} compiled in {time.perf_counter() - start:.1f} s")
    (out / "families.json").write_text(json.dumps({"models": list(names), "batches": list(FAMILY_BATCHES),
                                                   "context": FAMILY_CONTEXT}))


# GEMM (et.matmul) shapes, N x K: the linear layers of Llama-3.2-1B (qkv,
# o, gate+up, down) and of Llama-3.1-8B.
GEMM_SHAPES = [(3072, 2048), (2048, 2048), (16384, 2048), (2048, 8192),
               (6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]
# (BM, BN, BK), stages, threads per worker, tensor-core instructions, block
# order, split-K (gemm_kernel).
GEMM_CONFIGS = [((128, 128, 64), 3, 256, "sync", "auto", 1),
                ((128, 128, 64), 4, 256, "wgmma", "auto", 1), ((128, 128, 64), 6, 256, "wgmma", "auto", 1),
                ((128, 256, 64), 4, 256, "wgmma", "auto", 1), ((128, 256, 64), 4, 256, "wgmma", "rows", 1),
                ((256, 128, 64), 4, 512, "wgmma", "auto", 1), ((64, 128, 64), 6, 128, "wgmma", "auto", 1),
                ((64, 128, 64), 6, 128, "wgmma", "auto", 2), ((128, 128, 64), 6, 256, "wgmma", "auto", 4)]
GEMM_PROFILED = [(2048, 2048), (2048, 8192)]
# Numerics: partial tiles in M, N and K, each output type, accumulate, one
# stage, idle warps or warpgroups -- (M, K, N, tile, stages, threads, out,
# accumulate, mma).
GEMM_NUMERICS_SPLIT = [(37, 520, 72, (32, 64, 64), 4, 256, "f32", False, "wgmma", 3),
                       (130, 1000, 40, (64, 32, 64), 4, 256, "bf16", False, "wgmma", 4),
                       (100, 640, 96, (64, 32, 32), 3, 256, "f32", True, "sync", 2)]
# Split K with `accumulate atomic` (the decode kernel's o and down tiles):
# the parts add into y at once -- (M, K, N, tile, stages, threads, mma, parts).
GEMM_NUMERICS_ATOMIC = [(64, 8192, 256, (64, 64, 128), 4, 512, "sync", 4),
                        (37, 1024, 72, (32, 32, 64), 4, 256, "sync", 2),
                        (64, 2048, 128, (64, 64, 64), 4, 256, "wgmma", 8)]
GEMM_NUMERICS = [(37, 200, 72, (32, 64, 32), 3, 256, "f32", False, "sync"),
                 (130, 264, 40, (64, 32, 16), 1, 256, "bf16", False, "sync"),
                 (300, 512, 200, (128, 128, 32), 4, 128, "f32", True, "sync"),
                 (64, 1024, 96, (32, 32, 64), 2, 512, "bf16", False, "sync"),
                 (300, 200, 200, (128, 128, 64), 4, 256, "f32", False, "wgmma"),
                 (257, 1024, 520, (128, 256, 64), 3, 256, "bf16", False, "wgmma"),
                 (100, 640, 100, (64, 48, 64), 3, 256, "f32", True, "wgmma"),
                 (520, 384, 136, (256, 128, 64), 4, 512, "f32", False, "wgmma"),
                 (37, 200, 75, (32, 64, 32), 3, 256, "bf16", False, "sync"),
                 (150, 256, 75, (128, 128, 64), 4, 256, "f32", True, "wgmma"),
                 (300, 200, 200, (128, 128, 128), 3, 256, "bf16", False, "wgmma"),
                 # the prefill's split-K `down` half that adds into h: 128 x 256
                 # blocks, the epilogue's grouped reads of y (partial rows)
                 (257, 512, 512, (128, 256, 64), 4, 256, "f32", True, "wgmma"),
                 # `registers` tiles (decode: few rows, BK 32): 16 x 16 blocks on
                 # 16 warps sharing K, a partial M, accumulate, a partial N, K of
                 # fewer chunks than warps, 64 rows with the blocks of w split
                 (16, 2048, 96, (16, 16, 32), 1, 512, "f32", False, "registers"),
                 (13, 8192, 64, (16, 16, 32), 1, 512, "f32", True, "registers"),
                 (37, 256, 200, (48, 32, 32), 1, 256, "bf16", False, "registers"),
                 (5, 96, 40, (16, 16, 32), 1, 128, "f32", True, "registers"),
                 (64, 2048, 128, (64, 64, 32), 1, 512, "bf16", False, "registers")]


def gemm(out: Path, workers: int, cache: Path, kernels: bool = True) -> None:
    """et.matmul kernels (one per shape and configuration; M is a runtime
    argument) and numerics cases with their float64 references; without
    `kernels`, the numerics cases alone (part gemm-numerics)."""
    import ml_dtypes
    from event_tensor.kernels import gemm_kernel

    out.mkdir(parents=True, exist_ok=True)
    shapes, profiled = (GEMM_SHAPES, GEMM_PROFILED) if kernels else ([], [])
    for n, k in shapes:
        for tile, stages, threads, mma, order, split in GEMM_CONFIGS:
            art = et.compile(gemm_kernel(k, n, tile=tile, stages=stages, out="bf16", order=order, split_k=split),
                             target="cuda", workers=workers, mode="static", threads_per_worker=threads, tile_mma=mma,
                             cache_dir=cache)
            _copy_artifact(art, out / _gemm_name(n, k, tile, stages, threads, mma, order, split))
    # Profiled (per-tile times): a short-K and a long-K shape.
    for n, k in profiled:
        art = et.compile(gemm_kernel(k, n, tile=(128, 256, 64), stages=4, out="bf16"), target="cuda",
                         workers=workers, mode="static", threads_per_worker=256, profile=True, cache_dir=cache)
        _copy_artifact(art, out / f"profiled-{n}x{k}")
    def case(index, art, seed, m, k, n, accumulate, **fields):
        """Numerics case `index`: the kernel, random x, w (and y0 with
        `accumulate`) and their float64 result, with `fields` for the runner."""
        where = out / f"numerics{index}"
        _copy_artifact(art, where)
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((m, k)).astype(ml_dtypes.bfloat16)
        w = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(ml_dtypes.bfloat16)
        y0 = rng.standard_normal((m, n)).astype(np.float32) if accumulate else np.zeros((m, n), np.float32)
        ref = x.astype(np.float64) @ w.astype(np.float64).T + y0
        np.savez(where / "case.npz", x=x.view(np.uint16), w=w.view(np.uint16), y0=y0, ref=ref,
                 accumulate=accumulate, **fields)

    for i, (m, k, n, tile, stages, threads, dtype, acc, mma) in enumerate(GEMM_NUMERICS):
        registers = mma == "registers"
        art = et.compile(gemm_kernel(k, n, tile=tile, stages=stages, out=dtype, accumulate=acc, registers=registers),
                         target="cuda", workers=workers, mode="static", threads_per_worker=threads,
                         tile_mma="sync" if registers else mma, cache_dir=cache)
        case(i, art, i, m, k, n, acc, out=dtype, mma=mma)
    first = len(GEMM_NUMERICS)
    for i, (m, k, n, tile, stages, threads, dtype, acc, mma, split) in enumerate(GEMM_NUMERICS_SPLIT):
        art = et.compile(gemm_kernel(k, n, tile=tile, stages=stages, out=dtype, accumulate=acc, split_k=split),
                         target="cuda", workers=workers, mode="static", threads_per_worker=threads, tile_mma=mma,
                         cache_dir=cache)
        case(first + i, art, 100 + i, m, k, n, acc, out=dtype, mma=mma, split_k=split)
    first += len(GEMM_NUMERICS_SPLIT)
    for i, (m, k, n, tile, stages, threads, mma, split) in enumerate(GEMM_NUMERICS_ATOMIC):
        art = et.compile(gemm_kernel(k, n, tile=tile, stages=stages, accumulate=True, split_k=split, atomic=True),
                         target="cuda", workers=workers, mode="static", threads_per_worker=threads, tile_mma=mma,
                         cache_dir=cache)
        case(first + i, art, 200 + i, m, k, n, True, out="f32", mma=mma, split_k=split, atomic=True)
    count = first + len(GEMM_NUMERICS_ATOMIC)
    (out / "gemm.json").write_text(json.dumps({"shapes": shapes, "configs": GEMM_CONFIGS, "numerics": count,
                                               "profiled": profiled}))
    print(f"gemm: {len(shapes) * len(GEMM_CONFIGS)} kernels and {count} numerics cases in {out}")


def _gemm_name(n, k, tile, stages, threads, mma, order, split) -> str:
    return f"gemm-{n}x{k}-{tile[0]}x{tile[1]}x{tile[2]}-s{stages}-t{threads}-{mma}-{order}-k{split}"


# Prefill attention: (name, Hq, Hkv, D, block, threads) and the prompt
# lengths timed; the cache holds PREFILL_CACHE positions.
PREFILL_SHAPES = [("llama-3.2-1b", 32, 8, 64, 16, 128), ("llama-3.2-1b", 32, 8, 64, 32, 256),
                  ("llama-3.2-1b", 32, 8, 64, 48, 384),
                  ("qwen3-0.6b", 16, 8, 128, 32, 128), ("qwen3-0.6b", 16, 8, 128, 64, 256),
                  ("llama-3.1-8b", 32, 8, 128, 16, 128), ("llama-3.1-8b", 32, 8, 128, 32, 256)]
PREFILL_CACHE = 8192
# Numerics: (Hq, Hkv, D, T, pos0, block, threads, out, q) against float64.
PREFILL_NUMERICS = [(32, 8, 64, 100, 28, 16, 128, "f32", "bf16"), (16, 8, 128, 77, 0, 32, 128, "bf16", "bf16"),
                    (8, 8, 64, 40, 3, 16, 256, "f32", "bf16"), (32, 8, 64, 200, 60, 48, 384, "bf16", "bf16"),
                    (16, 8, 128, 90, 10, 64, 256, "f32", "f32")]


def prefill(out: Path, workers: int, cache: Path) -> None:
    """et.attention_prefill kernels and numerics cases."""
    import ml_dtypes
    from event_tensor.kernels import prefill_attention_kernel

    out.mkdir(parents=True, exist_ok=True)
    for name, hq, hkv, d, block, threads in PREFILL_SHAPES:
        art = et.compile(prefill_attention_kernel(hq, hkv, d, PREFILL_CACHE, block=block), target="cuda",
                         workers=workers, mode="static", threads_per_worker=threads, cache_dir=cache)
        _copy_artifact(art, out / f"prefill-{name}-b{block}-t{threads}")
    for i, (hq, hkv, d, t, pos0, block, threads, dtype, q_type) in enumerate(PREFILL_NUMERICS):
        s = 256
        art = et.compile(prefill_attention_kernel(hq, hkv, d, s, block=block, out=dtype, q=q_type), target="cuda",
                         workers=workers, mode="static", threads_per_worker=threads, cache_dir=cache)
        _copy_artifact(art, out / f"numerics{i}")
        rng = np.random.default_rng(i)
        q = rng.standard_normal((t, hq, d)).astype(np.float32 if q_type == "f32" else ml_dtypes.bfloat16)
        k = rng.standard_normal((s, hkv, d)).astype(ml_dtypes.bfloat16)
        v = rng.standard_normal((s, hkv, d)).astype(ml_dtypes.bfloat16)
        ref = numpy_refs.prefill_attention(q, k, v, pos0)
        np.savez(out / f"numerics{i}" / "case.npz", q=q if q_type == "f32" else q.view(np.uint16),
                 k=k.view(np.uint16), v=v.view(np.uint16), ref=ref, pos0=pos0, out=dtype)
    (out / "prefill.json").write_text(json.dumps({"shapes": PREFILL_SHAPES, "cache": PREFILL_CACHE,
                                                  "numerics": len(PREFILL_NUMERICS)}))
    print(f"prefill: {len(PREFILL_SHAPES)} kernels and {len(PREFILL_NUMERICS)} numerics cases in {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / ".device"))
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=132)
    parser.add_argument("--models", default="llama-3.2-1b,qwen3-0.6b",
                        help="model presets to compile ('' for none)")
    parser.add_argument("--profiled-models", default="", help="model presets to compile with profiling too")
    parser.add_argument("--model-threads", type=int, default=512, help="threads per worker of the model kernels")
    parser.add_argument("--per-layer", action="store_true",
                        help="model kernels with one task per kind and layer (default: per kind over layers)")
    parser.add_argument("--max-batch", type=int, default=4, help="max batch of the model kernels")
    parser.add_argument("--max-context", type=int, default=1024, help="max context of the model kernels")
    parser.add_argument("--format", default="isa", choices=["isa", "bin"], help="model kernels as PTX or cubin")
    parser.add_argument("--tile-prefetch", default=None, choices=["none", "registers", "l2", "shared"],
                        help="weight loads before the wait in the model kernels (default: the model's)")
    parser.add_argument("--tile-prefetch-bytes", type=int, default=None,
                        help="dynamic shared memory for the shared prefetches (default: the larger of 128 KB "
                             "with --tile-prefetch shared and one attention split's K and V)")
    parser.add_argument("--tile-kv-prefetch", default=None, choices=["none", "shared"],
                        help="KV-cache history before the wait in the model kernels (default: the model's)")
    parser.add_argument("--no-fuse-norms", action="store_true", help="one-tile RMSNorm tasks in the model kernels")
    parser.add_argument("--tile-unroll", type=int, default=None,
                        help="16-byte weight loads per lane per group in the model kernels (default: the model's)")
    parser.add_argument("--tile-linear", default="rows", choices=["rows", "spread"], help="et.linear lowering")
    parser.add_argument("--prefill-rows", type=int, default=0,
                        help="also compile a prefill kernel for this many prompt tokens per launch into each model")
    parser.add_argument("--families", default=",".join(FAMILIES), help="with --parts families: the presets")
    parser.add_argument("--parts", default="suite,bench,linear,tiles,models",
                        help="what to prepare (comma-separated: suite, bench, linear, tiles, models, gemm, "
                             "gemm-numerics, prefill, families)")
    args = parser.parse_args()
    parts = set(args.parts.split(","))
    unknown = parts - {"suite", "bench", "linear", "tiles", "models", "gemm", "gemm-numerics", "prefill", "families"}
    if unknown:
        parser.error(f"unknown parts: {', '.join(sorted(unknown))}")
    out = Path(args.out)
    cache = out / "cache"
    if "suite" in parts:
        suite(out / "suite", args.seeds, cache)
    if "bench" in parts:
        bench(out / "bench", args.workers, cache)
    if "linear" in parts:
        linear(out / "linear", args.workers, cache)
    if "tiles" in parts:
        tile_numerics(out / "tiles", args.workers, cache)
    if "gemm" in parts or "gemm-numerics" in parts:
        gemm(out / "gemm", args.workers, cache, kernels="gemm" in parts)
    if "prefill" in parts:
        prefill(out / "prefill", args.workers, cache)
    if "families" in parts:
        families(out / "families", cache, [m for m in args.families.split(",") if m])
    if "models" in parts:
        models(out / "models", args.workers, cache, [m for m in args.models.split(",") if m],
               [m for m in args.profiled_models.split(",") if m], args.model_threads, not args.per_layer,
               args.max_batch, args.max_context, args.format, args.tile_prefetch, not args.no_fuse_norms,
               args.tile_unroll, args.tile_linear, args.tile_prefetch_bytes, args.tile_kv_prefetch,
               args.prefill_rows)
    shutil.rmtree(cache, ignore_errors=True)


if __name__ == "__main__":
    main()
