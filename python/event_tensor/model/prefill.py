"""The prefill kernel: one launch feeds a prompt chunk of one sequence
(rows at consecutive positions of one cache slot) through the model on the
prompt tiles, `et.matmul` for the linear layers and `et.attention_prefill`
for attention, and writes the greedy next token of its last row. It shares
the weights and KV caches of the decode kernel (same argument names and
shapes) and keeps its activations in buffers of its own (`p_*`).

The kernel is *layered*: each kind of work is one task over (layer, row
block, ...) with event tensors indexed by (layer, row block), so the kernel
has one body per kind, not per layer (the per-layer form took minutes to
compile for a 16-layer model). Tile counts are static, sized for the most
rows a launch takes (`PrefillTiles.max_rows`); tiles past the launch's row
count only signal. Dependencies follow the rows, so a row block moves on as
soon as its own producers are done:

    norm1[l, i] -> q, k, v[l, i, *] -> rope_kv[l, i] (Qwen3's q/k norms,
    RoPE, the KV append) -> attn[l, *] (every row block of the layer: causal
    attention reads all earlier positions) -> o[l, i, *] (added into h)
    -> norm2[l, i] -> gate_up[l, i, *] (silu(x wg^T) * (x wu^T) in one
    gated GEMM tile) -> down[l, i, *]
    (added into h) -> norm1[l + 1, i]

Layer 0's norm1 also gathers the embeddings. `o` and `down` may split K in
two (`PrefillTiles.split_k`): the first half's tiles add into h, the second
half's store into `p_part`, and the next norm adds `p_part` into h (its
residual form) before normalizing, so the sum is deterministic.

Only the KV caches and the last row's hidden state leave the last layer, so
by default (`PrefillTiles.last_layer="row"`) its attention runs only the
token block of the last row, and its `o`, norm2, MLP and `down` run on that
row alone as decode-style tiles (et.linear over a worker's share of the
output rows). Then the final norm of the last row, the LM head (et.linear,
one row) and the two-stage argmax.

On several devices (`tp` = N) each device holds the decode kernel's share
of the heads, MLP columns and vocabulary: `o` and `down` store partial sums
into the symmetric `p_part_o` / `p_part_d`, an `et.allreduce` per layer adds
every device's into h (so the next norm waits for the whole layer, not a
row block), every row runs the last layer (no row tail, no split K), and
the argmax gathers every device's candidates as the decode kernel does.
Must run inside an MLIR Context."""

from __future__ import annotations

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
    Module,
    ShapedType,
)
from ..build import ROWS_IN_FLIGHT
from ..collectives import gather_candidates
from .config import ModelConfig, tp_config
from .kernel.tiles import sum_block
from .kernel.views import cache_view, layer_view, model_arguments, mr, new_kernel, strided, vec_view
from .layout import KernelLayout

__all__ = ["PrefillTiles", "build_prefill_kernel", "prefill_gemm_shapes"]

DYN = ShapedType.get_dynamic_size()
SPLIT_LAYERS = ("o", "down")  # the linear layers that add into the residual stream
# Throughput of a 128-row gated tile of BN columns relative to BN = 256 on the
# H200: 128 x 128 tiles ran at about 530 TFLOP/s-equivalent against 720; 192
# was not timed per tile and is taken between the two. With them the wave
# rule picks what measured fastest: 256 for Llama-3.2-1B (512 tiles, 3.9
# waves), 192 for Qwen3-0.6B (256 tiles in 2 waves against 192 tiles, 1.5
# waves, of 256; 2.5% faster on the H100, docs/experiments/).
GATED_RATE = {256: 1.0, 192: 0.9, 128: 0.74}


def prefill_gemm_shapes(config: ModelConfig) -> dict[str, tuple[int, int]]:
    """(N, K) of each linear layer of the prefill kernel, by task name."""
    c = config
    H, I, D = c.hidden_size, c.intermediate_size, c.head_dim
    return {"q": (c.num_heads * D, H), "k": (c.num_kv_heads * D, H), "v": (c.num_kv_heads * D, H),
            "o": (H, c.num_heads * D), "gate": (I, H), "up": (I, H), "gate_up": (2 * I, H), "down": (H, I)}


class PrefillTiles:
    """Tile choices of a prefill kernel for launches of up to `max_rows`
    rows, all tasks on `threads` threads per worker:

    - `row_block`: rows per GEMM tile (its BM); events are indexed by it;
    - `row_tile`: rows per tile of the row-wise tasks (norms, RoPE and the
      KV append), a divisor of `row_block`: these ops spread a few rows over
      a worker's threads, so a whole row block per tile left them on a few
      workers (default 8: one row per warp of 256 threads);
    - `act_cols`: columns per SiLU tile (default 256);
    - `gate_up`: "fused" (the default): one gated GEMM tile (`et.matmul
      ... gated(%up)`) computes silu(x wg^T) * (x wu^T) from its f32
      accumulators, so the projections never leave the tile; else the
      gate and up GEMMs store their outputs ("bf16", as a bf16 model rounds
      them, or "f32") for a separate SiLU task;
    - `rows_in_flight`: rows of the norms (and elements per thread of the
      KV append) whose loads a thread has in flight together (1, 2, 4, 8
      or 16; default 4 on cuda: an 8-row tile one row at a time waited
      out two L2 round trips per row and pass; the lowering's
      `rows-in-flight`);
    - `lm_unroll`: 16-byte weight loads per lane in flight in the LM
      head's et.linear, the kernel's only one (the lowering's `unroll`;
      default 8: 256 threads at the lowering's default of 4 kept half the
      decode kernel's bytes in flight);
    - `attn_block`: tokens per attention tile (a divisor of `row_block`;
      default: the tile's 16 rows per warp shared by the query group);
    - `split_k`: 1 or 2 per accumulating linear layer ("o", "down"), or
      one value for both. With 2, the layer's K is split in two halves,
      each a tile of its own (twice the tiles of a block: larger tiles fill
      the workers). Default on cuda: 2 with the widest BN (256 or 128)
      whose split tiles fill half a wave to one wave of the workers (the
      "split rule"), else 1; on cpu: 1;
    - `last_layer`: "row" (the default) runs the last layer past its KV
      append for the last row only (see the module's docs), "full" for
      every row;
    - `gemm`: (BN, BK, stages) per linear layer (keys of
      `prefill_gemm_shapes`), or one triple for all. Default on cuda: the
      lowest predicted latency of the shipped GEMM models of `gpu` among
      the configurations with this BM and thread count, else a 128 x 128
      tile with 6 stages; on cpu: (32, 16, 1).

    `sources` records where each GEMM choice came from."""

    def __init__(self, config: ModelConfig, *, max_rows: int, target: str = "cuda", threads: int | None = None,
                 row_block: int | None = None, row_tile: int = 8, act_cols: int = 256, gate_up: str = "fused",
                 attn_block: int | None = None, gemm=None, gpu: str = "NVIDIA H200", workers: int = 132,
                 rows_in_flight: int | None = None, lm_unroll: int = 8, split_k=None, last_layer: str = "row"):
        if isinstance(max_rows, bool) or not isinstance(max_rows, int) or max_rows < 1:
            raise ValueError(f"max_rows must be a positive int, got {max_rows!r}")
        gpu_target = target == "cuda"
        self.threads = threads or (256 if gpu_target else 128)
        self.row_block = row_block or (128 if gpu_target else 16)
        if self.row_block % 16 or not 16 <= self.row_block <= 256:
            raise ValueError(f"row_block must be a multiple of 16 in [16, 256], got {self.row_block!r}")
        if isinstance(row_tile, bool) or not isinstance(row_tile, int) or row_tile < 1 or self.row_block % row_tile:
            raise ValueError(f"row_tile must divide row_block {self.row_block}, got {row_tile!r}")
        if isinstance(act_cols, bool) or not isinstance(act_cols, int) or act_cols < 1:
            raise ValueError(f"act_cols must be a positive int, got {act_cols!r}")
        if gate_up not in ("fused", "bf16", "f32"):
            raise ValueError(f"gate_up must be 'fused', 'bf16' or 'f32', got {gate_up!r}")
        self.row_tile, self.act_cols, self.gate_up = row_tile, act_cols, gate_up
        if rows_in_flight is None:
            rows_in_flight = 4 if gpu_target else 1
        if isinstance(rows_in_flight, bool) or rows_in_flight not in ROWS_IN_FLIGHT:
            raise ValueError(f"rows_in_flight must be 1, 2, 4, 8 or 16, got {rows_in_flight!r}")
        self.rows_in_flight = rows_in_flight
        if isinstance(lm_unroll, bool) or not isinstance(lm_unroll, int) or lm_unroll < 1:
            raise ValueError(f"lm_unroll must be a positive int, got {lm_unroll!r}")
        self.lm_unroll = lm_unroll
        if last_layer not in ("row", "full"):
            raise ValueError(f"last_layer must be 'row' or 'full', got {last_layer!r}")
        self.last_layer = last_layer
        group = config.num_heads // config.num_kv_heads
        if attn_block is None:
            # Tokens per attention tile: the most that fill the tile's rows
            # (16 a warp) with whole query groups, a divisor of row_block
            # and, on the GPU, whole warps (a group of 3 or 5 heads leaves
            # some of the tile's warps idle).
            rows = self.threads // 32 * 16
            fits = [d for d in range(1, self.row_block + 1)
                    if self.row_block % d == 0 and d * group <= rows and (not gpu_target or d * group % 16 == 0)]
            if not fits:
                raise ValueError(f"a query group of {group} heads does not fit the {rows} rows of an attention "
                                 f"tile on {self.threads} threads")
            attn_block = max(fits)
        if not isinstance(attn_block, int) or attn_block < 1 or self.row_block % attn_block:
            raise ValueError(f"attn_block must divide row_block {self.row_block}, got {attn_block!r}")
        self.attn_block = attn_block
        self.max_rows = max_rows
        shapes = prefill_gemm_shapes(config)
        for name in (("gate", "up") if gate_up == "fused" else ("gate_up",)):
            del shapes[name]
        if isinstance(split_k, dict):
            bad = set(split_k) - set(SPLIT_LAYERS)
            if bad:
                raise ValueError(f"split_k applies to {', '.join(SPLIT_LAYERS)}, got {sorted(bad)}")
        self.split_k = {}
        for name in SPLIT_LAYERS:
            value = split_k.get(name) if isinstance(split_k, dict) else split_k
            if value is not None and (isinstance(value, bool) or value not in (1, 2)):
                raise ValueError(f"split_k of {name} must be 1 or 2, got {value!r}")
            self.split_k[name] = value
        self.gemm, self.sources = {}, {}
        for name, (n, k) in shapes.items():
            choice = gemm.get(name) if isinstance(gemm, dict) else gemm
            split_bn = None
            if name in SPLIT_LAYERS and self.split_k[name] is None:
                split_bn = self._split_rule(n, workers) if gpu_target and choice is None else None
                self.split_k[name] = 2 if split_bn else 1
            if choice is not None:
                bn, bk, stages = choice
                source = "given"
            elif split_bn:
                # Two K halves in tiles of 128 x split_bn: Llama-3.2-1B's
                # `down` in 128 x 128 tiles ran at about 530 TFLOP/s-equivalent
                # against 720 for 128 x 256 tiles, and 128 x 256 tiles over
                # all of K were only 64 per layer (docs/experiments/).
                bn, bk, stages, source = split_bn, 64, 4, "split rule"
            elif gpu_target and name == "gate_up" and self.row_block == 128 and self.threads == 256 and \
                    -(-max_rows // 128) * -(-n // 256) >= workers:
                # Wide gated tiles while 128 x 256 ones fill the workers: on
                # the H200 5.3 ms against 5.7 ms for the models' 128 x 128
                # choice (Llama-3.2-1B, 1024 tokens); BN by waves
                # (docs/experiments/).
                bn, bk, stages, source = self._gated_bn(n, workers), 64, 4, "gated rule"
            elif gpu_target and name in ("q", "k", "v") and self.row_block == 128 and self.threads == 256 and \
                    -(-max_rows // 128) * sum(-(-shapes[p][0] // 256) for p in ("q", "k", "v")) <= workers:
                # q, k and v run at once: one wave of 128 x 256 tiles beat
                # 1.5 waves of 128 x 128 (Llama-3.2-1B, 1024 tokens: 5.02
                # against 5.16 ms on the H200; docs/experiments/).
                bn, bk, stages, source = 256, 64, 4, "one-wave rule"
            elif gpu_target:
                bn, bk, stages, source = self._choose(max_rows, n, k, gpu, workers)
            else:
                bn, bk, stages, source = 32, 16, 1, "cpu default"
            if name == "gate_up" and (bn % 32 or bn < 32):
                raise ValueError(f"a gated tile's BN holds both weights' rows: a multiple of 32, got {bn}")
            self.gemm[name] = (int(bn), int(bk), int(stages))
            self.sources[name] = source

    def _gated_bn(self, n: int, workers: int) -> int:
        """BN of the gated tiles (both weights' rows; `n` is 2 x I): the
        fewest waves of the workers, each as long as a tile of BN at its
        measured rate (GATED_RATE)."""
        def waves(bn):
            return -(-(self.row_blocks * -(-n // bn)) // workers) * bn / GATED_RATE[bn]
        return min(GATED_RATE, key=waves)

    def _split_rule(self, n: int, workers: int) -> int | None:
        """BN of two-way split-K tiles that fill half a wave to one wave of
        the workers (the widest of 256 and 128), or None."""
        if self.row_block != 128 or self.threads != 256:
            return None
        for bn in (256, 128):
            tiles = self.row_blocks * -(-n // bn) * 2
            if 2 * tiles >= workers and tiles <= workers:
                return bn
        return None

    def _choose(self, m: int, n: int, k: int, gpu: str, workers: int):
        from ..tuning import TableError, shipped_gemm_models

        try:
            models = shipped_gemm_models(gpu)
        except TableError:
            models = None
        if models is not None:
            fits = [cfg for cfg in models.models if cfg.tile[0] == self.row_block and cfg.threads == self.threads
                    and cfg.split_k == 1 and cfg.mma == "wgmma" and cfg.order == "auto"]
            if fits:
                best = min(fits, key=lambda cfg: models.predict(m, n, k, cfg))
                return best.tile[1], best.tile[2], best.stages, f"models {models.gpu}"
        return 128, 64, 6, "default"

    @property
    def row_blocks(self) -> int:
        return -(-self.max_rows // self.row_block)

    def to_dict(self) -> dict:
        return {"max_rows": self.max_rows, "threads": self.threads, "row_block": self.row_block,
                "row_tile": self.row_tile, "act_cols": self.act_cols, "gate_up": self.gate_up,
                "rows_in_flight": self.rows_in_flight, "lm_unroll": self.lm_unroll,
                "attn_block": self.attn_block, "split_k": dict(self.split_k), "last_layer": self.last_layer,
                "gemm": {name: {"tile": [self.row_block, bn, bk], "stages": s, "source": self.sources[name]}
                         for name, (bn, bk, s) in self.gemm.items()}}


def build_prefill_kernel(config: ModelConfig, layout: KernelLayout, tiles: PrefillTiles, *,
                         name: str = "prefill", tp: int = 1) -> Module:
    """The prefill kernel of `config` (the decode kernel's `layout` gives the
    cache shape and the argmax chunks), on `tp` devices (`tiles` chosen for
    one device's shapes, `tp_config`)."""
    k = _PrefillKernel(config, layout, tiles, name, tp)
    with InsertionPoint(k.kernel.entry_block), Location.unknown():
        k.attributes()
        k.events_of_layers()
        k.layer_inputs()
        k.attention()
        k.layer_outputs()
        done = k.row_tail() if k.row_tail_layer else k.down_of_last_row
        k.head(done)
    return k.module


class _PrefillKernel:
    """The prefill kernel being built: its shapes, arguments and events, the
    helpers its tasks are built with, and one method per phase (called in
    order, inside the kernel's body)."""

    def __init__(self, config: ModelConfig, layout: KernelLayout, tiles: PrefillTiles, name: str, tp: int = 1):
        c, lay = tp_config(config, tp), layout
        self.c, self.lay, self.tiles, self.tp = c, lay, tiles, tp
        # (V: this device's rows of the LM head.)
        self.L, self.H, self.I, self.V = c.num_layers, c.hidden_size, c.intermediate_size, c.vocab_size // tp
        self.Hq, self.Hkv, self.D = c.num_heads, c.num_kv_heads, c.head_dim
        self.S, self.R, self.RB = lay.max_context, tiles.row_block, tiles.row_blocks
        self.TB = self.RB * (self.R // tiles.attn_block)  # attention token blocks
        # Row tiles of the row-wise tasks.
        self.RT, self.rt = self.RB * (self.R // tiles.row_tile), tiles.row_tile
        self.bf16, self.f32, self.i32, self.idx = (BF16Type.get(), F32Type.get(), IntegerType.get_signless(32),
                                                   IndexType.get())
        self.fused = tiles.gate_up == "fused"
        self.gu = self.bf16 if tiles.gate_up == "bf16" else self.f32
        if tp > 1 and (max(tiles.split_k.values()) > 1 or tiles.last_layer == "row"):
            raise ValueError("a prefill kernel on several devices needs split_k 1 and last_layer 'full' (its o and "
                             f"down are all-reduced per layer), got split_k {tiles.split_k} and last_layer "
                             f"{tiles.last_layer!r}")
        self.split = tiles.split_k
        self.row_tail_layer = tiles.last_layer == "row"
        # Layers whose o, norm2, MLP and down run on every row.
        self.LB = self.L - 1 if self.row_tail_layer else self.L
        symmetric = ("part_val", "part_idx", "p_part_o", "p_part_d") if tp > 1 else ()
        self.module, self.kernel, self.A = new_kernel(name, self.arguments(), devices=tp if tp > 1 else None,
                                                      symmetric=symmetric)
        self.rows = self.A["rows"]
        self.events = {}

    def arguments(self) -> list:
        """The kernel's (name, type) arguments, in order."""
        c, lay, H, I, V, Hq, Hkv, D = self.c, self.lay, self.H, self.I, self.V, self.Hq, self.Hkv, self.D
        bf16, f32, i32, idx, gu = self.bf16, self.f32, self.i32, self.idx, self.gu
        args = [("rows", idx), ("slot", idx), ("pos0", idx), ("p_tokens", mr([DYN], i32)),
                ("p_positions", mr([DYN], i32))]
        args += [(n, mr([V, H], bf16) if n == "lm_head" else t) for n, t in model_arguments(c, lay)]
        args += [("p_h", mr([DYN, H], f32)), ("p_xn", mr([DYN, H], bf16)),
                 ("p_q", mr([DYN, Hq, D], f32)), ("p_k", mr([DYN, Hkv, D], f32)), ("p_v", mr([DYN, Hkv, D], f32)),
                 ("p_attn", mr([DYN, Hq, D], bf16)),
                 *([] if self.fused else [("p_g", mr([DYN, I], gu)), ("p_u", mr([DYN, I], gu))]),
                 ("p_act", mr([DYN, I], bf16)),
                 # The upper K halves of split o and down. One buffer serves both:
                 # o[l] writes a row block's rows after attn[l] and down[l] after
                 # norm2[l] read them, and norm1[l + 1], which reads down's, comes
                 # before that block's q, k, v, so before attn[l + 1] and o[l + 1].
                 *([("p_part", mr([DYN, H], f32))] if max(self.split.values()) > 1 else []),
                 ("xn", mr([DYN, H], bf16)),
                 # The last row's MLP in the last layer (the decode kernel's buffers).
                 *([("g", mr([DYN, I], f32)), ("u", mr([DYN, I], f32)), ("act", mr([DYN, I], bf16))]
                   if self.row_tail_layer else []),
                 ("logits", mr([DYN, V], f32)),
                 ("part_val", mr([DYN, lay.argmax_chunks], f32)), ("part_idx", mr([DYN, lay.argmax_chunks], i32)),
                 ("next_val", mr([DYN, 1], f32)), ("next_token", mr([DYN, 1], i32))]
        if self.tp == 1:
            # Every cache slot's tokens by position (the decode kernel's
            # buffer, read by its penalties).
            args += [("history", mr([lay.cache_slots, lay.cache_len], i32))]
        if self.tp > 1:
            # Partial sums of o and down (read by every device), and every
            # device's argmax candidates (the decode kernel's buffers).
            rows, chunks = self.tiles.max_rows, lay.argmax_chunks
            args += [("p_part_o", mr([rows, H], f32)), ("p_part_d", mr([rows, H], f32)),
                     ("all_val", mr([DYN, self.tp * chunks], f32)), ("all_idx", mr([DYN, self.tp * chunks], i32))]
        return args

    # -- helpers ---------------------------------------------------------

    def const(self, v: int):
        return arith.ConstantOp(self.idx, v).result

    @staticmethod
    def plus_one(v):
        return affine.apply(AffineMap.get(1, 0, [AffineExpr.get_dim(0) + 1]), [v])

    def task(self, tname, extents, body, *, waits=(), signal=None, live=None, nbytes=0, flops=0, peers=0):
        """A task over the static `extents`. `waits(*ids)` and
        `signal(*ids)` give (event, indices) pairs (signalled on each of
        the `peers` devices when given); `live(*ids)`, if given, is the
        condition under which the body runs (tiles past the launch's rows
        only signal)."""
        t = et.TaskOp(tname, [self.const(e) for e in extents])
        t.attributes["et.cost"] = Attribute.parse(f"#et.cost<bytes = {int(nbytes)}, flops = {int(flops)}>")
        with InsertionPoint(t.entry_block):
            ids = list(t.tile_ids)
            for ev, at in waits(*ids) if callable(waits) else waits:
                et.wait(self.events[ev], at)
            if live is None:
                body(*ids)
            else:
                guard = scf.IfOp(live(*ids))
                with InsertionPoint(guard.then_block):
                    body(*ids)
                    scf.YieldOp([])
            if signal is not None:
                ev, at = signal(*ids)
                for k in range(peers) if peers else [None]:
                    et.signal(self.events[ev], at, peer=k)

    def live_from(self, r0):
        """Row r0 is a row of this launch."""
        return arith.CmpIOp(arith.CmpIPredicate.ult, r0, self.rows).result

    def start(self, t, size: int):
        """Index t * size: the first row (or column) of tile t."""
        return arith.MulIOp(t, self.const(size)).result

    def block_live(self, i):
        return self.live_from(self.start(i, self.R))

    def row_range(self, buf, t, size: int, shape, elt):
        """Rows [t * size, min((t + 1) * size, rows)) of a [rows, *shape] buffer."""
        r0 = self.start(t, size)
        n = arith.MinSIOp(self.const(size), arith.SubIOp(self.rows, r0).result).result
        strides = [1] * len(shape)
        for j in range(len(shape) - 2, -1, -1):
            strides[j] = strides[j + 1] * shape[j + 1]
        full = [shape[0] * strides[0] if shape else 1] + strides
        return memref.SubViewOp(strided([DYN] + list(shape), elt, full), buf, [r0], [n], [],
                                static_offsets=[DYN] + [0] * len(shape),
                                static_sizes=[DYN] + list(shape),
                                static_strides=[1] * (len(shape) + 1)).result

    def row_block(self, buf, i, shape, elt):
        return self.row_range(buf, i, self.R, shape, elt)

    def tile_rows(self, buf, t, shape, elt):
        return self.row_range(buf, t, self.rt, shape, elt)

    def block_of(self, t):
        """The row block of row tile t."""
        return arith.DivUIOp(t, self.const(self.R // self.rt)).result

    def tile_live(self, t):
        return self.live_from(self.start(t, self.rt))

    @staticmethod
    def collapse(buf, n: int):
        return memref.collapse_shape(mr([DYN, n], buf.type.element_type), buf, [[0], [1, 2]])

    def last(self):
        return arith.SubIOp(self.rows, self.const(1)).result

    def last_row(self, buf, n: int, elt):
        """The last row of a [rows, n] buffer."""
        return memref.SubViewOp(strided([1, n], elt, [n, 1]), buf, [self.last()], [], [],
                                static_offsets=[DYN, 0], static_sizes=[1, n], static_strides=[1, 1]).result

    @staticmethod
    def first_row(buf, n: int, elt):
        return memref.subview(buf, [0, 0], [1, n], [1, 1], result_type=strided([1, n], elt, [n, 1], 0))

    def xn0(self):
        return self.first_row(self.A["xn"], self.H, self.bf16)

    def add_part(self, name, rows_of):
        """The residual form of a norm after a split layer: rmsnorm's
        x is p_part's rows and h its residual (h += p_part, stored)."""
        if self.split.get(name, 1) == 2:
            return dict(x=rows_of(self.A["p_part"]), residual=rows_of(self.A["p_h"]))
        return dict(x=rows_of(self.A["p_h"]))

    def rmsnorm(self, parts, w, y):
        et.rmsnorm(parts["x"], w, y, self.eps, residual=parts.get("residual"))

    def gemm_task(self, tname, x_of, weight, y_of, wait, accumulate=False, up=None, signal=None, layers=None,
                  signal_at=None):
        """y (+)= x w^T over (layer, column block, row block) tiles of
        the first `layers` layers (default: all); tile (l, j, i) waits on
        `wait`[l, i] and signals `signal`[l, i] (default: tname).
        Consecutive tiles share a weight block (column-major, as the
        standalone GEMM orders blocks when N > M): the tiles that run at
        once read each weight block once, and x (a few MB) stays in L2.
        With `up` (a second weight), gated tiles of BN / 2 output columns.
        With split_k 2 (accumulating layers), a second task `<tname>_part`
        takes the upper half of K into p_part and signals the same
        element. `signal_at(l, j, i)`, if given, is the (event, indices)
        a tile signals instead."""
        layers = self.L if layers is None else layers
        if layers == 0:
            return
        A, R, const, start = self.A, self.R, self.const, self.start
        n, k = prefill_gemm_shapes(self.c)[tname]
        bn, bk, stages = self.tiles.gemm[tname]
        if up is not None:
            n //= 2
        out_bn = bn // 2 if up is not None else bn
        blocks_n = -(-n // out_bn)
        tile_attr = DenseI64ArrayAttr.get([R, bn, bk])
        halves = self.split.get(tname, 1) if accumulate else 1
        # The split point: half of K rounded up to whole BK slices.
        half = -(-k // 2)
        k_mid = -(-half // bk) * bk

        def body_of(y, k_range, acc):
            def body(l, j, i):
                et.matmul(x_of(l), layer_view(A[weight], l, n, k), y(l), start(i, R), start(j, out_bn),
                          k_range, tile_attr, stages=stages,
                          accumulate=True if acc else None,
                          up=None if up is None else layer_view(A[up], l, n, k))
            return body
        parts = [(tname, body_of(y_of, [], accumulate), k)]
        if halves == 2:
            parts = [(tname, body_of(y_of, [const(0), const(k_mid)], True), k_mid),
                     (tname + "_part", body_of(lambda l: A["p_part"], [const(k_mid), const(k)], False),
                      k - k_mid)]
        for pname, body, kk in parts:
            self.task(pname, [layers, blocks_n, self.RB], body, waits=lambda l, j, i: [(wait, [l, i])],
                      signal=signal_at or (lambda l, j, i: (signal or tname, [l, i])),
                      live=lambda l, j, i: self.block_live(i),
                      nbytes=2 * kk * (R + bn), flops=2 * R * bn * kk)

    def linear_task(self, tname, n, k, body, wait):
        """A one-row task over N = n output rows, about one share per
        worker: body(row0, rows) per tile; it waits on `wait()` and
        signals the scalar event `tname`."""
        per = max(1, -(-n // self.lay.workers))
        self.events[tname] = et.event([])
        self.task(tname, [-(-n // per)], lambda t: body(self.start(t, per), self.const(per)), waits=lambda t: [wait()],
                  signal=lambda t: (tname, []), nbytes=2 * per * k, flops=2 * per * k)

    # -- phases ----------------------------------------------------------

    def attributes(self) -> None:
        c, f32 = self.c, self.f32
        self.eps = FloatAttr.get(f32, c.rms_norm_eps)
        self.scale = FloatAttr.get(f32, self.D ** -0.5)
        self.theta = FloatAttr.get(f32, c.rope_theta)
        self.scaling = DenseF32ArrayAttr.get([float(x) for x in c.rope_scaling]) if c.rope_scaling else None

    def events_of_layers(self) -> None:
        """The event tensors of the layers' tasks, by (layer[, row block])."""
        L, LB, RB = self.L, self.LB, self.RB
        for ev, shape in (("norm1", [L, RB]), ("q", [L, RB]), ("k", [L, RB]), ("v", [L, RB]),
                          ("rope_kv", [L]), ("attn", [L, RB]), ("o", [LB, RB]), ("norm2", [LB, RB]),
                          ("gate", [LB, RB]), ("up", [LB, RB]), ("act", [LB, RB]), ("down", [LB, RB])):
            if not (self.fused and ev in ("gate", "up")) and not (self.tp > 1 and ev in ("o", "down")) and \
                    shape[0] > 0:
                self.events[ev] = et.event(shape)
        if self.tp > 1:
            # Per layer: the row-parallel layers' partials, and their sums.
            for ev in ("o_part", "sum_o", "down_part", "sum_d"):
                self.events[ev] = et.event([L])

    def layer_inputs(self) -> None:
        """norm1 (layer 0's gathering the embeddings), q, k and v, and
        rope_kv: Qwen3's q/k norms, RoPE and the KV append."""
        A, c, L, H, Hq, Hkv, D, rt, RT = self.A, self.c, self.L, self.H, self.Hq, self.Hkv, self.D, self.rt, self.RT
        bf16, f32, i32, eps = self.bf16, self.f32, self.i32, self.eps
        tile_rows, block_of = self.tile_rows, self.block_of

        def norm1(l, t):
            et.rmsnorm(tile_rows(A["p_h"], t, [H], f32), vec_view(A["ln1"], l, H),
                       tile_rows(A["p_xn"], t, [H], bf16), eps)

        def record(t):
            # Thread 0: the tile's tokens into the slot's history.
            r0 = self.start(t, rt)
            end = arith.MinSIOp(arith.AddIOp(r0, self.const(rt)).result, self.rows).result
            loop = scf.ForOp(r0, end, self.const(1))
            with InsertionPoint(loop.body):
                r = loop.induction_variable
                pos = arith.IndexCastOp(self.idx, memref.LoadOp(A["p_positions"], [r]).result).result
                memref.StoreOp(memref.LoadOp(A["p_tokens"], [r]).result, A["history"], [A["slot"], pos])
                scf.YieldOp([])

        def embed_norm1(t):
            et.embedding(A["embed"], self.row_range(A["p_tokens"], t, rt, [], i32), tile_rows(A["p_h"], t, [H], f32))
            if "history" in A:
                first = arith.CmpIOp(arith.CmpIPredicate.eq, et.ThreadIdOp(self.idx).result, self.const(0)).result
                guard = scf.IfOp(first)
                with InsertionPoint(guard.then_block):
                    record(t)
                    scf.YieldOp([])
            norm1(0, t)
        self.task("norm1_first", [RT], embed_norm1, signal=lambda t: ("norm1", [self.const(0), block_of(t)]),
                  live=self.tile_live, nbytes=8 * rt * H)

        def norm1_next(p, t):
            self.rmsnorm(self.add_part("down", lambda buf: tile_rows(buf, t, [H], f32)),
                         vec_view(A["ln1"], self.plus_one(p), H), tile_rows(A["p_xn"], t, [H], bf16))
        if L > 1:
            self.task("norm1", [L - 1, RT], norm1_next,
                      waits=lambda p, t: [("sum_d", [p]) if self.tp > 1 else ("down", [p, block_of(t)])],
                      signal=lambda p, t: ("norm1", [self.plus_one(p), block_of(t)]),
                      live=lambda p, t: self.tile_live(t), nbytes=6 * rt * H)
        xn = lambda l: A["p_xn"]  # noqa: E731
        self.gemm_task("q", xn, "wq", lambda l: self.collapse(A["p_q"], Hq * D), "norm1")
        self.gemm_task("k", xn, "wk", lambda l: self.collapse(A["p_k"], Hkv * D), "norm1")
        self.gemm_task("v", xn, "wv", lambda l: self.collapse(A["p_v"], Hkv * D), "norm1")

        def rope_kv(l, t):
            q = tile_rows(A["p_q"], t, [Hq, D], f32)
            k = tile_rows(A["p_k"], t, [Hkv, D], f32)
            if c.qk_norm:
                et.rmsnorm(_heads_rows(q, Hq, D), vec_view(A["q_norm"], l, D), _heads_rows(q, Hq, D), eps)
                et.rmsnorm(_heads_rows(k, Hkv, D), vec_view(A["k_norm"], l, D), _heads_rows(k, Hkv, D), eps)
            pos = self.row_range(A["p_positions"], t, rt, [], i32)
            et.rope(q, pos, self.theta, llama3_scaling=self.scaling)
            et.rope(k, pos, self.theta, llama3_scaling=self.scaling)
            at = arith.AddIOp(A["pos0"], self.start(t, rt)).result
            et.kv_append(k, cache_view(A["k_cache"], self.S, l, A["slot"]), at)
            et.kv_append(tile_rows(A["p_v"], t, [Hkv, D], f32), cache_view(A["v_cache"], self.S, l, A["slot"]), at)
        self.task("rope_kv", [L, RT], rope_kv,
                  waits=lambda l, t: [(ev, [l, block_of(t)]) for ev in ("q", "k", "v")],
                  signal=lambda l, t: ("rope_kv", [l]), live=lambda l, t: self.tile_live(t),
                  nbytes=8 * rt * (Hq + Hkv) * D)

    def attention(self) -> None:
        """attn: causal attention of every token block of a layer over the
        cache (in the last layer with the row tail, the last row's block
        only)."""
        A, L, Hq, Hkv, D, S, const = self.A, self.L, self.Hq, self.Hkv, self.D, self.S, self.const
        ab = self.tiles.attn_block
        per_block = self.R // ab

        def attn(l, tb, g):
            et.attention_prefill(A["p_q"], cache_view(A["k_cache"], S, l, A["slot"]),
                                 cache_view(A["v_cache"], S, l, A["slot"]), A["p_attn"], g, self.start(tb, ab),
                                 A["pos0"], ab, self.scale)

        def attn_live(l, tb):
            live = self.live_from(self.start(tb, ab))
            if not self.row_tail_layer:
                return live
            # In the last layer, only the token block of the last row.
            last_block = arith.CmpIOp(arith.CmpIPredicate.eq, tb, arith.DivUIOp(self.last(), const(ab)).result).result
            in_body = arith.CmpIOp(arith.CmpIPredicate.ult, l, const(L - 1)).result
            return arith.AndIOp(live, arith.OrIOp(in_body, last_block).result).result
        self.task("attn", [L, self.TB, Hkv], attn, waits=lambda l, tb, g: [("rope_kv", [l])],
                  signal=lambda l, tb, g: ("attn", [l, arith.DivUIOp(tb, const(per_block)).result]),
                  live=lambda l, tb, g: attn_live(l, tb),
                  nbytes=4 * S * D, flops=4 * S * D * ab * (Hq // Hkv))

    def layer_outputs(self) -> None:
        """o (added into h), norm2, the gated MLP (or gate, up and act) and
        down (added into h), in the layers that run them on every row."""
        A, H, I, Hq, D, LB, R, rt = self.A, self.H, self.I, self.Hq, self.D, self.LB, self.R, self.rt
        bf16, f32, gu, tile_rows, block_of = self.bf16, self.f32, self.gu, self.tile_rows, self.block_of
        xn = lambda l: A["p_xn"]  # noqa: E731
        self.row_parallel("o", lambda l: self.collapse(A["p_attn"], Hq * D), "wo", "attn")
        if LB:
            self.task("norm2", [LB, self.RT],
                      lambda l, t: self.rmsnorm(self.add_part("o", lambda buf: tile_rows(buf, t, [H], f32)),
                                                vec_view(A["ln2"], l, H), tile_rows(A["p_xn"], t, [H], bf16)),
                      waits=lambda l, t: [("sum_o", [l]) if self.tp > 1 else ("o", [l, block_of(t)])],
                      signal=lambda l, t: ("norm2", [l, block_of(t)]),
                      live=lambda l, t: self.tile_live(t), nbytes=6 * rt * H)
        if self.fused:
            self.gemm_task("gate_up", xn, "wg", lambda l: A["p_act"], "norm2", up="wu", signal="act", layers=LB)
        elif LB:
            self.gemm_task("gate", xn, "wg", lambda l: A["p_g"], "norm2", layers=LB)
            self.gemm_task("up", xn, "wu", lambda l: A["p_u"], "norm2", layers=LB)
            ac = self.tiles.act_cols
            row_block = self.row_block
            self.task("act", [LB, self.RB, -(-I // ac)],
                      lambda l, i, j: et.silu_mul(row_block(A["p_g"], i, [I], gu), row_block(A["p_u"], i, [I], gu),
                                                  row_block(A["p_act"], i, [I], bf16), self.start(j, ac),
                                                  self.const(ac)),
                      waits=lambda l, i, j: [("gate", [l, i]), ("up", [l, i])],
                      signal=lambda l, i, j: ("act", [l, i]), live=lambda l, i, j: self.block_live(i),
                      nbytes=(2 * (2 if gu == bf16 else 4) + 2) * R * ac)
        self.row_parallel("down", lambda l: A["p_act"], "wd", "act")

    def row_parallel(self, tname, x_of, weight, wait) -> None:
        """o or down, added into h: on one device by the GEMM tiles; on
        several, their partials into p_part_o / p_part_d, then the
        all-reduce of each layer (task sum_o / sum_d)."""
        A, LB = self.A, self.LB
        if self.tp == 1:
            self.gemm_task(tname, x_of, weight, lambda l: A["p_h"], wait, accumulate=True, layers=LB)
            return
        part = "p_part_" + tname[0]
        self.gemm_task(tname, x_of, weight, lambda l: A[part], wait, layers=LB,
                       signal_at=lambda l, j, i: (tname + "_part", [l]))
        et.AllReduceOp(A[part], A["p_h"], self.rows, self.events[tname + "_part"], self.events["sum_" + tname[0]],
                       self.sum_columns(), task="sum_" + tname[0])

    def sum_columns(self) -> int:
        """Columns per tile of the prefill's all-reduces: a tile adds all
        the launch's rows of its columns, so about one tile per worker
        (the largest power of two up to H / workers that divides H, at
        least 4; the decode kernel's `sum_block` of up to 512 columns gave
        a 4096-wide model 8 tiles for up to 512 rows). Not yet timed."""
        block = 4
        while block * 2 <= self.H // self.lay.workers and self.H % (block * 2) == 0:
            block *= 2
        return block if self.H % block == 0 else sum_block(self.H)

    def down_of_last_row(self):
        """The end of the last row's residual stream without the row tail:
        down[L - 1]'s element of its row block (on several devices, the
        sum of the last layer's down)."""
        if self.tp > 1:
            return ("sum_d", [self.const(self.L - 1)])
        return ("down", [self.const(self.L - 1), arith.DivUIOp(self.last(), self.const(self.R)).result])

    def row_tail(self):
        """The last layer past its attention, for the last row: decode-style
        tiles of about one share of the output rows per worker. Returns
        the (event, indices) of its end."""
        A, L, H, I, Hq, D, bf16, f32 = self.A, self.L, self.H, self.I, self.Hq, self.D, self.bf16, self.f32
        first_row, xn0 = self.first_row, self.xn0
        h_last = lambda: self.last_row(A["p_h"], H, f32)  # noqa: E731
        lw = lambda: self.const(L - 1)  # noqa: E731
        self.linear_task("o_last", H, Hq * D,
                         lambda r0, n: et.linear(self.last_row(self.collapse(A["p_attn"], Hq * D), Hq * D, bf16),
                                                 layer_view(A["wo"], lw(), H, Hq * D), h_last(), r0, n,
                                                 accumulate=True),
                         lambda: ("attn", [lw(), arith.DivUIOp(self.last(), self.const(self.R)).result]))
        self.events["norm2_last"] = et.event([])
        self.task("norm2_last", [1], lambda t: et.rmsnorm(h_last(), vec_view(A["ln2"], lw(), H), xn0(), self.eps),
                  waits=[("o_last", [])], signal=lambda t: ("norm2_last", []), nbytes=6 * H)

        def mlp_last(r0, n):
            g, u = first_row(A["g"], I, f32), first_row(A["u"], I, f32)
            et.linear(xn0(), layer_view(A["wg"], lw(), I, H), g, r0, n)
            et.linear(xn0(), layer_view(A["wu"], lw(), I, H), u, r0, n)
            et.silu_mul(g, u, first_row(A["act"], I, bf16), r0, n)
        self.linear_task("mlp_last", I, 2 * H, mlp_last, lambda: ("norm2_last", []))
        self.linear_task("down_last", H, I,
                         lambda r0, n: et.linear(first_row(A["act"], I, bf16), layer_view(A["wd"], lw(), H, I),
                                                 h_last(), r0, n, accumulate=True),
                         lambda: ("mlp_last", []))
        return lambda: ("down_last", [])

    def head(self, done) -> None:
        """The last row: final norm into xn[0], LM head, argmax; `done()`
        is the (event, indices) of the end of its residual stream."""
        A, H, V, lay, f32, i32 = self.A, self.H, self.V, self.lay, self.f32, self.i32
        first_row, const = self.first_row, self.const

        def final_norm(t):
            # The row tail's down adds into h itself; a split down[L - 1]
            # left its upper half in p_part.
            rows_of = lambda buf: self.last_row(buf, H, f32)  # noqa: E731
            self.rmsnorm(dict(x=rows_of(A["p_h"])) if self.row_tail_layer else self.add_part("down", rows_of),
                         A["final_norm"], self.xn0())
        self.events["final_norm"] = et.event([])
        self.task("final_norm", [1], final_norm, waits=lambda t: [done()], signal=lambda t: ("final_norm", []),
                  nbytes=6 * H)
        self.linear_task("lm_head", V, H,
                         lambda r0, n: et.linear(self.xn0(), A["lm_head"], first_row(A["logits"], V, f32), r0, n),
                         lambda: ("final_norm", []))
        chunk, chunks, tp = -(-V // lay.argmax_chunks), lay.argmax_chunks, self.tp
        self.events["argmax_part"] = et.event([])
        self.task("argmax_part", [chunks],
                  lambda t: et.argmax(first_row(A["logits"], V, f32), first_row(A["part_val"], chunks, f32),
                                      first_row(A["part_idx"], chunks, i32),
                                      self.start(t, chunk), const(chunk), t),
                  waits=[("lm_head", [])], signal=lambda t: ("argmax_part", []), nbytes=4 * chunk, flops=chunk,
                  peers=tp if tp > 1 else 0)
        before, cand_val, cand_idx = "argmax_part", A["part_val"], A["part_idx"]
        if tp > 1:
            # Every device's candidates, with indices into the whole vocabulary.
            self.events["gather"] = et.event([])
            self.task("gather", [1],
                      lambda t: gather_candidates(A["part_val"], A["part_idx"], A["all_val"], A["all_idx"], const(1),
                                                  chunks, tp, V),
                      waits=[("argmax_part", [])], signal=lambda t: ("gather", []), nbytes=8 * tp * chunks)
            before, cand_val, cand_idx, chunks = "gather", A["all_val"], A["all_idx"], tp * chunks
        self.task("argmax", [1],
                  lambda t: et.argmax(first_row(cand_val, chunks, f32), first_row(A["next_val"], 1, f32),
                                      first_row(A["next_token"], 1, i32), const(0), const(chunks), const(0),
                                      from_=first_row(cand_idx, chunks, i32)),
                  waits=[(before, [])], nbytes=8 * chunks, flops=chunks)


def _heads_rows(x, heads: int, dim: int):
    """A [n, heads, D] row block as [n * heads, D] (per-head norms)."""
    return memref.collapse_shape(strided([DYN, dim], F32Type.get(), [dim, 1]), x, [[0, 1], [2]])
