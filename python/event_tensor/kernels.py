"""Stand-alone kernels built from Python with the et bindings, for tests,
benchmarks and tuning: a GEMM (`y = x * w^T` for any number of tokens, one
`et.matmul` tile per task tile) and causal prefill attention over a KV
cache (`et.attention_prefill`). Needs MLIR."""

from __future__ import annotations

from .dialects import affine, arith, et, memref, scf, vector
from .ir import (
    AffineExpr,
    AffineMap,
    Attribute,
    BF16Type,
    Context,
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
    VectorType,
)

__all__ = ["allreduce_kernel", "gemm_kernel", "gemm_tiles", "hop_kernel", "prefill_attention_kernel",
           "prefill_attention_tile"]

OUTPUTS = ("f32", "bf16")
ORDERS = ("auto", "rows")


def gemm_tiles(m: int, n: int, tile: tuple[int, int, int]) -> int:
    """The number of task tiles (BM x BN blocks) of an M x N product."""
    return -(-m // tile[0]) * -(-n // tile[1])


def gemm_kernel(k: int, n: int, *, tile: tuple[int, int, int] = (128, 128, 64), stages: int = 4,
                out: str = "f32", accumulate: bool = False, order: str = "auto", split_k: int = 1,
                registers: bool = False, atomic: bool = False, name: str = "gemm") -> str:
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
    keeps the row-major order at every M.

    `split_k` = S > 1 cuts K into S ranges of whole BK-slices: the kernel
    takes one more argument, `%part: memref<Sx?xNxf32>`, and has two tasks.
    `part` runs S tiles per block, each an `et.matmul` over its K range into
    `part[s]`, and signals the block's element of an event; `sum` waits for
    the block's S signals and writes y = the sum of the S partial blocks
    (added to y with `accumulate`). More tiles than blocks keep workers busy
    when M is small and K long. With `atomic` (an f32 y, `accumulate`),
    no `part` argument and no `sum` task: each of the S tiles of a block
    adds its K range into y itself (`et.matmul ... accumulate atomic`), as
    the decode kernel's `o` and `down` tiles do.

    `registers` makes the tiles `et.matmul ... registers` (w and x straight
    into the tensor cores' operand registers: tiles of few rows, BK 32).

    The tile shape is checked by the op's verifier when the kernel is
    compiled. Returns the IR text (for `event_tensor.compile`)."""
    if out not in OUTPUTS:
        raise ValueError(f"out must be one of {OUTPUTS}, got {out!r}")
    if len(tile) != 3:
        raise ValueError(f"tile must be (BM, BN, BK), got {tile!r}")
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    if isinstance(split_k, bool) or not isinstance(split_k, int) or split_k < 1:
        raise ValueError(f"split_k must be a positive int, got {split_k!r}")
    if split_k > 1 and n % 4 and not atomic:
        raise ValueError(f"split_k needs N to be a multiple of 4 (the sum reads 16-byte chunks), got N = {n}")
    if atomic and (split_k == 1 or out != "f32" or not accumulate):
        raise ValueError(f"atomic needs split_k > 1, out 'f32' and accumulate, got split_k {split_k}, out {out!r}, "
                         f"accumulate {accumulate}")
    with Context(), Location.unknown():
        dyn = ShapedType.get_dynamic_size()
        bf16, f32, idx = BF16Type.get(), F32Type.get(), IndexType.get()
        y_type = f32 if out == "f32" else bf16
        types = [MemRefType.get([dyn, k], bf16), MemRefType.get([n, k], bf16), MemRefType.get([dyn, n], y_type), idx]
        if split_k > 1 and not atomic:
            types.append(MemRefType.get([split_k, dyn, n], f32))
        module = Module.create()
        with InsertionPoint(module.body):
            kernel = et.KernelOp(name, types)
            with InsertionPoint(kernel.entry_block):
                x, w, y, rows = kernel.arguments[:4]
                bm = arith.ConstantOp(idx, tile[0]).result
                bn = arith.ConstantOp(idx, tile[1]).result
                blocks_m = arith.CeilDivSIOp(rows, bm).result
                blocks_n = arith.ConstantOp(idx, -(-n // tile[1])).result
                blocks = arith.MulIOp(blocks_m, blocks_n).result
                # N > M, or never for the row-major order.
                bound = arith.ConstantOp(idx, n if order == "auto" else 0).result
                m_fastest = arith.CmpIOp(arith.CmpIPredicate.ugt, bound, rows).result

                def block_origin(t):
                    i = arith.SelectOp(m_fastest, arith.RemUIOp(t, blocks_m).result,
                                       arith.DivUIOp(t, blocks_n).result).result
                    j = arith.SelectOp(m_fastest, arith.DivUIOp(t, blocks_m).result,
                                       arith.RemUIOp(t, blocks_n).result).result
                    return arith.MulIOp(i, bm).result, arith.MulIOp(j, bn).result

                tile_attr = DenseI64ArrayAttr.get(list(tile))
                flops = 2 * tile[0] * tile[1] * k
                if split_k == 1:
                    task = et.TaskOp("gemm", [blocks])
                    _cost(task, 2 * k * (tile[0] + tile[1]), flops)
                    with InsertionPoint(task.entry_block):
                        m0, n0 = block_origin(task.tile_ids[0])
                        et.matmul(x, w, y, m0, n0, [], tile_attr, stages=stages,
                                  registers=True if registers else None, accumulate=True if accumulate else None)
                elif atomic:
                    task = et.TaskOp("gemm", [arith.MulIOp(blocks, arith.ConstantOp(idx, split_k).result).result])
                    chunk = _k_chunk(k, split_k, tile[2])
                    _cost(task, 2 * chunk * (tile[0] + tile[1]), flops // split_k)
                    with InsertionPoint(task.entry_block):
                        (t,) = task.tile_ids
                        m0, n0 = block_origin(arith.DivUIOp(t, arith.ConstantOp(idx, split_k).result).result)
                        k0 = arith.MulIOp(arith.RemUIOp(t, arith.ConstantOp(idx, split_k).result).result,
                                          arith.ConstantOp(idx, chunk).result).result
                        k1 = arith.AddIOp(k0, arith.ConstantOp(idx, chunk).result).result
                        et.matmul(x, w, y, m0, n0, [k0, k1], tile_attr, stages=stages, accumulate=True, atomic=True)
                else:
                    _split_k_tasks(kernel.arguments[4], x, w, y, rows, k, n, tile, stages, accumulate, split_k,
                                   blocks, block_origin, tile_attr, flops)
        return module.operation.get_asm(print_generic_op_form=True)


def _cost(task, nbytes: int, flops: int) -> None:
    task.attributes["et.cost"] = Attribute.parse(f"#et.cost<bytes = {int(nbytes)}, flops = {int(flops)}>")


def _k_chunk(k: int, split_k: int, bk: int) -> int:
    """The columns of K per range of gemm_kernel's split-K forms: a whole
    number of BK-slices."""
    return -(-(-(-k // split_k)) // bk) * bk


def _split_k_tasks(part, x, w, y, rows, k, n, tile, stages, accumulate, split_k, blocks, block_origin, tile_attr,
                   flops):
    """The `part` and `sum` tasks of gemm_kernel's split-K form."""
    idx, f32 = IndexType.get(), F32Type.get()
    dyn = ShapedType.get_dynamic_size()
    bm, bn = tile[0], tile[1]
    chunk = _k_chunk(k, split_k, tile[2])
    done = et.event([et.DYNAMIC], [blocks])
    task = et.TaskOp("part", [arith.MulIOp(blocks, arith.ConstantOp(idx, split_k).result).result])
    _cost(task, 2 * chunk * (bm + bn), flops // split_k)
    with InsertionPoint(task.entry_block):
        (t,) = task.tile_ids
        block = affine.apply(AffineMap.get(1, 0, [AffineExpr.get_floor_div(AffineExpr.get_dim(0),
                                                                            AffineExpr.get_constant(split_k))]),
                             [t])
        s = affine.apply(AffineMap.get(1, 0, [AffineExpr.get_mod(AffineExpr.get_dim(0),
                                                                   AffineExpr.get_constant(split_k))]), [t])
        m0, n0 = block_origin(block)
        k0 = arith.MulIOp(s, arith.ConstantOp(idx, chunk).result).result
        k1 = arith.AddIOp(k0, arith.ConstantOp(idx, chunk).result).result
        layer = memref.subview(part, [s, 0, 0], [1, rows, n], [1, 1, 1],
                               result_type=MemRefType.get([dyn, n], f32, StridedLayoutAttr.get(dyn, [n, 1])))
        et.matmul(x, w, layer, m0, n0, [k0, k1], tile_attr, stages=stages)
        et.signal(done, [block])
    task = et.TaskOp("sum", [blocks])
    _cost(task, 4 * bm * bn * (split_k + 1), bm * bn * split_k)
    with InsertionPoint(task.entry_block):
        (b,) = task.tile_ids
        et.wait(done, [b])
        m0, n0 = block_origin(b)
        _sum_block(part, y, rows, n, bm, bn, split_k, m0, n0, accumulate)


def _sum_block(part, y, rows, n, bm, bn, split_k, m0, n0, accumulate):
    """y[block] (+)= sum over s of part[s][block], 4 columns per thread and
    step, rows below `rows` and columns below N."""
    idx, f32 = IndexType.get(), F32Type.get()
    vec = VectorType.get([4], f32)
    y_elem = MemRefType(y.type).element_type
    tid = et.ThreadIdOp(idx).result
    threads = et.NumThreadsOp(idx).result
    four = arith.ConstantOp(idx, 4).result
    start = arith.MulIOp(tid, four).result
    step = arith.MulIOp(threads, four).result
    loop = scf.ForOp(start, arith.ConstantOp(idx, bm * bn).result, step)
    with InsertionPoint(loop.body):
        e = loop.induction_variable
        r = arith.AddIOp(m0, arith.DivUIOp(e, arith.ConstantOp(idx, bn).result).result).result
        c = arith.AddIOp(n0, arith.RemUIOp(e, arith.ConstantOp(idx, bn).result).result).result
        ok = arith.AndIOp(arith.CmpIOp(arith.CmpIPredicate.ult, r, rows).result,
                          arith.CmpIOp(arith.CmpIPredicate.ult, c, arith.ConstantOp(idx, n).result).result).result
        guard = scf.IfOp(ok)
        with InsertionPoint(guard.then_block):
            total = None
            for s in range(split_k):
                v = vector.LoadOp(vec, part, [arith.ConstantOp(idx, s).result, r, c]).result
                total = v if total is None else arith.AddFOp(total, v).result
            if accumulate:
                total = arith.AddFOp(vector.LoadOp(vec, y, [r, c]).result, total).result
            if y_elem != f32:
                total = arith.TruncFOp(VectorType.get([4], y_elem), total).result
            vector.StoreOp(total, y, [r, c])
            scf.YieldOp([])
        scf.YieldOp([])


def prefill_attention_kernel(heads: int, kv_heads: int, dim: int, cache_len: int, *, block: int = 16,
                             out: str = "bf16", q: str = "bf16", name: str = "prefill_attention") -> str:
    """`et.kernel @name(%q: memref<?xHqxDxbf16>, %k: memref<SxHkvxDxbf16>,
    %v: memref<SxHkvxDxbf16>, %o: memref<?xHqxDx(out)>, %tokens: index,
    %pos0: index)` (q bf16, or f32 with `q="f32"`): causal attention of `tokens` prompt tokens at positions
    pos0.. over the cache (which already holds their keys and values), one
    `et.attention_prefill` tile per (block of tokens, KV head)."""
    if out not in OUTPUTS:
        raise ValueError(f"out must be one of {OUTPUTS}, got {out!r}")
    if q not in OUTPUTS:
        raise ValueError(f"q must be one of {OUTPUTS}, got {q!r}")
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    with Context(), Location.unknown():
        dyn = ShapedType.get_dynamic_size()
        bf16, f32, idx = BF16Type.get(), F32Type.get(), IndexType.get()
        o_type = f32 if out == "f32" else bf16
        types = [MemRefType.get([dyn, heads, dim], f32 if q == "f32" else bf16), MemRefType.get([cache_len, kv_heads, dim], bf16),
                 MemRefType.get([cache_len, kv_heads, dim], bf16), MemRefType.get([dyn, heads, dim], o_type), idx, idx]
        module = Module.create()
        with InsertionPoint(module.body):
            kernel = et.KernelOp(name, types)
            with InsertionPoint(kernel.entry_block):
                q_arg, k, v, o, tokens, pos0 = kernel.arguments
                blk = arith.ConstantOp(idx, block).result
                blocks = arith.CeilDivSIOp(tokens, blk).result
                task = et.TaskOp("attn", [blocks, arith.ConstantOp(idx, kv_heads).result])
                group = heads // kv_heads
                _cost(task, 4 * dim * cache_len, 4 * dim * cache_len * block * group)
                with InsertionPoint(task.entry_block):
                    tb, g = task.tile_ids
                    et.attention_prefill(q_arg, k, v, o, g, arith.MulIOp(tb, blk).result, pos0, block,
                                         FloatAttr.get(f32, dim ** -0.5))
        return module.operation.get_asm(print_generic_op_form=True)


def prefill_attention_tile(heads: int, kv_heads: int, dim: int) -> tuple[int, int]:
    """(block, threads per worker) for `prefill_attention_kernel`: tiles of
    192 (token, head) rows on 12 warps for D = 64 and of 128 rows on 8 warps
    otherwise (what the registers allow), the fastest measured on the H200
    (docs/experiments/2026-11-22-prefill-attention.md)."""
    if kv_heads < 1 or heads % kv_heads:
        raise ValueError(f"heads ({heads}) must be a multiple of kv_heads ({kv_heads})")
    group = heads // kv_heads
    rows, threads = (192, 384) if dim == 64 else (128, 256)
    if rows % group:
        raise ValueError(f"the query group ({group} heads per KV head) must divide {rows}")
    return rows // group, threads


def allreduce_kernel(devices: int, rows: int, cols: int, *, dtype: str = "bf16", block: int = 512,
                     name: str = "allreduce") -> str:
    """`et.kernel @name(%x: memref<RxCxT>, %inbox: memref<NxRxCxT> {et.symmetric},
    %y: memref<RxCxT>) attributes {devices = N}` (T = bf16 or f32): y = the
    sum of every device's x, through `collectives.allreduce_tasks`."""
    from .collectives import allreduce_tasks

    if dtype not in OUTPUTS:
        raise ValueError(f"dtype must be one of {OUTPUTS}, got {dtype!r}")
    with Context(), Location.unknown():
        elem = BF16Type.get() if dtype == "bf16" else F32Type.get()
        types = [MemRefType.get([rows, cols], elem), MemRefType.get([devices, rows, cols], elem),
                 MemRefType.get([rows, cols], elem)]
        module = Module.create()
        with InsertionPoint(module.body):
            kernel = et.KernelOp(name, types, devices=devices, symmetric=[1])
            with InsertionPoint(kernel.entry_block):
                x, inbox, y = kernel.arguments
                allreduce_tasks(x, inbox, y, arith.ConstantOp(IndexType.get(), rows).result, cols, devices,
                                block=block, name=name)
        return module.operation.get_asm(print_generic_op_form=True)


def hop_kernel(devices: int, hops: int, *, peer: int | None = 1, name: str = "hops") -> str:
    """`et.kernel @name(%sink: memref<1xi32>) attributes {devices = N}`: a
    chain of 2 * `hops` tiles that alternate between two tasks, `ping` tile t
    waiting on a[t] and signalling b[t], `pong` tile t waiting on b[t] and
    signalling a[t + 1], each signal going to device (device_id + peer) mod
    N (to the device itself with `peer=None`): the launch time grows by one
    signal-to-wake latency per tile."""
    with Context(), Location.unknown():
        idx = IndexType.get()
        module = Module.create()
        with InsertionPoint(module.body):
            kernel = et.KernelOp(name, [MemRefType.get([1], IntegerType.get_signless(32))], devices=devices)
            with InsertionPoint(kernel.entry_block):
                a = et.event([hops + 1])
                b = et.event([hops])
                start = et.TaskOp("start", [arith.ConstantOp(idx, 1).result])
                with InsertionPoint(start.entry_block):
                    et.signal(a, [0])
                for task, src, dst, step in (("ping", a, b, 0), ("pong", b, a, 1)):
                    op = et.TaskOp(task, [arith.ConstantOp(idx, hops).result])
                    with InsertionPoint(op.entry_block):
                        (t,) = op.tile_ids
                        et.wait(src, [t])
                        nxt = arith.AddIOp(t, arith.ConstantOp(idx, step).result).result
                        et.signal(dst, [nxt], peer=peer)
        return module.operation.get_asm(print_generic_op_form=True)
