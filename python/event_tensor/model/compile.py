"""Compiles a model's decode step into one megakernel artifact (needs MLIR).
The artifact directory gets a `model.json` (config, layout) beside the
kernel, so `DecodeSession` can run it without MLIR."""

from __future__ import annotations

import json
import os
import time
from dataclasses import replace
from pathlib import Path

from .builder import build_decode_kernel
from .config import ModelConfig, tp_config
from .layout import MAX_LINEAR_ROWS, kernel_layout
from .options import NORM_IN_LINEAR_MAX_HIDDEN, KernelOptions, wide_one_row  # noqa: F401 -- re-exported
from .session import MODEL_JSON, PREFILL_DIR, VARIANTS_JSON

__all__ = ["compile_model", "default_prefill_rows", "PREFILL_ROWS", "MODEL_KV_PREFETCH", "MODEL_OPT_LEVEL",
           "MODEL_TILE_UNROLL", "MODEL_WEIGHT_PREFETCH", "MODEL_WEIGHT_PREFETCH_TASKS"]

# 16-byte weight loads per lane in flight in the model's linear tiles on the
# GPU: 8 measured 4% (batch 1) to 9% (batch 4) faster than 4 on the
# Llama-3.2-1B step and the same on Qwen3-0.6B, at 512 threads per worker
# (docs/experiments/2026-11-22-weight-prefetch-and-unroll.md). Kernels for more than
# MODEL_TILE_UNROLL_MAX_BATCH rows use 4: for max_batch 16, 4 was 7% (batch
# 1) and 4% (batch 16) faster for Llama and the same for Qwen3
# ("One artifact, re-measured").
MODEL_TILE_UNROLL = 8
MODEL_TILE_UNROLL_MAX_BATCH = 4

# Kernels for one sequence at a time (max_batch 1): the attention tiles copy
# the KV cache's history into shared memory before they wait for this step's
# q, k and v, and compute from there (`tile_kv_prefetch`). On the H200 that
# made batch 1 3-4% faster for Llama-3.2-1B, and batch 4 4-5% slower for
# both models, so kernels for larger batches keep it off
# (docs/experiments/2026-11-22-kv-history-staged.md).
MODEL_KV_PREFETCH = "shared"

# Kernels for one sequence at a time (max_batch 1) also copy the first
# weight rows of each `o` tile into shared memory before its wait
# (`tile_prefetch="shared"` for the tasks in MODEL_WEIGHT_PREFETCH_TASKS):
# `o` waits through the attention chain, while the memory system is nearly
# idle. On the H200, in three calls, that made the Qwen3-0.6B step 1.5-2.3%
# faster and the Llama-3.2-1B step between 0.1% slower and 1.6% faster
# (docs/experiments/2026-11-25-attention-chain-shortened.md); in kernels for 4
# rows it was 1-8% slower, and the same copies before every linear tile's
# wait were slower, since they take bandwidth from the phase still running.
# One-row kernels of models with a hidden size from
# MODEL_WEIGHT_PREFETCH_BELOW_HIDDEN on prefetch nothing: on the H200,
# without the `o` copies Llama-3.1-8B's step was 2.4-4.1% faster and
# Qwen3-8B's 1.2-3.3% (two passes each), where Qwen3-4B's was 1.3-2.5% faster
# and Llama-3.2-3B's 8% slower (its kernel spilled more), so those keep them
# (docs/experiments/2026-11-28-limits-and-defaults.md). Tensor-parallel
# kernels keep them (not measured).
MODEL_WEIGHT_PREFETCH = "shared"
MODEL_WEIGHT_PREFETCH_TASKS = ("o",)
MODEL_WEIGHT_PREFETCH_BELOW_HIDDEN = 4096

# Kernels for one sequence at a time (max_batch 1) also stage the first
# MODEL_STAGE_BYTES of weight rows of each `mlp` and `down` tile into shared
# memory while the worker is still on its tile before (`tile_stage_bytes`,
# `tile_stage_tasks`; docs/lowering.md, "Weights staged across tiles"). On
# the H100 that made the Qwen3-0.6B step 2-5% faster (0.795-0.807 against
# 0.818-0.838 ms) and the Llama-3.2-1B step 1-3% faster (1.065-1.086 against
# 1.079-1.101); on the H200 1.6-1.9% and 0-0.6%. Kernels for 4 rows were 0-3%
# slower with it, so they keep none; staging `qkv` too was within the noise
# for Qwen3-0.6B and 6-8% slower for Llama-3.2-1B, and staging every task in
# place of the `o` prefetch was slower for both (docs/experiments/2026-11-27-staging-mlp-down.md,
# docs/experiments/2026-11-27-staged-defaults-h200.md). Wide models
# (`options.wide_one_row`) and tensor-parallel kernels stage nothing: 0-3%
# slower with it at hidden size 4096 (docs/experiments/2026-11-28-wide-models.md).
MODEL_STAGE_BYTES = 69632

# Models of at least MODEL_KV_MMA_MIN_GROUP query heads per KV head compute
# the split attention on tensor cores (`tile_kv_mma_bytes`, the group's
# heads as the rows of an m16n8k16 tile): the CUDA-core tile's partial
# results leave room for 9 of 16 warps there. Qwen3-30B-A3B (8 heads of
# 128 per KV head) on the H100: 4.45-4.50 ms per step against 5.33 ms at
# batch 1 (docs/experiments/2026-11-28-qwen3-moe.md). Narrower groups keep
# the CUDA cores (the tensor-core tile did not help Llama-3.2-1B or
# Qwen3-0.6B in the model: docs/experiments/2026-11-26-attention-tensor-cores.md),
# except kernels of at least MODEL_KV_MMA_FROM_BATCH rows of models whose
# heads are at most MODEL_KV_MMA_MAX_HEAD_DIM wide, whose attention tiles
# stream far more KV rows than a warp's registers keep in flight, with rings
# of MODEL_KV_MMA_BATCH_BYTES: on the H100, Llama-3.2-1B's 16-row kernel
# took 1.456 / 1.744 ms at batch 4 / 16 against 1.552 / 1.886 with the CUDA
# cores (96 and 144 KiB rings: 1-2% slower than 120), the 64-row kernel
# 2.387 / 3.012 at batch 32 / 64 against 2.437 / 3.075 with 96 KiB, and the
# 4- and 8-row kernels of a served artifact's buckets 1.397 / 1.511 ms at
# batch 4 / 8 against 1.425 / 1.545 (one pass;
# docs/experiments/2026-12-07-logprobs-and-filters.md). Heads
# of 128 keep the CUDA cores: on the H200 Qwen3-0.6B's 16-row kernel was
# 15-25% slower on tensor cores (1.731 / 2.951 ms at batch 1 / 16 against
# 1.474 / 2.369; its frame 704 bytes against 240), the 64-row one 2-7%
# slower; Llama-3.1-8B's 64-row kernel the same either way
# (docs/experiments/2026-12-07-penalties-and-attention-rings.md).
MODEL_KV_MMA_MIN_GROUP = 8
MODEL_KV_MMA_FROM_BATCH = 4
MODEL_KV_MMA_MAX_HEAD_DIM = 64
MODEL_KV_MMA_BYTES = 98304
MODEL_KV_MMA_BATCH_BYTES = 122880
MODEL_STAGE_TASKS = ("mlp", "down")

# One-row kernels of models with a hidden size up to MODEL_NARROW_HIDDEN
# (Qwen3-0.6B) stage their `qkv` tiles' rows too (the copies go out during
# the `down` tile before). Since the tile lowering stopped issuing a tile's
# later linear ops' loads early after a staged one, that made the
# Qwen3-0.6B step faster on the H100 in 14 of 14 passes over four calls
# (0.7-2.0% on each call's means); Llama-3.2-1B's was 7% slower
# (docs/experiments/2026-11-27-staged-qkv.md).
MODEL_STAGE_TASKS_NARROW = ("qkv", "qkv_first", "mlp", "down")

# Kernels for one sequence at a time (max_batch 1) lay their et.linear
# tiles out over every warp (`tile_linear="spread"`: K split between warps
# for tiles of fewer rows than warps, two rows per trip for short rows, a
# gated row whole in one trip, and the first loads of a tile's later linear
# ops issued during the earlier ones). On the H100, with `qkv_by_matrix`
# chosen by the builder, that made the Qwen3-0.6B step 2.1-4.2% and the
# Llama-3.2-1B step 1.9-3.4% faster (medians of four calls; docs/experiments/2026-11-26-spread-linear-tile.md);
# kernels for more rows keep
# "rows" (not measured there), and so do one-row kernels of wide models
# (`options.wide_one_row`: from hidden size 2560; spread was 8-9% slower
# for Llama-3.1-8B).
MODEL_TILE_LINEAR = "spread"

# Threads per worker of the model kernels (when the caller gives none): 512,
# except one-row kernels of models with a hidden size up to 1024
# (Qwen3-0.6B), which take 384. On the H100 that made the Qwen3-0.6B step
# 3% faster in two calls (0.941-0.955 against 0.972-0.995 ms; its kernel then
# keeps 128 registers with no spills, against 68 bytes of spill stores at
# 512) and the Llama-3.2-1B step 6-7% slower (docs/experiments/2026-11-26-threads-per-worker.md). 256 was slower for
# both.
MODEL_THREADS = 512
MODEL_THREADS_NARROW = 384
MODEL_NARROW_HIDDEN = 1024


# Prompt tokens per launch of the prefill kernel that `event-tensor compile`
# and the server (`serving.open_model`) build by default on cuda (the fast
# time to first token: a 1024-token prompt in two launches of tensor-core
# tiles instead of one decode step per token).
PREFILL_ROWS = 512


def default_prefill_rows(config: ModelConfig, target: str, max_context: int) -> int:
    """The prefill kernel's rows when the caller gives none: PREFILL_ROWS
    (at most the context) on cuda, none on the host or for a model with
    experts (no prefill kernel yet)."""
    return min(PREFILL_ROWS, max_context) if target == "cuda" and not config.moe else 0


def default_workers(target: str) -> int:
    """Workers when the caller gives none: 132 on cuda (one per SM of an
    H100 or H200); on the host, one per available core and at least 4 (on
    2 cores, 4 workers ran the demo model's step 15% faster than 2: a tile
    that waits leaves its core to another worker's)."""
    if target != "cpu":
        return 132
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(4, cores)


def default_shape_options(config: ModelConfig, target: str, max_batch: int, max_context: int,
                          tuning_table=None) -> dict:
    """What `event-tensor compile` builds when not told (`specialize`,
    `linear_tile`): on cuda, for a model without experts and without a
    tuning table, a kernel per batch and context bucket (within 10% of a
    kernel compiled for each shape at every point measured, where one
    kernel for the largest shape is up to 1.8x slower) and tensor-core
    linear tiles from `mma_from_batch` on (batch 16: 3.3 against 5.9 ms
    with row tiles); one kernel where the shape has one bucket; else one
    kernel of row tiles."""
    if target != "cuda" or config.moe or tuning_table is not None:
        return {"specialize": False, "linear_tile": "rows"}
    batches, contexts = shape_buckets(max_batch, max_context, True)
    return {"specialize": len(batches) > 1 or len(contexts) > 1,
            "linear_tile": "auto" if max_batch >= mma_from_batch(config) else "rows"}


def _narrow(config: ModelConfig, max_batch: int) -> bool:
    """A one-row kernel of a model with a hidden size up to
    MODEL_NARROW_HIDDEN."""
    return max_batch == 1 and config.hidden_size <= MODEL_NARROW_HIDDEN


def model_threads(config: ModelConfig, max_batch: int) -> int:
    """Threads per worker of a cuda decode kernel when the caller gives
    none (MODEL_THREADS / MODEL_THREADS_NARROW)."""
    return MODEL_THREADS_NARROW if _narrow(config, max_batch) else MODEL_THREADS


def model_stage_tasks(config: ModelConfig, max_batch: int) -> tuple:
    """The tasks whose weight rows a one-row cuda decode kernel stages
    across tiles when the caller gives no `tile_stage_bytes`
    (MODEL_STAGE_TASKS / MODEL_STAGE_TASKS_NARROW)."""
    return MODEL_STAGE_TASKS_NARROW if _narrow(config, max_batch) else MODEL_STAGE_TASKS


# LLVM optimization level of the model kernels' NVPTX code generation. The
# megakernel is one large function whose register budget is shared by every
# task; at -O1 ptxas spilled less (Qwen3-0.6B: 120-132 bytes against
# 196-316 at -O2), and on the H200 the steps were 1-5% faster at batch 1
# and 4 for both models (docs/experiments/2026-11-22-codegen-O1.md).
MODEL_OPT_LEVEL = 1


def compile_model(config: ModelConfig, *, target: str = "cpu", max_batch: int = 1, max_context: int = 256,
                  workers: int | None = None, split_len: int | None = None, out_dir: str | Path | None = None,
                  cache_dir: str | Path | None = None, use_cache: bool = True, layered: bool | None = None,
                  tuning_table=None, batch_variants: bool = False, table_batch: int | None = None,
                  fuse_norms: bool | None = None, scratch_rows: int | None = None, prefill_rows: int = 0,
                  prefill_tiles: dict | None = None, tp: int = 1, linear_tile: str = "rows",
                  specialize=False, cache_batch: int | None = None, cache_context: int | None = None,
                  jobs: int | None = None, min_batch: int = 1, qk_heads: int | None = None,
                  gated_mlp: bool = True, qkv_by_matrix: bool | None = None, o_per_head: bool | None = None,
                  norm_in_linear: bool | list | None = None, norm_scratch: str | None = None,
                  expert_combine: bool | None = None, split_k: bool | None = None, **options) -> Path:
    """Returns the artifact directory (`out_dir` when given, else the
    compile cache's). `options` go to `event_tensor.compile` (for example
    `threads_per_worker` (on cuda by default `model_threads`), `profile`,
    `mode`; on cuda `tile_unroll`
    defaults to MODEL_TILE_UNROLL (4 above MODEL_TILE_UNROLL_MAX_BATCH
    rows), `opt_level` to MODEL_OPT_LEVEL and, for max_batch 1,
    `tile_kv_prefetch` to MODEL_KV_PREFETCH, `tile_prefetch` to
    MODEL_WEIGHT_PREFETCH in MODEL_WEIGHT_PREFETCH_TASKS and
    `tile_stage_bytes` to MODEL_STAGE_BYTES in `model_stage_tasks`, for one
    device). `layered` builds one task per
    kind over (layer, tile) instead of one per layer (see
    `build_decode_kernel`); it needs the static schedule, and is the
    default (None) unless `mode="dynamic"`. `fuse_norms`
    (default for `et.linear` tiles) has each linear tile normalize its own
    input instead of an RMSNorm task of a tile per row. `tuning_table` (a
    path, `event_tensor.tuning.TuningTable`, or the name of a GPU with a
    shipped table, such as "NVIDIA H200") picks the rows per tile of
    every linear layer for M = max_batch; shapes it lacks use the heuristic,
    and model.json records where each choice came from.

    The kernel's build choices (`layered`, `tp`, `linear_tile`,
    `gated_mlp`, `qkv_by_matrix`, `o_per_head`, `norm_in_linear`,
    `norm_scratch`, `fuse_norms`, `qk_heads`, `scratch_rows`,
    `expert_combine`, `split_k`) make one
    `model.options.KernelOptions`, checked once and recorded in model.json;
    those left None take the defaults of the target and of each kernel's
    max_batch (`KernelOptions.resolve`).

    Kernel variants: with `specialize` (True for the buckets of
    `shape_buckets`, of which each batch range keeps those of
    `context_buckets`; or a dict of `batches` and `contexts` upper bounds,
    all kept), one kernel is compiled per (batch range, context bucket), each for its
    own largest batch and context, into subdirectories of `out_dir` listed
    in `variants.json` (and model.json's `variants`); they share the
    weights and KV caches (stored for `max_batch` x `max_context`), and
    `DecodeSession` picks the kernel per launch from the batch size and the
    longest context of its rows. With `batch_variants` (and a table), the
    batch ranges are also cut where the table's choices change.
    `table_batch` is the M the table is read at (default `max_batch`).
    `cache_batch` / `cache_context` give the KV caches a larger storage
    shape than this kernel serves (what the variants share). The variants
    compile in `jobs` processes (default: one per core). `min_batch` (the
    smallest batch the kernel is meant for; a variant's range starts there)
    steers the default split length (`kernel_layout`).

    With `prefill_rows` > 0, a prefill kernel (`model.prefill`: the prompt
    tiles, et.matmul and et.attention_prefill) is compiled too, into the
    `prefill/` subdirectory; `DecodeSession.prefill` then feeds each prompt
    through it in launches of up to `prefill_rows` tokens; `prefill_tiles`
    (a dict) overrides the tile choices of `model.prefill.PrefillTiles`.
    Kernel variants share one prefill kernel, compiled for the caches'
    storage shape.

    `tp` = N > 1 compiles a tensor-parallel kernel for N devices
    (`build_decode_kernel(tp=N)`); model.json records `tp`, and
    `DecodeSession` shards the weights and runs the N copies. It needs the
    layered kernel; a prefill kernel runs on the N devices too; no batch
    variants yet.

    `qk_heads` sets the KV heads per `qk` tile (default: chosen by
    `build_decode_kernel`); `gated_mlp=False` computes the MLP's gate and up
    rows apart and their activation after them (`build_decode_kernel`);
    `qkv_by_matrix` gives each `qkv` tile rows of one of q, k and v
    (`build_decode_kernel`; None lets it choose). `o_per_head` splits the
    `o` projection over the query heads, each tile merging its head's
    attention splits itself (no `merge` task; atomic adds into the residual
    stream, so the low bits may vary from run to run: `build_decode_kernel`);
    None (the default) turns it on for the `et.linear` kernels of one
    device on cuda, where it measured faster at every batch (H100, context
    1024: 4-6% at batch 1, 1-3% at batches 2-16; docs/experiments/2026-11-26-o-per-head.md), and off elsewhere (the
    host's results
    keep their bits from run to run). Pass False for a GPU kernel whose
    logits repeat bit for bit. `expert_combine` likewise for a model with
    experts: None (the default) lets each `exp_down` tile add its share
    into the residual stream atomically on cuda (no `combine` task:
    `build_decode_kernel`), and keeps the `combine` task elsewhere; pass
    True for logits that repeat. `split_k` likewise for the tensor-core
    tiles of `o` and `down`: None (the default) splits their K over tiles
    that add into the residual stream atomically on one cuda device
    (`model.kernel.tiles.mma_split`); pass False for logits that repeat.

    `norm_in_linear` folds the fused norms into the `et.linear` ops that
    read them (`et.linear ... norm`; True for all, or a list of "qkv",
    "mlp", "lm_head" and, in a model with experts, "router";
    `build_decode_kernel`): in a one-row kernel a
    tile reads h once into its shared memory (h times the norm weights,
    bf16) with one barrier, its first weights already in flight. None (the
    default) turns it on for cuda kernels of `max_batch` 1 with `et.linear`
    tiles and a hidden size up to 1024 (Qwen3-0.6B: 2.8-3% faster on the
    H200, 1-4% on the H100), off elsewhere (Llama-3.2-1B's kernel, at 512 threads, spills;
    docs/experiments/2026-11-26-norm-in-linear.md), and for the router of
    a model with experts in every one-row cuda kernel (KernelOptions.resolve).
    `norm_scratch` ("global" or "shared") is where the other fused norms'
    tiles keep their normalized rows; None (the default) picks "shared" for
    `max_batch` 1 kernels of `et.linear` tiles (measured 1-3% faster there,
    same values) and "global" otherwise.

    `linear_tile="mma"` computes the decode step's linear layers with
    tensor-core `et.matmul` tiles (BM = 16) instead of `et.linear`
    (`build_decode_kernel`); model.json records it. `linear_tile="auto"`
    compiles both, as kernel variants: `rows` below `mma_from_batch`
    (batch 4 for hidden sizes from 2048, else 8; measured on the H200),
    `mma` from it; it needs `out_dir`."""
    if workers is None:
        workers = default_workers(target)
    # A config built in Python (not read by ModelConfig.from_hf) is checked
    # here, before any IR: its errors name the field, not an op.
    config.validate("compile_model")
    kernel = KernelOptions(layered=layered, tp=tp, linear_tile=linear_tile, gated_mlp=gated_mlp,
                           qkv_by_matrix=qkv_by_matrix, o_per_head=o_per_head, norm_in_linear=norm_in_linear,
                           norm_scratch=norm_scratch, fuse_norms=fuse_norms, qk_heads=qk_heads,
                           scratch_rows=scratch_rows, expert_combine=expert_combine, split_k=split_k)
    if kernel.linear_tile == "auto" and max_batch < mma_from_batch(config) and not specialize:
        kernel = replace(kernel, linear_tile="rows")  # nothing to choose between
    variants = bool(specialize) or batch_variants or kernel.linear_tile == "auto"
    if tp != 1 and batch_variants:
        raise ValueError("tp > 1 is not supported with batch_variants")
    if config.moe and prefill_rows:
        raise ValueError("a model with experts has no prefill kernel yet: prefill_rows must be 0 (prompts go "
                         "through the decode kernel)")
    if kernel.linear_tile == "auto" and (batch_variants or tuning_table is not None):
        raise ValueError("linear_tile='auto' is not supported with batch_variants or a tuning_table")
    if isinstance(prefill_rows, bool) or not isinstance(prefill_rows, int) or prefill_rows < 0:
        raise ValueError(f"prefill_rows must be a non-negative int, got {prefill_rows!r}")
    if variants:
        if cache_batch is not None or cache_context is not None:
            raise ValueError("cache_batch / cache_context are set by the kernel variants themselves")
        return _compile_shape_variants(config, kernel, target=target, max_batch=max_batch, max_context=max_context,
                                       workers=workers, split_len=split_len, out_dir=out_dir, cache_dir=cache_dir,
                                       use_cache=use_cache, tuning_table=tuning_table,
                                       batch_variants=batch_variants, specialize=specialize,
                                       table_batch=table_batch, jobs=jobs, prefill_rows=prefill_rows,
                                       prefill_tiles=prefill_tiles, **options)
    return _compile_kernel(config, kernel, target=target, max_batch=max_batch, max_context=max_context,
                           workers=workers, split_len=split_len, min_batch=min_batch, cache_batch=cache_batch,
                           cache_context=cache_context, out_dir=out_dir, cache_dir=cache_dir, use_cache=use_cache,
                           tuning_table=tuning_table, table_batch=table_batch, prefill_rows=prefill_rows,
                           prefill_tiles=prefill_tiles, **options)


def _cuda_defaults(config: ModelConfig, max_batch: int, tp: int, options: dict) -> None:
    """Fills in the cuda compile `options` the caller left out (the MODEL_*
    defaults above, those of the kernel's own max_batch). The tile
    lowering's plan shrinks the weight staging to what the tile buffers
    leave of the dynamic shared memory."""
    options.setdefault("threads_per_worker", model_threads(config, max_batch))
    options.setdefault("tile_unroll", MODEL_TILE_UNROLL if max_batch <= MODEL_TILE_UNROLL_MAX_BATCH else 4)
    options.setdefault("opt_level", MODEL_OPT_LEVEL)
    if max_batch >= MODEL_KV_MMA_FROM_BATCH and config.head_dim <= MODEL_KV_MMA_MAX_HEAD_DIM:
        options.setdefault("tile_kv_mma_bytes", MODEL_KV_MMA_BATCH_BYTES)
    elif config.group_size >= MODEL_KV_MMA_MIN_GROUP:
        options.setdefault("tile_kv_mma_bytes", MODEL_KV_MMA_BYTES)
    if max_batch != 1:
        return
    wide = wide_one_row(config, max_batch)
    options.setdefault("tile_linear", "rows" if wide else MODEL_TILE_LINEAR)
    options.setdefault("tile_kv_prefetch", MODEL_KV_PREFETCH)
    if "tile_prefetch" not in options and tp == 1 and config.hidden_size >= MODEL_WEIGHT_PREFETCH_BELOW_HIDDEN:
        options["tile_prefetch"] = "none"
    if "tile_prefetch" not in options:
        options["tile_prefetch"] = MODEL_WEIGHT_PREFETCH
        options.setdefault("tile_prefetch_tasks", MODEL_WEIGHT_PREFETCH_TASKS)
    # (Tensor-parallel kernels and wide models keep their weights unstaged
    # unless asked: staging measured slower for both.)
    if "tile_stage_bytes" not in options and tp == 1 and not wide:
        options["tile_stage_bytes"] = MODEL_STAGE_BYTES
        options.setdefault("tile_stage_tasks", model_stage_tasks(config, max_batch))


def _compile_kernel(config: ModelConfig, kernel: KernelOptions, *, target: str, max_batch: int, max_context: int,
                    workers: int, split_len: int | None = None, min_batch: int = 1, cache_batch: int | None = None,
                    cache_context: int | None = None, out_dir=None, cache_dir=None, use_cache: bool = True,
                    tuning_table=None, table_batch: int | None = None, prefill_rows: int = 0,
                    prefill_tiles: dict | None = None, **options) -> Path:
    """One decode kernel (and its prefill kernel, with `prefill_rows`) and
    its model.json, `kernel`'s defaults resolved for `target` and
    `max_batch` (each kernel variant compiles through here). Returns the
    artifact directory."""
    from .. import compile as et_compile
    from ..ir import Context

    kernel = kernel.resolve(config, target=target, max_batch=max_batch, mode=options.get("mode"))
    if kernel.linear_tile == "rows" and max_batch > MAX_LINEAR_ROWS:
        raise ValueError(f"max_batch {max_batch} needs tensor-core tiles (linear_tile 'mma' or 'auto'): the "
                         f"et.linear row tiles serve at most {MAX_LINEAR_ROWS} tokens")
    if target == "cuda":
        _cuda_defaults(config, max_batch, kernel.tp, options)
    layout = kernel_layout(config, max_batch=max_batch, max_context=max_context, workers=workers,
                           split_len=split_len, cache_batch=cache_batch, cache_context=cache_context,
                           min_batch=min_batch)
    if target == "cuda":
        _kv_prefetch_budget(tp_config(config, kernel.tp), layout, options)
    choices = {}
    linear_rows = None
    if tuning_table is not None:
        from ..tuning import choose_linear, load_linear_table

        table = load_linear_table(tuning_table)

        at_batch = table_batch or max_batch

        def linear_rows(n, k):
            cfg, source = choose_linear(n, k, at_batch, table=table, workers=workers)
            choices[f"{n}x{k}"] = {"rows": cfg.rows, "source": source}
            return cfg.rows
    start = time.perf_counter()
    with Context():
        module = build_decode_kernel(config, layout, kernel, linear_rows=linear_rows,
                                     warps=options["threads_per_worker"] // 32 if target == "cuda" else None)
        text = module.operation.get_asm(print_generic_op_form=True)
    build_s = time.perf_counter() - start
    # The tile lowering's plan stages what the tile buffers (a long split's
    # KV rows, say) leave of the dynamic shared memory, or nothing.
    art = et_compile(text, target=target, workers=workers, cache_dir=cache_dir, use_cache=use_cache, **options)
    total_s = time.perf_counter() - start
    info = {"config": config.to_dict(), "layout": layout.to_dict(), "target": target, **kernel.to_dict(),
            "linear_tiles": choices or None, "build_ir_s": round(build_s, 3), "compile_s": round(total_s, 3)}
    src = Path(art.path)
    if prefill_rows:
        info["prefill"] = _compile_prefill(config, layout, src / PREFILL_DIR, target=target, workers=workers,
                                           rows=prefill_rows, cache_dir=cache_dir, use_cache=use_cache,
                                           options=options, tiles=prefill_tiles or {}, tp=kernel.tp)
    (src / MODEL_JSON).write_text(json.dumps(info, indent=2))
    if out_dir is None:
        return src
    dest = art.copy_to(out_dir)
    if prefill_rows:
        import shutil

        shutil.rmtree(dest / PREFILL_DIR, ignore_errors=True)
        shutil.copytree(src / PREFILL_DIR, dest / PREFILL_DIR)
    return dest


def _compile_prefill(config: ModelConfig, layout, dest: Path, *, target: str, workers: int, rows: int, cache_dir,
                     use_cache: bool, options: dict, tiles: dict, tp: int = 1) -> dict:
    """The prefill kernel beside the decode kernel: same weights and caches,
    its own row buffers (`rows` tokens per launch), on the decode kernel's
    `tp` devices (its tiles chosen for one device's shapes)."""
    import shutil

    from .. import compile as et_compile
    from ..ir import Context
    from .prefill import PrefillTiles, build_prefill_kernel

    if tp > 1:
        # (o and down are all-reduced per layer, on every row.)
        tiles = {"split_k": 1, "last_layer": "full", **tiles}
    tiles = PrefillTiles(tp_config(config, tp), max_rows=rows, target=target, workers=workers, **tiles)
    start = time.perf_counter()
    with Context():
        text = build_prefill_kernel(config, layout, tiles, tp=tp).operation.get_asm(print_generic_op_form=True)
    keep = {k: v for k, v in options.items() if k in ("profile", "format", "opt_level")}
    if target == "cuda":
        keep["threads_per_worker"] = tiles.threads
        keep["tile_rows_in_flight"] = tiles.rows_in_flight
        keep["tile_unroll"] = tiles.lm_unroll
    art = et_compile(text, target=target, workers=workers, cache_dir=cache_dir, use_cache=use_cache, **keep)
    if dest.exists():
        shutil.rmtree(dest)
    art.copy_to(dest)
    return {"dir": PREFILL_DIR, "rows": rows, "tiles": tiles.to_dict(), "profile": bool(keep.get("profile")),
            "compile_s": round(time.perf_counter() - start, 3)}


def _kv_prefetch_budget(config: ModelConfig, layout, options: dict) -> None:
    """With tile_kv_prefetch="shared", the dynamic shared memory is sized
    for one split's K and V rows (the lowering stages a split only when all
    of it fits): more would only take L1 cache from the linear tiles (the
    batch-4 Llama step was 2.5% slower with 128 KB than without staging).
    Splits above the lowering's maximum are not staged. With the weight
    prefetch (tile_prefetch="shared") too, the buffer is the larger of the
    two (the tasks use it one at a time): the weight prefetch's default,
    or the split's."""
    from ..build import MAX_PREFETCH_BYTES, MIN_PREFETCH_BYTES, PREFETCH_BYTES

    if options.get("tile_kv_prefetch") != "shared":
        return
    need = 4 * config.head_dim * layout.split_len
    if need > MAX_PREFETCH_BYTES:
        options["tile_kv_prefetch"] = "none"
        return
    if "tile_prefetch_bytes" in options:
        return
    need = max(MIN_PREFETCH_BYTES, -(-need // 1024) * 1024)
    if options.get("tile_prefetch", "none") == "shared":
        need = max(need, PREFETCH_BYTES)
    options["tile_prefetch_bytes"] = need


#: The smallest batch that linear_tile="auto" runs on tensor-core tiles,
#: for hidden sizes from MMA_WIDE_HIDDEN; below it, MMA_FROM_BATCH_NARROW.
#: Measured on the H200 (docs/experiments/2026-11-24-one-artifact-per-shape.md): tensor-core tiles were faster from
#: batch 4 on Llama-3.2-1B and
#: Llama-3.1-8B (hidden 2048, 4096), but slower up to batch 6 on Qwen3-0.6B
#: (hidden 1024: a tile's K is too short to amortize its ring fill).
MMA_FROM_BATCH = 4
MMA_FROM_BATCH_NARROW = 8
MMA_WIDE_HIDDEN = 2048


def mma_from_batch(config: ModelConfig) -> int:
    """The smallest batch that linear_tile="auto" runs on tensor cores."""
    return MMA_FROM_BATCH if config.hidden_size >= MMA_WIDE_HIDDEN else MMA_FROM_BATCH_NARROW

#: `specialize=True`: the largest batch and context of each kernel. Batch
#: buckets are these (below max_batch) and max_batch; context buckets are
#: CONTEXT_BUCKET_FIRST x CONTEXT_BUCKET_FACTOR^k (below max_context) and
#: max_context. (With buckets of 1024 x 4^k, a context a quarter to a half
#: of its bucket measured up to 1.14x, and context 128 in the 1024 bucket
#: up to 1.20x, the time of a kernel for that context: docs/experiments/.)
#: 16 and 32 give the tensor-core kernels of more than 16 rows a row block
#: each (16, 32, 64 rows); the one-row bucket has the one-row kernel's own
#: defaults (staging, threads): 19-32% faster at batch 1 than a kernel of 3
#: or 7 rows (H100, docs/experiments/2026-12-07-served-batch-buckets.md).
BATCH_BUCKETS = (1, 2, 4, 8, 16, 32)
CONTEXT_BUCKET_FIRST = 256
CONTEXT_BUCKET_FACTOR = 2


def shape_buckets(max_batch: int, max_context: int, specialize) -> tuple[list[int], list[int]]:
    """The batch and context buckets (ascending upper bounds, the last
    max_batch / max_context) of `specialize`: False (one bucket each),
    True (the defaults above) or a dict with `batches` and / or `contexts`
    lists."""
    if specialize is False or specialize is None:
        return [max_batch], [max_context]
    if specialize is True:
        batches = [b for b in BATCH_BUCKETS if b < max_batch]
        contexts = []
        c = CONTEXT_BUCKET_FIRST
        while c < max_context:
            contexts.append(c)
            c *= CONTEXT_BUCKET_FACTOR
        return batches + [max_batch], contexts + [max_context]
    if not isinstance(specialize, dict) or not set(specialize) <= {"batches", "contexts"}:
        raise ValueError(f"specialize must be a bool or a dict with 'batches' and/or 'contexts', got {specialize!r}")
    out = []
    for key, top in (("batches", max_batch), ("contexts", max_context)):
        values = specialize.get(key, [top])
        if not isinstance(values, (list, tuple)) or not values or \
                any(isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= top for v in values) or \
                list(values) != sorted(set(values)):
            raise ValueError(f"specialize[{key!r}] must be ascending ints in [1, {top}], got {values!r}")
        out.append(list(values) + ([top] if values[-1] != top else []))
    return out[0], out[1]


def context_buckets(config: ModelConfig, lo: int, hi: int, contexts: list[int], *, workers: int,
                    split_len: int | None = None) -> list[int]:
    """The context buckets (ascending, the last kept) that the batch range
    lo..hi needs a kernel of its own for, under `specialize=True`. A bucket
    is left to the next larger kept one when that kernel runs its contexts
    on the same live attention tiles, its extra tiles only waiting and
    signalling: when it chooses its split length per launch
    (`KernelLayout.runtime_splits`: the default split's rule with the
    launch's batch and each row's length, about the live tiles of the
    bucket's own kernel), when its split length is the bucket's, or when
    both have one split per row. Measured on the H200 (docs/experiments/2026-11-25-one-artifact-8-kernels.md)."""
    kept = [contexts[-1]]
    above = kernel_layout(config, max_batch=hi, min_batch=lo, max_context=contexts[-1], workers=workers,
                          split_len=split_len)
    for c in reversed(contexts[:-1]):
        own = kernel_layout(config, max_batch=hi, min_batch=lo, max_context=c, workers=workers, split_len=split_len)
        if above.runtime_splits or own.split_len == above.split_len or own.splits == above.splits == 1:
            continue
        kept.append(c)
        above = own
    return kept[::-1]


def _compile_one(config: ModelConfig, kwargs: dict) -> None:
    """One kernel variant: `_compile_kernel` of the keywords a job of
    `_compile_shape_variants` holds (its `kernel` options among them)."""
    _compile_kernel(config, **kwargs)


# A compile process: reads (config, kwargs) jobs from stdin (a pickle
# stream) and writes each job's outcome (None or the exception) to the
# result pipe whose descriptor is argv[1]; it ends at end of input.
_CHILD = """
import os, pickle, sys
from event_tensor.model.compile import _compile_one
results = os.fdopen(int(sys.argv[1]), "wb")
while True:
    try:
        config, kwargs = pickle.load(sys.stdin.buffer)
    except EOFError:
        break
    try:
        _compile_one(config, kwargs)
        outcome = None
    except Exception as err:
        outcome = err
    pickle.dump(outcome, results)
    results.flush()
"""


class _CompileProcess:
    """A Python process of its own that compiles kernels one after another
    (started fresh: no fork of the caller's state, no re-import of its main
    module; the compiler's imports are paid once per process, not once per
    kernel). `run` returns when the kernel is written and raises its
    exception here."""

    def __init__(self):
        import subprocess
        import sys
        import tempfile

        import event_tensor

        env = dict(os.environ)
        package_root = str(Path(event_tensor.__file__).absolute().parent.parent)  # not resolved: a linked tree
        env["PYTHONPATH"] = os.pathsep.join([package_root] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        read, write = os.pipe()
        self._log = tempfile.TemporaryFile()
        self._proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(write)], stdin=subprocess.PIPE,
                                      stdout=self._log, stderr=subprocess.STDOUT, env=env, pass_fds=(write,))
        os.close(write)
        self._results = os.fdopen(read, "rb")

    def run(self, config: ModelConfig, kwargs: dict) -> None:
        import pickle

        try:
            pickle.dump((config, kwargs), self._proc.stdin)
            self._proc.stdin.flush()
            outcome = pickle.load(self._results)
        except (BrokenPipeError, EOFError):
            code = self._proc.wait()
            self._log.seek(0)
            tail = self._log.read().decode(errors="replace").strip().splitlines()[-20:]
            raise RuntimeError(f"compiling the kernel variant {kwargs.get('out_dir')} failed (exit {code}):\n"
                               + "\n".join(tail)) from None
        if outcome is not None:
            raise outcome

    def close(self) -> None:
        try:
            self._proc.stdin.close()
        except OSError:
            pass
        self._proc.wait()
        self._results.close()
        self._log.close()


def _compile_in_processes(config: ModelConfig, jobs_args: list[dict], jobs: int) -> None:
    """Compiles the kernels of `jobs_args` in `jobs` processes, the largest
    first (so that no process is left with a long one at the end). The
    first failure is raised once all processes have stopped."""
    import threading

    order = sorted(jobs_args, key=lambda a: -(a["max_batch"] * a["max_context"]))
    lock = threading.Lock()
    errors = []

    def work():
        try:
            proc = _CompileProcess()
        except BaseException as err:  # noqa: BLE001 -- raised in the caller
            with lock:
                errors.append(err)
            return
        try:
            while True:
                with lock:
                    if errors or not order:
                        return
                    job = order.pop(0)
                try:
                    proc.run(config, job)
                except BaseException as err:  # noqa: BLE001 -- raised in the caller
                    with lock:
                        errors.append(err)
                    return
        finally:
            proc.close()

    threads = [threading.Thread(target=work) for _ in range(jobs)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]


def _compile_shape_variants(config: ModelConfig, kernel: KernelOptions, *, max_batch: int, max_context: int,
                            out_dir, workers: int, specialize, batch_variants: bool, tuning_table, jobs: int | None,
                            prefill_rows: int = 0, prefill_tiles: dict | None = None, **kwargs) -> Path:
    """One kernel per (range of batch sizes, context bucket), each compiled
    for its own largest batch and context (tiles, splits, scratch) with the
    KV caches' storage shape of (max_batch, max_context), so that all share
    the weights and caches. The batch ranges are cut at the buckets of
    `specialize`, below `mma_from_batch(config)` for linear_tile="auto"
    (`rows` kernels below it, `mma` from it), and where the tuning table's choices
    change (`batch_variants`). The kernels compile in `jobs` processes
    (default: one per core). With `prefill_rows`, one prefill kernel for
    the caches' storage layout serves every variant."""
    if out_dir is None:
        raise ValueError("kernel variants (specialize, linear_tile='auto', batch_variants) need an out_dir")
    batches, contexts = shape_buckets(max_batch, max_context, specialize)
    cuts = set(batches)
    mma_from = mma_from_batch(config)
    if kernel.linear_tile == "auto" and max_batch >= mma_from:
        cuts.add(mma_from - 1)
    # Loaded once here (a path or a GPU name would otherwise be read again
    # by every variant's compile).
    table = None
    if tuning_table is not None:
        from ..tuning import choose_linear, load_linear_table

        table = load_linear_table(tuning_table)
    if batch_variants:
        if table is None:
            raise ValueError("batch_variants needs a tuning_table")
        shapes = config.linear_shapes()

        picks = [tuple(choose_linear(n, k, m, table=table, workers=workers)[0].rows for n, k in shapes)
                 for m in range(1, max_batch + 1)]
        cuts.update(m for m in range(1, max_batch) if picks[m - 1] != picks[m])
    ranges, lo = [], 1
    for hi in sorted(c for c in cuts if c <= max_batch):
        ranges.append((lo, hi))
        lo = hi + 1
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    variants, jobs_args = [], []
    for lo, hi in ranges:
        tile = kernel.linear_tile if kernel.linear_tile != "auto" else ("rows" if hi < mma_from else "mma")
        buckets = contexts
        if specialize is True:
            buckets = context_buckets(config, lo, hi, contexts, workers=workers,
                                      split_len=kwargs.get("split_len"))
        for context in buckets:
            name = f"batch{lo}-{hi}-context{context}-{tile}"
            # (split_k is a choice of the tensor-core tiles: a row-tile variant of "auto" has none.)
            variant_kernel = replace(kernel, linear_tile=tile, split_k=kernel.split_k if tile == "mma" else None)
            jobs_args.append(dict(kernel=variant_kernel, max_batch=hi, min_batch=lo,
                                  max_context=context, cache_batch=max_batch, cache_context=max_context,
                                  out_dir=out / name, workers=workers, tuning_table=table, **kwargs))
            variants.append({"min_batch": lo, "max_batch": hi, "max_context": context, "dir": name,
                             "linear_tile": tile})
    start = time.perf_counter()
    jobs = min(jobs or os.cpu_count() or 1, len(jobs_args))
    if jobs > 1:
        # MLIR and ptxas are single-threaded per kernel: the kernels compile
        # in `jobs` processes side by side.
        _compile_in_processes(config, jobs_args, jobs)
    else:
        for a in jobs_args:
            _compile_one(config, a)
    info = json.loads((out / variants[0]["dir"] / MODEL_JSON).read_text())
    # The storage layout: what the session allocates and checks against.
    storage = kernel_layout(config, max_batch=max_batch, max_context=max_context, workers=workers,
                            split_len=kwargs.get("split_len"))
    info["layout"] = storage.to_dict()
    if prefill_rows:
        info["prefill"] = _compile_prefill(config, storage, out / PREFILL_DIR, target=kwargs["target"],
                                           workers=workers, rows=prefill_rows, cache_dir=kwargs.get("cache_dir"),
                                           use_cache=kwargs.get("use_cache", True), options=kwargs,
                                           tiles=prefill_tiles or {})
    info.update(linear_tile=kernel.linear_tile, linear_tiles=None, variants=variants, compile_jobs=jobs,
                compile_s=round(time.perf_counter() - start, 3))
    (out / MODEL_JSON).write_text(json.dumps(info, indent=2))
    (out / VARIANTS_JSON).write_text(json.dumps({"variants": variants}, indent=2))
    return out
