"""The MLP block of a decode layer: its norm (`norm2`, unless the `mlp`
tiles fuse it), the gate and up projections with their activation in one
tile (`mlp`), and the down projection (`down`), which adds into the
residual stream (or, on several devices, into the partial sums of
`part_d`)."""

from __future__ import annotations

from ...dialects import arith, et
from .layers import LayerTask
from .linear import linear_body, norm_input
from .tiles import mma_block, mma_m_block
from .views import layer_view, vec_view

__all__ = ["Mlp"]


class Mlp:
    """The MLP block's tasks of the `DecodeContext` `ctx`."""

    def __init__(self, ctx):
        self.ctx = ctx
        A, H, I, tp = ctx.A, ctx.H, ctx.I, ctx.options.tp
        self.gate_lin = linear_body(ctx, "wg", I, H, ctx.normalized_rows, A["g"])
        self.up_lin = linear_body(ctx, "wu", I, H, ctx.normalized_rows, A["u"])
        self.down_lin = linear_body(ctx, "wd", H, I, A["act"], ctx.batch_rows(A["part_d"]) if tp > 1 else A["h"],
                                    accumulate=tp == 1)
        # Gate and up rows of one block and their activation in one tile:
        # the activation needs no phase of its own.
        self.mlp_rows = mma_block(I, H, mma_m_block(ctx.B), ctx.layout.workers) if ctx.mma else ctx.rows_for(I, H)
        self.mlp_tiles = self.gate_lin[1]

    def tasks(self) -> list[LayerTask]:
        """The block's tasks within a layer, in order, each waiting on
        tasks of the same layer."""
        H, gate_lin, down_lin = self.ctx.H, self.gate_lin, self.down_lin
        return [
            LayerTask("norm2", self.norm2_body, [self.ctx.B], False, ["o"], 2 * H, 5 * H),
            LayerTask("mlp", self.mlp_body, [self.mlp_tiles], False, ["norm2"], 2 * gate_lin[2],
                      2 * gate_lin[3] + 6 * self.mlp_rows),
            LayerTask("down", down_lin[0], [down_lin[1]], False, ["mlp"], down_lin[2], down_lin[3]),
        ]

    def norm2_body(self, l, b):
        self.ctx.norm_row(vec_view(self.ctx.A["ln2"], l, self.ctx.H), b)

    def mlp_body(self, l, t):
        ctx = self.ctx
        A, H, I, const, mlp_rows = ctx.A, ctx.H, ctx.I, ctx.const, self.mlp_rows
        x, norm = norm_input(ctx, vec_view(A["ln2"], l, H), t, "mlp") if ctx.options.fuse_norms else (None, {})
        if ctx.options.gated_mlp and not ctx.mma:
            # One pass: a warp's gate row, its up row, then its act
            # element (no g and u round trip, no barrier).
            et.linear(x if x is not None else ctx.normalized_rows(), layer_view(A["wg"], l, I, H), A["act"],
                      arith.MulIOp(t, const(mlp_rows)).result, const(mlp_rows),
                      gated=layer_view(A["wu"], l, I, H), **norm)
            return
        self.gate_lin[0](l, t, x, norm)
        self.up_lin[0](l, t, x, norm)
        et.silu_mul(A["g"], A["u"], A["act"], arith.MulIOp(t, const(mlp_rows)).result, const(mlp_rows))
