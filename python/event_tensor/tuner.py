"""Regenerates a tuning table on the current machine, in three steps that
may run on different machines (the GPU machine may have no MLIR):

1. `prepare` (needs MLIR): compiles one `et.linear` kernel per sample point,
   and with `gemm=True` one `et.matmul` kernel per shape and GEMM candidate.
   By default (`sampling="shapes"`) these are the candidate configurations
   at each shape's own N and K: fixed row counts and wave-sized ones (0.5,
   1, 2 or 4 tiles per worker). With `sampling="waves"`, candidate
   configurations x tile counts at the wave boundaries x K sizes, on
   synthetic shapes. It writes `plan.json` and the artifacts to a directory.
2. `measure` (runtime only): times every kernel for a few token counts M,
   with random inputs, and writes `samples.json`.
3. `fit` (numpy only): builds the table (at the shapes: each
   configuration's latency interpolated in M between the measured M; at
   the wave boundaries: one fitted `WaveModel` per configuration, evaluated
   at the requested shapes), validates it and saves it.

`event-tensor tune` runs all three, or one of them with `--step`.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import platform
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from .tuning import (LINEAR_M_MAX, TABLE_FORMAT, GemmConfig, LinearConfig, TuningTable, WaveModel, build_table,
                     gemm_candidates, gemm_sample_ms, linear_candidates, linear_problem, table_from_samples)

__all__ = ["prepare", "measure", "fit", "model_shapes", "sample_points", "shape_points", "default_ms",
           "queued_seconds", "gemm_artifact"]


def model_shapes(names: Sequence[str]) -> list[tuple[int, int]]:
    """The (N, K) of every linear layer of the named model presets."""
    from .model import preset

    return sorted({shape for name in names for shape in preset(name).linear_shapes()})


def _kernel(n: int, k: int, rows: int):
    """One task of ceil(n / rows) tiles, each an et.linear over its rows,
    built with the generated bindings."""
    from .dialects import arith, et
    from .ir import BF16Type, F32Type, IndexType, InsertionPoint, Location, MemRefType, Module, ShapedType

    dyn = ShapedType.get_dynamic_size()
    with Location.unknown():
        module = Module.create()
        with InsertionPoint(module.body):
            x_t = MemRefType.get([dyn, k], BF16Type.get())
            w_t = MemRefType.get([n, k], BF16Type.get())
            y_t = MemRefType.get([dyn, n], F32Type.get())
            with et.kernel("linear", [x_t, w_t, y_t]) as (x, w, y):
                with et.task("rows", [-(-n // rows)]) as (t,):
                    r0 = arith.MulIOp(t, et.index(rows)).result
                    et.linear(x, w, y, r0, et.index(rows))
    return module


def gemm_artifact(n: int, k: int, cfg: GemmConfig, *, target: str, workers: int, fmt: str = "isa"):
    """The et.matmul kernel of `cfg` for an N x K layer (f32 output, M a
    runtime argument; kernels.gemm_kernel), compiled for `target`."""
    from . import compile as et_compile
    from .kernels import gemm_kernel

    text = gemm_kernel(k, n, tile=cfg.tile, stages=cfg.stages, out="f32", order=cfg.order, split_k=cfg.split_k)
    cuda = {"threads_per_worker": cfg.threads, "tile_mma": cfg.mma, "format": fmt} if target == "cuda" else {}
    return et_compile(text, target=target, workers=workers, mode="static", **cuda)


def sample_points(shapes: Sequence[tuple[int, int]], *, rows: Sequence[int], unrolls: Sequence[int], capacity: int,
                  ks: Sequence[int] | None, max_waves: int | None) -> list[tuple[int, int, int, int]]:
    """The sample kernels (rows, unroll, tiles, K). Within each of the first
    `max_waves` wave regimes: the start, middle and end. With `max_waves`
    None, the regimes span what the shapes need at each row count: waves 1-3
    as above, then the end of waves 6, 12, 24, ... and of the last one, so
    the models interpolate instead of extrapolating (an LM head in 8-row
    tiles runs over a hundred waves). With `ks` None, the shapes' own K: all
    of them up to three, else the smallest, the median and the largest."""
    if ks is None:
        distinct = sorted({k for _, k in shapes})
        ks = distinct if len(distinct) <= 3 else [distinct[0], distinct[len(distinct) // 2], distinct[-1]]
    points = []
    for r in rows:
        if max_waves is None:
            need = max([math.ceil(math.ceil(n / r) / capacity) for n, _ in shapes] or [1])
            regimes = range(1, min(3, need) + 1)
            ends = set()
            w = 6
            while w < need:
                ends.add(w)
                w *= 2
            if need > 3:
                ends.add(need)
        else:
            regimes, ends = range(1, max_waves + 1), set()
        tiles = {(w - 1) * capacity + u for w in regimes for u in (1, max(1, capacity // 2), capacity)}
        tiles |= {w * capacity for w in ends}
        points += [(r, u, t, k) for u in unrolls for t in sorted(tiles) for k in ks]
    return points


def shape_points(shapes: Sequence[tuple[int, int]], *, rows: Sequence[int], unrolls: Sequence[int], capacity: int,
                 tiles_per_worker: Sequence[float]) -> list[tuple[int, int, int, int]]:
    """The sample kernels (rows, unroll, tiles, K) of `sampling="shapes"`:
    every candidate configuration (linear_candidates) at each shape's own
    N and K."""
    return [(r, u, math.ceil(n / r), k) for n, k in shapes
            for r in linear_candidates(n, capacity, rows, tiles_per_worker) for u in unrolls]


def default_ms(sampling: str, m_max: int) -> list[int]:
    """Token counts measured by default: 1, 4, 16 at the wave boundaries;
    at the shapes, powers of two up to m_max and m_max itself (the ends the
    interpolation in M needs)."""
    if sampling == "waves":
        return [1, 4, 16]
    return sorted({1 << i for i in range(m_max.bit_length()) if 1 << i <= m_max} | {m_max})


def prepare(out: str | Path, *, target: str, workers: int, threads: int = 512, shapes: Sequence[tuple[int, int]],
            m_max: int = 16, rows: Sequence[int] = (8, 16, 32, 64), unrolls: Sequence[int] = (4, 8),
            ks: Sequence[int] | None = (1024, 4096), ms: Sequence[int] | None = None, max_waves: int | None = 3,
            sampling: str = "shapes", tiles_per_worker: Sequence[float] = (0.5, 1, 2, 4),
            fmt: str = "isa", gemm: bool = False, progress: Callable[[int, int], None] | None = None) -> Path:
    """Compiles the sample kernels into `out` and writes `out/plan.json`.

    `sampling="shapes"` (the default): every candidate configuration at each
    shape's own N and K (shape_points); `fit` interpolates in M
    (tuning.table_from_samples). `sampling="waves"`: synthetic shapes at the
    wave boundaries (sample_points), for the fitted wave models; `ks` and
    `max_waves` apply to it only. `ms` defaults to default_ms. `fmt` is the
    CUDA binary format (`bin`: cubins, so measuring does not wait for the
    driver's JIT).

    `gemm=True` (at the shapes only) also compiles one et.matmul kernel per
    shape and GEMM candidate (tuning.gemm_candidates; M is a runtime
    argument), measured at the ends of its blocks of BM rows
    (tuning.gemm_sample_ms); the table then covers M 1..m_max with both
    kinds of tile. et.linear serves at most LINEAR_M_MAX tokens, so
    m_max above that needs `gemm`, and its samples stop there."""
    from . import compile as et_compile
    from .ir import Context

    if sampling not in ("shapes", "waves"):
        raise ValueError(f"sampling must be 'shapes' or 'waves', got {sampling!r}")
    if isinstance(m_max, bool) or not isinstance(m_max, int) or m_max < 1:
        raise ValueError(f"m_max must be a positive int, got {m_max!r}")
    if gemm and sampling != "shapes":
        raise ValueError("GEMM samples are taken at the shapes only (sampling='shapes')")
    if m_max > LINEAR_M_MAX and not gemm:
        raise ValueError(f"et.linear serves at most {LINEAR_M_MAX} tokens: m_max = {m_max} needs the GEMM "
                         "candidates too (gemm=True, --gemm)")
    linear_max = min(m_max, LINEAR_M_MAX)
    ms = list(ms) if ms is not None else default_ms(sampling, linear_max)
    if sampling == "shapes" and (1 not in ms or max(ms) < linear_max):
        raise ValueError(f"sampling at the shapes interpolates in M: the measured M ({ms}) must include 1 and "
                         f"reach m_max = {linear_max}")
    ms = [m for m in ms if m <= linear_max] if sampling == "shapes" else ms
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    capacity = workers
    if sampling == "shapes":  # (rows, unroll, tiles, K, N)
        builds = [(*point, n) for n, k in shapes for point in shape_points(
            [(n, k)], rows=rows, unrolls=unrolls, capacity=capacity, tiles_per_worker=tiles_per_worker)]
    else:
        builds = [(r, u, tiles, k, tiles * r) for r, u, tiles, k in sample_points(
            shapes, rows=rows, unrolls=unrolls, capacity=capacity, ks=ks, max_waves=max_waves)]
    gemm_builds = [(n, k, cfg) for n, k in shapes for cfg in gemm_candidates(n, k)] if gemm else []
    kernels = []
    for i, (r, u, tiles, k, n) in enumerate(builds):
        with Context():
            text = _kernel(n, k, r).operation.get_asm(print_generic_op_form=True)
        cuda = {"threads_per_worker": threads, "tile_unroll": u, "format": fmt} if target == "cuda" else {}
        art = et_compile(text, target=target, workers=workers, mode="static", **cuda)
        name = f"k{i}"
        art.copy_to(out / name)
        kernels.append({"dir": name, "kind": "linear", "rows": r, "unroll": u, "n": n, "k": k, "tiles": tiles})
        if progress:
            progress(i + 1, len(builds) + len(gemm_builds))
    for j, (n, k, cfg) in enumerate(gemm_builds):
        art = gemm_artifact(n, k, cfg, target=target, workers=workers, fmt=fmt)
        name = f"g{j}"
        art.copy_to(out / name)
        kernels.append({"dir": name, "kind": "gemm", "config": cfg.key(), "n": n, "k": k,
                        "ms": gemm_sample_ms(cfg, m_max)})
        if progress:
            progress(len(builds) + j + 1, len(builds) + len(gemm_builds))
    # Row groups working in parallel in a tile: the warps of a CTA, or the
    # one thread of a host worker.
    warps = max(1, threads // 32) if target == "cuda" else 1
    # Tokens per pass over the weights in the GPU lowering (et-lower-tile-ops).
    token_group = (4 if threads <= 512 else 2) if target == "cuda" else None
    plan = {"format": TABLE_FORMAT, "target": target, "sampling": sampling, "workers": workers, "threads": threads,
            "warps": warps, "token_group": token_group,
            "capacity": capacity, "ms": ms, "m_max": m_max, "shapes": [list(s) for s in shapes],
            "macro": [[r, 1] for r in rows], "micro": list(unrolls), "kernels": kernels}
    (out / "plan.json").write_text(json.dumps(plan, indent=1))
    return out


def _device_name(target: str) -> str:
    if target == "cuda":
        import torch

        return torch.cuda.get_device_name()
    return f"cpu {platform.machine()}"


# Weight bytes the timed launches of a CUDA sample cycle through (more than
# the GPU's L2).
COLD_BYTES = 256 << 20


def cold_copies(n: int, k: int) -> int:
    """Copies of an N x K bf16 weight that consecutive timed launches cycle
    through, so that each reads its weights from HBM (COLD_BYTES in all, at
    most 64 copies)."""
    return max(1, min(64, -(-COLD_BYTES // (2 * n * k))))


@functools.cache
def _sleep_cycles_per_second() -> float:
    """The rate of torch.cuda._sleep's cycle counter, measured once."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(1 << 20)  # warm-up
    start.record()
    torch.cuda._sleep(1 << 22)
    end.record()
    end.synchronize()
    return (1 << 22) / (start.elapsed_time(end) * 1e-3)


def queued_seconds(fn: Callable[[], None], *, inner: int = 16, reps: int = 5, warmup: int = 2) -> float:
    """Median device seconds per call of `fn()` (which enqueues one kernel
    on the current CUDA stream) when `inner` calls run back to back with
    no host time between them.

    Timed one launch at a time, a short kernel measures the host's launch
    work (tens of us through ctypes), not itself. Here a sleep kernel holds
    the stream while the host enqueues the `inner` launches, so that they
    start one after another on the device, and the time between the events
    is their device time plus the device-side gaps. The hold is twice the
    longest enqueue seen so far; a batch whose enqueue outlasted its hold is
    timed again with a longer one."""
    import torch

    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    rate = _sleep_cycles_per_second()
    hold_s = 1e-3
    times: list[float] = []
    while len(times) < reps:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(int(hold_s * rate))
        start.record()
        t0 = time.perf_counter()
        for _ in range(inner):
            fn()
        enqueue_s = time.perf_counter() - t0
        end.record()
        end.synchronize()
        if enqueue_s > 0.8 * hold_s:
            hold_s = 2 * enqueue_s  # the device may have waited for the host: again
            continue
        times.append(start.elapsed_time(end) * 1e-3 / inner)
    return float(np.median(times))


def measure(root: str | Path, *, reps: int = 5, progress: Callable[[int, int], None] | None = None) -> Path:
    """Times every kernel of `root/plan.json` with random inputs and writes
    `root/samples.json`. On the GPU: the median of `reps` batches of
    launches queued back to back (queued_seconds); on host workers: the
    median of `reps` launches after one warm-up."""
    from . import runtime

    root = Path(root)
    plan = json.loads((root / "plan.json").read_text())
    target = plan["target"]
    rng = np.random.default_rng(0)
    samples = []
    jobs = [(kern, m) for kern in plan["kernels"] for m in kern.get("ms", plan["ms"])]
    launchers = {}
    # Weights made where they run (on the GPU, random numbers for the large
    # sample kernels would otherwise take longer on the host than the
    # timing). On the GPU, consecutive launches read different copies,
    # COLD_BYTES in all, so that the weights come from HBM as in a model
    # step and not from L2, which holds a small kernel's weights after one
    # launch (docs/experiments/2026-11-22-tuning-table-vs-exhaustive.md, "The oracle is noisy, and it measured L2").
    weights: dict[Any, Any] = {}
    for i, (kern, m) in enumerate(jobs):
        launch = launchers.get(kern["dir"])
        if launch is None:
            launch = launchers[kern["dir"]] = runtime.load(root / kern["dir"]).launcher()
        n, k = kern["n"], kern["k"]
        x = rng.standard_normal((m, k)).astype(np.float32)
        is_gemm = kern.get("kind") == "gemm"
        # The GEMM kernels take the rows of x and, split in K, the partial
        # products (gemm_kernel).
        split = GemmConfig.from_key(kern["config"], str(root / "plan.json")).split_k if is_gemm else 1
        if target == "cuda":
            import torch

            if (n, k) not in weights:
                # The copies are views into one pool of random numbers,
                # drawn once (and again only for a larger shape): drawing
                # 256 MiB per sample kernel took most of the measuring time.
                copies = cold_copies(n, k)
                pool = weights.get("pool")
                if pool is None or pool.numel() < copies * n * k:
                    weights.pop("pool", None)
                    gen = torch.Generator(device="cuda").manual_seed(0)
                    pool = weights["pool"] = (torch.randn(max(COLD_BYTES // 2, copies * n * k), device="cuda",
                                                          generator=gen) / 32).to(torch.bfloat16)
                weights = {"pool": pool, (n, k): [pool[c * n * k:(c + 1) * n * k].view(n, k)
                                                  for c in range(copies)]}
            xs, y = torch.from_numpy(x).cuda().to(torch.bfloat16), torch.zeros(m, n, device="cuda")
            extra = ([m] + ([torch.zeros(split, m, n, device="cuda")] if split > 1 else [])) if is_gemm else []
            launch(xs, weights[(n, k)][0], y, *extra)
            # Arguments packed once; launches queued back to back, each on
            # the next weight copy (queued_seconds).
            bound = itertools.cycle([launch.bind(xs, w, y, *extra) for w in weights[(n, k)]])
            times = [queued_seconds(lambda: next(bound)(), reps=reps)]
            launch.check()
        else:
            import ml_dtypes

            if (n, k) not in weights:
                weights.clear()
                weights[(n, k)] = (rng.standard_normal((n, k)) / np.sqrt(k)).astype(ml_dtypes.bfloat16)
            args = [x.astype(ml_dtypes.bfloat16), weights[(n, k)], np.zeros((m, n), np.float32)]
            if is_gemm:
                args += [m] + ([np.zeros((split, m, n), np.float32)] if split > 1 else [])
            launch(*args)
            times = []
            for _ in range(reps):
                t0 = time.perf_counter()
                launch(*args)
                times.append(time.perf_counter() - t0)
        if is_gemm:
            samples.append({"kind": "gemm", "config": kern["config"], "n": n, "k": k, "m": m,
                            "seconds": float(np.median(times))})
        else:
            cfg = LinearConfig(kern["rows"], 1, kern["unroll"])
            tiles, trips = linear_problem(m, n, k, cfg, plan["warps"], plan.get("token_group"))
            samples.append({"kind": "linear", "rows": kern["rows"], "split_k": 1, "unroll": kern["unroll"], "n": n,
                            "k": k, "m": m, "tiles": tiles, "trips": trips, "seconds": float(np.median(times))})
        if progress:
            progress(i + 1, len(jobs))
    for launch in launchers.values():
        close = getattr(launch, "close", None)
        if close:
            close()
    result = {"device": _device_name(target), "samples": samples}
    (root / "samples.json").write_text(json.dumps(result, indent=1))
    return root / "samples.json"


def fit(root: str | Path, out: str | Path) -> TuningTable:
    """Builds the table from `root/samples.json` (samples at the shapes:
    interpolated in M, tuning.table_from_samples; at the wave boundaries:
    wave models fitted and evaluated at the plan's shapes, build_table),
    validates it and writes it to `out`."""
    root = Path(root)
    plan = json.loads((root / "plan.json").read_text())
    measured = json.loads((root / "samples.json").read_text())
    if plan.get("sampling", "waves") == "shapes":
        table = table_from_samples(measured["device"], plan["workers"], plan["threads"], measured["samples"],
                                   plan["m_max"])
        table = TuningTable.from_json(json.loads(json.dumps(table.to_json())), str(out))
        table.save(out)
        return table
    models = {}
    for rows, split in plan["macro"]:
        for unroll in plan["micro"]:
            # Tiles and trips recounted from the plan (the samples' own
            # counts may come from an older count).
            mine = [(*linear_problem(s["m"], s["n"], s["k"], LinearConfig(rows, split, unroll), plan["warps"],
                                     plan.get("token_group")), s["seconds"]) for s in measured["samples"]
                    if (s["rows"], s["split_k"], s["unroll"]) == (rows, split, unroll)]
            models[(rows, split, unroll)] = WaveModel(plan["capacity"]).fit(mine)
    table = build_table(measured["device"], plan["workers"], plan["threads"],
                        [tuple(s) for s in plan["shapes"]], plan["m_max"],
                        [tuple(m) for m in plan["macro"]], plan["micro"], models, warps=plan["warps"],
                        token_group=plan.get("token_group"))
    # What is saved must load back through the validation.
    table = TuningTable.from_json(json.loads(json.dumps(table.to_json())), str(out))
    table.save(out)
    return table
