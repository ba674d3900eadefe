"""The task/event graph of an `et.kernel` (the C++ EventGraph analysis).

`event_graph(kernel)` returns a dict:

    {"kernel": "attention",
     "tasks":  [{"name": "merge", "extents": [{"value": "8", "kind": "static"}]}, ...],
     "events": [{"name": "event0", "shape": [8], "signalled_by": [...], "waited_by": [...],
                 "count_kind": "static" | "symbolic" | "device", "count": "4",
                 "static_counts": [...], "device_reason": "..."}, ...],
     "edges":  [{"from": "qkv_proj", "to": "attn_split", "event": "event1"}, ...]}

`count` is the expected number of signals of element (e0, e1, ...); for a
symbolic count it is an expression of the kernel arguments (`arg0`, ...).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from ._mlir_libs import _etDialects

__all__ = ["event_graph", "event_graph_dot", "kernels", "schedule_plan"]


def _as_operation(op):
    return op.operation if hasattr(op, "operation") else op


def kernels(module) -> list:
    """The `et.kernel` operations at the top level of `module`."""
    body = _as_operation(module).regions[0].blocks[0]
    return [op for op in body.operations if op.operation.name == "et.kernel"]


def _one_kernel(op):
    operation = _as_operation(op)
    if operation.name == "builtin.module":
        found = kernels(operation)
        if len(found) != 1:
            raise ValueError(f"expected a module with exactly one 'et.kernel', found {len(found)}")
        return _as_operation(found[0])
    if operation.name != "et.kernel":
        raise ValueError(f"expected an 'et.kernel' operation, got '{operation.name}'")
    return operation


def event_graph(kernel) -> dict[str, Any]:
    """The task/event graph of `kernel` (an et.kernel, or a module holding one)."""
    return json.loads(_etDialects.event_graph_json(_one_kernel(kernel)))


def event_graph_dot(kernel) -> str:
    """The task/event graph of `kernel` in Graphviz DOT."""
    return _etDialects.event_graph_dot(_one_kernel(kernel))


_SIZE_NAME = re.compile(r"(arg|load)[0-9]+")


def schedule_plan(kernel, bindings: Mapping[str, int] | None = None) -> dict[str, Any]:
    """The schedule of a scheduled `kernel`, expanded into tiles for concrete
    runtime sizes: the input of `event_tensor.simulator.simulate`.

    `bindings` gives every runtime size a tile count depends on: kernel
    argument `i` as "arg<i>", the `k`-th `et.extent.load` as "load<k>". The
    plan holds the tasks (tile counts, bytes, flops and durations under the
    schedule's cost model), every tile's dependencies, and either the
    per-worker programs (static) or the ticket order (dynamic).
    """
    items = []
    for name, value in (bindings or {}).items():
        if not isinstance(name, str) or not _SIZE_NAME.fullmatch(name):
            raise ValueError(f"size binding name {name!r} is not 'arg<i>' or 'load<k>'")
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"size binding {name!r} must be an int, got {value!r}")
        items.append(f"{name}={value}")
    return json.loads(_etDialects.schedule_plan_json(_one_kernel(kernel), ",".join(items)))
