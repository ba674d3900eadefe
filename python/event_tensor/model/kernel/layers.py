"""The decoder layers as tasks: the attention and MLP blocks' tasks of one
layer joined into one chain (the fused norms, the tensor-parallel sums),
then emitted per layer, or layered: one task per kind over (layer, tile),
with event tensors indexed by layer."""

from __future__ import annotations

from typing import Callable, NamedTuple

from ...dialects import affine, arith, et
from ...ir import AffineExpr, AffineMap, InsertionPoint
from .tiles import sum_block

__all__ = ["LayerTask", "Layers"]


class LayerTask(NamedTuple):
    """A task of each layer: `body(layer, *tile_ids)` over `extents`
    (prefixed with the batch when `per_batch`), after the tasks `waits` of
    the same layer; `pre(layer, *tile_ids)` (in a layered task also
    given `live=`, whether the tile's row is in the batch), if given, runs
    before the waits and its result (a dict) goes to `body` as `pre=` (see
    `DecodeContext.task`). `body` None: an all-reduce (tensor
    parallelism)."""

    name: str
    body: Callable | None
    extents: list
    per_batch: bool
    waits: list
    nbytes: int
    flops: int
    pre: Callable | None = None


class Layers:
    """The layer tasks of the `DecodeContext` `ctx` from its `attention`
    and `mlp` blocks: `entry` starts each layer (after the previous one's
    end, `ctx.layer_done`), `tasks` follow it in order."""

    def __init__(self, ctx, attention, mlp):
        self.ctx = ctx
        tasks = attention.tasks() + mlp.tasks()
        if ctx.options.fuse_norms:
            # qkv starts each layer; mlp waits on o directly.
            tasks = [spec for spec in tasks if spec.name not in ("qkv", "norm2")]
            tasks = [spec._replace(waits=["o"]) if spec.name == "mlp" else spec for spec in tasks]
        # Tensor parallelism: the all-reduces, h += the partial sums of
        # every device (et.allreduce, one per layer); what waited on o (mlp,
        # or norm2 with unfused norms) waits on sum_o, the next layer on
        # sum_d.
        self.allreduces = {}
        if ctx.options.tp > 1:
            block = sum_block(ctx.H)
            self.allreduces = {"sum_o": ("part_o", block), "sum_d": ("part_d", block)}
            with_sums = []
            for spec in tasks:
                if "o" in spec.waits:
                    spec = spec._replace(waits=["sum_o" if w == "o" else w for w in spec.waits])
                with_sums.append(spec)
                if spec.name in ("o", "down"):
                    with_sums.append(LayerTask(f"sum_{spec.name[0]}", None, [], False, [spec.name], 0, 0))
            tasks = with_sums
        self.entry = attention.entry()
        self.tasks = tasks

    def emit(self) -> str:
        """Emits the layers' tasks; returns the event after which the
        residual stream is complete (the last layer's, per layer)."""
        ctx, entry = self.ctx, self.entry
        if ctx.options.layered:
            self.emit_layered()
            return ctx.layer_done
        prev = "embed"
        for l in range(ctx.L):
            ctx.task(f"{entry.name}_{l}", entry.extents, [prev], lambda *ids, l=l: entry.body(l, *ids),
                     nbytes=entry.nbytes, flops=entry.flops)
            for spec in self.tasks:
                pre = spec.pre
                ctx.task(f"{spec.name}_{l}", spec.extents, [f"{w}_{l}" for w in spec.waits],
                         lambda *ids, body=spec.body, l=l, **kw: body(l, *ids, **kw), per_batch=spec.per_batch,
                         nbytes=spec.nbytes, flops=spec.flops,
                         pre=(lambda *ids, pre=pre, l=l: pre(l, *ids)) if pre else None)
            prev = f"{ctx.layer_done}_{l}"
        return prev

    def emit_layered(self) -> None:
        """One task per kind over (layer, tiles), events indexed by
        layer. The `entry` task starts each layer, after the previous
        layer's `down`; its layer 0 is a task of its own, after the
        embedding."""
        ctx, entry = self.ctx, self.entry
        events, const, L = ctx.events, ctx.const, ctx.L
        for kind in [entry.name] + [spec.name for spec in self.tasks]:
            events[kind] = et.event([L])
        t = ctx.new_task(entry.name + "_first", [const(e) for e in entry.extents])
        ctx.cost(t, entry.nbytes, entry.flops)
        with InsertionPoint(t.entry_block):
            et.wait(events["embed"], [])
            entry.body(0, *t.tile_ids)
            et.signal(events[entry.name], [const(0)])
        if L > 1:
            t = ctx.new_task(entry.name, [const(L - 1)] + [const(e) for e in entry.extents])
            ctx.cost(t, entry.nbytes, entry.flops)
            with InsertionPoint(t.entry_block):
                prev_layer, *ids = t.tile_ids
                layer = affine.apply(AffineMap.get(1, 0, [AffineExpr.get_dim(0) + 1]), [prev_layer])
                et.wait(events[ctx.layer_done], [prev_layer])
                entry.body(layer, *ids)
                et.signal(events[entry.name], [layer])
        for spec in self.tasks:
            if spec.name in self.allreduces:
                # h += every device's partial sums (et-lower-collectives
                # makes this a task), per layer.
                part, block = self.allreduces[spec.name]
                et.AllReduceOp(ctx.A[part], ctx.A["h"], ctx.batch, events[spec.waits[0]], events[spec.name], block,
                               task=spec.name)
                continue
            self.emit_layered_task(spec)

    def emit_layered_task(self, spec: LayerTask) -> None:
        """The task of one kind over (layer, [row,] tiles); tiles past the
        runtime batch, or that the pre-wait part finds without work, only
        wait and signal."""
        ctx = self.ctx
        events, const, body, pre = ctx.events, ctx.const, spec.body, spec.pre
        ext = [ctx.L] + ([ctx.B] if spec.per_batch else []) + list(spec.extents)
        t = ctx.new_task(spec.name, [const(e) for e in ext])
        ctx.cost(t, spec.nbytes, spec.flops)
        with InsertionPoint(t.entry_block):
            layer, *ids = t.tile_ids
            live = arith.CmpIOp(arith.CmpIPredicate.ult, ids[0], ctx.batch).result if spec.per_batch else None
            early = pre(layer, *ids, live=live) if pre else None
            for w in spec.waits:
                et.wait(events[w], [layer])

            def run():
                if pre:
                    body(layer, *ids, pre=early)
                else:
                    body(layer, *ids)
            if early is not None and "live" in early:
                # The pre-wait part says whether the tile has work
                # (it folds in the batch guard).
                live = early["live"]
            if live is not None:
                # Tiles past the runtime batch (or otherwise dead)
                # only signal (after the pre-wait part's
                # "otherwise", if any).
                ctx.guarded(live, run, early.get("otherwise") if early is not None else None)
            else:
                run()
            et.signal(events[spec.name], [layer])
