"""Stand-alone kernels built from Python with the et bindings: a GEMM
(`y = x * w^T` for any number of tokens, one `et.matmul` tile per task tile)
for tests, benchmarks and tuning. Needs MLIR."""

from __future__ import annotations

from .dialects import arith, et
from .ir import (
    Attribute,
    BF16Type,
    Context,
    DenseI64ArrayAttr,
    F32Type,
    IndexType,
    InsertionPoint,
    Location,
    MemRefType,
    Module,
    ShapedType,
)

__all__ = ["gemm_kernel", "gemm_tiles"]

OUTPUTS = ("f32", "bf16")
ORDERS = ("auto", "rows")


def gemm_tiles(m: int, n: int, tile: tuple[int, int, int]) -> int:
    """The number of task tiles (BM x BN blocks) of an M x N product."""
    return -(-m // tile[0]) * -(-n // tile[1])


def gemm_kernel(k: int, n: int, *, tile: tuple[int, int, int] = (128, 128, 64), stages: int = 4,
                out: str = "f32", accumulate: bool = False, order: str = "auto", name: str = "gemm") -> str:
    """`et.kernel @name(%x: memref<?xKxbf16>, %w: memref<NxKxbf16>,
    %y: memref<?xNx(out)>, %rows: index)`: one task over the
    ceildiv(rows, BM) x ceildiv(N, BN) blocks, each an `et.matmul`, with no
    events. `rows` (the tokens of x and y) is a runtime argument, so one
    kernel serves every M.

    Block order: workers take the task's tiles in turn (the static
    schedule's cyclic formula), so the blocks in flight at once are
    consecutive tiles. When w is the larger operand (N > M), tile t is
    block (t mod Mb, t div Mb): the blocks in flight share a few columns
    of w, w streams from memory once, and the rows of x are reused from L2;
    otherwise the order is row-major (x streams once). `order="rows"`
    keeps the row-major order at every M. The tile shape is
    checked by the op's verifier when the kernel is compiled. Returns the
    IR text (for `event_tensor.compile`)."""
    if out not in OUTPUTS:
        raise ValueError(f"out must be one of {OUTPUTS}, got {out!r}")
    if len(tile) != 3:
        raise ValueError(f"tile must be (BM, BN, BK), got {tile!r}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    with Context(), Location.unknown():
        dyn = ShapedType.get_dynamic_size()
        bf16, idx = BF16Type.get(), IndexType.get()
        y_type = F32Type.get() if out == "f32" else bf16
        types = [MemRefType.get([dyn, k], bf16), MemRefType.get([n, k], bf16), MemRefType.get([dyn, n], y_type), idx]
        module = Module.create()
        with InsertionPoint(module.body):
            kernel = et.KernelOp(name, types)
            with InsertionPoint(kernel.entry_block):
                x, w, y, rows = kernel.arguments
                bm = arith.ConstantOp(idx, tile[0]).result
                bn = arith.ConstantOp(idx, tile[1]).result
                blocks_m = arith.CeilDivSIOp(rows, bm).result
                blocks_n = arith.ConstantOp(idx, -(-n // tile[1])).result
                task = et.TaskOp("gemm", [arith.MulIOp(blocks_m, blocks_n).result])
                cost = f"#et.cost<bytes = {2 * k * (tile[0] + tile[1])}, flops = {2 * tile[0] * tile[1] * k}>"
                task.attributes["et.cost"] = Attribute.parse(cost)
                with InsertionPoint(task.entry_block):
                    (t,) = task.tile_ids
                    # N > M, or never for the row-major order.
                    bound = arith.ConstantOp(idx, n if order == "auto" else 0).result
                    m_fastest = arith.CmpIOp(arith.CmpIPredicate.ugt, bound, rows).result
                    i = arith.SelectOp(m_fastest, arith.RemUIOp(t, blocks_m).result,
                                       arith.DivUIOp(t, blocks_n).result).result
                    j = arith.SelectOp(m_fastest, arith.DivUIOp(t, blocks_m).result,
                                       arith.RemUIOp(t, blocks_n).result).result
                    m0 = arith.MulIOp(i, bm).result
                    n0 = arith.MulIOp(j, bn).result
                    et.matmul(x, w, y, m0, n0, DenseI64ArrayAttr.get(list(tile)), stages=stages,
                              accumulate=True if accumulate else None)
        return module.operation.get_asm(print_generic_op_form=True)
