"""The MLP block of a decode layer with experts (Qwen3-MoE): routing and the
chosen experts inside the kernel.

Each row b of the batch goes to K of E experts. The tiles of the experts
work on *positions* p = b * K + k (row b's k-th choice), not on the
experts: position p's tiles read the weights of the expert that the router
chose for it, loaded from memory, so only chosen experts' weights are
read, and every event count stays static (the data decides which weights a
tile reads, not how many tiles signal). A task has a static number T of
tiles (about one per worker, at least a full batch's positions); a launch
of P = batch * K positions cuts each position's rows into D = T / P
blocks, so that a launch of any batch keeps about T tiles busy: tile t
takes block t mod D of position t / D. Tiles past the launch's positions
only signal.

  `moe_norm`  a tile per row: xn[b] = rmsnorm(h[b]) * ln2
  `router`    blocks of experts: the router's scores (f32) of xn, or (the
              "router" kind of `norm_in_linear`) of h read through its norm
              (`et.linear ... norm`), without `moe_norm`: `topk` then
              writes xn for the experts
              (with the router reading h through its norm, the router's
              first tile also writes the experts' xn)
  `experts`   T tiles, each a block of a position's expert's intermediate
              rows: the tile runs its row's `et.router_topk` itself (the
              K best experts and their weights, into its shared memory),
              then the gated activation of its position's expert for the
              row; the position's first block publishes the choice for
              `exp_down` (a `topk` task of a tile per row was one phase
              more: 7-9% slower on the H100 at batch 1,
              docs/experiments/2026-12-06-moe-phases.md)
  `exp_down`  T tiles, each a block of H: the expert's down projection,
              into `exp_out`, or (without `expert_combine`) times the
              router's weight added into h with atomic adds
  `combine`   (`expert_combine`) a tile per row: h[b] += sum over k of
              weight * output, in the router's order (the same bits for
              any schedule)

docs/models.md ("Mixture of experts") says what is left: an expert's
weights are read once per position that chose it (a batch whose rows
share an expert reads it from L2 the second time), and the next layer
waits on every `exp_down` tile of the layer, not only its own rows'."""

from __future__ import annotations

from ...dialects import arith, et, memref, scf
from ...ir import InsertionPoint
from .layers import LayerTask
from .linear import through_norm
from .views import DYN, layer_view, mr, shared, strided, vec_view

__all__ = ["Experts", "expert_buffers"]


class Experts:
    """The expert MLP block's tasks of the `DecodeContext` `ctx`."""

    def __init__(self, ctx):
        self.ctx = ctx
        c, workers = ctx.c, ctx.layout.workers
        self.E, self.K, self.Im = c.num_experts, c.num_experts_per_tok, c.moe_intermediate_size
        # About one tile per worker, and at least one per position of a
        # full batch.
        self.tiles = max(ctx.B * self.K, workers // self.K * self.K)
        self.router_rows = ctx.rows_for(self.E, ctx.H)
        # The router reads h through its norm (no `moe_norm` phase).
        self.router_norm = "router" in ctx.options.norm_tasks

    def tasks(self) -> list[LayerTask]:
        ctx, E, K, Im, H = self.ctx, self.E, self.K, self.Im, self.ctx.H
        # Bytes and flops of a tile at batch 1 (the most blocks per position).
        blocks = self.tiles // K
        up_rows, down_rows = -(-Im // blocks), -(-H // blocks)
        return [
            *([] if self.router_norm else
              [LayerTask("moe_norm", self.norm_body, [ctx.B], False, ["o"], 2 * H, 5 * H)]),
            LayerTask("router", self.router_body, [-(-E // self.router_rows)], False,
                      ["o" if self.router_norm else "moe_norm"], 2 * self.router_rows * H,
                      2 * self.router_rows * H * ctx.B),
            LayerTask("experts", self.up_body, [self.tiles], False, ["router"], 4 * up_rows * H + 8 * E,
                      4 * up_rows * H + 4 * E * K),
            LayerTask("exp_down", self.down_body, [self.tiles], False, ["experts"], 2 * down_rows * Im,
                      2 * down_rows * Im),
            *([LayerTask("combine", self.combine_body, [ctx.B], False, ["exp_down"], 4 * H * (K + 2), 2 * H * K)]
              if ctx.options.expert_combine else []),
        ]

    # -- helpers ---------------------------------------------------------

    def live_row(self, b):
        return arith.CmpIOp(arith.CmpIPredicate.ult, b, self.ctx.batch).result

    def block(self, t, n: int):
        """(live, position, row b, choice k, first row, rows) of tile t of a
        task over an expert's n output rows, in this launch."""
        ctx, K = self.ctx, self.K
        positions = arith.MulIOp(ctx.batch, ctx.const(K)).result
        blocks = arith.MaxUIOp(arith.DivUIOp(ctx.const(self.tiles), positions).result, ctx.const(1)).result
        p = arith.DivUIOp(t, blocks).result
        live = arith.CmpIOp(arith.CmpIPredicate.ult, p, positions).result
        rows = arith.CeilDivUIOp(ctx.const(n), blocks).result
        r0 = arith.MulIOp(arith.RemUIOp(t, blocks).result, rows).result
        return live, p, arith.DivUIOp(p, ctx.const(K)).result, arith.RemUIOp(p, ctx.const(K)).result, r0, rows

    def expert(self, ids, b, k):
        """The expert of row b's k-th choice in `ids` (`expert_ids`, or a
        tile's own [1, K] choice when b is 0), clamped into range (a router
        fed NaNs chooses no valid one)."""
        ctx = self.ctx
        e = arith.IndexCastOp(ctx.idx, memref.LoadOp(ids, [b, k]).result).result
        return arith.MinUIOp(e, ctx.const(self.E - 1)).result

    def expert_view(self, name, l, e, rows: int, cols: int):
        """Expert e's [rows, cols] matrix of the stacked [L, E, rows, cols]
        weight `name` in layer l."""
        return memref.subview(self.ctx.A[name], [l, e, 0, 0], [1, 1, rows, cols], [1, 1, 1, 1],
                              result_type=strided([rows, cols], self.ctx.bf16, [cols, 1]))

    # -- bodies ----------------------------------------------------------

    def norm_body(self, l, b):
        self.ctx.norm_row(vec_view(self.ctx.A["ln2"], l, self.ctx.H), b)

    def router_body(self, l, t):
        ctx, rows = self.ctx, self.router_rows
        x, norm = (through_norm(ctx, vec_view(ctx.A["ln2"], l, ctx.H)) if self.router_norm else
                   (ctx.normalized_rows(), {}))
        et.linear(x, layer_view(ctx.A["router"], l, self.E, ctx.H), ctx.A["scores"],
                  arith.MulIOp(t, ctx.const(rows)).result, ctx.const(rows), **norm)
        if self.router_norm:
            # The experts' xn: the first router tile writes it, row by row.
            def rows_norm():
                loop = scf.ForOp(ctx.const(0), ctx.batch, ctx.const(1), [])
                with InsertionPoint(loop.body):
                    self.norm_body(l, loop.induction_variable)
                    scf.YieldOp([])
            ctx.guarded(arith.CmpIOp(arith.CmpIPredicate.eq, t, ctx.const(0)).result, rows_norm)

    def up_body(self, l, t):
        ctx, A, H, Im, K = self.ctx, self.ctx.A, self.ctx.H, self.Im, self.K
        live, p, b, k, r0, rows = self.block(t, Im)
        # The tile's own choice of experts for its row (in its shared
        # memory; the load after it takes a barrier).
        ids = memref.AllocaOp(shared([1, K], ctx.i32), [], []).result
        weights = memref.AllocaOp(shared([1, K], ctx.f32), [], []).result

        def run():
            c0 = ctx.const(0)
            et.router_topk(ctx.one_row(A["scores"], b, self.E, ctx.f32), ids, weights,
                           normalize=ctx.c.norm_topk_prob or None)
            e = self.expert(ids, c0, k)
            # The position's first block publishes the choice for
            # `exp_down` (and `combine`), from one thread.
            first = arith.AndIOp(
                arith.CmpIOp(arith.CmpIPredicate.eq, r0, c0).result,
                arith.CmpIOp(arith.CmpIPredicate.eq, et.ThreadIdOp(ctx.idx).result, c0).result).result

            def publish():
                memref.StoreOp(memref.LoadOp(ids, [c0, k]).result, A["expert_ids"], [b, k])
                memref.StoreOp(memref.LoadOp(weights, [c0, k]).result, A["expert_w"], [b, k])
            ctx.guarded(first, publish)
            et.linear(ctx.one_row(A["xn"], b, H, ctx.bf16), self.expert_view("exp_gate", l, e, Im, H),
                      ctx.one_row(A["exp_act"], p, Im, ctx.bf16), r0, rows,
                      gated=self.expert_view("exp_up", l, e, Im, H))
        ctx.guarded(live, run)

    def down_body(self, l, t):
        ctx, A, H, Im = self.ctx, self.ctx.A, self.ctx.H, self.Im
        live, p, b, k, r0, rows = self.block(t, H)

        def run():
            e = self.expert(ctx.A["expert_ids"], b, k)
            x, w = ctx.one_row(A["exp_act"], p, Im, ctx.bf16), self.expert_view("exp_down", l, e, H, Im)
            if ctx.options.expert_combine:
                et.linear(x, w, ctx.one_row(A["exp_out"], p, H, ctx.f32), r0, rows)
                return
            # h[b] += weight * (this block of the expert's output): the K
            # choices' tiles add into the row at once.
            et.linear(x, w, ctx.one_row(A["h"], b, H, ctx.f32), r0, rows, accumulate=True, atomic=True,
                      scale=memref.LoadOp(A["expert_w"], [b, k]).result)
        ctx.guarded(live, run)

    def combine_body(self, l, b):
        """h[b, i] += sum over k of w[b, k] * out[b K + k, i] (the sum
        first, in k's order), the columns strided over the worker's
        threads."""
        ctx, A, K = self.ctx, self.ctx.A, self.K

        def run():
            weights = [memref.LoadOp(A["expert_w"], [b, ctx.const(k)]).result for k in range(K)]
            first = arith.MulIOp(b, ctx.const(K)).result
            rows = [arith.AddIOp(first, ctx.const(k)).result for k in range(K)]
            loop = scf.ForOp(et.ThreadIdOp(ctx.idx).result, ctx.const(ctx.H), et.NumThreadsOp(ctx.idx).result)
            with InsertionPoint(loop.body):
                i = loop.induction_variable
                total = None
                for weight, row in zip(weights, rows):
                    y = arith.MulFOp(weight, memref.LoadOp(A["exp_out"], [row, i]).result).result
                    total = y if total is None else arith.AddFOp(total, y).result
                memref.StoreOp(arith.AddFOp(memref.LoadOp(A["h"], [b, i]).result, total).result, A["h"], [b, i])
                scf.YieldOp([])
        ctx.guarded(self.live_row(b), run)


def expert_buffers(ctx) -> list:
    """The block's activation buffers (name, type)."""
    c, B = ctx.c, ctx.B
    E, K = c.num_experts, c.num_experts_per_tok
    return [("scores", mr([DYN, E], ctx.f32)), ("expert_ids", mr([DYN, K], ctx.i32)),
            ("expert_w", mr([DYN, K], ctx.f32)), ("exp_act", mr([B * K, c.moe_intermediate_size], ctx.bf16)),
            *([("exp_out", mr([B * K, ctx.H], ctx.f32))] if ctx.options.expert_combine else [])]

