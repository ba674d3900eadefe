"""The `et` dialect: generated op classes plus Pythonic helpers.

The op classes (`KernelOp`, `TaskOp`, `EventCreateOp`, ...) are generated from
ODS. This module extends two of them with convenience constructors and adds
helpers that read like the IR:

    with et.kernel("mlp", [IndexType.get()]) as (rows,):
        ready = et.event([et.DYNAMIC], [rows])
        with et.task("producer", [rows]) as (i,):
            et.signal(ready, [i])
        with et.task("consumer", [rows]) as (i,):
            et.wait(ready, [i])

Python ints are accepted wherever an `index` value is expected (they become
`arith.constant`s). Helpers take `loc` and `ip` keyword-only arguments.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional, Sequence, Union

from ._et_enum_gen import *  # noqa: F401,F403
from ._et_ops_gen import *  # noqa: F401,F403
from ._et_ops_gen import _Dialect
from ._et_ops_gen import KernelOp as _KernelOpGen
from ._et_ops_gen import TaskOp as _TaskOpGen
from ._ods_common import _cext as _ods_cext
from .._mlir_libs._etDialects.et import DYNAMIC, EventType  # noqa: F401
from ..ir import (
    ArrayAttr,
    DictAttr,
    FunctionType,
    IndexType,
    InsertionPoint,
    IntegerAttr,
    IntegerType,
    MemRefType,
    StringAttr,
    Type,
    TypeAttr,
    UnitAttr,
    Value,
)
from . import arith as _arith

IndexLike = Union[Value, int]

__all__ = [
    "DYNAMIC",
    "EventType",
    "KernelOp",
    "TaskOp",
    "event",
    "index",
    "device_id",
    "kernel",
    "peer",
    "signal",
    "task",
    "wait",
]


def index(value: IndexLike, *, loc=None, ip=None) -> Value:
    """Returns `value` as an `index` Value (a Python int becomes a constant)."""
    if isinstance(value, Value):
        if not isinstance(value.type, IndexType):
            raise TypeError(f"expected an index value, got one of type {value.type}")
        return value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an index Value or a Python int, got {value!r}")
    return _arith.ConstantOp(IndexType.get(), value, loc=loc, ip=ip).result


def _indices(values: Sequence[IndexLike], *, loc=None, ip=None) -> list[Value]:
    return [index(v, loc=loc, ip=ip) for v in values]


@_ods_cext.register_operation(_Dialect, replace=True)
class KernelOp(_KernelOpGen):
    """`et.kernel`: built from a name and argument types; the body block is
    created with one argument per type."""

    def __init__(self, name: str, arg_types: Sequence[Type], *, devices: Optional[int] = None,
                 symmetric: Sequence[int] = (), loc=None, ip=None):
        arg_types = list(arg_types)
        if devices is not None and (isinstance(devices, bool) or not isinstance(devices, int) or devices < 1):
            raise ValueError(f"kernel '{name}': devices must be a positive int, got {devices!r}")
        arg_attrs = None
        if symmetric:
            marked = set()
            for i in symmetric:
                if isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(arg_types):
                    raise ValueError(f"kernel '{name}': symmetric argument {i!r} is not an argument index "
                                     f"(0..{len(arg_types) - 1})")
                if not isinstance(arg_types[i], MemRefType):
                    raise ValueError(f"kernel '{name}': symmetric argument {i} is a {arg_types[i]}, not a memref")
                marked.add(i)
            arg_attrs = ArrayAttr.get([
                DictAttr.get({"et.symmetric": UnitAttr.get()} if i in marked else {})
                for i in range(len(arg_types))])
        super().__init__(
            StringAttr.get(name),
            TypeAttr.get(FunctionType.get(arg_types, [])),
            arg_attrs=arg_attrs,
            devices=None if devices is None else IntegerAttr.get(IntegerType.get_signless(64), devices),
            loc=loc,
            ip=ip,
        )
        self.body.blocks.append(*arg_types)

    @property
    def entry_block(self):
        return self.body.blocks[0]

    @property
    def arguments(self):
        return self.entry_block.arguments


@_ods_cext.register_operation(_Dialect, replace=True)
class TaskOp(_TaskOpGen):
    """`et.task`: built from a name and extents (Values or ints); the body
    block gets one `index` tile coordinate per extent."""

    def __init__(self, name: str, extents: Sequence[IndexLike], *, loc=None, ip=None):
        if len(extents) == 0:
            raise ValueError(f"task '{name}' needs at least one extent")
        for i, e in enumerate(extents):
            if isinstance(e, int) and not isinstance(e, bool) and e < 1:
                raise ValueError(f"task '{name}': extent #{i} must be positive, got {e}")
        values = _indices(extents, loc=loc, ip=ip)
        super().__init__(StringAttr.get(name), values, loc=loc, ip=ip)
        self.body.blocks.append(*([IndexType.get()] * len(values)))

    @property
    def entry_block(self):
        return self.body.blocks[0]

    @property
    def tile_ids(self):
        return self.entry_block.arguments


@contextmanager
def kernel(name: str, arg_types: Sequence[Type], *, devices: Optional[int] = None,
           symmetric: Sequence[int] = (), loc=None, ip=None) -> Iterator[tuple]:
    """Creates an `et.kernel` and builds its body inside the `with` block;
    yields the kernel arguments. `devices=N` makes a kernel that runs on N
    devices; `symmetric` lists the memref arguments allocated on every
    device (reachable with `peer`)."""
    op = KernelOp(name, arg_types, devices=devices, symmetric=symmetric, loc=loc, ip=ip)
    with InsertionPoint(op.entry_block):
        yield tuple(op.arguments)


@contextmanager
def task(name: str, extents: Sequence[IndexLike], *, loc=None, ip=None) -> Iterator[tuple]:
    """Creates an `et.task` and builds its body inside the `with` block;
    yields the tile coordinates."""
    op = TaskOp(name, extents, loc=loc, ip=ip)
    with InsertionPoint(op.entry_block):
        yield tuple(op.tile_ids)


def event(
    shape: Sequence[Optional[int]],
    dynamic_sizes: Sequence[IndexLike] = (),
    *,
    expected: Optional[int] = None,
    loc=None,
    ip=None,
) -> Value:
    """Creates an event tensor. `shape` holds ints and `None` or `DYNAMIC`
    for dynamic dimensions, whose sizes come from `dynamic_sizes` in order."""
    dims = [DYNAMIC if d is None else d for d in shape]
    for i, d in enumerate(dims):
        if d != DYNAMIC and (not isinstance(d, int) or d < 1):
            raise ValueError(f"event dimension {i} must be a positive int or None (dynamic), got {shape[i]!r}")
    n_dyn = sum(1 for d in dims if d == DYNAMIC)
    if n_dyn != len(dynamic_sizes):
        raise ValueError(f"event shape {list(shape)} has {n_dyn} dynamic dimensions but {len(dynamic_sizes)} sizes were given")
    if expected is not None and (not isinstance(expected, int) or expected < 1):
        raise ValueError(f"expected count must be a positive int, got {expected!r}")
    attr = None if expected is None else IntegerAttr.get(IntegerType.get_signless(64), expected)
    return event_create(
        EventType.get(dims), _indices(dynamic_sizes, loc=loc, ip=ip), expected=attr, loc=loc, ip=ip
    )


def _check_rank(event_value: Value, indices: Sequence[IndexLike], what: str) -> None:
    if not isinstance(event_value.type, EventType):
        raise TypeError(f"{what}: expected an event tensor, got a value of type {event_value.type}")
    rank = event_value.type.rank
    if len(indices) != rank:
        raise ValueError(f"{what}: {event_value.type} has rank {rank}, got {len(indices)} indices")


def wait(event_value: Value, indices: Sequence[IndexLike] = (), *, loc=None, ip=None) -> EventWaitOp:
    """Waits until element `indices` of `event_value` is ready."""
    _check_rank(event_value, indices, "wait")
    return event_wait(event_value, _indices(indices, loc=loc, ip=ip), loc=loc, ip=ip)


def signal(event_value: Value, indices: Sequence[IndexLike] = (), *, peer: IndexLike | None = None,
           loc=None, ip=None) -> EventSignalOp:
    """Signals element `indices` of `event_value` once; with `peer=k`, the
    element of the copy on device (device_id + k) mod N of a multi-device
    kernel."""
    _check_rank(event_value, indices, "signal")
    peer_value = None if peer is None else _indices([peer], loc=loc, ip=ip)[0]
    return event_signal(event_value, _indices(indices, loc=loc, ip=ip), peer=peer_value, loc=loc, ip=ip)


def device_id(*, loc=None, ip=None) -> Value:
    """The device this copy of a multi-device kernel runs on (`et.device_id`)."""
    return DeviceIdOp(IndexType.get(), loc=loc, ip=ip).result


def peer(buffer: Value, offset: IndexLike, *, loc=None, ip=None) -> Value:
    """The copy of symmetric kernel argument `buffer` on device
    (device_id + offset) mod N (`et.peer`)."""
    return PeerOp(buffer.type, buffer, index(offset, loc=loc, ip=ip), loc=loc, ip=ip).result
