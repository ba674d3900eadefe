"""Builds one decode step of a Llama-3 / Qwen3 model as one `et.kernel`,
with the generated `et` op bindings.

Batch size (1..max_batch) and context length (<= max_context) are runtime
values: the batch is an `index` argument (task extents and the dynamic
dimension of every activation buffer). Each row of the batch is one token
with its position and its KV-cache slot (buffers): rows of different slots
are different sequences; rows of one slot at consecutive positions are a
chunk of one prompt (prefill), attending causally, since every row's keys
and values are appended before any row's attention. Weights are stacked per kind ([layers, ...]) and selected with
`memref.subview` inside task bodies; KV caches are [layers, max_batch,
max_context, kv_heads, head_dim] bf16.

Every producer task signals one event tensor of rank 0 once per tile, and
each consumer waits on the events of what it reads; buffers reused across
layers are ordered by the chain of those waits. `et.cost` attributes give
the scheduler each tile's weight bytes and flops.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..dialects import arith, et, memref
from ..ir import (
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
    Module,
    ShapedType,
    StridedLayoutAttr,
)
from .config import ModelConfig

__all__ = ["KernelLayout", "build_decode_kernel", "kernel_layout"]

DYN = ShapedType.get_dynamic_size()


@dataclass(frozen=True)
class KernelLayout:
    """Compile-time shape choices of a decode kernel; the runtime needs them
    to allocate buffers (stored in the artifact's model.json)."""

    max_batch: int
    max_context: int
    split_len: int
    argmax_chunks: int
    workers: int

    @property
    def splits(self) -> int:
        return -(-self.max_context // self.split_len)

    def to_dict(self) -> dict:
        return dict(max_batch=self.max_batch, max_context=self.max_context, split_len=self.split_len,
                    argmax_chunks=self.argmax_chunks, workers=self.workers)


def kernel_layout(config: ModelConfig, *, max_batch: int, max_context: int, workers: int,
                  split_len: int | None = None) -> KernelLayout:
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or not 1 <= max_batch <= 16:
        raise ValueError(f"max_batch must be an int in [1, 16] (et.linear serves at most 16 tokens), got {max_batch!r}")
    if isinstance(max_context, bool) or not isinstance(max_context, int) or max_context < 1:
        raise ValueError(f"max_context must be a positive int, got {max_context!r}")
    if max_context > config.max_position_embeddings:
        raise ValueError(f"max_context {max_context} exceeds the model's max_position_embeddings "
                         f"{config.max_position_embeddings}")
    if split_len is None:
        # About one attention tile per worker at full context, but at least
        # 256 positions per tile: a tile has a fixed cost of a few us, so
        # short splits cost more than they spread (measured on the H200:
        # 1.89 ms per Llama-3.2-1B step with 256 at 1k context, 2.05 ms with
        # 64; docs/benchmarks.md).
        split_len = max(256, -(-max_context * config.num_kv_heads // workers))
        split_len = min(-(-split_len // 16) * 16, max(16, -(-max_context // 16) * 16))
    if split_len < 1:
        raise ValueError(f"split_len must be positive, got {split_len}")
    chunks = max(1, min(workers, -(-config.vocab_size // 1024)))
    return KernelLayout(max_batch, max_context, split_len, chunks, workers)


def _rows_per_tile(n: int, workers: int) -> int:
    """Rows of a linear-layer tile: about one tile per worker."""
    return max(1, -(-n // workers))


def build_decode_kernel(config: ModelConfig, layout: KernelLayout, *, name: str = "decode") -> Module:
    """The decode-step kernel of `config`. Must run inside an MLIR Context."""
    c, lay = config, layout
    L, H, I, V = c.num_layers, c.hidden_size, c.intermediate_size, c.vocab_size
    Hq, Hkv, D = c.num_heads, c.num_kv_heads, c.head_dim
    S, B = lay.max_context, lay.max_batch
    bf16, f32, i32, idx = BF16Type.get(), F32Type.get(), IntegerType.get_signless(32), IndexType.get()

    def mr(shape, elt):
        return MemRefType.get(list(shape), elt, loc=Location.unknown())

    def strided(shape, elt, strides):
        return MemRefType.get(list(shape), elt, StridedLayoutAttr.get(DYN, list(strides)), loc=Location.unknown())

    # Kernel arguments, in order (runtime/model.py passes them the same way).
    args = [("batch", idx), ("tokens", mr([DYN], i32)), ("positions", mr([DYN], i32)), ("slots", mr([DYN], i32)),
            ("embed", mr([V, H], bf16)), ("ln1", mr([L, H], bf16)),
            ("wq", mr([L, Hq * D, H], bf16)), ("wk", mr([L, Hkv * D, H], bf16)), ("wv", mr([L, Hkv * D, H], bf16)),
            ("wo", mr([L, H, Hq * D], bf16)), ("ln2", mr([L, H], bf16)),
            ("wg", mr([L, I, H], bf16)), ("wu", mr([L, I, H], bf16)), ("wd", mr([L, H, I], bf16)),
            ("final_norm", mr([H], bf16)), ("lm_head", mr([V, H], bf16))]
    if c.qk_norm:
        args += [("q_norm", mr([L, D], bf16)), ("k_norm", mr([L, D], bf16))]
    args += [("k_cache", mr([L, B, S, Hkv, D], bf16)), ("v_cache", mr([L, B, S, Hkv, D], bf16)),
             ("h", mr([DYN, H], f32)), ("xn", mr([DYN, H], bf16)),
             ("q", mr([DYN, Hq, D], f32)), ("k", mr([DYN, Hkv, D], f32)), ("v", mr([DYN, Hkv, D], f32)),
             ("o_part", mr([DYN, lay.splits, Hq, D], f32)), ("lse", mr([DYN, lay.splits, Hq], f32)),
             ("attn", mr([DYN, Hq, D], bf16)), ("a", mr([DYN, H], f32)),
             ("g", mr([DYN, I], f32)), ("u", mr([DYN, I], f32)), ("act", mr([DYN, I], bf16)),
             ("mo", mr([DYN, H], f32)), ("logits", mr([DYN, V], f32)),
             ("part_val", mr([DYN, lay.argmax_chunks], f32)), ("part_idx", mr([DYN, lay.argmax_chunks], i32)),
             ("next_val", mr([DYN, 1], f32)), ("next_token", mr([DYN, 1], i32))]

    module = Module.create(Location.unknown())
    with InsertionPoint(module.body), Location.unknown():
        kernel = et.KernelOp(name, [t for _, t in args])
        arg_names = [n for n, _ in args]
        kernel.attributes["arg_names"] = Attribute.parse("[" + ", ".join(f'"{n}"' for n in arg_names) + "]")
        with InsertionPoint(kernel.entry_block):
            A = dict(zip(arg_names, kernel.arguments))
            batch = A["batch"]

            def const(v: int):
                return arith.ConstantOp(idx, v).result

            def cost(task, nbytes: int, flops: int):
                task.attributes["et.cost"] = Attribute.parse(f"#et.cost<bytes = {int(nbytes)}, flops = {int(flops)}>")

            def new_task(tname: str, extents: list, max_extents: list | None = None):
                t = et.TaskOp(tname, extents)
                if max_extents is not None:
                    t.attributes["max_extents"] = DenseI64ArrayAttr.get(max_extents)
                return t

            events: dict[str, object] = {}

            def task(tname: str, extents: list, deps: list[str], body: Callable, *, per_batch: bool = False,
                     nbytes: int = 0, flops: int = 0):
                """A task over `extents` (prefixed with the batch when
                `per_batch`), waiting on the events of `deps`; signals its
                own event once per tile."""
                ext = ([batch] if per_batch else []) + [const(e) for e in extents]
                mx = ([B] + list(extents)) if per_batch else None
                events[tname] = et.event([])
                t = new_task(tname, ext, mx)
                cost(t, nbytes, flops)
                with InsertionPoint(t.entry_block):
                    for dep in deps:
                        et.wait(events[dep], [])
                    body(*t.tile_ids)
                    et.signal(events[tname], [])

            def layer_view(w, layer: int, rows: int, cols: int):
                """Layer `layer` of a stacked [L, rows, cols] weight."""
                return memref.subview(w, [layer, 0, 0], [1, rows, cols], [1, 1, 1],
                                      result_type=MemRefType.get([rows, cols], w.type.element_type,
                                                                 StridedLayoutAttr.get(layer * rows * cols, [cols, 1]),
                                                                 loc=Location.unknown()))

            def vec_view(w, layer: int, n: int):
                return memref.subview(w, [layer, 0], [1, n], [1, 1],
                                      result_type=MemRefType.get([n], w.type.element_type,
                                                                 StridedLayoutAttr.get(layer * n, [1]),
                                                                 loc=Location.unknown()))

            def collapse(buf, n: int):
                """[batch, a, b] -> [batch, a * b]."""
                t = buf.type
                return memref.collapse_shape(mr([DYN, n], t.element_type), buf, [[0], [1, 2]])

            def linear_task(tname, x, w, y, n, k, deps, *, y3=None):
                rows = _rows_per_tile(n, lay.workers)
                tiles = -(-n // rows)

                def body(t):
                    r0 = arith.MulIOp(t, const(rows)).result
                    out = collapse(y3, n) if y3 is not None else y
                    et.linear(x() if callable(x) else x, w(), out, r0, const(rows))

                task(tname, [tiles], deps, body, nbytes=rows * k * 2, flops=2 * rows * k)

            def position(b):
                p = memref.LoadOp(A["positions"], [b]).result
                return arith.IndexCastOp(idx, p).result

            def row(buf, b, shape, elt):
                """Row b of a [batch, *shape] buffer as a `shape` view."""
                n = len(shape)
                strides = [1] * n
                for i in range(n - 2, -1, -1):
                    strides[i] = strides[i + 1] * shape[i + 1]
                return memref.subview(buf, [b] + [0] * n, [1] + list(shape), [1] * (n + 1),
                                      result_type=strided(shape, elt, strides))

            def rows1(buf, b, shape, elt):
                """Rows [b, b + 1) of a [batch, *shape] buffer, rank kept."""
                n = len(shape)
                strides = [1] * (n + 1)
                for i in range(n - 1, -1, -1):
                    strides[i] = strides[i + 1] * ([1] + list(shape))[i + 1]
                return memref.subview(buf, [b] + [0] * n, [1] + list(shape), [1] * (n + 1),
                                      result_type=strided([1] + list(shape), elt, strides))

            def cache_view(cache, layer: int, b):
                """Layer `layer` of the cache slot of row b."""
                slot = arith.IndexCastOp(idx, memref.LoadOp(A["slots"], [b]).result).result
                return memref.subview(cache, [layer, slot, 0, 0, 0], [1, 1, S, Hkv, D], [1] * 5,
                                      result_type=strided([S, Hkv, D], bf16, [Hkv * D, D, 1]))

            eps = FloatAttr.get(f32, c.rms_norm_eps)
            scale = FloatAttr.get(f32, D ** -0.5)
            theta = FloatAttr.get(f32, c.rope_theta)
            scaling = DenseF32ArrayAttr.get([float(x) for x in c.rope_scaling]) if c.rope_scaling else None

            # Embedding: h = embed[tokens].
            task("embed", [1], [], lambda t: et.embedding(A["embed"], A["tokens"], A["h"]),
                 nbytes=0, flops=0)
            prev = "embed"
            for l in range(L):
                # Attention block.
                if l == 0:
                    task(f"norm1_{l}", [1], [prev],
                         lambda t, l=l: et.rmsnorm(A["h"], vec_view(A["ln1"], l, H), A["xn"], eps),
                         nbytes=2 * H, flops=4 * H)
                else:
                    task(f"norm1_{l}", [1], [prev],
                         lambda t, l=l: et.rmsnorm(A["mo"], vec_view(A["ln1"], l, H), A["xn"], eps,
                                                   residual=A["h"]),
                         nbytes=2 * H, flops=5 * H)
                n1 = f"norm1_{l}"
                linear_task(f"q_{l}", A["xn"], lambda l=l: layer_view(A["wq"], l, Hq * D, H), None, Hq * D, H, [n1],
                            y3=A["q"])
                linear_task(f"k_{l}", A["xn"], lambda l=l: layer_view(A["wk"], l, Hkv * D, H), None, Hkv * D, H, [n1],
                            y3=A["k"])
                linear_task(f"v_{l}", A["xn"], lambda l=l: layer_view(A["wv"], l, Hkv * D, H), None, Hkv * D, H, [n1],
                            y3=A["v"])

                def qk_body(b, l=l):
                    p = position(b)
                    q_b, k_b = rows1(A["q"], b, [Hq, D], f32), rows1(A["k"], b, [Hkv, D], f32)
                    if c.qk_norm:
                        q2, k2 = row(A["q"], b, [Hq, D], f32), row(A["k"], b, [Hkv, D], f32)
                        et.rmsnorm(q2, vec_view(A["q_norm"], l, D), q2, eps)
                        et.rmsnorm(k2, vec_view(A["k_norm"], l, D), k2, eps)
                    pos1 = memref.subview(A["positions"], [b], [1], [1],
                                          result_type=strided([1], i32, [1]))
                    et.rope(q_b, pos1, theta, llama3_scaling=scaling)
                    et.rope(k_b, pos1, theta, llama3_scaling=scaling)
                    et.kv_append(k_b, cache_view(A["k_cache"], l, b), p)
                    et.kv_append(rows1(A["v"], b, [Hkv, D], f32), cache_view(A["v_cache"], l, b), p)

                task(f"qk_{l}", [], [f"q_{l}", f"k_{l}", f"v_{l}"], qk_body, per_batch=True,
                     nbytes=4 * D * (Hq + 4 * Hkv), flops=8 * D * (Hq + Hkv))

                def attn_body(b, g, s, l=l):
                    length = arith.AddIOp(position(b), const(1)).result
                    et.attention_split(row(A["q"], b, [Hq, D], f32), cache_view(A["k_cache"], l, b),
                                       cache_view(A["v_cache"], l, b),
                                       row(A["o_part"], b, [lay.splits, Hq, D], f32),
                                       row(A["lse"], b, [lay.splits, Hq], f32),
                                       g, s, const(lay.split_len), length, scale)

                task(f"attn_{l}", [Hkv, lay.splits], [f"qk_{l}"], attn_body, per_batch=True,
                     nbytes=4 * lay.split_len * D, flops=4 * lay.split_len * D * c.group_size)
                task(f"merge_{l}", [], [f"attn_{l}"],
                     lambda b: et.attention_merge(row(A["o_part"], b, [lay.splits, Hq, D], f32),
                                                  row(A["lse"], b, [lay.splits, Hq], f32),
                                                  row(A["attn"], b, [Hq, D], bf16)),
                     per_batch=True, nbytes=4 * lay.splits * Hq * (D + 1), flops=2 * lay.splits * Hq * D)
                linear_task(f"o_{l}", lambda: collapse(A["attn"], Hq * D),
                            lambda l=l: layer_view(A["wo"], l, H, Hq * D), A["a"], H, Hq * D, [f"merge_{l}"])
                # MLP block.
                task(f"norm2_{l}", [1], [f"o_{l}"],
                     lambda t, l=l: et.rmsnorm(A["a"], vec_view(A["ln2"], l, H), A["xn"], eps, residual=A["h"]),
                     nbytes=2 * H, flops=5 * H)
                linear_task(f"gate_{l}", A["xn"], lambda l=l: layer_view(A["wg"], l, I, H), A["g"], I, H,
                            [f"norm2_{l}"])
                linear_task(f"up_{l}", A["xn"], lambda l=l: layer_view(A["wu"], l, I, H), A["u"], I, H,
                            [f"norm2_{l}"])
                cols = -(-I // lay.workers)
                cols = -(-cols // 8) * 8
                task(f"act_{l}", [-(-I // cols)], [f"gate_{l}", f"up_{l}"],
                     lambda t: et.silu_mul(A["g"], A["u"], A["act"], arith.MulIOp(t, const(cols)).result,
                                           const(cols)),
                     nbytes=cols * 10, flops=cols * 6)
                linear_task(f"down_{l}", A["act"], lambda l=l: layer_view(A["wd"], l, H, I), A["mo"], H, I,
                            [f"act_{l}"])
                prev = f"down_{l}"
            # Final norm, LM head, greedy argmax (two stages).
            task("final_norm", [1], [prev],
                 lambda t: et.rmsnorm(A["mo"], A["final_norm"], A["xn"], eps, residual=A["h"]),
                 nbytes=2 * H, flops=5 * H)
            linear_task("lm_head", A["xn"], lambda: A["lm_head"], A["logits"], V, H, ["final_norm"])
            chunk = -(-V // lay.argmax_chunks)
            task("argmax_part", [lay.argmax_chunks], ["lm_head"],
                 lambda t: et.argmax(A["logits"], A["part_val"], A["part_idx"],
                                     arith.MulIOp(t, const(chunk)).result, const(chunk), t),
                 nbytes=4 * chunk, flops=chunk)
            task("argmax", [1], ["argmax_part"],
                 lambda t: et.argmax(A["part_val"], A["next_val"], A["next_token"], const(0),
                                     const(lay.argmax_chunks), const(0), from_=A["part_idx"]),
                 nbytes=8 * lay.argmax_chunks, flops=lay.argmax_chunks)
    return module
