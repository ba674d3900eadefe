"""What the phases of the decode kernel share (`DecodeContext`): the model's
shapes on one device, the layout and options, the rows per linear tile, the
`et.kernel` and its arguments, the task events, and the helpers that every
phase builds its tasks and views with."""

from __future__ import annotations

from typing import Callable

from ...dialects import arith, et, memref, scf
from ...ir import (
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
    StridedLayoutAttr,
    UnitAttr,
)
from ..config import ModelConfig, tp_config
from ..layout import KernelLayout
from ..options import KernelOptions
from .buffers import decode_arguments, plan_scratch
from .tiles import rows_per_tile
from .views import DYN, mr, new_kernel, strided

__all__ = ["DecodeContext"]


class DecodeContext:
    """The decode kernel being built. Its dimensions are one device's
    shares (`tp_config`): L layers, hidden H, intermediate I, vocabulary V
    (V_lm rows of the LM head on this device), Hq query and Hkv KV heads of
    D; S and B are the layout's max context and max batch. `A` maps the
    argument names to the kernel's block arguments, `batch` is the runtime
    batch, `events` the event of each task by name.

    The helpers that create ops do so at the current insertion point; task
    bodies take the layer (an int, or an index Value in a layered task)
    and the tile coordinates."""

    def __init__(self, config: ModelConfig, layout: KernelLayout, options: KernelOptions, *, name: str,
                 linear_rows: Callable | None, warps: int | None):
        self.config, self.layout, self.options = config, layout, options
        self.linear_rows, self.warps = linear_rows, warps
        tp = options.tp
        c = self.c = tp_config(config, tp)
        self.L, self.H, self.I, self.V = c.num_layers, c.hidden_size, c.intermediate_size, c.vocab_size
        self.Hq, self.Hkv, self.D = c.num_heads, c.num_kv_heads, c.head_dim
        self.V_lm = self.V // tp  # rows of the LM head on one device
        self.S, self.B = layout.max_context, layout.max_batch
        self.mma = options.linear_tile == "mma"
        self.xs_rows, self.qkv_rows, self.qkv_by_matrix = plan_scratch(self)
        self.bf16, self.f32, self.i32, self.idx = (BF16Type.get(), F32Type.get(), IntegerType.get_signless(32),
                                                   IndexType.get())
        args, symmetric = decode_arguments(self)
        self.module, self.kernel, self.A = new_kernel(name, args, devices=tp if tp > 1 else None,
                                                      symmetric=symmetric)
        self.batch = self.A["batch"]
        self.events: dict[str, object] = {}
        # The event that ends a layer: the residual stream is complete.
        self.layer_done = ("sum_d" if tp > 1 else "down" if not c.moe else
                           "combine" if options.expert_combine else "exp_down")
        with Location.unknown():
            self.eps = FloatAttr.get(self.f32, c.rms_norm_eps)
            self.scale = FloatAttr.get(self.f32, self.D ** -0.5)
            self.theta = FloatAttr.get(self.f32, c.rope_theta)
            self.scaling = DenseF32ArrayAttr.get([float(x) for x in c.rope_scaling]) if c.rope_scaling else None

    def rows_for(self, n: int, k: int) -> int:
        """Rows per tile of the N x K linear layer: `linear_rows(n, k)`
        (a tuning table's), else about one tile per worker."""
        rows = self.linear_rows(n, k) if self.linear_rows else rows_per_tile(n, self.layout.workers)
        if isinstance(rows, bool) or not isinstance(rows, int) or not 1 <= rows:
            raise ValueError(f"rows per tile for the {n}x{k} linear layer must be a positive int, got {rows!r}")
        return min(rows, n)

    # -- ops -------------------------------------------------------------

    def const(self, v: int):
        return arith.ConstantOp(self.idx, v).result

    @staticmethod
    def cost(task, nbytes: int, flops: int):
        task.attributes["et.cost"] = Attribute.parse(f"#et.cost<bytes = {int(nbytes)}, flops = {int(flops)}>")

    @staticmethod
    def new_task(tname: str, extents: list, max_extents: list | None = None):
        t = et.TaskOp(tname, extents)
        if max_extents is not None:
            t.attributes["max_extents"] = DenseI64ArrayAttr.get(max_extents)
        return t

    @staticmethod
    def outlined(run):
        """run() inside a region whose code the worker conversion moves
        into a function of its own, never inlined (`et.outline`): for code
        that most launches skip, so that it takes no registers or stack
        from the tiles around it."""
        region = scf.ExecuteRegionOp([])
        region.attributes["et.outline"] = UnitAttr.get()
        region.attributes["no_inline"] = UnitAttr.get()
        with InsertionPoint(region.region.blocks.append()):
            run()
            scf.YieldOp([])

    @staticmethod
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

    def task(self, tname: str, extents: list, deps: list[str], body: Callable, *, per_batch: bool = False,
             nbytes: int = 0, flops: int = 0, pre: Callable | None = None, peers: int = 0):
        """A task over `extents` (prefixed with the batch when
        `per_batch`), waiting on the events of `deps`; signals its
        own event once per tile (on each of the `peers` devices
        when given). `pre(*tile_ids)`, if given, runs before the
        waits and its result (a dict) is passed to `body` as `pre=`;
        its "live" entry, if any, guards the body (a dead tile only
        waits and signals)."""
        events = self.events
        ext = ([self.batch] if per_batch else []) + [self.const(e) for e in extents]
        mx = ([self.B] + list(extents)) if per_batch else None
        events[tname] = et.event([])
        t = self.new_task(tname, ext, mx)
        self.cost(t, nbytes, flops)
        with InsertionPoint(t.entry_block):
            early = pre(*t.tile_ids) if pre else None
            for dep in deps:
                et.wait(events[dep], [])
            if pre and "live" in early:
                self.guarded(early["live"], lambda: body(*t.tile_ids, pre=early), early.get("otherwise"))
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

    # -- views -----------------------------------------------------------

    @staticmethod
    def collapse(buf, n: int):
        """[batch, a, b] -> [batch, a * b]."""
        t = buf.type
        return memref.collapse_shape(mr([DYN, n], t.element_type), buf, [[0], [1, 2]])

    def position(self, b):
        p = memref.LoadOp(self.A["positions"], [b]).result
        return arith.IndexCastOp(self.idx, p).result

    @staticmethod
    def row(buf, b, shape, elt):
        """Row b of a [batch, *shape] buffer as a `shape` view."""
        n = len(shape)
        strides = [1] * n
        for i in range(n - 2, -1, -1):
            strides[i] = strides[i + 1] * shape[i + 1]
        return memref.subview(buf, [b] + [0] * n, [1] + list(shape), [1] * (n + 1),
                              result_type=strided(shape, elt, strides))

    def slot_of(self, b):
        """Row b's cache slot (index)."""
        return arith.IndexCastOp(self.idx, memref.LoadOp(self.A["slots"], [b]).result).result

    def batch_rows(self, buf, elt=None):
        """The first `batch` rows of a [max_batch, H] buffer (f32, or `elt`)."""
        H = self.H
        return memref.SubViewOp(
            MemRefType.get([DYN, H], elt or self.f32, StridedLayoutAttr.get(0, [H, 1]), loc=Location.unknown()),
            buf, [], [self.batch], [], static_offsets=[0, 0], static_sizes=[DYN, H], static_strides=[1, 1]).result

    @staticmethod
    def entry(buf, b, elt):
        """Entry b of a [rows] buffer as a [1] view."""
        return memref.subview(buf, [b], [1], [1], result_type=strided([1], elt, [1]))

    @staticmethod
    def one_row(buf, b, width: int, elt):
        """Row b of a [rows, width] buffer as a [1, width] view (a static
        view when b is the int 0)."""
        offset = 0 if isinstance(b, int) and b == 0 else DYN
        return memref.subview(buf, [b, 0], [1, width], [1, 1],
                              result_type=strided([1, width], elt, [width, 1], offset))

    def norm_row(self, w, b):
        """xn[b] = rmsnorm(h[b]) * w where row b is in the batch: the body of
        a norm task's tile b (norms not fused into the linear tiles)."""
        H, A = self.H, self.A
        live = arith.CmpIOp(arith.CmpIPredicate.ult, b, self.batch).result
        self.guarded(live, lambda: et.rmsnorm(self.one_row(A["h"], b, H, self.f32), w,
                                              self.one_row(A["xn"], b, H, self.bf16), self.eps))

    def normalized_rows(self):
        """What the linear tiles read without fused norms: the `batch`
        rows of xn (tensor-core tiles), or all of xn (et.linear's rows)."""
        return self.batch_rows(self.A["xn"], self.bf16) if self.mma else self.A["xn"]
