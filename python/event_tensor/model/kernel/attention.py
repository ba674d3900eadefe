"""The attention block of a decode layer: its norm (`norm1`, unless the
`qkv` tiles fuse it), the q/k/v projection (`qkv`), RoPE and the KV-cache
append (`qk`), the attention over splits of the context (`attn`), their
merge (`merge`) and the output projection (`o`), or with `o_per_head` the
merge inside the `o` tiles."""

from __future__ import annotations

from ...dialects import arith, et, memref, scf
from ...ir import InsertionPoint, IntegerType, Location, MemRefType
from ..layout import MIN_SPLIT_LEN
from .layers import LayerTask
from .linear import linear_body, norm_input, normalized
from .tiles import QK_TILE_WARPS, mma_m_block, mma_qkv_block
from .views import DYN, cache_view, layer_view, shared, strided, vec_view

__all__ = ["Attention"]


class Attention:
    """The attention block's tasks of the `DecodeContext` `ctx`. Building it
    emits what the kernel computes once, before its tasks (the attention
    tiles per row of the launch, when the split length is chosen per
    launch)."""

    def __init__(self, ctx):
        self.ctx = ctx
        c, lay, options = ctx.c, ctx.layout, ctx.options
        A, H, Hq, Hkv, D, mma = ctx.A, ctx.H, ctx.Hq, ctx.Hkv, ctx.D, ctx.mma
        # Attention tiles per row for about one wave at this launch's
        # batch (see split_of), at least one, in the kernels that choose
        # their split per launch (`KernelLayout.runtime_splits`; the others
        # keep the static split); i32 arithmetic, which the GPU divides
        # faster than index.
        if lay.runtime_splits:
            c32 = self.c32
            self.wave = arith.MaxUIOp(arith.DivUIOp(c32(lay.workers), arith.MulIOp(
                c32(Hkv), arith.IndexCastOp(ctx.i32, ctx.batch).result).result).result, c32(1)).result
        # o_per_head: tiles per query head (blocks of rows of h), about one
        # tile per worker in all.
        o_blocks = max(1, lay.workers // Hq)
        self.o_head_rows = -(-H // o_blocks)
        self.o_blocks = -(-H // self.o_head_rows)
        # The qkv tiles: q, k and v blocks as tiles of their own (tile t <
        # tq is a q block, then the k blocks, then the v blocks), or k and
        # v rows riding in the q tiles. Tensor-core tiles take one BN for
        # the three, chosen together.
        qkv_rows = mma_qkv_block(c, mma_m_block(ctx.B), lay.workers) if mma else ctx.qkv_rows
        self.separate = mma or ctx.qkv_by_matrix
        rows = qkv_rows if self.separate else None
        self.q_lin = linear_body(ctx, "wq", Hq * D, H, ctx.normalized_rows, None, A["q"], rows=rows)
        if self.separate:
            self.k_lin = linear_body(ctx, "wk", Hkv * D, H, ctx.normalized_rows, None, A["k"], rows=rows)
            self.v_lin = linear_body(ctx, "wv", Hkv * D, H, ctx.normalized_rows, None, A["v"], rows=rows)
            self.qkv_tiles = self.q_lin[1] + self.k_lin[1] + self.v_lin[1]
        else:
            # K and V rows ride in the q tiles: one task, one tile per
            # worker, three independent linear layers per tile.
            self.qkv_tiles = self.q_lin[1]
            kv_rows = -(-(Hkv * D) // self.qkv_tiles)
            self.k_lin = linear_body(ctx, "wk", Hkv * D, H, ctx.normalized_rows, None, A["k"], rows=kv_rows)
            self.v_lin = linear_body(ctx, "wv", Hkv * D, H, ctx.normalized_rows, None, A["v"], rows=kv_rows)
        tp = options.tp
        self.o_lin = linear_body(ctx, "wo", H, Hq * D, lambda: ctx.collapse(A["attn"], Hq * D),
                                 ctx.batch_rows(A["part_o"]) if tp > 1 else A["h"], accumulate=tp == 1)
        # KV heads per qk tile: by default the fewest that still leave no
        # qk tile on a worker that runs a qkv tile (on the H100, a qk tile
        # behind a qkv tile on its worker started 0.5-1.1 us after those on
        # idle workers, and the phase waits for its last tile), with at most
        # a worker's warps' worth of heads (a warp per head).
        qk_heads = options.qk_heads
        if qk_heads is None:
            idle = lay.workers - self.qkv_tiles
            fits = [n for n in range(1, Hkv + 1) if Hkv % n == 0
                    and n * (c.group_size + 1) <= (ctx.warps or QK_TILE_WARPS) and ctx.B * (Hkv // n) <= idle]
            qk_heads = fits[0] if fits else 1
        self.qk_heads = qk_heads
        # KV heads per merge tile: one (row, KV head) a tile while those
        # tiles fit one wave of the workers, else a whole row a tile (every
        # KV head). In the 64-row Llama-3.2-1B kernel the 512 tiles of one
        # head each took 9 us of a 185 us layer on the H200, set by their
        # count; a tile per row made the step 7-10% faster on the H100 at
        # batch 32 and 64, and the 16-row kernel (128 tiles, one wave) 1%
        # slower (docs/experiments/2026-12-07-merge-rows.md).
        self.merge_heads = 1 if ctx.B * Hkv <= lay.workers else Hkv

    def c32(self, v: int):
        return arith.ConstantOp(self.ctx.i32, v).result

    # -- the layer's tasks -------------------------------------------------

    def entry(self) -> LayerTask:
        """The task that starts each layer: `norm1`, or with fused norms
        the `qkv` tiles, which normalize themselves."""
        ctx = self.ctx
        if ctx.options.fuse_norms:
            return self.qkv_task()._replace(waits=[])
        return LayerTask("norm1", self.norm1_body, [ctx.B], False, [], 2 * ctx.H, 5 * ctx.H)

    def qkv_task(self) -> LayerTask:
        q_lin, k_lin, v_lin = self.q_lin, self.k_lin, self.v_lin
        return LayerTask("qkv", self.qkv_body, [self.qkv_tiles], False, ["norm1"], q_lin[2] + k_lin[2] + v_lin[2],
                         q_lin[3] + k_lin[3] + v_lin[3])

    def tasks(self) -> list[LayerTask]:
        """The block's tasks within a layer, in order, each waiting on
        tasks of the same layer."""
        ctx = self.ctx
        c, lay, D, B, Hkv, Hq = ctx.c, ctx.layout, ctx.D, ctx.B, ctx.Hkv, ctx.Hq
        o_lin, qk_heads = self.o_lin, self.qk_heads
        tasks = [
            self.qkv_task(),
            LayerTask("qk", self.qk_body, [Hkv // qk_heads], True, ["qkv"], 4 * D * (c.group_size + 4) * qk_heads,
                      8 * D * (c.group_size + 1) * qk_heads),
            self.attn_task(),
        ]
        if ctx.options.o_per_head:
            tasks.append(LayerTask("o", self.o_head_body, [Hq * self.o_blocks], False, ["attn"],
                                   self.o_head_rows * D * 2 + B * 4 * lay.splits * (D + 1),
                                   2 * B * self.o_head_rows * D, pre=self.o_head_pre))
        else:
            mh = self.merge_heads
            tasks += [LayerTask("merge", self.merge_body, [Hkv // mh], True, ["attn"],
                                4 * lay.splits * c.group_size * mh * (D + 1), 2 * lay.splits * c.group_size * mh * D,
                                pre=self.merge_pre),
                      LayerTask("o", o_lin[0], [o_lin[1]], False, ["merge"], o_lin[2], o_lin[3])]
        return tasks

    def attn_task(self) -> LayerTask:
        """The attention tiles: per (row, KV head, split) in one-row
        kernels. In kernels of several rows tile i of the task's
        (split, row, KV head) takes work item i of the launch's rows
        (split, row < batch, KV head), the split slowest: the tiles with
        work are the first ones, whatever the launch's batch and split
        length (`split_of`) leave empty, so that the static schedule
        spreads them over the workers. In (row, KV head, split) order the
        empty splits of a batch-16 launch were every other pair of tiles,
        and the schedule dealt them to the same workers: half of them ran
        four long tiles, the other half none
        (docs/experiments/2026-11-28-norm-once-mma.md)."""
        ctx = self.ctx
        c, lay, D, Hkv, B, const = ctx.c, ctx.layout, ctx.D, ctx.Hkv, ctx.B, ctx.const
        nbytes, flops = 4 * lay.split_len * D, 4 * lay.split_len * D * c.group_size
        if B == 1:
            return LayerTask("attn", self.attn_body, [Hkv, lay.splits], True, ["qk"], nbytes, flops,
                             pre=self.attn_pre)

        def pre(l, s, b, g, live=None):
            i = arith.AddIOp(arith.MulIOp(arith.AddIOp(arith.MulIOp(s, const(B)).result, b).result,
                                          const(Hkv)).result, g).result
            # (A launch of no rows: every tile dead, no division by 0.)
            per = arith.MaxUIOp(arith.MulIOp(ctx.batch, const(Hkv)).result, const(1)).result
            s = arith.DivUIOp(i, per).result
            r = arith.RemUIOp(i, per).result
            b, g = arith.DivUIOp(r, const(Hkv)).result, arith.RemUIOp(r, const(Hkv)).result
            live = arith.AndIOp(arith.CmpIOp(arith.CmpIPredicate.ult, s, const(lay.splits)).result,
                                arith.CmpIOp(arith.CmpIPredicate.ult, b, ctx.batch).result).result
            return dict(self.attn_pre(l, b, g, s, live=live), item=(b, g, s))
        return LayerTask("attn", lambda l, s, b, g, pre: self.attn_body(l, *pre["item"], pre),
                         [lay.splits, B, Hkv], False, ["qk"], nbytes, flops, pre=pre)

    # -- norm1 and qkv -----------------------------------------------------

    def norm1_body(self, l, b):
        self.ctx.norm_row(vec_view(self.ctx.A["ln1"], l, self.ctx.H), b)

    def qkv_body(self, l, t):
        ctx = self.ctx
        A, H, fuse_norms = ctx.A, ctx.H, ctx.options.fuse_norms
        q_lin, k_lin, v_lin = self.q_lin, self.k_lin, self.v_lin
        if not self.separate:
            x, norm = norm_input(ctx, vec_view(A["ln1"], l, H), t, "qkv") if fuse_norms else (None, {})
            q_lin[0](l, t, x, norm)
            k_lin[0](l, t, x, norm)
            v_lin[0](l, t, x, norm)
            return
        if not ctx.mma:
            return self.qkv_pick(l, t)
        const = ctx.const
        x = normalized(ctx, vec_view(A["ln1"], l, H), t) if fuse_norms else None
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

    def qkv_pick(self, l, t):
        # One et.linear whose weights, output and first row the
        # tile picks (arith.select), so that it stays at the task's
        # top level: its first weight loads can go out ahead of the
        # tile's norm.
        ctx = self.ctx
        A, H, Hq, Hkv, D, const, bf16, f32 = ctx.A, ctx.H, ctx.Hq, ctx.Hkv, ctx.D, ctx.const, ctx.bf16, ctx.f32
        qkv_rows = ctx.qkv_rows
        x, norm = norm_input(ctx, vec_view(A["ln1"], l, H), t, "qkv") if ctx.options.fuse_norms else (None, {})
        first_k, first_v = self.q_lin[1], self.q_lin[1] + self.k_lin[1]
        is_q = arith.CmpIOp(arith.CmpIPredicate.ult, t, const(first_k)).result
        is_k = arith.CmpIOp(arith.CmpIPredicate.ult, t, const(first_v)).result

        def pick(a, b, c):
            return arith.SelectOp(is_q, a, arith.SelectOp(is_k, b, c).result).result

        w_type = strided([DYN, H], bf16, [H, 1])
        y_type = MemRefType.get([DYN, DYN], f32, loc=Location.unknown())
        w = pick(*(memref.cast(w_type, layer_view(A[name], l, n, H))
                   for name, n in (("wq", Hq * D), ("wk", Hkv * D), ("wv", Hkv * D))))
        y = pick(*(memref.cast(y_type, ctx.collapse(A[name], n))
                   for name, n in (("q", Hq * D), ("k", Hkv * D), ("v", Hkv * D))))
        tile = pick(t, arith.SubIOp(t, const(first_k)).result, arith.SubIOp(t, const(first_v)).result)
        et.linear(x if x is not None else ctx.normalized_rows(), w, y, arith.MulIOp(tile, const(qkv_rows)).result,
                  const(qkv_rows), **norm)

    # -- qk: RoPE and the KV append ----------------------------------------

    def heads(self, buf, b, h0, n: int, total: int, *, rank3: bool = True):
        """Heads [h0, h0 + n) of row b of a [batch, total, D] f32
        buffer: [1, n, D], or [n, D] with rank3=False."""
        D = self.ctx.D
        shape = [1, n, D] if rank3 else [n, D]
        strides = [total * D, D, 1] if rank3 else [D, 1]
        return memref.subview(buf, [b, h0, 0], [1, n, D], [1, 1, 1],
                              result_type=strided(shape, self.ctx.f32, strides))

    def pos_of(self, b):
        """Row b's position as a [1] view; row 0's for a tile past the
        runtime batch (et.rope_into may read it before the wait, outside
        the tile's guard)."""
        ctx = self.ctx
        inside = arith.CmpIOp(arith.CmpIPredicate.ult, b, ctx.batch).result
        b = arith.SelectOp(inside, b, ctx.const(0)).result
        return ctx.entry(ctx.A["positions"], b, ctx.i32)

    def rotate_kv(self, l, b, g, n: int):
        """KV heads [g, g + n) of row b: their keys normalized (Qwen3),
        rotated and written into the row's cache slot at its position
        (et.rope_into), their values there too (et.kv_append)."""
        ctx = self.ctx
        A, D, Hkv = ctx.A, ctx.D, ctx.Hkv
        slot = ctx.slot_of(b)
        row = ctx.position(b)
        k_norm = dict(norm=vec_view(A["k_norm"], l, D), eps=ctx.eps) if ctx.c.qk_norm else {}
        et.rope_into(self.heads(A["k"], b, g, n, Hkv), self.pos_of(b),
                     cache_view(A["k_cache"], ctx.S, l, slot, g, n), row, ctx.theta, llama3_scaling=ctx.scaling,
                     **k_norm)
        et.kv_append(self.heads(A["v"], b, g, n, Hkv), cache_view(A["v_cache"], ctx.S, l, slot, g, n), row)

    def rotate_q(self, l, b, g, n: int):
        """The query heads of KV heads [g, g + n) of row b, normalized
        (Qwen3) and rotated in place."""
        ctx = self.ctx
        c = ctx.c
        q_norm = dict(norm=vec_view(ctx.A["q_norm"], l, ctx.D), eps=ctx.eps) if c.qk_norm else {}
        q0 = arith.MulIOp(g, ctx.const(c.group_size)).result
        q = self.heads(ctx.A["q"], b, q0, n * c.group_size, ctx.Hq)
        et.rope_into(q, self.pos_of(b), q, ctx.const(0), ctx.theta, llama3_scaling=ctx.scaling, **q_norm)

    def qk_body(self, l, b, t):
        # One tile per (row, block of qk_heads KV heads): their query
        # heads normalized (Qwen3) and rotated in place, their keys
        # normalized, rotated and appended, their values appended; the
        # three ops touch different buffers and run without a barrier
        # between them (et-lower-tile-ops), a warp per head.
        g = arith.MulIOp(t, self.ctx.const(self.qk_heads)).result
        self.rotate_q(l, b, g, self.qk_heads)
        self.rotate_kv(l, b, g, self.qk_heads)

    # -- attn and merge ----------------------------------------------------

    def split_of(self, b):
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
        lay, c32 = self.ctx.layout, self.c32
        length = arith.AddIOp(memref.LoadOp(self.ctx.A["positions"], [b]).result, c32(1)).result
        n = arith.MinUIOp(self.wave, arith.CeilDivUIOp(length, c32(MIN_SPLIT_LEN)).result).result
        n = arith.MinUIOp(n, c32(lay.splits)).result
        per = arith.AndIOp(arith.AddIOp(arith.CeilDivUIOp(length, n).result, c32(15)).result, c32(-16)).result
        return length, arith.MinUIOp(per, c32(lay.split_len)).result

    def attn_pre(self, l, b, g, s, live=None):
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
        ctx = self.ctx
        A, lay, const, idx, batch = ctx.A, ctx.layout, ctx.const, ctx.idx, ctx.batch
        if live is not None:
            b = arith.SelectOp(live, b, const(0)).result
        slot = memref.LoadOp(A["slots"], [b]).result
        p = ctx.position(b)
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
        split_len = arith.IndexCastOp(idx, self.split_of(b)[1]).result if lay.runtime_splits else const(lay.split_len)
        has_work = arith.CmpIOp(arith.CmpIPredicate.ult, arith.MulIOp(s, split_len).result, length).result
        if live is not None:
            has_work = arith.AndIOp(live, has_work).result
        extra = {}
        if ctx.options.o_per_head and ctx.B > 1:
            # The `o` tiles merge every row's splits up to the batch's
            # longest row: a split past its own row's length says so
            # with an lse of -inf (row_live: a row of the batch).
            row_live = live if live is not None else arith.ConstantOp(IntegerType.get_signless(1), 1).result
            group = ctx.c.group_size

            def otherwise():
                mark = scf.IfOp(row_live)
                with InsertionPoint(mark.then_block):
                    q0 = arith.MulIOp(g, const(group)).result
                    ninf = arith.ConstantOp(ctx.f32, float("-inf")).result
                    for i in range(group):
                        memref.StoreOp(ninf, A["lse"], [b, s, arith.AddIOp(q0, const(i)).result])
                    scf.YieldOp([])
            extra["otherwise"] = otherwise
        return dict(k=cache_view(A["k_cache"], ctx.S, l, slot_i), v=cache_view(A["v_cache"], ctx.S, l, slot_i),
                    length=length, stable=stable, split_len=split_len, live=has_work, **extra)

    def attn_body(self, l, b, g, s, pre):
        ctx = self.ctx
        A, lay, Hq, D, f32 = ctx.A, ctx.layout, ctx.Hq, ctx.D, ctx.f32
        q = ctx.row(A["q"], b, [Hq, D], f32)
        et.attention_split(q, pre["k"], pre["v"],
                           ctx.row(A["o_part"], b, [lay.splits, Hq, D], f32),
                           ctx.row(A["lse"], b, [lay.splits, Hq], f32),
                           g, s, pre["split_len"], pre["length"], ctx.scale, stable=pre["stable"])

    def live_splits(self, b):
        """The splits of row b that hold positions (index): the
        attention tiles of later splits skip their body and write
        nothing."""
        ctx = self.ctx
        lay, const = ctx.layout, ctx.const
        if lay.runtime_splits:
            return arith.IndexCastOp(ctx.idx, arith.CeilDivUIOp(*self.split_of(b)).result).result
        return arith.MinUIOp(arith.CeilDivUIOp(arith.AddIOp(ctx.position(b), const(1)).result,
                                               const(lay.split_len)).result, const(lay.splits)).result

    def merge_pre(self, l, b, g, live=None):
        # The splits that hold positions of row b (the attention tiles
        # of later splits skip their body and write nothing), from the
        # row's position, an input: before the wait, off the chain. (A
        # row past the runtime batch reads a stale position; its tile
        # only signals.)
        return dict(splits=self.live_splits(b))

    def merge_body(self, l, b, g, pre):
        # One tile per (row, merge_heads KV heads): their groups' query heads.
        ctx = self.ctx
        A, Hq, D, f32 = ctx.A, ctx.Hq, ctx.D, ctx.f32
        G = ctx.c.group_size * self.merge_heads
        q0 = arith.MulIOp(g, ctx.const(G)).result
        live = pre["splits"]
        o_b = memref.SubViewOp(strided([DYN, G, D], f32, [Hq * D, D, 1]), A["o_part"], [b, q0], [live], [],
                               static_offsets=[DYN, 0, DYN, 0], static_sizes=[1, DYN, G, D],
                               static_strides=[1, 1, 1, 1]).result
        lse_b = memref.SubViewOp(strided([DYN, G], f32, [Hq, 1]), A["lse"], [b, q0], [live], [],
                                 static_offsets=[DYN, 0, DYN], static_sizes=[1, DYN, G],
                                 static_strides=[1, 1, 1]).result
        out = memref.subview(A["attn"], [b, q0, 0], [1, G, D], [1, 1, 1],
                             result_type=strided([G, D], ctx.bf16, [D, 1]))
        et.attention_merge(o_b, lse_b, out)

    # -- o per query head --------------------------------------------------

    def o_head_pre(self, l, t, live=None):
        # The tile's merged head, one row per token (shared memory), and
        # the splits to merge: the row's (one-row kernels), else the
        # longest row's. The positions are inputs, so their loads go
        # before the wait, off the chain.
        ctx = self.ctx
        const, B = ctx.const, ctx.B
        if B > 1:
            most = scf.ForOp(const(0), ctx.batch, const(1), [const(1)])
            with InsertionPoint(most.body):
                scf.YieldOp([arith.MaxUIOp(most.inner_iter_args[0],
                                           self.live_splits(most.induction_variable)).result])
            splits = most.results[0]
        else:
            splits = self.live_splits(const(0))
        return dict(xs=memref.AllocaOp(shared([B, ctx.D], ctx.bf16), [], []).result, splits=splits)

    def o_head_body(self, l, t, pre):
        ctx = self.ctx
        A, H, Hq, D, B, const, batch = ctx.A, ctx.H, ctx.Hq, ctx.D, ctx.B, ctx.const, ctx.batch
        bf16, f32, o_blocks, o_head_rows = ctx.bf16, ctx.f32, self.o_blocks, self.o_head_rows
        head = arith.DivUIOp(t, const(o_blocks)).result
        blk = arith.RemUIOp(t, const(o_blocks)).result
        x = memref.SubViewOp(shared([DYN, D], bf16, [D, 1], 0), pre["xs"], [], [batch], [],
                             static_offsets=[0, 0], static_sizes=[DYN, D], static_strides=[1, 1]).result
        if B > 1:
            # Every row of the batch at once: the rows are the merge's
            # heads, over the splits of the longest row (a shorter
            # row's later splits hold an lse of -inf: attn_pre).
            n = pre["splits"]
            S = ctx.layout.splits
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
