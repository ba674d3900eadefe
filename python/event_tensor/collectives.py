"""Communication between the devices of a multi-device kernel, as tasks
built from Python (the IR's own collective, `et.allreduce`, is lowered by
the et-lower-collectives pass). `allreduce_tasks` is a one-shot all-reduce
by push: each device writes its partial sum into every device's `inbox`
(symmetric: allocated on every device) and signals there; each device then
adds the N partials in device order, so every device computes the same
bits. `gather_candidates` collects every device's argmax candidates. Needs
MLIR; emits into the kernel being built (an `InsertionPoint` in its
body)."""

from __future__ import annotations

from .dialects import arith, et, memref, scf, vector
from .ir import F32Type, IndexType, InsertionPoint, IntegerType, MemRefType, Value, VectorType

__all__ = ["allreduce_tasks", "gather_candidates"]


def allreduce_tasks(x: Value, inbox: Value, y: Value, rows: Value, cols: int, devices: int, *,
                    block: int = 512, name: str = "allreduce", after: tuple | None = None) -> Value:
    """Emits the tasks `{name}_push` (tiles (k, c) over devices x column
    blocks) and `{name}_sum` (tiles (c)): y[:rows, :cols] = the sum over
    devices of their x[:rows, :cols].

    `x` and `y` are [R, cols] memrefs on this device, `inbox` a symmetric
    [N, R, cols] kernel argument (N = `devices`); R may be dynamic, `rows`
    (index) <= R is the number of rows in use. Push tile (k, c) copies
    column block c of x into slot k of the inbox of device
    (device_id + k) mod N and signals that device's element c of the
    returned event (k = 0 is the device itself), so slot s of a device's
    inbox holds the partial of device (device_id - s) mod N. `after`, an
    (event, indices function) pair, makes each push tile wait first on
    `event[fn(c)]` (the tile that wrote its block of x). The sum of block c
    waits for its N pushes, adds the slots in device order 0..N-1 in f32 and
    writes y in y's element type. Returns the event (`!et.event<blocks>`,
    N signals per element) that the sum tasks signal per block."""
    if cols % block:
        raise ValueError(f"allreduce: cols ({cols}) must be a multiple of block ({block})")
    elem = MemRefType(x.type).element_type
    if MemRefType(inbox.type).element_type != elem:
        raise ValueError("allreduce: x and inbox need the same element type")
    width = 4 if elem == F32Type.get() else 8
    if block % width:
        raise ValueError(f"allreduce: block ({block}) must be a multiple of {width}")
    blocks = cols // block
    vec = VectorType.get([width], elem)
    vec32 = VectorType.get([width], F32Type.get())
    received = et.event([blocks])
    done = et.event([blocks])

    def each_vector(c, body):
        # Thread t handles elements (t + i * threads) * width of the
        # rows x block column block, row-major.
        tid = et.ThreadIdOp(IndexType.get()).result
        threads = et.NumThreadsOp(IndexType.get()).result
        total = arith.MulIOp(rows, et.index(block)).result
        loop = scf.ForOp(arith.MulIOp(tid, et.index(width)).result, total, arith.MulIOp(threads, et.index(width)).result)
        with InsertionPoint(loop.body):
            e = loop.induction_variable
            r = arith.DivUIOp(e, et.index(block)).result
            col = arith.AddIOp(arith.MulIOp(c, et.index(block)).result, arith.RemUIOp(e, et.index(block)).result).result
            body(r, col)
            scf.YieldOp([])

    push = et.TaskOp(f"{name}_push", [et.index(devices), et.index(blocks)])
    with InsertionPoint(push.entry_block):
        k, c = push.tile_ids
        if after is not None:
            event, fn = after
            et.wait(event, fn(c))
        remote = et.peer(inbox, k)

        def copy(r, col):
            vector.StoreOp(vector.LoadOp(vec, x, [r, col]).result, remote, [k, r, col])

        each_vector(c, copy)
        et.signal(received, [c], peer=k)

    total = et.TaskOp(f"{name}_sum", [et.index(blocks)])
    with InsertionPoint(total.entry_block):
        (c,) = total.tile_ids
        et.wait(received, [c])
        d = et.device_id()
        y_elem = MemRefType(y.type).element_type

        def add(r, col):
            acc = None
            for rank in range(devices):
                # The slot of device `rank`'s partial: (d - rank) mod N.
                slot = arith.RemUIOp(arith.AddIOp(d, et.index(devices - rank)).result, et.index(devices)).result
                v = vector.LoadOp(vec, inbox, [slot, r, col]).result
                if elem != F32Type.get():
                    v = arith.ExtFOp(vec32, v).result
                acc = v if acc is None else arith.AddFOp(acc, v).result
            if y_elem != F32Type.get():
                acc = arith.TruncFOp(VectorType.get([width], y_elem), acc).result
            vector.StoreOp(acc, y, [r, col])

        each_vector(c, add)
        et.signal(done, [c])
    return done


def _peer_of_device(buffer: Value, rank: Value | int, devices: int) -> Value:
    """The copy of symmetric `buffer` on device `rank` (absolute): et.peer
    at offset (rank - device_id) mod N."""
    d = et.device_id()
    r = et.index(rank)
    off = arith.RemUIOp(arith.SubIOp(arith.AddIOp(r, et.index(devices)).result, d).result, et.index(devices)).result
    return et.peer(buffer, off)


def gather_candidates(part_val: Value, part_idx: Value, all_val: Value, all_idx: Value, rows: Value,
                      chunks: int, devices: int, share: int) -> None:
    """In a task body: the argmax candidates of every device (symmetric
    part_val f32 / part_idx i32 [R, chunks], indices into that device's
    `share` of the vocabulary) into all_val / all_idx [R, N * chunks],
    device by device, with indices into the whole vocabulary (device r's
    plus r * share)."""
    idx, i32 = IndexType.get(), IntegerType.get_signless(32)
    tid = et.ThreadIdOp(idx).result
    threads = et.NumThreadsOp(idx).result
    per_device = arith.MulIOp(rows, et.index(chunks)).result
    total = arith.MulIOp(per_device, et.index(devices)).result
    loop = scf.ForOp(tid, total, threads)
    with InsertionPoint(loop.body):
        e = loop.induction_variable
        dev = arith.DivUIOp(e, per_device).result
        rest = arith.RemUIOp(e, per_device).result
        b = arith.DivUIOp(rest, et.index(chunks)).result
        j = arith.RemUIOp(rest, et.index(chunks)).result
        v = memref.LoadOp(_peer_of_device(part_val, dev, devices), [b, j]).result
        i = memref.LoadOp(_peer_of_device(part_idx, dev, devices), [b, j]).result
        base = arith.IndexCastOp(i32, arith.MulIOp(dev, et.index(share)).result).result
        col = arith.AddIOp(arith.MulIOp(dev, et.index(chunks)).result, j).result
        memref.StoreOp(v, all_val, [b, col])
        memref.StoreOp(arith.AddIOp(i, base).result, all_idx, [b, col])
        scf.YieldOp([])
