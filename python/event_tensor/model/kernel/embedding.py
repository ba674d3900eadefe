"""The decode kernel's first task: the embedding rows of the launch's
tokens into the residual stream, h = embed[tokens]; on one device it also
records each row's token in its cache slot's history (what `et.penalize`
reads)."""

from __future__ import annotations

from ...dialects import arith, et, memref, scf
from ...ir import InsertionPoint

__all__ = ["embedding_task"]


def embedding_task(ctx) -> None:
    """The `embed` task of the `DecodeContext` `ctx` (one tile), which the
    first layer waits on."""
    A = ctx.A

    def record():
        # Thread 0 over the rows: history[slot, position] = token.
        loop = scf.ForOp(ctx.const(0), ctx.batch, ctx.const(1))
        with InsertionPoint(loop.body):
            b = loop.induction_variable
            pos = arith.IndexCastOp(ctx.idx, memref.LoadOp(A["positions"], [b]).result).result
            memref.StoreOp(memref.LoadOp(A["tokens"], [b]).result, A["history"], [ctx.slot_of(b), pos])
            scf.YieldOp([])

    def body(t):
        et.embedding(A["embed"], A["tokens"], A["h"])
        if "history" in A:
            first = arith.CmpIOp(arith.CmpIPredicate.eq, et.ThreadIdOp(ctx.idx).result, ctx.const(0)).result
            ctx.guarded(first, record)
    ctx.task("embed", [1], [], body, nbytes=0, flops=0)
