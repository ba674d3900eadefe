"""Linear-layer tiles (`et.linear` rows, or `et.matmul` tensor-core tiles
with `linear_tile="mma"`) and the fused norms that feed them: with
`fuse_norms` every tile that reads the normalized residual stream
normalizes it itself, into its rows of the scratch `xs` or its shared
memory, or through its linear op (`norm_in_linear`). The residual stream h
is f32: `o` and `down` add into it (et.linear accumulate), and the norms
read it."""

from __future__ import annotations

from ...dialects import arith, et, memref
from ...ir import DenseI64ArrayAttr, Location, MemRefType, StridedLayoutAttr
from .tiles import MMA_STAGES, mma_block, mma_k_block, mma_m_block, mma_registers, mma_split
from .views import DYN, layer_view, shared

__all__ = ["linear_body", "norm_input", "normalized", "through_norm"]


def linear_body(ctx, weight, n, k, x, y, y3=None, accumulate=False, rows=None):
    """A linear-layer tile body `body(layer, tile)` with its tile
    count, bytes and flops; `weight` is a stacked weight's name,
    or a function of the layer giving the N x K weight; `rows`
    per tile, else rows_for(n, k) (`mma_block` with `mma`). With `mma`,
    `accumulate` and the kernel's `split_k`, tile t takes part t % parts
    of K of its block of rows (`mma_split`), added into y atomically."""
    A, const, mma = ctx.A, ctx.const, ctx.mma
    parts = 1
    if mma and accumulate and ctx.options.split_k and rows is None:
        rows, parts = mma_split(n, k, mma_m_block(ctx.B), ctx.layout.workers)
    rows = rows or (mma_block(n, k, mma_m_block(ctx.B), ctx.layout.workers) if mma else ctx.rows_for(n, k))
    w = weight if callable(weight) else (lambda l: layer_view(A[weight], l, n, k))

    def body(l, t, x_in=None, norm=None):
        out = ctx.collapse(y3, n) if y3 is not None else y
        xv = x_in if x_in is not None else (x() if callable(x) else x)
        if parts > 1:
            block, part = arith.DivUIOp(t, const(parts)).result, arith.RemUIOp(t, const(parts)).result
            k0 = arith.MulIOp(part, const(k // parts)).result
            et.matmul(xv, w(l), out, const(0), arith.MulIOp(block, const(rows)).result,
                      [k0, arith.AddIOp(k0, const(k // parts)).result],
                      DenseI64ArrayAttr.get([mma_m_block(ctx.B), rows, mma_k_block(k // parts)]),
                      stages=MMA_STAGES, accumulate=True, atomic=True)
            return
        r0 = arith.MulIOp(t, const(rows)).result
        if mma:
            bm = mma_m_block(ctx.B)
            registers = mma_registers(bm, rows)  # BK 32 and no ring stages, else the ring's
            et.matmul(xv, w(l), out, const(0), r0, [],
                      DenseI64ArrayAttr.get([bm, rows, 32 if registers else mma_k_block(k)]),
                      stages=None if registers else MMA_STAGES, registers=registers or None,
                      accumulate=True if accumulate else None)
        else:
            et.linear(xv, w(l), out, r0, const(rows), accumulate=accumulate, **(norm or {}))
    return body, -(-n // rows) * parts, rows * k * 2 // parts, 2 * rows * k // parts


def normalized(ctx, norm_w, t):
    """Tile t's rows of the scratch [batch, H], holding
    rmsnorm(h) * norm_w (fuse_norms)."""
    A, H, B, bf16, batch = ctx.A, ctx.H, ctx.B, ctx.bf16, ctx.batch
    if ctx.options.norm_scratch == "shared":
        buf = memref.AllocaOp(shared([B, H], bf16), [], []).result
        xs_t = memref.SubViewOp(shared([DYN, H], bf16, [H, 1], 0), buf, [], [batch], [],
                                static_offsets=[0, 0], static_sizes=[DYN, H], static_strides=[1, 1]).result
        et.rmsnorm(A["h"], norm_w, xs_t, ctx.eps)
        return xs_t
    xs_t = memref.SubViewOp(
        MemRefType.get([DYN, H], bf16, StridedLayoutAttr.get(DYN, [H, 1]), loc=Location.unknown()),
        A["xs"], [t], [batch], [], static_offsets=[DYN, 0, 0], static_sizes=[1, DYN, H],
        static_strides=[1, 1, 1]).result
    et.rmsnorm(A["h"], norm_w, xs_t, ctx.eps)
    return xs_t


def through_norm(ctx, norm_w):
    """(x, et.linear keywords) of a linear op that reads the residual
    stream h through its RMSNorm with weights `norm_w` (`et.linear ...
    norm`). One-row kernels read a static row (the GPU lowering then reads
    x once per worker, into shared memory)."""
    H, res = ctx.H, ctx.A["h"]
    x = ctx.batch_rows(res) if ctx.B > 1 else memref.SubViewOp(
        MemRefType.get([1, H], ctx.f32, StridedLayoutAttr.get(0, [H, 1]), loc=Location.unknown()),
        res, [], [], [], static_offsets=[0, 0], static_sizes=[1, H], static_strides=[1, 1]).result
    return x, dict(norm=norm_w, eps=ctx.eps)


def norm_input(ctx, norm_w, t, kind):
    """What a linear tile of task `kind` reading rmsnorm(h) * norm_w
    takes: (x, et.linear keywords): h and its norm (kinds in
    `norm_in_linear`), or tile t's rows of the scratch, normalized."""
    if kind in ctx.options.norm_tasks:
        return through_norm(ctx, norm_w)
    return normalized(ctx, norm_w, t), {}
