"""How the decode kernel's work is cut into tiles: rows per linear tile,
the tensor-core tiles' blocks, the norm scratch's rows, the column blocks
of the tensor-parallel sums. No MLIR here."""

from __future__ import annotations

from dataclasses import replace

from ..config import ModelConfig, tp_config

__all__ = ["MMA_BLOCKS", "MMA_SPLITS", "MMA_STAGES", "MMA_TILE_COST_ROWS", "QK_TILE_WARPS", "mma_block",
           "mma_k_block", "mma_m_block", "mma_qkv_block", "mma_registers", "mma_split", "mma_tiling",
           "mma_scratch_tiles",
           "norm_scratch_rows", "rows_per_tile", "scratch_tiles", "sum_block"]

#: The most warps' worth of heads (a warp per query or key head) that the
#: default `qk_heads` puts in one `qk` tile when the kernel's warps per
#: worker are not given (`build_decode_kernel(warps=)`): the 16 warps of
#: 512 threads.
QK_TILE_WARPS = 16


def sum_block(hidden: int) -> int:
    """Columns per tile of the tensor-parallel sums: the largest of 512,
    256, ..., 4 (4 f32 columns per vector) that divides `hidden`."""
    for block in (512, 256, 128, 64, 32, 16, 8, 4):
        if hidden % block == 0:
            return block
    raise ValueError(f"hidden_size {hidden} is not a multiple of 4")


#: The et.matmul tiles of `linear_tile="mma"`: ring stages, and a tile's
#: fixed cost (ring fill, epilogue, barriers) in rows of w, measured: tiles
#: of 16 rows ran far slower in the decode step than tiles of 64.
MMA_STAGES = 4
MMA_TILE_COST_ROWS = 32

#: The rows of w per et.matmul tile (BN) that `mma_tiling` chooses from.
#: Tiles of 128 rows (and the gated MLP tile of 64 + 64 on warpgroup MMA)
#: were slower at 16 and 64 rows of x (docs/experiments/2026-12-06-qkv-tiles.md).
MMA_BLOCKS = (64, 32, 16)

#: The parts K may be split into by `mma_tiling` for the layers that add
#: into the residual stream (`split_k`).
MMA_SPLITS = (1, 2, 4, 8)


def mma_tiling(ns, k: int, bm: int, workers: int, splits=(1,)) -> tuple[int, int]:
    """(BN, parts) of the et.matmul tiles of one decode task whose tiles
    multiply the same BM rows of x by blocks of BN rows of one of the
    N x K weights of `ns` (q, k and v in the `qkv` task; one weight
    elsewhere), each over 1/parts of K (a `parts` of `splits` that cuts K
    into whole 128-column slices; more than one only where the parts meet
    in h through atomic adds: `o` and `down` with `split_k`).

    A tile reads its BM rows of x over its part of K as well as its rows of
    w (x from L2, w from memory): at 64 rows of x and 16 of w four bytes of
    x come in for each byte of w. The choice has the least work per worker,
    ceil(tiles / workers) x ((BM + BN) x K / parts + MMA_TILE_COST_ROWS x
    2048) (a tile's fixed cost as that many rows of a 2048-column part),
    the tiles of all the task's weights counted together (they share the
    workers); on a tie the fewest parts, then the largest BN. Llama-3.2-1B's
    q, k and v chosen one by one took 16-row blocks, 192 tiles for 132
    workers; together they take 32 (96 tiles): on the H200 its 16-row kernel
    7-8% and its 64-row kernel 7-8% faster, Llama-3.1-8B's 64-row kernel
    10-13% (docs/experiments/2026-12-06-qkv-tiles.md)."""
    best = None
    for parts in splits:
        if parts > 1 and k % (128 * parts):
            continue
        for bn in MMA_BLOCKS:
            tiles = sum(-(-n // bn) for n in ns) * parts
            cost = -(-tiles // workers) * ((bm + bn) * k // parts + MMA_TILE_COST_ROWS * 2048)
            if best is None or cost < best[0]:
                best = (cost, bn, parts)
    return best[1], best[2]


def mma_block(n: int, k: int, bm: int, workers: int) -> int:
    """BN of the whole-K et.matmul tiles of an N x K linear layer at decode
    (`mma_tiling` of that layer alone)."""
    return mma_tiling([n], k, bm, workers)[0]


def mma_split(n: int, k: int, bm: int, workers: int) -> tuple[int, int]:
    """(BN, parts) of the et.matmul tiles of an N x K layer that adds into
    the residual stream with `split_k` (`mma_tiling` over MMA_SPLITS)."""
    return mma_tiling([n], k, bm, workers, MMA_SPLITS)


def mma_qkv_block(config: ModelConfig, bm: int, workers: int) -> int:
    """BN of the `qkv` task's q, k and v tiles (`config`: one device's
    shares), chosen together (`mma_tiling`)."""
    c = config
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim
    return mma_tiling([q, kv, kv], c.hidden_size, bm, workers)[0]


def mma_registers(bm: int, bn: int) -> bool:
    """Whether a decode et.matmul tile of BM x BN rows takes `registers`
    (w and x straight into the tensor cores' operand registers) instead of
    the ring of shared-memory slices: 16 x 16 tiles only. Measured on the
    H100 (Llama-3.2-1B, context 1024): with them the 16-row kernel took
    2.0-2.4% less at batch 1, 4 and 16; `registers` tiles of 64 rows of x
    (read from L2 once per 16 rows of w) made the 64-row kernel 4-11%
    slower, and tiles of 64 rows of w (gate/up, LM head) streamed at about
    half the ring's rate (docs/experiments/2026-11-28-decode-gemm.md)."""
    return bm == 16 and bn == 16


def mma_scratch_tiles(config: ModelConfig, lm_rows: int, bm: int, workers: int) -> int:
    """Rows of the norm scratch `xs` with `linear_tile="mma"` (`config`: one
    device's shares; BM rows of x): the most tiles of qkv (q, k and v
    tiles), gate/up and the LM head (`lm_rows` rows)."""
    c, H = config, config.hidden_size
    qkv = mma_qkv_block(c, bm, workers)
    q_tiles = -(-(c.num_heads * c.head_dim) // qkv) + 2 * -(-(c.num_kv_heads * c.head_dim) // qkv)
    return max(q_tiles, *(-(-n // mma_block(n, H, bm, workers)) for n in (c.intermediate_size, lm_rows)))


def norm_scratch_rows(config: ModelConfig, workers: int, *, tp: int = 1, linear_tile: str = "rows",
                      rows_for=None, max_batch: int = 1) -> int:
    """Rows of the norm scratch `xs` of `build_decode_kernel` with fused
    norms, given the rows per tile `rows_for(n, k)` of et.linear (default:
    about one tile per worker), or the tensor-core tiles of a `max_batch`
    kernel; kernels that share buffers (batch variants) size it once with
    it."""
    c = tp_config(config, tp)
    lm_rows = c.vocab_size // tp
    if linear_tile == "mma":
        return mma_scratch_tiles(c, lm_rows, mma_m_block(max_batch), workers)
    rows_for = rows_for or (lambda n, k: min(rows_per_tile(n, workers), n))
    return scratch_tiles(replace(c, vocab_size=lm_rows), rows_for)


def mma_m_block(batch: int) -> int:
    """BM of the decode et.matmul tiles: every row of a `batch`-row kernel
    in one block (16 rows per 16 of the batch)."""
    return 16 * -(-batch // 16)


def mma_k_block(k: int) -> int:
    """BK of the decode et.matmul tiles: 128 where it divides K (the faster
    tile in benchmarks/linear_batches.py), else 64."""
    return 128 if k % 128 == 0 else 64


def rows_per_tile(n: int, workers: int) -> int:
    """Rows of a linear-layer tile: about one tile per worker."""
    return max(1, -(-n // workers))


def scratch_tiles(config: ModelConfig, rows_for) -> int:
    """Rows of the norm scratch `xs` (fuse_norms): the most tiles of the
    tasks that normalize into it (qkv, gate/up, LM head), given the rows per
    tile `rows_for(n, k)`."""
    c = config
    shapes = [(c.num_heads * c.head_dim, c.hidden_size), (c.intermediate_size, c.hidden_size),
              (c.vocab_size, c.hidden_size)]
    return max(-(-n // min(rows_for(n, k), n)) for n, k in shapes)
