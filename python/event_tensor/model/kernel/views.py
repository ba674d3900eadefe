"""Memref types and views, and the `et.kernel` with its named arguments:
what the decode and prefill kernels build their IR from."""

from __future__ import annotations

from ...dialects import et, memref
from ...ir import Attribute, BF16Type, InsertionPoint, Location, MemRefType, Module, ShapedType, StridedLayoutAttr
from ..config import ModelConfig
from ..layout import KernelLayout, cache_shape

__all__ = ["DYN", "cache_view", "layer_view", "model_arguments", "mr", "new_kernel", "shared", "strided",
           "vec_view"]

DYN = ShapedType.get_dynamic_size()


def mr(shape, elt):
    """A memref type of `shape` (DYN for dynamic sizes) with the identity layout."""
    return MemRefType.get(list(shape), elt, loc=Location.unknown())


def strided(shape, elt, strides, offset=DYN):
    """A memref type with the given strides and offset (dynamic by default)."""
    return MemRefType.get(list(shape), elt, StridedLayoutAttr.get(offset, list(strides)), loc=Location.unknown())


def shared(shape, elt, strides=None, offset=0):
    """A memref type in workgroup memory (a tile's shared memory on the GPU,
    per-tile memory on the host): the identity layout, or the given
    strides and offset."""
    layout = StridedLayoutAttr.get(offset, list(strides)) if strides is not None else None
    return MemRefType.get(list(shape), elt, layout, Attribute.parse("#gpu.address_space<workgroup>"),
                          loc=Location.unknown())


def new_kernel(name: str, args: list, *, devices: int | None = None, symmetric: tuple = ()):
    """A module with one et.kernel `name` taking the (name, type) `args`,
    their names recorded in `arg_names` (the runtime's argument metadata).
    `devices` and the names in `symmetric` make a kernel on several devices.
    Returns (module, kernel, {name: block argument}). Must run inside an
    MLIR Context."""
    module = Module.create(Location.unknown())
    names = [n for n, _ in args]
    with InsertionPoint(module.body), Location.unknown():
        kernel = et.KernelOp(name, [t for _, t in args], devices=devices,
                             symmetric=[names.index(n) for n in symmetric])
    kernel.attributes["arg_names"] = Attribute.parse("[" + ", ".join(f'"{n}"' for n in names) + "]")
    return module, kernel, dict(zip(names, kernel.arguments))


def model_arguments(config: ModelConfig, layout: KernelLayout) -> list:
    """(name, type) of the kernel arguments the decode and prefill kernels
    share: the weights (stacked over layers) and the KV caches. Must run
    inside an MLIR Context."""
    c = config
    L, H, I, V = c.num_layers, c.hidden_size, c.intermediate_size, c.vocab_size
    Hq, Hkv, D = c.num_heads, c.num_kv_heads, c.head_dim
    S, B = layout.cache_len, layout.cache_slots
    bf16 = BF16Type.get()
    args = [("embed", mr([V, H], bf16)), ("ln1", mr([L, H], bf16)),
            ("wq", mr([L, Hq * D, H], bf16)), ("wk", mr([L, Hkv * D, H], bf16)), ("wv", mr([L, Hkv * D, H], bf16)),
            ("wo", mr([L, H, Hq * D], bf16)), ("ln2", mr([L, H], bf16))]
    if c.moe:
        E, Im = c.num_experts, c.moe_intermediate_size
        args += [("router", mr([L, E, H], bf16)), ("exp_gate", mr([L, E, Im, H], bf16)),
                 ("exp_up", mr([L, E, Im, H], bf16)), ("exp_down", mr([L, E, H, Im], bf16))]
    else:
        args += [("wg", mr([L, I, H], bf16)), ("wu", mr([L, I, H], bf16)), ("wd", mr([L, H, I], bf16))]
    args += [("final_norm", mr([H], bf16)), ("lm_head", mr([V, H], bf16))]
    if c.qk_norm:
        args += [("q_norm", mr([L, D], bf16)), ("k_norm", mr([L, D], bf16))]
    shape = cache_shape(L, B, S, Hkv, D)
    return args + [("k_cache", mr(shape, bf16)), ("v_cache", mr(shape, bf16))]


def cache_view(cache, length: int, layer, slot, h0=0, n: int | None = None):
    """The first `length` positions of KV heads [h0, h0 + n) (default: all)
    of layer `layer` (index Value or int) of cache slot `slot` (index
    Value) as a [length, n, D] view."""
    _, _, L, Hkv, D = cache.type.shape
    S, n = length, (Hkv if n is None else n)
    return memref.subview(cache, [slot, 0, layer, h0, 0], [1, S, 1, n, D], [1] * 5,
                          result_type=strided([S, n, D], cache.type.element_type, [L * Hkv * D, D, 1]))


def _layer_offset(layer, size: int):
    """The static offset of layer `layer` (an int), or dynamic."""
    return layer * size if isinstance(layer, int) else DYN


def layer_view(w, layer, rows: int, cols: int):
    """Layer `layer` (int or index Value) of a stacked [L, rows, cols] weight."""
    return memref.subview(w, [layer, 0, 0], [1, rows, cols], [1, 1, 1],
                          result_type=MemRefType.get([rows, cols], w.type.element_type,
                                                     StridedLayoutAttr.get(_layer_offset(layer, rows * cols),
                                                                           [cols, 1]),
                                                     loc=Location.unknown()))


def vec_view(w, layer, n: int):
    """Layer `layer` (int or index Value) of a stacked [L, n] vector."""
    return memref.subview(w, [layer, 0], [1, n], [1, 1],
                          result_type=MemRefType.get([n], w.type.element_type,
                                                     StridedLayoutAttr.get(_layer_offset(layer, n), [1]),
                                                     loc=Location.unknown()))
