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
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

from ..collectives import gather_candidates
from ..dialects import affine, arith, et, memref, scf
from ..ir import (
    AffineExpr,
    AffineMap,
    Attribute,
    BF16Type,
    DenseF32ArrayAttr,
    DenseI64ArrayAttr,
    F32Type,
    FloatAttr,
    IndexType,
    InsertionPoint,
    IntegerType,
    Location,
    MemRefType,
    Module,
    ShapedType,
    StridedLayoutAttr,
)
from .config import ModelConfig, tp_config
from .options import NORM_TASKS, KernelOptions

__all__ = ["KernelLayout", "PLAIN_KERNEL", "build_decode_kernel", "kernel_layout"]

DYN = ShapedType.get_dynamic_size()
#: The most warps' worth of heads (a warp per query or key head) that the
#: default `qk_heads` puts in one `qk` tile when the kernel's warps per
#: worker are not given (`build_decode_kernel(warps=)`): the 16 warps of
#: 512 threads.
QK_TILE_WARPS = 16
#: The shortest attention split the defaults choose, at compile time and at
#: run time: a tile has a fixed cost of a few us, so shorter splits cost
#: more than they spread.
MIN_SPLIT_LEN = 256
#: The same for kernels of one row (max_batch 1): there a row's attention
#: tiles are the only ones, and with the merge per KV head, 128 positions
#: (8 tiles per KV head at 1k context) measured 1-3% faster than 256 on
#: the H200 (docs/benchmarks.md, "The attention chain, shortened").
MIN_SPLIT_LEN_ONE_ROW = 128


@dataclass(frozen=True)
class KernelLayout:
    """Compile-time shape choices of a decode kernel; the runtime needs them
    to allocate buffers (stored in the artifact's model.json)."""

    max_batch: int
    max_context: int
    split_len: int
    argmax_chunks: int
    workers: int
    #: The KV caches' slots and positions (storage), at least max_batch and
    #: max_context; 0 means equal to them.
    cache_batch: int = 0
    cache_context: int = 0

    @property
    def splits(self) -> int:
        return -(-self.max_context // self.split_len)

    @property
    def runtime_splits(self) -> bool:
        """Whether the attention split length is chosen per launch (see
        the decode builder's `split_of`): for kernels of several rows whose
        rows have several splits longer than MIN_SPLIT_LEN, where the
        launch's choice can add tiles. With splits of MIN_SPLIT_LEN it can
        only rebalance splits already as short as is worth it (measured
        1-2% slower on the H200), with one split per row there is nothing
        to choose, and a one-row kernel's static split already makes about
        one wave at its full context (its staged KV path measured 1-5%
        slower with a computed split length). docs/benchmarks.md, "Split
        lengths chosen per launch"."""
        return self.max_batch > 1 and self.splits > 1 and self.split_len > MIN_SPLIT_LEN

    @property
    def cache_slots(self) -> int:
        return self.cache_batch or self.max_batch

    @property
    def cache_len(self) -> int:
        return self.cache_context or self.max_context

    def to_dict(self) -> dict:
        return dict(max_batch=self.max_batch, max_context=self.max_context, split_len=self.split_len,
                    argmax_chunks=self.argmax_chunks, workers=self.workers, cache_batch=self.cache_slots,
                    cache_context=self.cache_len)


def kernel_layout(config: ModelConfig, *, max_batch: int, max_context: int, workers: int,
                  split_len: int | None = None, cache_batch: int | None = None,
                  cache_context: int | None = None, min_batch: int = 1) -> KernelLayout:
    """The layout of a kernel for up to `max_batch` rows and `max_context`
    positions. `cache_batch` / `cache_context` (default: the same) give the
    KV caches a larger storage shape, shared with other kernels.
    `min_batch` is the smallest batch the kernel is meant for (a kernel
    variant's range starts there); it only steers the default split
    length."""
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or not 1 <= max_batch <= 16:
        raise ValueError(f"max_batch must be an int in [1, 16] (et.linear serves at most 16 tokens), got {max_batch!r}")
    if isinstance(max_context, bool) or not isinstance(max_context, int) or max_context < 1:
        raise ValueError(f"max_context must be a positive int, got {max_context!r}")
    if max_context > config.max_position_embeddings:
        raise ValueError(f"max_context {max_context} exceeds the model's max_position_embeddings "
                         f"{config.max_position_embeddings}")
    if isinstance(min_batch, bool) or not isinstance(min_batch, int) or not 1 <= min_batch <= max_batch:
        raise ValueError(f"min_batch must be an int in [1, max_batch {max_batch}], got {min_batch!r}")
    if split_len is None:
        # About one wave of attention tiles (rows x KV heads x splits, one
        # tile per worker) at full context, for the geometric middle of the
        # batches the kernel serves; a power of two, and at least 256
        # positions (128 for one-row kernels): a tile has a fixed cost of a
        # few us, so short splits cost more than they spread. Measured on
        # the H200 (docs/benchmarks.md, "The split length follows the
        # batch"): the best split at every (batch, context) of Llama-3.2-1B
        # and Qwen3-0.6B tried, but one within 1.3%; at batch 1 and 1k
        # context 256 then, 128 since the merge per KV head.
        rows = math.sqrt(min_batch * max_batch)
        least = MIN_SPLIT_LEN_ONE_ROW if max_batch == 1 else MIN_SPLIT_LEN
        split_len = max(least, math.ceil(max_context * config.num_kv_heads * rows / workers))
        split_len = 1 << (split_len - 1).bit_length()
        split_len = min(split_len, max(16, -(-max_context // 16) * 16))
    if split_len < 1:
        raise ValueError(f"split_len must be positive, got {split_len}")
    chunks = max(1, min(workers, -(-config.vocab_size // 1024)))
    for name, value, least in (("cache_batch", cache_batch, max_batch), ("cache_context", cache_context, max_context)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise ValueError(f"{name} must be an int of at least {least}, got {value!r}")
    return KernelLayout(max_batch, max_context, split_len, chunks, workers, cache_batch or 0, cache_context or 0)


def _sum_block(hidden: int) -> int:
    """Columns per tile of the tensor-parallel sums: the largest of 512,
    256, ..., 4 (4 f32 columns per vector) that divides `hidden`."""
    for block in (512, 256, 128, 64, 32, 16, 8, 4):
        if hidden % block == 0:
            return block
    raise ValueError(f"hidden_size {hidden} is not a multiple of 4")


#: The et.matmul tiles of `linear_tile="mma"`: ring stages, and a tile's
#: fixed cost (ring fill, epilogue, barriers) in rows of w, measured: tiles
#: of 16 rows ran far slower in the decode step than tiles of 64.
MMA_STAGES = 4
MMA_TILE_COST_ROWS = 32


def mma_block(n: int, workers: int) -> int:
    """Rows of w per et.matmul tile (BN) of an N-row linear layer at decode
    (`linear_tile="mma"`): of 64, 32 and 16, the one with the least work
    per worker, ceil(tiles / workers) x (BN + MMA_TILE_COST_ROWS), the
    largest on a tie."""
    best = None
    for bn in (64, 32, 16):
        cost = -(-(-(-n // bn)) // workers) * (bn + MMA_TILE_COST_ROWS)
        if best is None or cost < best[0]:
            best = (cost, bn)
    return best[1]


def mma_scratch_tiles(config: ModelConfig, lm_rows: int, workers: int) -> int:
    """Rows of the norm scratch `xs` with `linear_tile="mma"` (`config`: one
    device's shares): the most tiles of qkv (q, k and v tiles), gate/up and
    the LM head (`lm_rows` rows)."""
    c = config

    def tiles(n):
        return -(-n // mma_block(n, workers))
    return max(tiles(c.num_heads * c.head_dim) + 2 * tiles(c.num_kv_heads * c.head_dim),
               tiles(c.intermediate_size), tiles(lm_rows))


def norm_scratch_rows(config: ModelConfig, workers: int, *, tp: int = 1, linear_tile: str = "rows",
                      rows_for=None) -> int:
    """Rows of the norm scratch `xs` of `build_decode_kernel` with fused
    norms, given the rows per tile `rows_for(n, k)` of et.linear (default:
    about one tile per worker); kernels that share buffers (batch variants)
    size it once with it."""
    c = tp_config(config, tp)
    lm_rows = c.vocab_size // tp
    if linear_tile == "mma":
        return mma_scratch_tiles(c, lm_rows, workers)
    rows_for = rows_for or (lambda n, k: min(_rows_per_tile(n, workers), n))
    return scratch_tiles(replace(c, vocab_size=lm_rows), rows_for)


def mma_k_block(k: int) -> int:
    """BK of the decode et.matmul tiles: 128 where it divides K (the faster
    tile in benchmarks/linear_batches.py), else 64."""
    return 128 if k % 128 == 0 else 64


def _rows_per_tile(n: int, workers: int) -> int:
    """Rows of a linear-layer tile: about one tile per worker."""
    return max(1, -(-n // workers))


def scratch_tiles(config: ModelConfig, rows_for) -> int:
    """Rows of the norm scratch `xs` (fuse_norms): the most tiles of the
    tasks that normalize into it (qkv, gate/up, LM head), given the rows per
    tile `rows_for(n, k)`."""
    c = config
    shapes = [(c.num_heads * c.head_dim, c.hidden_size), (c.intermediate_size, c.hidden_size),
              (c.vocab_size, c.hidden_size)]
    return max(-(-n // min(rows_for(n, k), n)) for n, k in shapes)


def mr(shape, elt):
    """A memref type of `shape` (DYN for dynamic sizes) with the identity layout."""
    return MemRefType.get(list(shape), elt, loc=Location.unknown())


def strided(shape, elt, strides, offset=DYN):
    """A memref type with the given strides and offset (dynamic by default)."""
    return MemRefType.get(list(shape), elt, StridedLayoutAttr.get(offset, list(strides)), loc=Location.unknown())


def shared(shape, elt, strides=None, offset=0):
    """A memref type in workgroup memory (a tile's shared memory on the GPU,
    per-tile memory on the host): the identity layout, or the given
    strides and offset."""
    layout = StridedLayoutAttr.get(offset, list(strides)) if strides is not None else None
    return MemRefType.get(list(shape), elt, layout, Attribute.parse("#gpu.address_space<workgroup>"),
                          loc=Location.unknown())


def new_kernel(name: str, args: list, *, devices: int | None = None, symmetric: tuple = ()):
    """A module with one et.kernel `name` taking the (name, type) `args`,
    their names recorded in `arg_names` (the runtime's argument metadata).
    `devices` and the names in `symmetric` make a kernel on several devices.
    Returns (module, kernel, {name: block argument}). Must run inside an
    MLIR Context."""
    module = Module.create(Location.unknown())
    names = [n for n, _ in args]
    with InsertionPoint(module.body), Location.unknown():
        kernel = et.KernelOp(name, [t for _, t in args], devices=devices,
                             symmetric=[names.index(n) for n in symmetric])
    kernel.attributes["arg_names"] = Attribute.parse("[" + ", ".join(f'"{n}"' for n in names) + "]")
    return module, kernel, dict(zip(names, kernel.arguments))



def model_arguments(config: ModelConfig, layout: KernelLayout) -> list:
    """(name, type) of the kernel arguments the decode and prefill kernels
    share: the weights (stacked over layers) and the KV caches. Must run
    inside an MLIR Context."""
    c = config
    L, H, I, V = c.num_layers, c.hidden_size, c.intermediate_size, c.vocab_size
    Hq, Hkv, D = c.num_heads, c.num_kv_heads, c.head_dim
    S, B = layout.cache_len, layout.cache_slots
    bf16 = BF16Type.get()
    args = [("embed", mr([V, H], bf16)), ("ln1", mr([L, H], bf16)),
            ("wq", mr([L, Hq * D, H], bf16)), ("wk", mr([L, Hkv * D, H], bf16)), ("wv", mr([L, Hkv * D, H], bf16)),
            ("wo", mr([L, H, Hq * D], bf16)), ("ln2", mr([L, H], bf16)),
            ("wg", mr([L, I, H], bf16)), ("wu", mr([L, I, H], bf16)), ("wd", mr([L, H, I], bf16)),
            ("final_norm", mr([H], bf16)), ("lm_head", mr([V, H], bf16))]
    if c.qk_norm:
        args += [("q_norm", mr([L, D], bf16)), ("k_norm", mr([L, D], bf16))]
    return args + [("k_cache", mr([L, B, S, Hkv, D], bf16)), ("v_cache", mr([L, B, S, Hkv, D], bf16))]


def _layer_offset(layer, size: int):
    """The static offset of layer `layer` (an int), or dynamic."""
    return layer * size if isinstance(layer, int) else DYN


def layer_view(w, layer, rows: int, cols: int):
    """Layer `layer` (int or index Value) of a stacked [L, rows, cols] weight."""
    return memref.subview(w, [layer, 0, 0], [1, rows, cols], [1, 1, 1],
                          result_type=MemRefType.get([rows, cols], w.type.element_type,
                                                     StridedLayoutAttr.get(_layer_offset(layer, rows * cols),
                                                                           [cols, 1]),
                                                     loc=Location.unknown()))


def vec_view(w, layer, n: int):
    """Layer `layer` (int or index Value) of a stacked [L, n] vector."""
    return memref.subview(w, [layer, 0], [1, n], [1, 1],
                          result_type=MemRefType.get([n], w.type.element_type,
                                                     StridedLayoutAttr.get(_layer_offset(layer, n), [1]),
                                                     loc=Location.unknown()))


#: The choices of `build_decode_kernel` called with keywords that its
#: callers leave out: a plain kernel (one task per layer, the `merge` task,
#: `et.rmsnorm` into the global scratch); `KernelOptions.resolve` gives
#: those of a target instead.
PLAIN_KERNEL = dict(layered=False, o_per_head=False, norm_in_linear=False, norm_scratch="global")


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

    With `fuse_norms` (the default), every tile of a linear layer that
    reads a normalized residual stream (qkv, gate/up, LM head) normalizes
    it itself into its own rows of a scratch buffer `xs` [tiles, max_batch,
    hidden], instead of waiting for a one-tile RMSNorm task: two fewer
    dependent phases per layer. A tile's scratch rows are free again by the
    time the next task uses them, since each such task waits on all tiles
    of the one before. (Merging every head's attention splits inside each
    `o` tile the same way measured no faster at batch 1 and slower at batch
    4; `o_per_head` below merges only the tile's own head.) `scratch_rows` sizes `xs`
    (at least what this kernel's tiles need; kernels that share buffers
    pass their maximum).

    `tp` = N > 1 splits the model over N devices (tensor parallelism; a
    kernel with `devices = N`, layered and with fused norms). Each device
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

    `linear_tile="mma"` computes the linear layers with `et.matmul` tiles
    of 16 x BN rows of w (`mma.sync` tensor-core tiles, the batch padded to
    16 rows) instead of `et.linear`: a tile reads its weights once for all
    rows of the batch (fused norms only). q, k and v get tiles of their
    own in the `qkv` task; BN per layer from `mma_block`.

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
    (docs/benchmarks.md, "Every warp on a short tile").

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

    `norm_in_linear` (with `fuse_norms`, `et.linear` tiles only; True for
    the qkv, mlp and LM-head tiles, or a list of "qkv", "mlp", "lm_head")
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
    layered, tp, linear_tile, fuse_norms = options.layered, options.tp, options.linear_tile, options.fuse_norms
    qk_heads, gated_mlp, qkv_by_matrix, o_per_head = (options.qk_heads, options.gated_mlp, options.qkv_by_matrix,
                                                      options.o_per_head)
    norm_in_linear, norm_scratch, scratch_rows = options.norm_tasks, options.norm_scratch, options.scratch_rows
    norm_tasks = NORM_TASKS
    mma = linear_tile == "mma"
    c = tp_config(config, tp)
    lay = layout
    L, H, I, V = c.num_layers, c.hidden_size, c.intermediate_size, c.vocab_size
    Hq, Hkv, D = c.num_heads, c.num_kv_heads, c.head_dim
    V_lm = V // tp  # rows of the LM head on one device
    S, B = lay.max_context, lay.max_batch

    def rows_for(n: int, k: int) -> int:
        rows = linear_rows(n, k) if linear_rows else _rows_per_tile(n, lay.workers)
        if isinstance(rows, bool) or not isinstance(rows, int) or not 1 <= rows:
            raise ValueError(f"rows per tile for the {n}x{k} linear layer must be a positive int, got {rows!r}")
        return min(rows, n)

    # Tiles that normalize into the global scratch (fuse_norms): qkv,
    # gate/up, LM head, unless they read h through their norms or keep
    # their rows in shared memory.
    global_xs = fuse_norms and norm_scratch == "global" and len(norm_in_linear) < len(norm_tasks)
    xs_rows = norm_scratch_rows(config, lay.workers, tp=tp, linear_tile=linear_tile,
                                rows_for=rows_for) if global_xs else 1
    # qkv tiles by matrix: the rows per tile of q, k and v together.
    qkv_total = (c.num_heads + 2 * c.num_kv_heads) * c.head_dim
    qkv_rows = rows_for(qkv_total, c.hidden_size)
    divides = (c.num_heads * c.head_dim) % qkv_rows == 0 and (c.num_kv_heads * c.head_dim) % qkv_rows == 0
    if qkv_by_matrix is None:
        q_tiles = -(-(c.num_heads * c.head_dim) // rows_for(c.num_heads * c.head_dim, c.hidden_size))
        qkv_by_matrix = (not mma and lay.max_batch == 1 and divides and qkv_total // qkv_rows <= q_tiles)
    if qkv_by_matrix and not mma:
        if not divides:
            raise ValueError(f"qkv_by_matrix needs rows per tile ({qkv_rows}) that divide the "
                             f"{c.num_heads * c.head_dim} q and {c.num_kv_heads * c.head_dim} k and v rows")
        if global_xs and "qkv" not in norm_in_linear:
            xs_rows = max(xs_rows, qkv_total // qkv_rows)
    if scratch_rows is not None:
        if scratch_rows < xs_rows:
            raise ValueError(f"scratch_rows {scratch_rows} is below the {xs_rows} tiles that normalize into it")
        xs_rows = scratch_rows
    bf16, f32, i32, idx = BF16Type.get(), F32Type.get(), IntegerType.get_signless(32), IndexType.get()

    # Kernel arguments, in order (runtime/model.py passes them the same way).
    args = [("batch", idx), ("tokens", mr([DYN], i32)), ("positions", mr([DYN], i32)), ("slots", mr([DYN], i32))]
    args += [(n, mr([V_lm, H], bf16) if n == "lm_head" else t) for n, t in model_arguments(c, lay)]
    args += [("h", mr([DYN, H], f32)), ("xn", mr([DYN, H], bf16)),
             ("xs", mr([xs_rows, B, H], bf16)),
             ("q", mr([DYN, Hq, D], f32)), ("k", mr([DYN, Hkv, D], f32)), ("v", mr([DYN, Hkv, D], f32)),
             ("o_part", mr([DYN, lay.splits, Hq, D], f32)), ("lse", mr([DYN, lay.splits, Hq], f32)),
             ("attn", mr([DYN, Hq, D], bf16)),
             ("g", mr([DYN, I], f32)), ("u", mr([DYN, I], f32)), ("act", mr([DYN, I], bf16)),
             ("logits", mr([DYN, V_lm], f32)),
             ("part_val", mr([DYN, lay.argmax_chunks], f32)), ("part_idx", mr([DYN, lay.argmax_chunks], i32)),
             ("next_val", mr([DYN, 1], f32)), ("next_token", mr([DYN, 1], i32))]
    symmetric = ()
    if tp > 1:
        # Partial sums of the row-parallel layers, read by every device;
        # every device's argmax candidates, gathered into all_val/all_idx.
        args += [("part_o", mr([B, H], f32)), ("part_d", mr([B, H], f32)),
                 ("all_val", mr([DYN, tp * lay.argmax_chunks], f32)),
                 ("all_idx", mr([DYN, tp * lay.argmax_chunks], i32))]
        symmetric = ("part_o", "part_d", "part_val", "part_idx")

    module, kernel, A = new_kernel(name, args, devices=tp if tp > 1 else None, symmetric=symmetric)
    with InsertionPoint(kernel.entry_block), Location.unknown():
        batch = A["batch"]

        def const(v: int):
            return arith.ConstantOp(idx, v).result

        def cost(task, nbytes: int, flops: int):
            task.attributes["et.cost"] = Attribute.parse(f"#et.cost<bytes = {int(nbytes)}, flops = {int(flops)}>")

        def new_task(tname: str, extents: list, max_extents: list | None = None):
            t = et.TaskOp(tname, extents)
            if max_extents is not None:
                t.attributes["max_extents"] = DenseI64ArrayAttr.get(max_extents)
            return t

        events: dict[str, object] = {}

        def guarded(live, run, otherwise=None):
            """run() where `live` holds; otherwise() (if given) where not."""
            guard = scf.IfOp(live, has_else=otherwise is not None)
            with InsertionPoint(guard.then_block):
                run()
                scf.YieldOp([])
            if otherwise is not None:
                with InsertionPoint(guard.else_block):
                    otherwise()
                    scf.YieldOp([])

        def task(tname: str, extents: list, deps: list[str], body: Callable, *, per_batch: bool = False,
                 nbytes: int = 0, flops: int = 0, pre: Callable | None = None, peers: int = 0):
            """A task over `extents` (prefixed with the batch when
            `per_batch`), waiting on the events of `deps`; signals its
            own event once per tile (on each of the `peers` devices
            when given). `pre(*tile_ids)`, if given, runs before the
            waits and its result (a dict) is passed to `body` as `pre=`;
            its "live" entry, if any, guards the body (a dead tile only
            waits and signals)."""
            ext = ([batch] if per_batch else []) + [const(e) for e in extents]
            mx = ([B] + list(extents)) if per_batch else None
            events[tname] = et.event([])
            t = new_task(tname, ext, mx)
            cost(t, nbytes, flops)
            with InsertionPoint(t.entry_block):
                early = pre(*t.tile_ids) if pre else None
                for dep in deps:
                    et.wait(events[dep], [])
                if pre and "live" in early:
                    guarded(early["live"], lambda: body(*t.tile_ids, pre=early), early.get("otherwise"))
                elif pre:
                    body(*t.tile_ids, pre=early)
                else:
                    body(*t.tile_ids)
                if peers:
                    # Every device reads what this tile wrote.
                    for k in range(peers):
                        et.signal(events[tname], [], peer=k)
                else:
                    et.signal(events[tname], [])

        def collapse(buf, n: int):
            """[batch, a, b] -> [batch, a * b]."""
            t = buf.type
            return memref.collapse_shape(mr([DYN, n], t.element_type), buf, [[0], [1, 2]])

        def position(b):
            p = memref.LoadOp(A["positions"], [b]).result
            return arith.IndexCastOp(idx, p).result

        def row(buf, b, shape, elt):
            """Row b of a [batch, *shape] buffer as a `shape` view."""
            n = len(shape)
            strides = [1] * n
            for i in range(n - 2, -1, -1):
                strides[i] = strides[i + 1] * shape[i + 1]
            return memref.subview(buf, [b] + [0] * n, [1] + list(shape), [1] * (n + 1),
                                  result_type=strided(shape, elt, strides))

        def slot_of(b):
            """Row b's cache slot (index)."""
            return arith.IndexCastOp(idx, memref.LoadOp(A["slots"], [b]).result).result

        def cache_view(cache, layer, slot, h0=0, n: int = Hkv):
            """KV heads [h0, h0 + n) of layer `layer` of cache slot `slot`."""
            return memref.subview(cache, [layer, slot, 0, h0, 0], [1, 1, S, n, D], [1] * 5,
                                  result_type=strided([S, n, D], bf16, [Hkv * D, D, 1]))

        eps = FloatAttr.get(f32, c.rms_norm_eps)
        scale = FloatAttr.get(f32, D ** -0.5)
        theta = FloatAttr.get(f32, c.rope_theta)
        scaling = DenseF32ArrayAttr.get([float(x) for x in c.rope_scaling]) if c.rope_scaling else None

        def layered_tasks(specs, entry):
            """One task per kind over (layer, tiles), events indexed by
            layer. The `entry` task starts each layer, after the previous
            layer's `down`; its layer 0 is a task of its own, after the
            embedding."""
            kind0, body0, extents0, nbytes0, flops0 = entry
            for kind in [kind0] + [spec[0] for spec in specs]:
                events[kind] = et.event([L])
            t = new_task(kind0 + "_first", [const(e) for e in extents0])
            cost(t, nbytes0, flops0)
            with InsertionPoint(t.entry_block):
                et.wait(events["embed"], [])
                body0(0, *t.tile_ids)
                et.signal(events[kind0], [const(0)])
            if L > 1:
                t = new_task(kind0, [const(L - 1)] + [const(e) for e in extents0])
                cost(t, nbytes0, flops0)
                with InsertionPoint(t.entry_block):
                    prev_layer, *ids = t.tile_ids
                    layer = affine.apply(AffineMap.get(1, 0, [AffineExpr.get_dim(0) + 1]), [prev_layer])
                    et.wait(events[layer_done], [prev_layer])
                    body0(layer, *ids)
                    et.signal(events[kind0], [layer])
            for kind, body, extents, per_batch, waits, nbytes, flops in specs:
                if kind in allreduces:
                    # h += every device's partial sums (et-lower-collectives
                    # makes this a task), per layer.
                    part, block = allreduces[kind]
                    et.AllReduceOp(A[part], A["h"], batch, events[waits[0]], events[kind], block, task=kind)
                    continue
                ext = [L] + ([B] if per_batch else []) + list(extents)
                t = new_task(kind, [const(e) for e in ext])
                cost(t, nbytes, flops)
                pre = pre_wait.get(kind)
                with InsertionPoint(t.entry_block):
                    layer, *ids = t.tile_ids
                    live = arith.CmpIOp(arith.CmpIPredicate.ult, ids[0], batch).result if per_batch else None
                    early = pre(layer, *ids, live=live) if pre else None
                    for w in waits:
                        et.wait(events[w], [layer])

                    def run():
                        if pre:
                            body(layer, *ids, pre=early)
                        else:
                            body(layer, *ids)
                    if early is not None and "live" in early:
                        # The pre-wait part says whether the tile has work
                        # (it folds in the batch guard).
                        live = early["live"]
                    if live is not None:
                        # Tiles past the runtime batch (or otherwise dead)
                        # only signal (after the pre-wait part's
                        # "otherwise", if any).
                        guarded(live, run, early.get("otherwise") if early is not None else None)
                    else:
                        run()
                    et.signal(events[kind], [layer])

        # The event that ends a layer: the residual stream is complete.
        layer_done = "sum_d" if tp > 1 else "down"

        def final_norm_body(t):
            if layered:
                et.wait(events[layer_done], [const(L - 1)])
            et.rmsnorm(A["h"], A["final_norm"], A["xn"], eps)

        def normalized(norm_w, t):
            """Tile t's rows of the scratch [batch, H], holding
            rmsnorm(h) * norm_w (fuse_norms)."""
            if norm_scratch == "shared":
                buf = memref.AllocaOp(shared([B, H], bf16), [], []).result
                xs_t = memref.SubViewOp(shared([DYN, H], bf16, [H, 1], 0), buf, [], [batch], [],
                                        static_offsets=[0, 0], static_sizes=[DYN, H], static_strides=[1, 1]).result
                et.rmsnorm(A["h"], norm_w, xs_t, eps)
                return xs_t
            xs_t = memref.SubViewOp(
                MemRefType.get([DYN, H], bf16, StridedLayoutAttr.get(DYN, [H, 1]), loc=Location.unknown()),
                A["xs"], [t], [batch], [], static_offsets=[DYN, 0, 0], static_sizes=[1, DYN, H],
                static_strides=[1, 1, 1]).result
            et.rmsnorm(A["h"], norm_w, xs_t, eps)
            return xs_t

        def norm_input(norm_w, t, kind):
            """What a linear tile of task `kind` reading rmsnorm(h) * norm_w
            takes: (x, et.linear keywords): h and its norm (kinds in
            `norm_in_linear`), or tile t's rows of the scratch, normalized."""
            if kind in norm_in_linear:
                # One-row kernels read a static row (the GPU lowering then
                # reads x once per worker, into shared memory).
                res = A["h"]
                x = _rows(res) if B > 1 else memref.SubViewOp(
                    MemRefType.get([1, H], f32, StridedLayoutAttr.get(0, [H, 1]), loc=Location.unknown()),
                    res, [], [], [], static_offsets=[0, 0], static_sizes=[1, H], static_strides=[1, 1]).result
                return x, dict(norm=norm_w, eps=eps)
            return normalized(norm_w, t), {}

        # Task bodies, given the layer (an int, or an index Value for a
        # layered task) and the tile coordinates. The residual stream h
        # is f32: `o` and `down` add into it (et.linear accumulate), and
        # the norms read it.
        def norm1_body(l, t):
            et.rmsnorm(A["h"], vec_view(A["ln1"], l, H), A["xn"], eps)

        def linear_body(weight, n, k, x, y, y3=None, accumulate=False, rows=None):
            """A linear-layer tile body `body(layer, tile)` with its tile
            count, bytes and flops; `weight` is a stacked weight's name,
            or a function of the layer giving the N x K weight; `rows`
            per tile, else rows_for(n, k) (mma_block with `mma`)."""
            rows = rows or (mma_block(n, lay.workers) if mma else rows_for(n, k))
            w = weight if callable(weight) else (lambda l: layer_view(A[weight], l, n, k))

            def body(l, t, x_in=None, norm=None):
                r0 = arith.MulIOp(t, const(rows)).result
                out = collapse(y3, n) if y3 is not None else y
                xv = x_in if x_in is not None else (x() if callable(x) else x)
                if mma:
                    et.matmul(xv, w(l), out, const(0), r0, [], DenseI64ArrayAttr.get([16, rows, mma_k_block(k)]),
                              stages=MMA_STAGES, accumulate=True if accumulate else None)
                else:
                    et.linear(xv, w(l), out, r0, const(rows), accumulate=accumulate, **(norm or {}))
            return body, -(-n // rows), rows * k * 2, 2 * rows * k

        def _rows(buf):
            """The first `batch` rows of a [max_batch, H] buffer."""
            return memref.SubViewOp(
                MemRefType.get([DYN, H], f32, StridedLayoutAttr.get(0, [H, 1]), loc=Location.unknown()),
                buf, [], [batch], [], static_offsets=[0, 0], static_sizes=[DYN, H], static_strides=[1, 1]).result

        def heads(buf, b, h0, n: int, total: int, *, rank3: bool = True):
            """Heads [h0, h0 + n) of row b of a [batch, total, D] f32
            buffer: [1, n, D], or [n, D] with rank3=False."""
            shape = [1, n, D] if rank3 else [n, D]
            strides = [total * D, D, 1] if rank3 else [D, 1]
            return memref.subview(buf, [b, h0, 0], [1, n, D], [1, 1, 1],
                                  result_type=strided(shape, f32, strides))

        def pos_of(b):
            """Row b's position as a [1] view; row 0's for a tile past the
            runtime batch (et.rope_into may read it before the wait, outside
            the tile's guard)."""
            inside = arith.CmpIOp(arith.CmpIPredicate.ult, b, batch).result
            b = arith.SelectOp(inside, b, const(0)).result
            return memref.subview(A["positions"], [b], [1], [1], result_type=strided([1], i32, [1]))

        def rotate_kv(l, b, g, n: int):
            """KV heads [g, g + n) of row b: their keys normalized (Qwen3),
            rotated and written into the row's cache slot at its position
            (et.rope_into), their values there too (et.kv_append)."""
            slot = slot_of(b)
            row = position(b)
            k_norm = dict(norm=vec_view(A["k_norm"], l, D), eps=eps) if c.qk_norm else {}
            et.rope_into(heads(A["k"], b, g, n, Hkv), pos_of(b), cache_view(A["k_cache"], l, slot, g, n), row, theta,
                         llama3_scaling=scaling, **k_norm)
            et.kv_append(heads(A["v"], b, g, n, Hkv), cache_view(A["v_cache"], l, slot, g, n), row)

        def rotate_q(l, b, g, n: int):
            """The query heads of KV heads [g, g + n) of row b, normalized
            (Qwen3) and rotated in place."""
            q_norm = dict(norm=vec_view(A["q_norm"], l, D), eps=eps) if c.qk_norm else {}
            q0 = arith.MulIOp(g, const(c.group_size)).result
            q = heads(A["q"], b, q0, n * c.group_size, Hq)
            et.rope_into(q, pos_of(b), q, const(0), theta, llama3_scaling=scaling, **q_norm)

        def qk_body(l, b, t):
            # One tile per (row, block of qk_heads KV heads): their query
            # heads normalized (Qwen3) and rotated in place, their keys
            # normalized, rotated and appended, their values appended; the
            # three ops touch different buffers and run without a barrier
            # between them (et-lower-tile-ops), a warp per head.
            g = arith.MulIOp(t, const(qk_heads)).result
            rotate_q(l, b, g, qk_heads)
            rotate_kv(l, b, g, qk_heads)

        # Attention tiles per row for about one wave at this launch's
        # batch (see split_of), at least one, in the kernels that choose
        # their split per launch (`KernelLayout.runtime_splits`; the others
        # keep the static split); i32 arithmetic, which the GPU divides
        # faster than index.
        def c32(v: int):
            return arith.ConstantOp(i32, v).result

        if lay.runtime_splits:
            wave = arith.MaxUIOp(arith.DivUIOp(c32(lay.workers), arith.MulIOp(
                c32(Hkv), arith.IndexCastOp(i32, batch).result).result).result, c32(1)).result

        def split_of(b):
            """(length, split length) of row b, i32: the split length is
            chosen per launch, `wave` splits per row (about one wave of
            attention tiles for the launch's batch), no more than the
            row has MIN_SPLIT_LEN positions nor than the kernel has tiles
            per row; the row's length over that many splits in whole 16s,
            at most the kernel's split length (so that the splits cover
            the row, and the KV staging sized for one split holds one).
            A kernel whose static split is long for its launch (a context
            at the bottom of its bucket, a batch at the bottom of its
            range) gets balanced, shorter splits instead of a few long
            ones and dead tiles."""
            length = arith.AddIOp(memref.LoadOp(A["positions"], [b]).result, c32(1)).result
            n = arith.MinUIOp(wave, arith.CeilDivUIOp(length, c32(MIN_SPLIT_LEN)).result).result
            n = arith.MinUIOp(n, c32(lay.splits)).result
            per = arith.AndIOp(arith.AddIOp(arith.CeilDivUIOp(length, n).result, c32(15)).result, c32(-16)).result
            return length, arith.MinUIOp(per, c32(lay.split_len)).result

        def attn_pre(l, b, g, s, live=None):
            """Before the attention tile's wait: the KV-cache views of
            row b, its length, and `stable`, the lowest position that
            this step writes into row b's slot (the smallest position of
            the rows of the batch with the same slot); the positions
            below it are history the cache rows may be loaded from
            before the wait; and "live": whether the tile has work, that
            is its row is in the runtime batch and its split starts
            below the row's length (tiles of splits past it only wait
            and signal; the merge reads only the splits below). A tile
            past the runtime batch (`live` false) reads row 0 and stages
            nothing."""
            if live is not None:
                b = arith.SelectOp(live, b, const(0)).result
            slot = memref.LoadOp(A["slots"], [b]).result
            p = position(b)
            loop = scf.ForOp(const(0), batch, const(1), [p])
            with InsertionPoint(loop.body):
                other = loop.induction_variable
                same = arith.CmpIOp(arith.CmpIPredicate.eq, memref.LoadOp(A["slots"], [other]).result,
                                    slot).result
                p_other = arith.IndexCastOp(idx, memref.LoadOp(A["positions"], [other]).result).result
                lowest = arith.MinSIOp(loop.inner_iter_args[0], p_other).result
                scf.YieldOp([arith.SelectOp(same, lowest, loop.inner_iter_args[0]).result])
            stable = loop.results[0]
            if live is not None:
                stable = arith.SelectOp(live, stable, const(0)).result
            slot_i = arith.IndexCastOp(idx, slot).result
            length = arith.AddIOp(p, const(1)).result
            split_len = arith.IndexCastOp(idx, split_of(b)[1]).result if lay.runtime_splits else const(lay.split_len)
            has_work = arith.CmpIOp(arith.CmpIPredicate.ult, arith.MulIOp(s, split_len).result, length).result
            if live is not None:
                has_work = arith.AndIOp(live, has_work).result
            extra = {}
            if o_per_head and B > 1:
                # The `o` tiles merge every row's splits up to the batch's
                # longest row: a split past its own row's length says so
                # with an lse of -inf (row_live: a row of the batch).
                row_live = live if live is not None else arith.ConstantOp(IntegerType.get_signless(1), 1).result

                def otherwise():
                    mark = scf.IfOp(row_live)
                    with InsertionPoint(mark.then_block):
                        q0 = arith.MulIOp(g, const(c.group_size)).result
                        ninf = arith.ConstantOp(f32, float("-inf")).result
                        for i in range(c.group_size):
                            memref.StoreOp(ninf, A["lse"], [b, s, arith.AddIOp(q0, const(i)).result])
                        scf.YieldOp([])
                extra["otherwise"] = otherwise
            return dict(k=cache_view(A["k_cache"], l, slot_i), v=cache_view(A["v_cache"], l, slot_i),
                        length=length, stable=stable, split_len=split_len, live=has_work, **extra)

        def attn_body(l, b, g, s, pre):
            q = row(A["q"], b, [Hq, D], f32)
            et.attention_split(q, pre["k"], pre["v"],
                               row(A["o_part"], b, [lay.splits, Hq, D], f32),
                               row(A["lse"], b, [lay.splits, Hq], f32),
                               g, s, pre["split_len"], pre["length"], scale, stable=pre["stable"])

        def merge_pre(l, b, g, live=None):
            # The splits that hold positions of row b (the attention tiles
            # of later splits skip their body and write nothing), from the
            # row's position, an input: before the wait, off the chain. (A
            # row past the runtime batch reads a stale position; its tile
            # only signals.)
            return dict(splits=live_splits(b))

        def merge_body(l, b, g, pre):
            # One tile per (row, KV head): the group's query heads.
            G = c.group_size
            q0 = arith.MulIOp(g, const(G)).result
            live = pre["splits"]
            o_b = memref.SubViewOp(strided([DYN, G, D], f32, [Hq * D, D, 1]), A["o_part"], [b, q0], [live], [],
                                   static_offsets=[DYN, 0, DYN, 0], static_sizes=[1, DYN, G, D],
                                   static_strides=[1, 1, 1, 1]).result
            lse_b = memref.SubViewOp(strided([DYN, G], f32, [Hq, 1]), A["lse"], [b, q0], [live], [],
                                     static_offsets=[DYN, 0, DYN], static_sizes=[1, DYN, G],
                                     static_strides=[1, 1, 1]).result
            out = memref.subview(A["attn"], [b, q0, 0], [1, G, D], [1, 1, 1],
                                 result_type=strided([G, D], bf16, [D, 1]))
            et.attention_merge(o_b, lse_b, out)

        def live_splits(b):
            """The splits of row b that hold positions (index): the
            attention tiles of later splits skip their body and write
            nothing."""
            if lay.runtime_splits:
                return arith.IndexCastOp(idx, arith.CeilDivUIOp(*split_of(b)).result).result
            return arith.MinUIOp(arith.CeilDivUIOp(arith.AddIOp(position(b), const(1)).result,
                                                   const(lay.split_len)).result, const(lay.splits)).result

        # o_per_head: tiles per query head (blocks of rows of h), about one
        # tile per worker in all.
        o_blocks = max(1, lay.workers // Hq)
        o_head_rows = -(-H // o_blocks)
        o_blocks = -(-H // o_head_rows)

        def o_head_pre(l, t, live=None):
            # The tile's merged head, one row per token (shared memory), and
            # the splits to merge: the row's (one-row kernels), else the
            # longest row's. The positions are inputs, so their loads go
            # before the wait, off the chain.
            if B > 1:
                most = scf.ForOp(const(0), batch, const(1), [const(1)])
                with InsertionPoint(most.body):
                    scf.YieldOp([arith.MaxUIOp(most.inner_iter_args[0],
                                               live_splits(most.induction_variable)).result])
                splits = most.results[0]
            else:
                splits = live_splits(const(0))
            return dict(xs=memref.AllocaOp(shared([B, D], bf16), [], []).result, splits=splits)

        def o_head_body(l, t, pre):
            head = arith.DivUIOp(t, const(o_blocks)).result
            blk = arith.RemUIOp(t, const(o_blocks)).result
            x = memref.SubViewOp(shared([DYN, D], bf16, [D, 1], 0), pre["xs"], [], [batch], [],
                                 static_offsets=[0, 0], static_sizes=[DYN, D], static_strides=[1, 1]).result
            if B > 1:
                # Every row of the batch at once: the rows are the merge's
                # heads, over the splits of the longest row (a shorter
                # row's later splits hold an lse of -inf: attn_pre).
                n = pre["splits"]
                S = lay.splits
                o_rows = memref.ReinterpretCastOp(
                    strided([DYN, DYN, D], f32, [Hq * D, S * Hq * D, 1]), A["o_part"],
                    [arith.MulIOp(head, const(D)).result], [n, batch], [], static_offsets=[DYN],
                    static_sizes=[DYN, DYN, D], static_strides=[Hq * D, S * Hq * D, 1]).result
                lse_rows = memref.ReinterpretCastOp(
                    strided([DYN, DYN], f32, [Hq, S * Hq]), A["lse"], [head], [n, batch], [],
                    static_offsets=[DYN], static_sizes=[DYN, DYN], static_strides=[Hq, S * Hq]).result
                et.attention_merge(o_rows, lse_rows, x)
            else:
                # One-row kernels: the head's splits of the row (batch <= 1).
                loop = scf.ForOp(const(0), batch, const(1), [])
                with InsertionPoint(loop.body):
                    b = loop.induction_variable
                    o_b = memref.SubViewOp(strided([DYN, 1, D], f32, [Hq * D, D, 1]), A["o_part"], [b, head],
                                           [pre["splits"]], [], static_offsets=[DYN, 0, DYN, 0],
                                           static_sizes=[1, DYN, 1, D], static_strides=[1, 1, 1, 1]).result
                    lse_b = memref.SubViewOp(strided([DYN, 1], f32, [Hq, 1]), A["lse"], [b, head], [pre["splits"]],
                                             [], static_offsets=[DYN, 0, DYN], static_sizes=[1, DYN, 1],
                                             static_strides=[1, 1, 1]).result
                    out = memref.SubViewOp(shared([1, D], bf16, [D, 1], DYN), pre["xs"], [b], [], [],
                                           static_offsets=[DYN, 0], static_sizes=[1, D], static_strides=[1, 1]).result
                    et.attention_merge(o_b, lse_b, out)
                    scf.YieldOp([])
            k0 = arith.MulIOp(head, const(D)).result
            w = memref.SubViewOp(strided([H, D], bf16, [Hq * D, 1]), layer_view(A["wo"], l, H, Hq * D), [k0], [],
                                 [], static_offsets=[0, DYN], static_sizes=[H, D], static_strides=[1, 1]).result
            et.linear(x, w, A["h"], arith.MulIOp(blk, const(o_head_rows)).result, const(o_head_rows),
                      accumulate=True, atomic=True)

        def norm2_body(l, t):
            et.rmsnorm(A["h"], vec_view(A["ln2"], l, H), A["xn"], eps)

        by_matrix = qkv_by_matrix and not mma
        q_lin = linear_body("wq", Hq * D, H, A["xn"], None, A["q"], rows=qkv_rows if by_matrix else None)
        if mma or by_matrix:
            # q, k and v blocks are tiles of their own: tile t < tq is a q
            # block, then the k blocks, then the v blocks.
            k_lin = linear_body("wk", Hkv * D, H, A["xn"], None, A["k"], rows=qkv_rows if by_matrix else None)
            v_lin = linear_body("wv", Hkv * D, H, A["xn"], None, A["v"], rows=qkv_rows if by_matrix else None)
            qkv_tiles = q_lin[1] + k_lin[1] + v_lin[1]

            def qkv_pick(l, t):
                # One et.linear whose weights, output and first row the
                # tile picks (arith.select), so that it stays at the task's
                # top level: its first weight loads can go out ahead of the
                # tile's norm.
                x, norm = norm_input(vec_view(A["ln1"], l, H), t, "qkv") if fuse_norms else (None, {})
                first_k, first_v = q_lin[1], q_lin[1] + k_lin[1]
                is_q = arith.CmpIOp(arith.CmpIPredicate.ult, t, const(first_k)).result
                is_k = arith.CmpIOp(arith.CmpIPredicate.ult, t, const(first_v)).result

                def pick(a, b, c):
                    return arith.SelectOp(is_q, a, arith.SelectOp(is_k, b, c).result).result

                w_type = strided([DYN, H], bf16, [H, 1])
                y_type = MemRefType.get([DYN, DYN], f32, loc=Location.unknown())
                w = pick(*(memref.cast(w_type, layer_view(A[name], l, n, H))
                           for name, n in (("wq", Hq * D), ("wk", Hkv * D), ("wv", Hkv * D))))
                y = pick(*(memref.cast(y_type, collapse(A[name], n))
                           for name, n in (("q", Hq * D), ("k", Hkv * D), ("v", Hkv * D))))
                tile = pick(t, arith.SubIOp(t, const(first_k)).result, arith.SubIOp(t, const(first_v)).result)
                et.linear(x if x is not None else A["xn"], w, y, arith.MulIOp(tile, const(qkv_rows)).result,
                          const(qkv_rows), **norm)

            def qkv_body(l, t):
                if not mma:
                    return qkv_pick(l, t)
                x = normalized(vec_view(A["ln1"], l, H), t) if fuse_norms else None
                first_k, first_v = q_lin[1], q_lin[1] + k_lin[1]
                is_q = scf.IfOp(arith.CmpIOp(arith.CmpIPredicate.ult, t, const(first_k)).result, has_else=True)
                with InsertionPoint(is_q.then_block):
                    q_lin[0](l, t, x)
                    scf.YieldOp([])
                with InsertionPoint(is_q.else_block):
                    is_k = scf.IfOp(arith.CmpIOp(arith.CmpIPredicate.ult, t, const(first_v)).result, has_else=True)
                    with InsertionPoint(is_k.then_block):
                        k_lin[0](l, arith.SubIOp(t, const(first_k)).result, x)
                        scf.YieldOp([])
                    with InsertionPoint(is_k.else_block):
                        v_lin[0](l, arith.SubIOp(t, const(first_v)).result, x)
                        scf.YieldOp([])
                    scf.YieldOp([])
        else:
            # K and V rows ride in the q tiles: one task, one tile per
            # worker, three independent linear layers per tile.
            qkv_tiles = q_lin[1]
            kv_rows = -(-(Hkv * D) // qkv_tiles)
            k_lin = linear_body("wk", Hkv * D, H, A["xn"], None, A["k"], rows=kv_rows)
            v_lin = linear_body("wv", Hkv * D, H, A["xn"], None, A["v"], rows=kv_rows)

            def qkv_body(l, t):
                x, norm = norm_input(vec_view(A["ln1"], l, H), t, "qkv") if fuse_norms else (None, {})
                q_lin[0](l, t, x, norm)
                k_lin[0](l, t, x, norm)
                v_lin[0](l, t, x, norm)
        o_lin = linear_body("wo", H, Hq * D, lambda: collapse(A["attn"], Hq * D),
                            _rows(A["part_o"]) if tp > 1 else A["h"], accumulate=tp == 1)

        gate_lin = linear_body("wg", I, H, A["xn"], A["g"])
        up_lin = linear_body("wu", I, H, A["xn"], A["u"])
        down_lin = linear_body("wd", H, I, A["act"], _rows(A["part_d"]) if tp > 1 else A["h"],
                               accumulate=tp == 1)
        # Gate and up rows of one block and their activation in one tile:
        # the activation needs no phase of its own.
        mlp_rows = mma_block(I, lay.workers) if mma else rows_for(I, H)
        mlp_tiles = gate_lin[1]

        def mlp_body(l, t):
            x, norm = norm_input(vec_view(A["ln2"], l, H), t, "mlp") if fuse_norms else (None, {})
            if gated_mlp and not mma:
                # One pass: a warp's gate row, its up row, then its act
                # element (no g and u round trip, no barrier).
                et.linear(x if x is not None else A["xn"], layer_view(A["wg"], l, I, H), A["act"],
                          arith.MulIOp(t, const(mlp_rows)).result, const(mlp_rows),
                          gated=layer_view(A["wu"], l, I, H), **norm)
                return
            gate_lin[0](l, t, x, norm)
            up_lin[0](l, t, x, norm)
            et.silu_mul(A["g"], A["u"], A["act"], arith.MulIOp(t, const(mlp_rows)).result, const(mlp_rows))
        # KV heads per qk tile: by default the fewest that still leave no
        # qk tile on a worker that runs a qkv tile (on the H100, a qk tile
        # behind a qkv tile on its worker started 0.5-1.1 us after those on
        # idle workers, and the phase waits for its last tile), with at most
        # a worker's warps' worth of heads (a warp per head).
        if qk_heads is None:
            idle = lay.workers - qkv_tiles
            fits = [n for n in range(1, Hkv + 1) if Hkv % n == 0 and n * (c.group_size + 1) <= (warps or QK_TILE_WARPS)
                    and B * (Hkv // n) <= idle]
            qk_heads = fits[0] if fits else 1
        # Computed before a task's waits, passed to its body as `pre=`.
        pre_wait = {"attn": attn_pre, "merge": merge_pre}
        if o_per_head:
            pre_wait["o"] = o_head_pre
        # (name, body, extents, per_batch, waits (names of the same layer), bytes, flops)
        qkv_spec = ("qkv", qkv_body, [qkv_tiles], False, ["norm1"], q_lin[2] + k_lin[2] + v_lin[2],
                    q_lin[3] + k_lin[3] + v_lin[3])
        layer_tasks = [
            qkv_spec,
            ("qk", qk_body, [Hkv // qk_heads], True, ["qkv"], 4 * D * (c.group_size + 4) * qk_heads,
             8 * D * (c.group_size + 1) * qk_heads),
            ("attn", attn_body, [Hkv, lay.splits], True, ["qk"], 4 * lay.split_len * D,
             4 * lay.split_len * D * c.group_size),
            ("merge", merge_body, [Hkv], True, ["attn"], 4 * lay.splits * c.group_size * (D + 1),
             2 * lay.splits * c.group_size * D),
            ("o", o_lin[0], [o_lin[1]], False, ["merge"], o_lin[2], o_lin[3]),
            ("norm2", norm2_body, [1], False, ["o"], 2 * H, 5 * H),
            ("mlp", mlp_body, [mlp_tiles], False, ["norm2"], 2 * gate_lin[2], 2 * gate_lin[3] + 6 * mlp_rows),
            ("down", down_lin[0], [down_lin[1]], False, ["mlp"], down_lin[2], down_lin[3]),
        ]
        if o_per_head:
            o_spec = ("o", o_head_body, [Hq * o_blocks], False, ["attn"],
                      o_head_rows * D * 2 + B * 4 * lay.splits * (D + 1), 2 * B * o_head_rows * D)
            layer_tasks = [o_spec if spec[0] == "o" else spec for spec in layer_tasks if spec[0] != "merge"]
        if fuse_norms:
            # qkv starts each layer; mlp waits on o directly.
            layer_tasks = [spec for spec in layer_tasks if spec[0] not in ("qkv", "norm2")]
            layer_tasks = [spec[:4] + (["o"],) + spec[5:] if spec[0] == "mlp" else spec for spec in layer_tasks]
        # Tensor parallelism: the all-reduces, h += the partial sums of
        # every device (et.allreduce, one per layer); mlp waits on sum_o,
        # the next layer on sum_d.
        allreduces = {}
        if tp > 1:
            block = _sum_block(H)
            allreduces = {"sum_o": ("part_o", block), "sum_d": ("part_d", block)}
            with_sums = []
            for spec in layer_tasks:
                if spec[0] == "mlp":
                    spec = spec[:4] + (["sum_o"],) + spec[5:]
                with_sums.append(spec)
                if spec[0] in ("o", "down"):
                    with_sums.append((f"sum_{spec[0][0]}", None, [], False, [spec[0]], 0, 0))
            layer_tasks = with_sums
        if fuse_norms:
            entry = ("qkv", qkv_body, [qkv_tiles], qkv_spec[5], qkv_spec[6])
        else:
            entry = ("norm1", norm1_body, [1], 2 * H, 5 * H)

        # Embedding: h = embed[tokens].
        task("embed", [1], [], lambda t: et.embedding(A["embed"], A["tokens"], A["h"]),
             nbytes=0, flops=0)
        if not layered:
            prev = "embed"
            for l in range(L):
                task(f"{entry[0]}_{l}", entry[2], [prev], lambda *ids, l=l: entry[1](l, *ids),
                     nbytes=entry[3], flops=entry[4])
                for name, body, extents, per_batch, waits, nbytes, flops in layer_tasks:
                    pre = pre_wait.get(name)
                    task(f"{name}_{l}", extents, [f"{w}_{l}" for w in waits],
                         lambda *ids, body=body, l=l, **kw: body(l, *ids, **kw), per_batch=per_batch,
                         nbytes=nbytes, flops=flops,
                         pre=(lambda *ids, pre=pre, l=l: pre(l, *ids)) if pre else None)
                prev = f"{layer_done}_{l}"
        else:
            layered_tasks(layer_tasks, entry)
            prev = layer_done
        # Final norm, LM head, greedy argmax (two stages).
        lm_body, lm_tiles, lm_bytes, lm_flops = linear_body(lambda l: A["lm_head"], V_lm, H, A["xn"], A["logits"])
        if fuse_norms:
            def lm_head_body(t):
                if layered:
                    et.wait(events[layer_done], [const(L - 1)])
                lm_body(None, t, *norm_input(A["final_norm"], t, "lm_head"))
            task("lm_head", [lm_tiles], [prev] if not layered else [], lm_head_body, nbytes=lm_bytes,
                 flops=lm_flops)
        else:
            task("final_norm", [1], [prev] if not layered else [],
                 lambda t: final_norm_body(t), nbytes=2 * H, flops=5 * H)
            task("lm_head", [lm_tiles], ["final_norm"], lambda t: lm_body(None, t), nbytes=lm_bytes,
                 flops=lm_flops)
        chunk = -(-V_lm // lay.argmax_chunks)
        task("argmax_part", [lay.argmax_chunks], ["lm_head"],
             lambda t: et.argmax(A["logits"], A["part_val"], A["part_idx"],
                                 arith.MulIOp(t, const(chunk)).result, const(chunk), t),
             nbytes=4 * chunk, flops=chunk, peers=tp if tp > 1 else 0)
        candidates, cand_val, cand_idx = lay.argmax_chunks, A["part_val"], A["part_idx"]
        if tp > 1:
            # Every device's candidates, device by device, with indices
            # into the whole vocabulary.
            task("gather", [1], ["argmax_part"],
                 lambda t: gather_candidates(A["part_val"], A["part_idx"], A["all_val"], A["all_idx"], batch,
                                             lay.argmax_chunks, tp, V_lm),
                 nbytes=8 * tp * lay.argmax_chunks, flops=0)
            candidates, cand_val, cand_idx = tp * lay.argmax_chunks, A["all_val"], A["all_idx"]
        task("argmax", [1], ["gather" if tp > 1 else "argmax_part"],
             lambda t: et.argmax(cand_val, A["next_val"], A["next_token"], const(0),
                                 const(candidates), const(0), from_=cand_idx),
             nbytes=8 * candidates, flops=candidates)
    return module
