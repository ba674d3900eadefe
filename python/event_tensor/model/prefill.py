"""The prefill kernel: one launch feeds a prompt chunk of one sequence
(rows at consecutive positions of one cache slot) through the model on the
prompt tiles, `et.matmul` for the linear layers and `et.attention_prefill`
for attention, and writes the greedy next token of its last row. It shares
the weights and KV caches of the decode kernel (same argument names and
shapes) and keeps its activations in buffers of its own (`p_*`).

Per layer, each phase is one task whose tiles signal a scalar event and
wait for all tiles of the phase before (dynamic tile counts: the row count
is a launch argument):

    norm1 (row blocks) -> q, k, v (GEMM blocks) -> rope_kv (row blocks:
    Qwen3's q/k norms, RoPE, the KV append) -> attn (token blocks x KV
    heads) -> o (GEMM, added into h) -> norm2 -> gate, up (GEMM) -> act
    (row blocks) -> down (GEMM, added into h)

then the final norm of the last row, the LM head (et.linear, one row) and
the two-stage argmax. Must run inside an MLIR Context."""

from __future__ import annotations

from ..dialects import arith, et, memref
from ..ir import (
    Attribute,
    BF16Type,
    DenseI64ArrayAttr,
    F32Type,
    FloatAttr,
    DenseF32ArrayAttr,
    IndexType,
    InsertionPoint,
    IntegerType,
    Location,
    MemRefType,
    Module,
    ShapedType,
    StridedLayoutAttr,
)
from .builder import KernelLayout, layer_view, model_arguments, vec_view
from .config import ModelConfig

__all__ = ["PREFILL_ROW_BLOCK", "PrefillTiles", "build_prefill_kernel"]

DYN = ShapedType.get_dynamic_size()
PREFILL_ROW_BLOCK = 64  # rows per tile of the row-wise phases (norms, RoPE, SiLU)


class PrefillTiles:
    """Tile choices of a prefill kernel: the GEMM tile and ring depth, and
    the tokens per attention tile (all tasks run on `threads` threads)."""

    def __init__(self, config: ModelConfig, *, gemm=((128, 128, 64), 4), threads: int = 256):
        group = config.num_heads // config.num_kv_heads
        rows = threads // 32 * 16
        if rows % group:
            raise ValueError(f"a query group of {group} heads does not divide the {rows} rows of an attention tile")
        self.gemm_tile, self.gemm_stages = gemm
        self.threads = threads
        self.attn_block = rows // group

    def to_dict(self) -> dict:
        return {"gemm_tile": list(self.gemm_tile), "gemm_stages": self.gemm_stages, "threads": self.threads,
                "attn_block": self.attn_block}


def build_prefill_kernel(config: ModelConfig, layout: KernelLayout, tiles: PrefillTiles, *,
                         name: str = "prefill") -> Module:
    """The prefill kernel of `config` (the decode kernel's `layout` gives the
    cache shape and the argmax chunks)."""
    c, lay = config, layout
    L, H, I, V = c.num_layers, c.hidden_size, c.intermediate_size, c.vocab_size
    Hq, Hkv, D = c.num_heads, c.num_kv_heads, c.head_dim
    S, R = lay.max_context, PREFILL_ROW_BLOCK
    bf16, f32, i32, idx = BF16Type.get(), F32Type.get(), IntegerType.get_signless(32), IndexType.get()

    def mr(shape, elt):
        return MemRefType.get(list(shape), elt, loc=Location.unknown())

    def strided(shape, elt, strides, offset=DYN):
        return MemRefType.get(list(shape), elt, StridedLayoutAttr.get(offset, list(strides)), loc=Location.unknown())

    args = [("rows", idx), ("slot", idx), ("pos0", idx), ("p_tokens", mr([DYN], i32)),
            ("p_positions", mr([DYN], i32))]
    args += model_arguments(c, lay)
    args += [("p_h", mr([DYN, H], f32)), ("p_xn", mr([DYN, H], bf16)),
             ("p_q", mr([DYN, Hq, D], f32)), ("p_k", mr([DYN, Hkv, D], f32)), ("p_v", mr([DYN, Hkv, D], f32)),
             ("p_attn", mr([DYN, Hq, D], bf16)),
             ("p_g", mr([DYN, I], f32)), ("p_u", mr([DYN, I], f32)), ("p_act", mr([DYN, I], bf16)),
             ("xn", mr([DYN, H], bf16)), ("logits", mr([DYN, V], f32)),
             ("part_val", mr([DYN, lay.argmax_chunks], f32)), ("part_idx", mr([DYN, lay.argmax_chunks], i32)),
             ("next_val", mr([DYN, 1], f32)), ("next_token", mr([DYN, 1], i32))]

    module = Module.create(Location.unknown())
    with InsertionPoint(module.body), Location.unknown():
        kernel = et.KernelOp(name, [t for _, t in args])
        names = [n for n, _ in args]
        kernel.attributes["arg_names"] = Attribute.parse("[" + ", ".join(f'"{n}"' for n in names) + "]")
        with InsertionPoint(kernel.entry_block):
            A = dict(zip(names, kernel.arguments))
            rows = A["rows"]

            def const(v: int):
                return arith.ConstantOp(idx, v).result

            def ceil_div(a, b: int):
                return arith.CeilDivSIOp(a, const(b)).result

            events = {}

            def task(tname, extents, deps, body, nbytes=0, flops=0):
                events[tname] = et.event([])
                t = et.TaskOp(tname, extents)
                t.attributes["et.cost"] = Attribute.parse(f"#et.cost<bytes = {int(nbytes)}, flops = {int(flops)}>")
                with InsertionPoint(t.entry_block):
                    for dep in deps:
                        et.wait(events[dep], [])
                    body(*t.tile_ids)
                    et.signal(events[tname], [])

            def row_block(buf, r0, shape, elt):
                """Rows [r0, min(r0 + R, rows)) of a [rows, *shape] buffer."""
                n = arith.MinSIOp(const(R), arith.SubIOp(rows, r0).result).result
                strides = [1] * len(shape)
                for i in range(len(shape) - 2, -1, -1):
                    strides[i] = strides[i + 1] * shape[i + 1]
                full = [shape[0] * strides[0] if shape else 1] + strides
                return memref.SubViewOp(strided([DYN] + list(shape), elt, full), buf, [r0], [n], [],
                                        static_offsets=[DYN] + [0] * len(shape),
                                        static_sizes=[DYN] + list(shape),
                                        static_strides=[1] * (len(shape) + 1)).result

            def cache_view(cache, l: int):
                return memref.SubViewOp(strided([S, Hkv, D], bf16, [Hkv * D, D, 1]), cache, [A["slot"]], [], [],
                                        static_offsets=[l, DYN, 0, 0, 0], static_sizes=[1, 1, S, Hkv, D],
                                        static_strides=[1] * 5).result

            def collapse(buf, n: int):
                return memref.collapse_shape(mr([DYN, n], buf.type.element_type), buf, [[0], [1, 2]])

            eps = FloatAttr.get(f32, c.rms_norm_eps)
            scale = FloatAttr.get(f32, D ** -0.5)
            theta = FloatAttr.get(f32, c.rope_theta)
            scaling = DenseF32ArrayAttr.get([float(x) for x in c.rope_scaling]) if c.rope_scaling else None
            bm, bn, bk = tiles.gemm_tile
            tile_attr = DenseI64ArrayAttr.get([bm, bn, bk])
            row_tiles = ceil_div(rows, R)

            def gemm_task(tname, x, w, y, n: int, k: int, deps, accumulate=False):
                """y (+)= x w^T over (row block, column block) tiles."""
                blocks_n = -(-n // bn)

                def body(t):
                    i = arith.DivUIOp(t, const(blocks_n)).result
                    j = arith.RemUIOp(t, const(blocks_n)).result
                    et.matmul(x, w, y, arith.MulIOp(i, const(bm)).result, arith.MulIOp(j, const(bn)).result, [],
                              tile_attr, stages=tiles.gemm_stages, accumulate=True if accumulate else None)
                task(tname, [arith.MulIOp(ceil_div(rows, bm), const(blocks_n)).result], deps, body,
                     nbytes=2 * k * (bm + bn), flops=2 * bm * bn * k)

            # Embedding: h = embed[tokens].
            task("embed", [row_tiles], [], lambda t: et.embedding(
                A["embed"], memref.SubViewOp(strided([DYN], i32, [1]), A["p_tokens"],
                                             [arith.MulIOp(t, const(R)).result],
                                             [arith.MinSIOp(const(R), arith.SubIOp(
                                                 rows, arith.MulIOp(t, const(R)).result).result).result],
                                             [], static_offsets=[DYN], static_sizes=[DYN],
                                             static_strides=[1]).result,
                row_block(A["p_h"], arith.MulIOp(t, const(R)).result, [H], f32)), nbytes=2 * R * H)
            prev = "embed"
            for l in range(L):
                def r0_of(t):
                    return arith.MulIOp(t, const(R)).result

                task(f"norm1_{l}", [row_tiles], [prev],
                     lambda t, l=l: et.rmsnorm(row_block(A["p_h"], r0_of(t), [H], f32), vec_view(A["ln1"], l, H),
                                               row_block(A["p_xn"], r0_of(t), [H], bf16), eps), nbytes=6 * R * H)
                gemm_task(f"q_{l}", A["p_xn"], layer_view(A["wq"], l, Hq * D, H), collapse(A["p_q"], Hq * D),
                          Hq * D, H, [f"norm1_{l}"])
                gemm_task(f"k_{l}", A["p_xn"], layer_view(A["wk"], l, Hkv * D, H), collapse(A["p_k"], Hkv * D),
                          Hkv * D, H, [f"norm1_{l}"])
                gemm_task(f"v_{l}", A["p_xn"], layer_view(A["wv"], l, Hkv * D, H), collapse(A["p_v"], Hkv * D),
                          Hkv * D, H, [f"norm1_{l}"])

                def rope_kv(t, l=l):
                    r0 = r0_of(t)
                    q = row_block(A["p_q"], r0, [Hq, D], f32)
                    k = row_block(A["p_k"], r0, [Hkv, D], f32)
                    if c.qk_norm:
                        et.rmsnorm(_heads_rows(q, Hq, D), vec_view(A["q_norm"], l, D), _heads_rows(q, Hq, D), eps)
                        et.rmsnorm(_heads_rows(k, Hkv, D), vec_view(A["k_norm"], l, D), _heads_rows(k, Hkv, D), eps)
                    pos = memref.SubViewOp(strided([DYN], i32, [1]), A["p_positions"], [r0],
                                           [arith.MinSIOp(const(R), arith.SubIOp(rows, r0).result).result],
                                           [], static_offsets=[DYN], static_sizes=[DYN], static_strides=[1]).result
                    et.rope(q, pos, theta, llama3_scaling=scaling)
                    et.rope(k, pos, theta, llama3_scaling=scaling)
                    at = arith.AddIOp(A["pos0"], r0).result
                    et.kv_append(k, cache_view(A["k_cache"], l), at)
                    et.kv_append(row_block(A["p_v"], r0, [Hkv, D], f32), cache_view(A["v_cache"], l), at)
                task(f"rope_kv_{l}", [row_tiles], [f"q_{l}", f"k_{l}", f"v_{l}"], rope_kv, nbytes=8 * R * (Hq + Hkv) * D)

                def attn(tb, g, l=l):
                    et.attention_prefill(A["p_q"], cache_view(A["k_cache"], l), cache_view(A["v_cache"], l),
                                         A["p_attn"], g, arith.MulIOp(tb, const(tiles.attn_block)).result, A["pos0"],
                                         tiles.attn_block, scale)
                task(f"attn_{l}", [ceil_div(rows, tiles.attn_block), const(Hkv)], [f"rope_kv_{l}"], attn,
                     nbytes=4 * S * D, flops=4 * S * D * tiles.attn_block * (Hq // Hkv))
                gemm_task(f"o_{l}", collapse(A["p_attn"], Hq * D), layer_view(A["wo"], l, H, Hq * D), A["p_h"],
                          H, Hq * D, [f"attn_{l}"], accumulate=True)
                task(f"norm2_{l}", [row_tiles], [f"o_{l}"],
                     lambda t, l=l: et.rmsnorm(row_block(A["p_h"], r0_of(t), [H], f32), vec_view(A["ln2"], l, H),
                                               row_block(A["p_xn"], r0_of(t), [H], bf16), eps), nbytes=6 * R * H)
                gemm_task(f"gate_{l}", A["p_xn"], layer_view(A["wg"], l, I, H), A["p_g"], I, H, [f"norm2_{l}"])
                gemm_task(f"up_{l}", A["p_xn"], layer_view(A["wu"], l, I, H), A["p_u"], I, H, [f"norm2_{l}"])
                task(f"act_{l}", [row_tiles], [f"gate_{l}", f"up_{l}"],
                     lambda t: et.silu_mul(row_block(A["p_g"], r0_of(t), [I], f32),
                                           row_block(A["p_u"], r0_of(t), [I], f32),
                                           row_block(A["p_act"], r0_of(t), [I], bf16), const(0), const(I)),
                     nbytes=10 * R * I)
                gemm_task(f"down_{l}", A["p_act"], layer_view(A["wd"], l, H, I), A["p_h"], H, I, [f"act_{l}"],
                          accumulate=True)
                prev = f"down_{l}"

            # The last row: final norm into xn[0], LM head, argmax.
            def final_norm(t):
                last = arith.SubIOp(rows, const(1)).result
                h_last = memref.SubViewOp(strided([1, H], f32, [H, 1]), A["p_h"], [last], [], [],
                                          static_offsets=[DYN, 0], static_sizes=[1, H], static_strides=[1, 1]).result
                xn0 = memref.subview(A["xn"], [0, 0], [1, H], [1, 1], result_type=strided([1, H], bf16, [H, 1], 0))
                et.rmsnorm(h_last, A["final_norm"], xn0, eps)
            task("final_norm", [const(1)], [prev], final_norm, nbytes=6 * H)
            lm_rows = max(1, -(-V // lay.workers))

            def lm_head(t):
                xn0 = memref.subview(A["xn"], [0, 0], [1, H], [1, 1], result_type=strided([1, H], bf16, [H, 1], 0))
                out = memref.subview(A["logits"], [0, 0], [1, V], [1, 1],
                                     result_type=strided([1, V], f32, [V, 1], 0))
                et.linear(xn0, A["lm_head"], out, arith.MulIOp(t, const(lm_rows)).result, const(lm_rows))
            task("lm_head", [const(-(-V // lm_rows))], ["final_norm"], lm_head, nbytes=2 * lm_rows * H,
                 flops=2 * lm_rows * H)
            chunk = -(-V // lay.argmax_chunks)

            def one(buf, n, elt):
                return memref.subview(buf, [0, 0], [1, n], [1, 1], result_type=strided([1, n], elt, [n, 1], 0))
            task("argmax_part", [const(lay.argmax_chunks)], ["lm_head"],
                 lambda t: et.argmax(one(A["logits"], V, f32), one(A["part_val"], lay.argmax_chunks, f32),
                                     one(A["part_idx"], lay.argmax_chunks, i32),
                                     arith.MulIOp(t, const(chunk)).result, const(chunk), t),
                 nbytes=4 * chunk, flops=chunk)
            task("argmax", [const(1)], ["argmax_part"],
                 lambda t: et.argmax(one(A["part_val"], lay.argmax_chunks, f32), one(A["next_val"], 1, f32),
                                     one(A["next_token"], 1, i32), const(0), const(lay.argmax_chunks), const(0),
                                     from_=one(A["part_idx"], lay.argmax_chunks, i32)),
                 nbytes=8 * lay.argmax_chunks, flops=lay.argmax_chunks)
    return module


def _heads_rows(x, heads: int, dim: int):
    """A [n, heads, D] row block as [n * heads, D] (per-head norms)."""
    return memref.collapse_shape(MemRefType.get([DYN, dim], F32Type.get(), StridedLayoutAttr.get(DYN, [dim, 1]),
                                                loc=Location.unknown()), x, [[0, 1], [2]])
