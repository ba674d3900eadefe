"""Builds one decode step of a Llama-3 / Qwen3 model as one `et.kernel`,
with the generated `et` op bindings.

Batch size (1..max_batch) and context length (<= max_context) are runtime
values: the batch is an `index` argument (task extents and the dynamic
dimension of every activation buffer). Each row of the batch is one token
with its position and its KV-cache slot (buffers): rows of different slots
are different sequences; rows of one slot at consecutive positions are a
chunk of one prompt (prefill), attending causally, since every row's keys
and values are appended before any row's attention. Weights are stacked per kind ([layers, ...]) and selected with
`memref.subview` inside task bodies; KV caches are [layers, cache_batch,
cache_context, kv_heads, head_dim] bf16 (by default max_batch and
max_context; kernels specialized for smaller shapes keep the storage shape
of the largest, so that they share the caches).

Every producer task signals one event tensor of rank 0 once per tile, and
each consumer waits on the events of what it reads; buffers reused across
layers are ordered by the chain of those waits. `et.cost` attributes give
the scheduler each tile's weight bytes and flops.

`build_decode_kernel` checks its options and calls the phases of
`model.kernel` in order (shared state in `kernel.context.DecodeContext`);
the layout (`KernelLayout`, `kernel_layout`) is in `model.layout`.
"""

from __future__ import annotations

from ..ir import InsertionPoint, Location, Module
from .config import ModelConfig
from .kernel.attention import Attention
from .kernel.context import DecodeContext
from .kernel.embedding import embedding_task
from .kernel.head import head_tasks
from .kernel.layers import Layers
from .kernel.mlp import Mlp
from .kernel.moe import Experts
from .kernel.steps import steps_task
from .layout import KernelLayout, kernel_layout
from .options import KernelOptions

__all__ = ["KernelLayout", "PLAIN_KERNEL", "build_decode_kernel", "kernel_layout"]


#: The choices of `build_decode_kernel` called with keywords that its
#: callers leave out: a plain kernel (one task per layer, the `merge` and
#: `combine` tasks, every linear tile normalizing into the global scratch, whole K in every tensor-core tile);
#: `KernelOptions.resolve` gives those of a target instead.
PLAIN_KERNEL = dict(layered=False, o_per_head=False, norm_in_linear=False, norm_scratch="global", fuse_norms=True,
                    expert_combine=True, split_k=False)


def build_decode_kernel(config: ModelConfig, layout: KernelLayout, options: KernelOptions | None = None, *,
                        name: str = "decode", linear_rows=None, warps: int | None = None, **choices) -> Module:
    """The decode-step kernel of `config`. Must run inside an MLIR Context.

    `options` are the kernel's build choices (`KernelOptions`, every
    default that `KernelOptions.resolve` picks made); or pass its fields as
    keywords (`choices`), those left out taking PLAIN_KERNEL's or
    `KernelOptions`' defaults. `warps` (per worker, default unknown)
    bounds the default `qk_heads`.

    By default every layer gets its own tasks. With `layered`, each kind of
    task is one `et.task` whose first tile coordinate is the layer, with
    event tensors indexed by layer (`q` tile (l, t) waits on `norm1[l]`,
    `norm1` of layer l on `down[l - 1]`): one body per kind instead of one
    per layer. Tasks over the batch then span `max_batch` tiles, and those
    past the runtime batch only take part in the signalling, so every
    count stays static.

    `linear_rows(n, k)` gives the rows per tile of each N x K linear layer
    (for example from a tuning table); by default about one tile per
    worker.

    With `fuse_norms` (the default of `et.linear` tiles), every tile of a
    linear layer that reads a normalized residual stream (qkv, gate/up,
    LM head) normalizes it itself into its own rows of a scratch buffer
    `xs` [tiles, max_batch, hidden], instead of waiting for an RMSNorm task
    (a tile per row, into `xn`): two fewer dependent phases per layer. A tile's scratch rows are free again by the
    time the next task uses them, since each such task waits on all tiles
    of the one before. (Merging every head's attention splits inside each
    `o` tile the same way measured no faster at batch 1 and slower at batch
    4; `o_per_head` below merges only the tile's own head.) `scratch_rows` sizes `xs`
    (at least what this kernel's tiles need; kernels that share buffers
    pass their maximum).

    `tp` = N > 1 splits the model over N devices (tensor parallelism; a
    kernel with `devices = N`, layered; norms not fused run after the
    all-reduce). Each device
    holds its share of the heads, of the MLP's columns and of the LM head's
    vocabulary (`tp_config`; the weights are sharded by
    `weights.tp_shards`), and its share of the KV cache. The row-parallel
    `o` and `down` write partial sums into the symmetric buffers `part_o`
    and `part_d`; an `et.allreduce` per kind (lowered by
    et-lower-collectives into signals to every device and a task per layer
    and column block) adds all devices' partials, in device order, into
    the residual stream, which so stays identical on every device; its
    events are `sum_o` and `sum_d`. The
    greedy token: each device's argmax over its vocabulary share, gathered
    from every device (`gather`) and reduced on each.

    The kernel runs up to `steps` decode steps per launch (`et.repeat`,
    `kernel.steps`; on several devices every copy runs them, in step):
    after the greedy token, `advance` (at the end of the `argmax` tile;
    on several devices a task of its own) records each row's token in `out_tokens[slot, position]`, checks
    the row's stop ids, budget (`remaining`) and the compiled context
    (`finished` says why a row stopped), and feeds the token back as the
    row's next input; the launch ends when every row has finished. A
    launch with `steps = 1` is one step.

    `linear_tile="mma"` computes the linear layers with `et.matmul` tiles
    of 16 x BN rows of w (`mma.sync` tensor-core tiles, the batch padded to
    16 rows) instead of `et.linear`: a tile reads its weights once for all
    rows of the batch; its norms are tasks of their own by default. q, k
    and v get tiles of their own in the `qkv` task; BN per task from
    `kernel.tiles.mma_tiling` (one BN for q, k and v, chosen together).

    With `gated_mlp` (the default), an `mlp` tile of `et.linear` rows
    computes its activation in one `et.linear ... gated(%wu)` (each warp's
    gate row, up row and act element in turn); without, two `et.linear`
    into the scratch `g` and `u`, then `et.silu_mul` (a round trip through
    memory and a barrier). The same bits either way.

    With `qkv_by_matrix`, the `qkv` tiles of `et.linear` rows take rows
    of one of q, k and v each, as the tensor-core tiles do (the rows per
    tile, from `linear_rows` of the three together, must divide each): one
    `et.linear` per tile, whose weights, output and first row the tile
    picks with `arith.select`, instead of three. Otherwise the k and v rows
    ride in the q tiles. None (the default) chooses it for `max_batch` 1
    kernels where the rows divide and the tiles are no more than the q
    tiles alone (Qwen3-0.6B; not Llama-3.2-1B, whose 3072 rows give 24 per
    tile): measured faster there with `tile_linear="spread"`
    (docs/experiments/2026-11-26-spread-linear-tile.md).

    `qk_heads` KV heads go to one `qk` tile (by default the fewest that
    leave every `qk` tile a worker without a `qkv` tile, with at most a
    worker's `warps` heads (QK_TILE_WARPS when not given), a warp per head;
    else 1).

    `o_per_head` drops the `merge` task: the `o` projection is split over
    its K (the query heads), an `o` tile per (query head, block of rows of
    h). Waiting on `attn`, a tile merges its head's splits (every row of
    the batch in one `et.attention_merge`, over the splits of the longest
    row: an attention tile whose split is past its row's length marks its
    lse -inf instead of skipping all work) into its shared memory and adds
    that head's part of
    `attn wo^T` into its rows of h with `et.linear ... accumulate atomic`
    (relaxed f32 atomic adds, so the low bits of h, and through it the
    logits, may differ from run to run); its weights (K = head_dim: short
    rows) are loaded before its wait where the weight prefetch applies.
    One dependent phase (and its wait) fewer per layer. Not with tensor
    parallelism or `linear_tile="mma"`.

    `expert_combine=False` (a model with experts) drops the `combine`
    task: each `exp_down` tile adds its block of an expert's output, times
    the router's weight of that choice, into h (`et.linear ... accumulate
    atomic scale`), so the next layer waits on `exp_down`; like
    `o_per_head`, the low bits of h may then differ from run to run.

    `split_k=True` (`linear_tile="mma"`) splits the K of the `o` and
    `down` tiles into parts that add into h atomically
    (`kernel.tiles.mma_split`); the low bits of h may then differ from run
    to run too.

    `norm_in_linear` (with `fuse_norms`, `et.linear` tiles only; True for
    the qkv, mlp and LM-head tiles and a model's router, or a list of "qkv",
    "mlp", "lm_head", "router")
    folds those tiles' norms into their linear ops (`et.linear ... norm`):
    a tile reads the f32 residual stream h itself, rounds h times the norm
    weights to bf16 and scales its finished sums by each row's inverse RMS,
    with no `et.rmsnorm` pass and no scratch. One-row kernels pass h's row
    as a static view, so the GPU lowering stages it once per tile with one
    barrier (docs/lowering.md).

    `norm_scratch="shared"` (`et.linear` tiles with fused norms) puts a
    tile's normalized rows in its own shared memory ([max_batch, H] bf16)
    instead of its rows of the global scratch `xs`: the tile's linear op
    reads them from there, not from L2 (same values)."""
    if options is None:
        options = KernelOptions(**{**PLAIN_KERNEL, **choices})
    elif choices:
        raise TypeError("build_decode_kernel takes options or keyword choices, not both")
    if not options.resolved:
        raise ValueError(f"build_decode_kernel needs options whose defaults are resolved (KernelOptions.resolve), "
                         f"got {options}")
    options.check(config.num_kv_heads)
    if warps is not None and (isinstance(warps, bool) or not isinstance(warps, int) or warps < 1):
        raise ValueError(f"warps must be a positive int, got {warps!r}")
    ctx = DecodeContext(config, layout, options, name=name, linear_rows=linear_rows, warps=warps)
    with InsertionPoint(ctx.kernel.entry_block), Location.unknown():
        # The blocks first (the values computed once, at the kernel's top),
        # then the tasks in the order they run.
        attention = Attention(ctx)
        mlp = Experts(ctx) if config.moe else Mlp(ctx)
        layers = Layers(ctx, attention, mlp)
        embedding_task(ctx)
        done = layers.emit()
        head_tasks(ctx, done)
        steps_task(ctx)
    return ctx.module
