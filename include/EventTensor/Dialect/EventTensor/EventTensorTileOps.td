//===- EventTensorTileOps.td - The et dialect's tile ops --*- tablegen -*-===//
//
// The tile compute ops of the et dialect: the LLM tiles (linear layers and
// GEMM tiles, split-KV and prefill attention, norms, RoPE, KV append,
// embedding, argmax) that a task body computes with its worker's threads,
// and the weight prefetch and staging ops around them. They are lowered by
// et-lower-tile-ops (lib/Conversion/TileOps/), one file per family; the
// core ops (kernels, tasks, events, schedules) are in EventTensorOps.td,
// which includes this file.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORTILEOPS_TD
#define EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORTILEOPS_TD

def ET_LinearOp : ET_Op<"linear", [AttrSizedOperandSegments,
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "a linear-layer tile: rows of y = x * w^T for a few tokens";
  let description = [{
    Computes, for every token `m` of `x` and every output row `n` in
    `[row0, row0 + rows)` that is below N:

    ```
    y[m, n] = sum_k float32(x[m, k]) * float32(w[n, k])
    ```

    `x` is `M x K` bf16 activations (M <= 16 tokens: decode and short
    prompts), `w` is `N x K` bf16 weights in the layout of a PyTorch
    `Linear` (out features x in features), and `y` is `M x N`, f32 or bf16
    (the f32 sum rounded to nearest even). Accumulation is in f32. With
    `accumulate`, the sum is added to what `y` holds (`y[m, n] += ...`, f32
    `y` only): a residual connection in the same pass, with no other tile
    writing those rows. With `accumulate atomic`, each add into `y` is an
    atomic f32 add, so tiles that share rows may add into them at once: a
    split over K, each tile taking a block of x's columns and of w's (a
    view), the partial sums meeting in `y`. The adds then land in the
    order the hardware takes them, so the low bits of `y` may differ from
    run to run. With `gated(%wu)` (`wu` shaped as `w`), a gated MLP's
    activation in the same pass:

    ```
    y[m, n] = silu(sum_k x[m, k] * w[n, k]) * (sum_k x[m, k] * wu[n, k])
    ```

    with `et.silu_mul`'s SiLU, so the result has the bits of two linear
    layers into f32 and `et.silu_mul` after them, without their round trip
    through memory.

    With `norm(%g) eps(e)` (`g` a K-element bf16 vector), x is the f32
    residual stream and the op reads it through an RMSNorm with weights
    `g`, folded into the sums: the inverse RMS of a token is one scalar,
    so it multiplies the finished sums instead of every element of x:

    ```
    r[m] = 1 / sqrt(sum_k x[m, k]^2 / K + eps)
    y[m, n] = r[m] * sum_k bf16(x[m, k] * float32(g[k])) * float32(w[n, k])
    ```

    (both sums of a gated op are scaled by `r[m]` before the activation).
    `x * g` is rounded to bf16 as an activation would be; `et.rmsnorm` into
    a bf16 buffer, then `et.linear`, rounds `x * r * g` instead, so the two
    agree to that rounding.

    With `scale(%s)` (an f32 value), every finished row is multiplied by
    `s` before it is written or added into `y`: `y[m, n] (+)= s * ...`
    (after the activation of a gated op). A mixture-of-experts block adds
    each expert's down projection into the residual stream weighted by the
    router's probability this way, without a pass of its own. The lowering needs no buffer for the normalized
    rows and at most one barrier (docs/lowering.md). The op runs on all threads of the worker, which
    split the rows and the reduction between them; it sits in an `et.task`
    body, typically with one task tile per block of rows.

    Lowering (`et-lower-tile-ops`): on the GPU, one warp per row, each lane
    reading 16 bytes of the row per load with `unroll` loads in flight, and
    a warp butterfly (`gpu.shuffle xor`) to sum the lanes; a short row (a
    static K of at most 256) instead takes K / 8 lanes (rounded up to a
    power of two), so that a warp covers several rows per load and every
    thread's loads of the tile go out together (before the task's first
    wait where they can). With the pass's `linear=spread`, a tile of few or
    short rows spreads over every warp instead (K split between warps, or
    several rows per trip). The plan of each op (`et.linear_plan`) records
    the choice. On the CPU, scalar loops.

    Example:

    ```mlir
    %row0 = arith.muli %tile, %c16 : index
    et.linear %x, %w, %y rows(%row0, %c16)
        : memref<1x2048xbf16>, memref<8192x2048xbf16>, memref<1x8192xf32>
    // the residual stream h += attn * wo^T
    et.linear %attn, %wo, %h rows(%row0, %c16) accumulate
        : memref<1x2048xbf16>, memref<2048x2048xbf16>, memref<1x2048xf32>
    // one query head's part of it (split K: every head's tiles add into h)
    et.linear %head, %wo_head, %h rows(%row0, %c128) accumulate atomic
        : memref<1x64xbf16>, memref<2048x64xbf16, strided<[2048, 1], offset: ?>>, memref<1x2048xf32>
    // the gated MLP's activation: silu(x wg^T) * (x wu^T)
    et.linear %x, %wg, %act rows(%row0, %c16) gated(%wu)
        : memref<1x2048xbf16>, memref<8192x2048xbf16>, memref<1x8192xbf16>, memref<8192x2048xbf16>
    // an expert's share of the residual stream: h += p * (act * wd^T)
    et.linear %act, %wd, %h rows(%row0, %c128) accumulate atomic scale(%p)
        : memref<1x768xbf16>, memref<2048x768xbf16>, memref<1x2048xf32>
    // q, k and v rows from the normalized residual stream h
    et.linear %h, %wqkv, %qkv rows(%row0, %c32) norm(%ln1 : memref<1024xbf16>) eps(1.0e-06)
        : memref<1x1024xf32>, memref<4096x1024xbf16>, memref<1x4096xf32>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead]>:$x,
                       Arg<MemRefRankOf<[BF16], [2]>, "", [MemRead]>:$w,
                       Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead, MemWrite]>:$y,
                       Index:$row0, Index:$rows, UnitAttr:$accumulate, UnitAttr:$atomic,
                       Arg<Optional<MemRefRankOf<[BF16], [2]>>, "", [MemRead]>:$gated,
                       Arg<Optional<MemRefRankOf<[BF16], [1]>>, "", [MemRead]>:$norm,
                       OptionalAttr<F32Attr>:$eps,
                       Optional<F32>:$scale);
  let assemblyFormat = [{
    $x `,` $w `,` $y `rows` `(` $row0 `,` $rows `)` (`accumulate` $accumulate^)? (`atomic` $atomic^)?
    (`gated` `(` $gated^ `)`)? (`norm` `(` $norm^ `:` type($norm) `)`)? (`eps` `(` $eps^ `)`)?
    (`scale` `(` $scale^ `)`)? attr-dict `:`
    type($x) `,` type($w) `,` type($y) (`,` type($gated)^)?
  }];
  let hasVerifier = 1;
}

def ET_MatmulOp : ET_Op<"matmul", [AttrSizedOperandSegments,
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "a GEMM tile on tensor cores: a block of y = x * w^T for many tokens";
  let description = [{
    Computes one `BM x BN` block of `y = x * w^T`, `tile = [BM, BN, BK]`:
    for every token `m` in `[m0, m0 + BM)` below M and every output row `n`
    in `[n0, n0 + BN)` below N,

    ```
    y[m, n] = sum_k float32(x[m, k]) * float32(w[n, k])
    ```

    `x` is `M x K` bf16 activations (any number of tokens: prefill), `w` is
    `N x K` bf16 weights in the layout of a PyTorch `Linear`, `y` is `M x N`,
    f32 or bf16 (rounded to nearest even). Accumulation is in f32. With
    `accumulate`, the block is added to what `y` holds (f32 `y` only). K is
    static and a multiple of 8, so every row starts 16-byte aligned.

    With `k(%k0, %k1)` the sum only runs over `k` in `[k0, min(k1, K))`
    (split-K: several tiles each take a part of K, and their partial blocks
    are summed by another task, or meet in `y` with `accumulate atomic`);
    `k0` and `k1` are multiples of 8 (checked when constant), and an empty
    range gives zeros. With `accumulate atomic` each add into `y` is an
    atomic f32 add, so tiles that share a block of `y` (the parts of a
    split K) may add into it at once; the adds land in the order the
    hardware takes them, so the low bits of `y` may differ from run to run.

    With `gated(%up)` (an `N x K` weight like `w`), the tile is the gated
    MLP's first half: `BN / 2` output columns `n` in `[n0, n0 + BN / 2)`,

    ```
    y[m, n] = silu(sum_k x[m, k] w[n, k]) * (sum_k x[m, k] up[n, k])
    ```

    with `silu(g) = g / (1 + exp(-g))`: the tile multiplies `BN / 2` rows of
    each weight, and the activation is applied to the f32 accumulators
    before `y` is written (no `accumulate`). The op
    runs on all threads of the worker and sits in an `et.task` body,
    typically with one task tile per block.

    The tile shape is a tuning parameter: `BM` and `BN` multiples of 16 up
    to 256, `BK` a multiple of 16 up to 128; `stages` (1 to 8, default 3)
    is how many `BK`-slices of x and w the ring holds. The warp and
    warpgroup layouts are documented in docs/lowering.md.

    Lowering (`et-lower-tile-ops`): on the GPU, a `stages`-deep ring of
    x and w slices in dynamic shared memory, filled with `cp.async`
    (out-of-range rows and columns zero-filled). With `mma=wgmma` (the
    default) and BK = 64, BM a multiple of 64 and at least 3 stages, each
    warpgroup multiplies a 64-row sub-block with `wgmma.mma_async` straight
    from the (128-byte swizzled) slices; otherwise each warp owns a
    sub-block, reads its operands with `ldmatrix` and multiplies with
    `mma.sync.m16n8k16`. Both accumulate in f32 registers. On the CPU,
    scalar loops.

    With `registers` (a tile of few rows: a decode step's linear layers),
    nothing goes through shared memory on the way in: each warp loads its
    share of w with 16-byte loads straight into `mma.sync` operand
    registers, and the rows of x it multiplies them with likewise, many
    loads in flight per warp; the warps split the tile's 32-column chunks
    of K between them (and its 8-row blocks of w where the accumulators
    would not fit), and add up their partial sums in shared memory at the
    end. `BM` at most 64, `BK` 32 (a warp's chunk: a 16-byte load per lane
    covers 8 rows of w by 32 columns), K a multiple of 32, the whole K (no
    `k` range), not gated; `stages` is not used.

    Example:

    ```mlir
    %m0 = arith.muli %tm, %c128 : index
    %n0 = arith.muli %tn, %c128 : index
    et.matmul %x, %w, %y at(%m0, %n0) tile [128, 128, 32] stages 4
        : memref<?x2048xbf16>, memref<8192x2048xbf16>, memref<?x8192xbf16>
    // the second quarter of K = 8192, into an f32 partial block
    et.matmul %x, %w, %part at(%m0, %n0) k(%c2048, %c4096) tile [128, 128, 64] stages 4
        : memref<?x8192xbf16>, memref<2048x8192xbf16>, memref<?x2048xf32>
    // silu(x wg^T) * (x wu^T), 128 output columns from 128 rows of each weight
    et.matmul %x, %wg, %act at(%m0, %n0) gated(%wu : memref<8192x2048xbf16>) tile [128, 256, 64] stages 4
        : memref<?x2048xbf16>, memref<8192x2048xbf16>, memref<?x8192xbf16>
    // a decode step's 16 rows of w for up to 16 tokens, added into h
    et.matmul %xn, %wd, %h at(%c0, %n0) tile [16, 16, 32] registers accumulate
        : memref<?x8192xbf16>, memref<2048x8192xbf16>, memref<?x2048xf32>
    // a quarter of K of a 64 x 64 block, added into h at once with the
    // other three quarters' tiles
    et.matmul %act, %wd, %h at(%c0, %n0) k(%k0, %k1) tile [64, 64, 128] stages 4 accumulate atomic
        : memref<?x8192xbf16>, memref<2048x8192xbf16>, memref<?x2048xf32>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16], [2]>, "", [MemRead]>:$x,
                       Arg<MemRefRankOf<[BF16], [2]>, "", [MemRead]>:$w,
                       Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead, MemWrite]>:$y,
                       Index:$m0, Index:$n0, Variadic<Index>:$k_range,
                       Arg<Optional<MemRefRankOf<[BF16], [2]>>, "", [MemRead]>:$up,
                       DenseI64ArrayAttr:$tile,
                       DefaultValuedAttr<I64Attr, "3">:$stages,
                       UnitAttr:$registers,
                       UnitAttr:$accumulate,
                       UnitAttr:$atomic);
  let assemblyFormat = [{
    $x `,` $w `,` $y `at` `(` $m0 `,` $n0 `)` (`k` `(` $k_range^ `)`)? (`gated` `(` $up^ `:` type($up) `)`)?
    `tile` $tile (`stages` $stages^)? (`registers` $registers^)? (`accumulate` $accumulate^)?
    (`atomic` $atomic^)? attr-dict `:` type($x) `,` type($w) `,` type($y)
  }];
  let hasVerifier = 1;
}

def ET_PrefetchOp : ET_Op<"prefetch", [
    MemoryEffects<[MemRead<DefaultResource>]>]> {
  let summary = "a hint: rows of a matrix will be read soon (L2 prefetch)";
  let description = [{
    Rows `[row0, row0 + rows)` of the row-major matrix `w` (`N x K`, rows
    contiguous: unit inner stride and a row stride of K), clamped to `N`,
    are about to be read by some tile. On the GPU, thread 0 of the worker
    issues one bulk prefetch of those bytes into L2
    (`cp.async.bulk.prefetch.L2`) and nobody waits for it; on the CPU the op
    does nothing. It changes no value: a task of prefetches lets workers
    that would otherwise idle (during a latency-bound phase) start the
    memory traffic of a later bandwidth-bound phase.

    Example:

    ```mlir
    et.prefetch %wg rows(%r0, %c64) : memref<8192x2048xbf16, strided<[2048, 1], offset: ?>>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F16, F32], [2]>, "", [MemRead]>:$w,
                       Index:$row0, Index:$rows);
  let assemblyFormat = [{
    $w `rows` `(` $row0 `,` $rows `)` attr-dict `:` type($w)
  }];
  let hasVerifier = 1;
}

def ET_StagedRowsOp : ET_Op<"staged_rows", [
    MemoryEffects<[MemRead<DefaultResource>]>]> {
  let summary = "the first rows of a weight tile, if the worker staged them in shared memory";
  let description = [{
    A tile's weights never depend on earlier tasks, so a worker may copy
    them into its shared memory while it is still busy with the tile before
    (staging across tiles). This op says which of them are there: rows
    `[row0, row0 + count)` of the row-major matrix `w` (`N x K`, rows
    contiguous) are rows `[0, count)` of `view`, complete when the op
    returns. `count` is `min(R, rows, N - row0)` (at least 0), where `R` is
    the leading size of `view`, when the worker's schedule staged this tile;
    otherwise it is 0 and `view` must not be read. The op holds no data of
    its own: the tile reads rows below `count` from `view` and the others
    from `w`.

    `offset` is where the view starts in the worker's staging region
    (bytes, a multiple of 16): the staged ops of one task lie side by side.
    The tile lowering (`et-lower-tile-ops` with `stage-bytes`) creates it
    for `et.linear` on the GPU, at the task's top level, with `w`, `row0`
    and `rows` computed from the tile coordinates alone. The GPU worker
    lowering (`convert-et-to-nvvm`, static schedules) decides which tiles
    are staged: in each worker's program, the entry before a single tile
    issues the tile's copy at its own start, before its own waits, with one
    bulk copy (`cp.async.bulk`) per op completing on an mbarrier, which this
    op waits on. The host worker lowering rejects it (shared memory exists
    on the GPU only). The model's one-row decode kernels stage the rows of
    their `mlp` and `down` tiles (and `qkv` for hidden sizes up to 1024);
    docs/lowering.md, "Weights staged across tiles", has the measurements.

    Example:

    ```mlir
    %view, %count = et.staged_rows %w rows(%row0, %c48) offset 0
        : memref<3072x1024xbf16, strided<[1024, 1], offset: ?>>
          -> memref<48x1024xbf16, #gpu.address_space<workgroup>>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16], [2]>, "", [MemRead]>:$w,
                       Index:$row0, Index:$rows, I64Attr:$offset);
  let results = (outs MemRefRankOf<[BF16], [2]>:$view, Index:$count);
  let assemblyFormat = [{
    $w `rows` `(` $row0 `,` $rows `)` `offset` $offset attr-dict `:` type($w) `->` type($view)
  }];
  let hasVerifier = 1;
}

def ET_SiluMulOp : ET_Op<"silu_mul", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "the gated MLP activation: y = silu(gate) * up";
  let description = [{
    For every token `m` and column `j` in `[col0, col0 + cols)` below H:

    ```
    y[m, j] = silu(gate[m, j]) * up[m, j],   silu(g) = g / (1 + exp(-g))
    ```

    computed in f32 from bf16 or f32 inputs and rounded to `y`'s element
    type. All threads of the worker split the columns.

    Example:

    ```mlir
    et.silu_mul %gate, %up, %y cols(%c0, %c8192) : memref<1x8192xf32>, memref<1x8192xf32>, memref<1x8192xbf16>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead]>:$gate,
                       Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead]>:$up,
                       Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemWrite]>:$y,
                       Index:$col0, Index:$cols);
  let assemblyFormat = [{
    $gate `,` $up `,` $y `cols` `(` $col0 `,` $cols `)` attr-dict `:`
    type($gate) `,` type($up) `,` type($y)
  }];
  let hasVerifier = 1;
}

def ET_RMSNormOp : ET_Op<"rmsnorm", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "RMSNorm of token rows, optionally fused with the residual add";
  let description = [{
    For every token `m` of `x` (`M x H`):

    ```
    h = x[m, :] (+ residual[m, :] when `residual` is given; h is then
        stored back into residual, the new residual stream)
    y[m, :] = h / sqrt(mean(h * h) + eps) * w
    ```

    in f32, from bf16 or f32 inputs, rounded to `y`'s element type. `w` is
    the `H` weights. On the GPU one warp handles a token (shuffle-butterfly
    sum of squares); on the CPU, loops.

    Example:

    ```mlir
    et.rmsnorm %x, %w, %y eps(1.0e-05) residual(%res)
        : memref<1x2048xbf16>, memref<2048xbf16>, memref<1x2048xbf16>, memref<1x2048xf32>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead]>:$x,
                       Arg<MemRefRankOf<[BF16, F32], [1]>, "", [MemRead]>:$w,
                       Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemWrite]>:$y,
                       Optional<MemRefRankOf<[F32], [2]>>:$residual,
                       F32Attr:$eps);
  let assemblyFormat = [{
    $x `,` $w `,` $y `eps` `(` $eps `)` (`residual` `(` $residual^ `)`)? attr-dict `:`
    type($x) `,` type($w) `,` type($y) (`,` type($residual)^)?
  }];
  let hasVerifier = 1;
}

def ET_EmbeddingOp : ET_Op<"embedding", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "embedding gather: y[m, :] = table[ids[m], :]";
  let description = [{
    Copies the row `ids[m]` of `table` (`V x H`) into row `m` of `y`
    (`M x H`), converting the element type (bf16 or f32). An id outside
    `[0, V)` yields a row of zeros. All threads of the worker split the
    columns.

    Example:

    ```mlir
    et.embedding %table, %ids, %h : memref<128256x2048xbf16>, memref<1xi32>, memref<1x2048xf32>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead]>:$table,
                       Arg<MemRefRankOf<[I32, I64, Index], [1]>, "", [MemRead]>:$ids,
                       Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemWrite]>:$y);
  let assemblyFormat = [{
    $table `,` $ids `,` $y attr-dict `:` type($table) `,` type($ids) `,` type($y)
  }];
  let hasVerifier = 1;
}

def ET_KVAppendOp : ET_Op<"kv_append", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "appends the new tokens' keys or values to a KV cache";
  let description = [{
    `cache[position + m, h, d] = new[m, h, d]` for every token `m` of `new`
    (`M x Hkv x D`), into `cache` (`S x Hkv x D`), converting the element
    type. Positions at or past S are not written. All threads split the
    elements.

    Example:

    ```mlir
    et.kv_append %k, %kcache, %pos : memref<1x8x64xf32>, memref<8192x8x64xbf16>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [3]>, "", [MemRead]>:$new_values,
                       Arg<MemRefRankOf<[BF16, F32], [3]>, "", [MemWrite]>:$cache,
                       Index:$position);
  let assemblyFormat = [{
    $new_values `,` $cache `,` $position attr-dict `:` type($new_values) `,` type($cache)
  }];
  let hasVerifier = 1;
}

def ET_RoPEOp : ET_Op<"rope", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "rotary position embedding, in place (Llama-3 and Qwen3)";
  let description = [{
    Rotates, in place, every head of `x` (`M x heads x D`, D even) by the
    angle `positions[m] * inv_freq[i]` for the pair (i, i + D/2), the
    "rotate half" form of both families:

    ```
    x[i]       = x[i] * cos - x[i + D/2] * sin
    x[i + D/2] = x[i + D/2] * cos + x[i] * sin
    inv_freq[i] = theta ^ (-2i / D)
    ```

    Qwen3: `theta` (1e6) alone. Llama-3: with `llama3_scaling = [factor,
    low_freq_factor, high_freq_factor, original_max_position]` (32, 1, 4,
    8192 for Llama-3.2), frequencies whose wavelength exceeds
    `original_max_position / low_freq_factor` are divided by `factor`,
    those below `original_max_position / high_freq_factor` are kept, and
    the ones between are interpolated smoothly. Computed in f32.

    Example:

    ```mlir
    et.rope %q, %pos theta(5.0e+05) llama3_scaling([32.0, 1.0, 4.0, 8192.0]) : memref<1x32x64xf32>, memref<1xi32>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [3]>, "", [MemRead, MemWrite]>:$x,
                       Arg<MemRefRankOf<[I32, I64, Index], [1]>, "", [MemRead]>:$positions,
                       F32Attr:$theta,
                       OptionalAttr<DenseF32ArrayAttr>:$llama3_scaling);
  let assemblyFormat = [{
    $x `,` $positions `theta` `(` $theta `)` (`llama3_scaling` `(` $llama3_scaling^ `)`)? attr-dict
    `:` type($x) `,` type($positions)
  }];
  let hasVerifier = 1;
}

def ET_RoPEIntoOp : ET_Op<"rope_into", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "per-head RMSNorm (optional) and RoPE of x, stored into a row of out";
  let description = [{
    For every token `m` and head `h` of `x` (`M x heads x D`, D even):

    ```
    v = x[m, h, :]
    v = v / sqrt(mean(v * v) + eps) * w        (with `norm(%w)`)
    out[row + m, h, :] = rope(v, positions[m])  (rows at or past out's first
                                                 dimension are not written)
    ```

    in f32, rounded to `out`'s element type. `rope` is `et.rope`'s rotation
    (same `theta` and `llama3_scaling`). `out` (`S x heads x D`) may be `x`
    itself with `row` 0 (in place), or a KV cache with `row` the token's
    position: the decode step's query heads are normalized and rotated in
    place, and its key head normalized, rotated and appended, each with one
    read of `x` and one write (`et.rmsnorm`, `et.rope` and `et.kv_append`
    one after another take a round trip to memory each). On the GPU one
    warp handles a (token, head), lane l the pairs (i, i + D/2) with
    i = l mod 32; on the CPU, loops.

    Example:

    ```mlir
    // Qwen3's key head of the decode step, appended at position %p
    et.rope_into %k, %pos, %kcache[%p] theta(1.0e+06) norm(%kn) eps(1.0e-06)
        : memref<1x1x128xf32>, memref<1xi32>, memref<4096x1x128xbf16>, memref<128xbf16>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [3]>, "", [MemRead]>:$x,
                       Arg<MemRefRankOf<[I32, I64, Index], [1]>, "", [MemRead]>:$positions,
                       Arg<MemRefRankOf<[BF16, F32], [3]>, "", [MemWrite]>:$out,
                       Index:$row,
                       Optional<MemRefRankOf<[BF16, F32], [1]>>:$norm,
                       F32Attr:$theta,
                       OptionalAttr<F32Attr>:$eps,
                       OptionalAttr<DenseF32ArrayAttr>:$llama3_scaling);
  let assemblyFormat = [{
    $x `,` $positions `,` $out `[` $row `]` `theta` `(` $theta `)`
    (`norm` `(` $norm^ `)`)? (`eps` `(` $eps^ `)`)?
    (`llama3_scaling` `(` $llama3_scaling^ `)`)? attr-dict
    `:` type($x) `,` type($positions) `,` type($out) (`,` type($norm)^)?
  }];
  let hasVerifier = 1;
}

def ET_ArgmaxOp : ET_Op<"argmax", [AttrSizedOperandSegments,
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "argmax of a column range of each token row (greedy decoding or sampling)";
  let description = [{
    For every token `m`, finds the largest `x[m, j]` over `j` in
    `[col0, col0 + cols)` (below the row length), ties to the smallest `j`,
    and writes its value to `values[m, slot]` and its index to
    `indices[m, slot]`. With `from(%idx)`, the index written is `idx[m, j]`
    instead of `j`: a second argmax over the per-tile results of a first
    one then yields the column of the whole vocabulary.

    With `sample(%temperature, %seed, %counter)` (per token: f32, i64, i32),
    a token whose temperature `T` is above 0 takes the largest
    `x[m, j] / T + g(j)` instead, where `g(j) = -log(-log(u))` is Gumbel
    noise from `u` in (0, 1): Philox4x32-10 keyed by the token's seed, its
    counter `(j, counter[m], 0, 0)`, first word, 24 bits. The winner is then
    a sample of `softmax(x[m, :] / T)` over the columns (the Gumbel-max
    trick), the same for every split of the columns into tiles and every
    number of threads, and repeatable for a seed and counter (the decode
    kernel passes the row's position, so every step draws anew). The value
    written is the winning key; a second argmax (without `sample`) over the
    tiles' results finishes the sample. A token with `T <= 0` is greedy,
    bit for bit as without `sample`.

    With `from(%idx)` as well, `x` holds gathered columns of a row and entry
    `j`'s noise is that of column `idx[m, j]`: a draw over the candidates of `et.top_candidates`,
    whose index is the column's, is the draw over the whole row wherever
    every column the threshold keeps is among them.

    With `key_offset(%o)` as well, column `j`'s noise is that of column
    `j + o` (the counter's first word): x holding columns `[o, o + n)` of a
    wider row (a device's share of the vocabulary) then draws the keys
    those columns have in the whole row, so the best key over every
    share's candidates is the sample of the whole row, as if one op had
    scanned it.

    With `above(%threshold)` (f32 per token, from `et.sample_threshold`), a
    sampling token's columns whose `x[m, j] / T` is below `threshold[m]`
    are left out (their key is -inf): the sample is then one of the
    distribution that the top-k, top-p and min-p filters leave.

    Example:

    ```mlir
    // one tile per 4096 columns, then one tile over the partial results
    et.argmax %logits, %pv, %pi cols(%c0, %c4096) slot(%t) : memref<1x128256xf32>, memref<1x32xf32>, memref<1x32xi32>
    et.argmax %pv, %v, %i cols(%z, %c32) slot(%z) from(%pi) : memref<1x32xf32>, memref<1x1xf32>, memref<1x1xi32>, memref<1x32xi32>
    // sampling: temperature, seed and counter per token
    et.argmax %logits, %pv, %pi cols(%c0, %c4096) slot(%t) sample(%temp, %seed, %pos : memref<?xf32>, memref<?xi64>, memref<?xi32>) : memref<?x128256xf32>, memref<?x32xf32>, memref<?x32xi32>
    // sampling from what the filters leave
    et.argmax %logits, %pv, %pi cols(%c0, %c4096) slot(%t) sample(%temp, %seed, %pos : memref<?xf32>, memref<?xi64>, memref<?xi32>) above(%tau : memref<?xf32>) : memref<?x128256xf32>, memref<?x32xf32>, memref<?x32xi32>
    // sampling over the second half of a vocabulary of 128256
    et.argmax %shard, %pv, %pi cols(%c0, %c4096) slot(%t) sample(%temp, %seed, %pos : memref<?xf32>, memref<?xi64>, memref<?xi32>) key_offset(%c64128) : memref<?x64128xf32>, memref<?x16xf32>, memref<?x16xi32>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead]>:$x,
                       Arg<MemRefRankOf<[F32], [2]>, "", [MemWrite]>:$values,
                       Arg<MemRefRankOf<[I32], [2]>, "", [MemWrite]>:$indices,
                       Index:$col0, Index:$cols, Index:$slot,
                       Optional<MemRefRankOf<[I32], [2]>>:$from,
                       Optional<MemRefRankOf<[F32], [1]>>:$temperature,
                       Optional<MemRefRankOf<[I64], [1]>>:$seed,
                       Optional<MemRefRankOf<[I32], [1]>>:$counter,
                       Optional<MemRefRankOf<[F32], [1]>>:$threshold,
                       Optional<Index>:$key_offset);
  let assemblyFormat = [{
    $x `,` $values `,` $indices `cols` `(` $col0 `,` $cols `)` `slot` `(` $slot `)`
    (`from` `(` $from^ `)`)?
    (`sample` `(` $temperature^ `,` $seed `,` $counter `:` type($temperature) `,` type($seed) `,`
      type($counter) `)`)?
    (`key_offset` `(` $key_offset^ `)`)?
    (`above` `(` $threshold^ `:` type($threshold) `)`)?
    attr-dict `:` type($x) `,` type($values) `,` type($indices)
    (`,` type($from)^)?
  }];
  let hasVerifier = 1;
}

def ET_SampleThresholdOp : ET_Op<"sample_threshold", [AttrSizedOperandSegments,
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "the logit threshold of a token's top-k, top-p and min-p sampling filters";
  let description = [{
    For token `m` of `x` (its logits, one row per token), sampled at
    temperature `T = temperature[m]`, writes to `threshold[m]` the least
    `y = x[m, j] / T` that the filters keep, applied in this order (that of
    Hugging Face transformers' logits warpers):

    - top-k (`top_k[m]` in `(0, V)`): the `k`-th largest `y` (ties kept);
    - top-p (`top_p[m]` in `(0, 1)`): of the tokens top-k keeps, the least
      `y` whose tokens with a larger `y` hold less than `p` of their
      probability mass (softmax of `y`): the smallest set of the most likely
      tokens that holds `p` of it;
    - min-p (`min_p[m]` in `(0, 1]`): `max(y) + log(min_p)`, the tokens
      at least `min_p` times as likely as the most likely one.

    A filter outside its range is off; with none on, or `T <= 0`, the
    threshold is -inf. `et.argmax ... sample(...) above(%threshold)` then
    samples from what is left. The op runs on all threads of the worker
    (a task tile per token): radix selects over the order-preserving 32-bit
    keys of `y`, 8 bits a pass, with the counts (top-k) and the mass (top-p)
    of each key range in shared memory, so the threshold is exact up to the
    order of f32 additions of the mass.

    With `candidates(%ids, %vals, %stats, %covered)` (what
    `et.top_candidates` wrote for every chunk of the token's row), the
    selects go over the chunks' candidates instead of the row, and the
    maximum and the mass of the whole row come from the chunks' stats: the
    same threshold, from a few thousand entries instead of the vocabulary,
    wherever the candidates decide it (top-k with `k <= K`; top-p where the
    nucleus ends above every chunk's floor; min-p always). Where they do
    not, the op scans the row as without them. `covered[m]` (i32) is then 1
    where the threshold is above every chunk's floor, so that every column
    the filters keep is a candidate and a draw over the candidates alone
    (`et.argmax ... from(%ids) sample(...) above(...)` over them) is the
    draw over the row; else 0.

    Example:

    ```mlir
    et.sample_threshold %logits token(%m) temperature(%t) top_k(%k) top_p(%p) min_p(%mp) into(%tau)
        : memref<?x151936xf32>, memref<?xf32>, memref<?xi32>, memref<?xf32>, memref<?xf32>, memref<?xf32>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead]>:$x,
                       Index:$token,
                       Arg<MemRefRankOf<[F32], [1]>, "", [MemRead]>:$temperature,
                       Arg<MemRefRankOf<[I32], [1]>, "", [MemRead]>:$top_k,
                       Arg<MemRefRankOf<[F32], [1]>, "", [MemRead]>:$top_p,
                       Arg<MemRefRankOf<[F32], [1]>, "", [MemRead]>:$min_p,
                       Arg<MemRefRankOf<[F32], [1]>, "", [MemWrite]>:$threshold,
                       Arg<Optional<MemRefRankOf<[I32], [3]>>, "", [MemRead]>:$cand_ids,
                       Arg<Optional<MemRefRankOf<[F32], [3]>>, "", [MemRead]>:$cand_vals,
                       Arg<Optional<MemRefRankOf<[F32], [3]>>, "", [MemRead]>:$cand_stats,
                       Arg<Optional<MemRefRankOf<[I32], [1]>>, "", [MemWrite]>:$covered);
  let assemblyFormat = [{
    $x `token` `(` $token `)` `temperature` `(` $temperature `)` `top_k` `(` $top_k `)` `top_p` `(` $top_p `)`
    `min_p` `(` $min_p `)` `into` `(` $threshold `)`
    (`candidates` `(` $cand_ids^ `,` $cand_vals `,` $cand_stats `,` $covered `:` type($cand_ids) `,`
      type($cand_vals) `,` type($cand_stats) `,` type($covered) `)`)?
    attr-dict `:` type($x) `,` type($temperature) `,`
    type($top_k) `,` type($top_p) `,` type($min_p) `,` type($threshold)
  }];
  let hasVerifier = 1;
}

def ET_LogitBiasOp : ET_Op<"logit_bias", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "a token's logit biases added to its logits";
  let description = [{
    For token `m` of `x` (its logits, one row per token), adds `values[m, k]`
    to `x[m, ids[m, k]]` for each of the K entries of its rows of `ids` and
    `values` (`M x K`, K static) whose id is a column of `x` and whose value
    is not zero; entries of one id add up (atomically). A row of zero
    values reads no logit. The op runs on all threads of the worker (a
    task tile per token); `et.penalize`, `et.sample_threshold` and
    `et.argmax` after it see the changed logits.

    Example:

    ```mlir
    et.logit_bias %logits token(%m) bias(%ids, %values)
        : memref<?x128256xf32>, memref<?x256xi32>, memref<?x256xf32>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[F32], [2]>, "", [MemRead, MemWrite]>:$x,
                       Index:$token,
                       Arg<MemRefRankOf<[I32], [2]>, "", [MemRead]>:$ids,
                       Arg<MemRefRankOf<[F32], [2]>, "", [MemRead]>:$values);
  let assemblyFormat = [{
    $x `token` `(` $token `)` `bias` `(` $ids `,` $values `)` attr-dict `:` type($x) `,` type($ids) `,`
    type($values)
  }];
  let hasVerifier = 1;
}

def ET_TopLogprobsOp : ET_Op<"top_logprobs", [AttrSizedOperandSegments,
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "a token's log-sum-exp and its most likely ids with their log-probabilities";
  let description = [{
    For token `m` of `x` (its logits, one row per token) with
    `n = count[m]`: nothing if `n < 0`; otherwise writes the log-sum-exp of
    its row, `log(sum_j exp(x[m, j]))`, to `lse[m]`, and the ids of its
    `min(n, N, width)` largest logits, largest first (equal logits in
    increasing id), to `ids[row, 0..)` with their log-probabilities
    `x[m, id] - lse[m]` in `values[row, 0..)` (`N` is the static width of
    `ids` and `values`; entries past them are left as they were). A
    token's chosen id then has log-probability `x[m, id] - lse[m]`.

    The op runs on all threads of the worker (a task tile per token): one
    pass for the maximum and the sum of exponentials (online, per thread),
    then, with `n > 0`, radix selects over the order-preserving keys of the
    logits (8 bits a pass, as `et.sample_threshold`) for the `n`-th
    largest, and over the ids among equal logits at that threshold when
    more of them tie than are left to take (ids below 2^24), then one pass
    that gathers the ids at or above it; thread 0 orders them.

    With `candidates(%ids, %vals, %stats)` (what `et.top_candidates` wrote
    for every chunk of the token's row, `K` candidates a chunk, `N <= K`),
    the log-sum-exp comes from the chunks' stats and the selects go over
    the candidates: every id of the row's N largest is one of its chunk's
    K largest, so the result is the same.

    Example:

    ```mlir
    // the top 20 of token %m into row %r of a history of top lists
    et.top_logprobs %logits token(%m) count(%n) into(%lse, %ids, %vals) row(%r)
        : memref<?x128256xf32>, memref<?xi32>, memref<?xf32>, memref<32784x20xi32>, memref<32784x20xf32>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead]>:$x,
                       Index:$token,
                       Arg<MemRefRankOf<[I32], [1]>, "", [MemRead]>:$count,
                       Arg<MemRefRankOf<[F32], [1]>, "", [MemWrite]>:$lse,
                       Arg<MemRefRankOf<[I32], [2]>, "", [MemWrite]>:$ids,
                       Arg<MemRefRankOf<[F32], [2]>, "", [MemWrite]>:$values,
                       Index:$row,
                       Arg<Optional<MemRefRankOf<[I32], [3]>>, "", [MemRead]>:$cand_ids,
                       Arg<Optional<MemRefRankOf<[F32], [3]>>, "", [MemRead]>:$cand_vals,
                       Arg<Optional<MemRefRankOf<[F32], [3]>>, "", [MemRead]>:$cand_stats);
  let assemblyFormat = [{
    $x `token` `(` $token `)` `count` `(` $count `)` `into` `(` $lse `,` $ids `,` $values `)` `row` `(` $row `)`
    (`candidates` `(` $cand_ids^ `,` $cand_vals `,` $cand_stats `:` type($cand_ids) `,` type($cand_vals) `,`
      type($cand_stats) `)`)?
    attr-dict `:` type($x) `,` type($count) `,` type($lse) `,` type($ids) `,` type($values)
  }];
  let hasVerifier = 1;
}

def ET_TopCandidatesOp : ET_Op<"top_candidates", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "a chunk of a token's logits reduced to its largest entries and its sums";
  let description = [{
    For token `m` of `x` (its logits, one row per token) and its columns
    `[col0, col0 + cols)` (below the row length; chunk `slot` of the row),
    writes to `ids[m, slot, 0..K)` the ids of the chunk's `K` largest
    logits (equal logits in increasing id; in no order) and to
    `vals[m, slot, 0..K)` their logits (id -1 and -inf past the chunk's
    columns), and to `stats[m, slot, 0..4)`: the chunk's largest logit
    `c`, `sum exp(x - c)`, `sum exp((x - c) / T)` at the token's
    temperature `T = temperature[m]` (0 where `T <= 0`), and its floor: the
    `K`-th largest logit if the chunk has more than `K` columns, else -inf;
    every column whose logit is above the floor is a candidate.

    A tile per chunk, then `et.top_logprobs` and `et.sample_threshold`
    with `candidates(...)` over all of the row's chunks: they read a few
    thousand candidates instead of every logit on one worker. The op runs
    on all threads of the worker: one online pass for the sums, radix
    selects for the `K`-th largest (as `et.top_logprobs`), one pass that
    gathers the candidates.

    Example:

    ```mlir
    // chunk %t of 126 chunks of 1018 columns, 64 candidates each
    et.top_candidates %logits token(%m) cols(%c0, %c1018) temperature(%temp) into(%ids, %vals, %stats) slot(%t)
        : memref<?x128256xf32>, memref<?xf32>, memref<?x126x64xi32>, memref<?x126x64xf32>, memref<?x126x4xf32>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead]>:$x,
                       Index:$token, Index:$col0, Index:$cols,
                       Arg<MemRefRankOf<[F32], [1]>, "", [MemRead]>:$temperature,
                       Arg<MemRefRankOf<[I32], [3]>, "", [MemWrite]>:$ids,
                       Arg<MemRefRankOf<[F32], [3]>, "", [MemWrite]>:$vals,
                       Arg<MemRefRankOf<[F32], [3]>, "", [MemWrite]>:$stats,
                       Index:$slot);
  let assemblyFormat = [{
    $x `token` `(` $token `)` `cols` `(` $col0 `,` $cols `)` `temperature` `(` $temperature `)`
    `into` `(` $ids `,` $vals `,` $stats `)` `slot` `(` $slot `)` attr-dict `:` type($x) `,` type($temperature) `,`
    type($ids) `,` type($vals) `,` type($stats)
  }];
  let hasVerifier = 1;
}

def ET_PenalizeOp : ET_Op<"penalize", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "a token's repetition, frequency and presence penalties applied to its logits";
  let description = [{
    For token `m` of `x` (its logits, one row per token), whose sequence
    so far is `history[slot, 0..length)` (token ids by position), and
    whose positions from `outputs_from[m]` on hold generated tokens (those
    before, the prompt), changes in place the logit of every token id `t`
    that occurs in the sequence, once per id, as the serving engines of the
    field do:

    - repetition (`repetition[m] = r`; off for 1, and for `r <= 0`, so
      that zeroed rows penalize nothing; for ids anywhere in the
      sequence): `x / r` where `x > 0`, else `x * r`;
    - then frequency and presence (`frequency[m] = f`,
      `presence[m] = p`, 0 off; for ids among the generated tokens, `c`
      times): `x - c * f - p`.

    Ids outside `[0, width)` in the history are skipped. With every penalty
    off, nothing is read. `counts` (`M x width` i32, one row per token) is
    scratch: all zero before, all zero after (the op counts each id's
    occurrences there, then the first thread to take an id's count applies
    its penalty). The op runs on all threads of the worker (a task tile
    per token); `et.sample_threshold` and `et.argmax` after it see the
    changed logits.

    Example:

    ```mlir
    et.penalize %logits token(%m) history(%hist, %slot, %n) outputs_from(%from) repetition(%r)
        frequency(%f) presence(%p) counts(%counts)
        : memref<?x128256xf32>, memref<16x2049xi32>, memref<?xi32>, memref<?xf32>, memref<?xf32>,
          memref<?xf32>, memref<?x128256xi32>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[F32], [2]>, "", [MemRead, MemWrite]>:$x,
                       Index:$token,
                       Arg<MemRefRankOf<[I32], [2]>, "", [MemRead]>:$history,
                       Index:$slot, Index:$length,
                       Arg<MemRefRankOf<[I32], [1]>, "", [MemRead]>:$outputs_from,
                       Arg<MemRefRankOf<[F32], [1]>, "", [MemRead]>:$repetition,
                       Arg<MemRefRankOf<[F32], [1]>, "", [MemRead]>:$frequency,
                       Arg<MemRefRankOf<[F32], [1]>, "", [MemRead]>:$presence,
                       Arg<MemRefRankOf<[I32], [2]>, "", [MemRead, MemWrite]>:$counts);
  let assemblyFormat = [{
    $x `token` `(` $token `)` `history` `(` $history `,` $slot `,` $length `)`
    `outputs_from` `(` $outputs_from `)` `repetition` `(` $repetition `)` `frequency` `(` $frequency `)`
    `presence` `(` $presence `)` `counts` `(` $counts `)` attr-dict `:` type($x) `,` type($history) `,`
    type($outputs_from) `,` type($repetition) `,` type($frequency) `,` type($presence) `,` type($counts)
  }];
  let hasVerifier = 1;
}

def ET_RouterTopKOp : ET_Op<"router_topk", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "a mixture-of-experts router: the top-k experts of each token and their weights";
  let description = [{
    For every token `m` of `logits` (`M x E` f32, the router's scores of E
    experts), with `p = softmax(logits[m, :])` in f32, writes the K experts
    of highest `p` to `ids[m, 0..K)` (`M x K` i32), highest first, ties to
    the smaller expert index, and their probabilities to `weights[m, 0..K)`
    (`M x K` f32); with `normalize`, each divided by the sum of the K (the
    `norm_topk_prob` of Qwen3-MoE configs). K is the static second
    dimension of `ids` and `weights`, at most E. A NaN score never wins.

    Example:

    ```mlir
    // token b's 8 of 128 experts, weights summing to 1
    et.router_topk %scores, %ids, %weights normalize
        : memref<1x128xf32, strided<[128, 1], offset: ?>>, memref<1x8xi32, strided<[8, 1], offset: ?>>,
          memref<1x8xf32, strided<[8, 1], offset: ?>>
    ```

    Lowering (`et-lower-tile-ops`): a group of lanes per token (a warp on
    the GPU, the one thread on the CPU), each lane scanning every 32nd
    expert: the maximum and the softmax denominator by butterflies, then K
    rounds that each take the best expert after the previous round's in
    the order (probability descending, index ascending); lane 0 writes.
  }];
  let arguments = (ins Arg<MemRefRankOf<[F32], [2]>, "", [MemRead]>:$logits,
                       Arg<MemRefRankOf<[I32], [2]>, "", [MemWrite]>:$ids,
                       Arg<MemRefRankOf<[F32], [2]>, "", [MemWrite]>:$weights,
                       UnitAttr:$normalize);
  let assemblyFormat = [{
    $logits `,` $ids `,` $weights (`normalize` $normalize^)? attr-dict `:`
    type($logits) `,` type($ids) `,` type($weights)
  }];
  let hasVerifier = 1;
}

def ET_AttentionSplitOp : ET_Op<"attention_split", [AttrSizedOperandSegments,
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "decode attention of one KV head's query group over one split of the KV cache";
  let description = [{
    Grouped-query decode attention, split along the sequence. `q` is the
    current token's `Hq x D` queries, `k` and `v` the `S x Hkv x D` caches,
    G = Hq / Hkv query heads share KV head `kv_head`. The split covers
    positions `P = [split * split_len, min((split + 1) * split_len, len))`.
    For every query head `h` of the group:

    ```
    s_t = scale * sum_d q[h, d] * k[t, kv_head, d]       (t in P)
    o[split, h, :] = sum_t exp(s_t - max s) * v[t, kv_head, :] / sum_t exp(s_t - max s)
    lse[split, h] = max s + log(sum_t exp(s_t - max s))
    ```

    An empty split writes zeros and `lse = -inf`. With `subsplits = n`, the
    split's positions are further cut into n contiguous chunks of
    `ceildiv(split_len, n)`, and chunk j writes entry `split * n + j` of `o`
    and `lse` (so `o` holds splits * n entries). `et.attention_merge`
    combines all entries. On the GPU, with a static group size, D in {64,
    128, 256} and bf16 caches, one warp handles a chunk for all query heads
    of the group (each KV row read once), D/8 lanes per position with
    16-byte loads, an online softmax per lane and a shuffle merge; otherwise
    one warp per (query head, chunk) with lanes splitting D. More chunks
    keep more warps of a worker busy. On the CPU, loops.

    `stable(%n)` states that no task of the kernel writes the cache
    positions below `n` (the history from earlier kernel launches). It does
    not change the result; with `et-lower-tile-ops{kv-prefetch=shared}` the
    GPU lowering copies the split's K and V rows below `n` into shared
    memory before the task's first wait, so those loads overlap the wait.

    `append(%kn, %vn)` (with `stable`; `kn` and `vn` are `N x D`) gives
    the keys and values of the positions this step adds: position `t` in
    `[stable, min(len, stable + N))` has key `kn[t - stable]` and value
    `vn[t - stable]`, rounded to the caches' element type. The split that
    covers `t` writes them into the caches' row `t` (KV head `kv_head`)
    and attends over them; the other splits do not touch them. A tile can
    then rotate the step's key into shared memory (`et.rope_into` into a
    workgroup `memref.alloca`) and hand it straight to the attention: with
    the staged lowering below, the split that holds the row puts it into
    its stage from there instead of reading back from the cache what it
    has just written. The other lowerings write the rows into the caches
    first (a barrier) and read them from there.

    Example:

    ```mlir
    et.attention_split %q, %kc, %vc, %o, %lse kv_head(%g) split(%s) split_len(%c256) len(%n) scale(0.125)
        : memref<32x64xf32>, memref<8192x8x64xbf16>, memref<8192x8x64xbf16>, memref<?x32x64xf32>, memref<?x32xf32>
    // positions below %p were written before this launch
    et.attention_split %q, %kc, %vc, %o, %lse kv_head(%g) split(%s) split_len(%c256) len(%n) stable(%p) scale(0.125)
        : memref<32x64xf32>, memref<8192x8x64xbf16>, memref<8192x8x64xbf16>, memref<?x32x64xf32>, memref<?x32xf32>
    // and position %p itself is this step's key and value, appended here
    et.attention_split %q, %kc, %vc, %o, %lse kv_head(%g) split(%s) split_len(%c256) len(%n) stable(%p)
        append(%kn, %vn) scale(0.125)
        : memref<32x64xf32>, memref<8192x8x64xbf16>, memref<8192x8x64xbf16>, memref<?x32x64xf32>, memref<?x32xf32>,
          memref<1x64xf32, #gpu.address_space<workgroup>>, memref<1x64xf32, #gpu.address_space<workgroup>>
    ```
  }];
  // k and v are written only with `append`.
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemRead]>:$q,
                       Arg<MemRefRankOf<[BF16, F32], [3]>, "", [MemRead, MemWrite]>:$k,
                       Arg<MemRefRankOf<[BF16, F32], [3]>, "", [MemRead, MemWrite]>:$v,
                       Arg<MemRefRankOf<[F32], [3]>, "", [MemWrite]>:$o,
                       Arg<MemRefRankOf<[F32], [2]>, "", [MemWrite]>:$lse,
                       Index:$kv_head, Index:$split, Index:$split_len, Index:$len,
                       Optional<Index>:$stable,
                       Arg<Optional<MemRefRankOf<[BF16, F32], [2]>>, "", [MemRead]>:$new_k,
                       Arg<Optional<MemRefRankOf<[BF16, F32], [2]>>, "", [MemRead]>:$new_v,
                       F32Attr:$scale,
                       DefaultValuedAttr<ConfinedAttr<I64Attr, [IntMinValue<1>]>, "1">:$subsplits);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $o `,` $lse `kv_head` `(` $kv_head `)` `split` `(` $split `)`
    `split_len` `(` $split_len `)` `len` `(` $len `)` (`stable` `(` $stable^ `)`)?
    (`append` `(` $new_k^ `,` $new_v `)`)? `scale` `(` $scale `)` attr-dict `:`
    type($q) `,` type($k) `,` type($v) `,` type($o) `,` type($lse) (`,` type($new_k)^ `,` type($new_v))?
  }];
  let hasVerifier = 1;
}

def ET_AttentionPrefillOp : ET_Op<"attention_prefill", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "causal attention of a block of prompt tokens over the KV cache (one KV head)";
  let description = [{
    Grouped-query causal attention for prefill. `q` and `o` are the
    prompt's `T x Hq x D` queries and outputs, `k` and `v` the
    `S x Hkv x D` caches, which already hold the prompt's keys and values
    (`et.kv_append`); token `t` of the prompt is at position `pos0 + t`.
    For the `block` tokens `t` in `[t0, min(t0 + block, T))` and the
    G = Hq / Hkv query heads `h` of KV head `kv_head`:

    ```
    s_j = scale * sum_d q[t, h, d] * k[j, kv_head, d]       (j in [0, pos0 + t])
    o[t, h, :] = sum_j exp(s_j - max s) * v[j, kv_head, :] / sum_j exp(s_j - max s)
    ```

    A task typically has one tile per (block of tokens, KV head). D is
    static and a multiple of 16; `q` (bf16, or f32 as RoPE leaves it; it
    is rounded to bf16 for the tensor cores) and `o` are bf16 or f32.

    Lowering (`et-lower-tile-ops`): on the GPU (D of 64 or 128, bf16
    caches, `block` x G a multiple of 16 that the worker's warps cover),
    flash-attention style on tensor cores: each warp owns 16 (token, head)
    rows; blocks of 64 cache positions of K and V go through shared memory
    (`cp.async`, double-buffered); scores `mma.sync` from q fragments in
    registers and K via `ldmatrix`, the causal mask and an online softmax
    in registers, and P (bf16) times V (`ldmatrix.trans`) into f32
    accumulators. Otherwise, and on the CPU, loops.

    Example:

    ```mlir
    %t0 = arith.muli %tb, %c16 : index
    et.attention_prefill %q, %kc, %vc, %o kv_head(%g) tokens(%t0) pos0(%p0) block(16) scale(0.125)
        : memref<?x32x64xbf16>, memref<8192x8x64xbf16>, memref<8192x8x64xbf16>, memref<?x32x64xbf16>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[BF16, F32], [3]>, "", [MemRead]>:$q,
                       Arg<MemRefRankOf<[BF16], [3]>, "", [MemRead]>:$k,
                       Arg<MemRefRankOf<[BF16], [3]>, "", [MemRead]>:$v,
                       Arg<MemRefRankOf<[BF16, F32], [3]>, "", [MemWrite]>:$o,
                       Index:$kv_head, Index:$t0, Index:$pos0,
                       ConfinedAttr<I64Attr, [IntMinValue<1>]>:$block,
                       F32Attr:$scale);
  let assemblyFormat = [{
    $q `,` $k `,` $v `,` $o `kv_head` `(` $kv_head `)` `tokens` `(` $t0 `)` `pos0` `(` $pos0 `)`
    `block` `(` $block `)` `scale` `(` $scale `)` attr-dict `:`
    type($q) `,` type($k) `,` type($v) `,` type($o)
  }];
  let hasVerifier = 1;
}

def ET_AttentionMergeOp : ET_Op<"attention_merge", [
    MemoryEffects<[MemRead<DefaultResource>, MemWrite<DefaultResource>]>]> {
  let summary = "log-sum-exp combine of split-KV attention partial results";
  let description = [{
    For every head `h` and element `d` of `out` (`Hq x D`), over the splits
    `s` of `o` (`splits x Hq x D`) and `lse` (`splits x Hq`):

    ```
    L = log(sum_s exp(lse[s, h]))
    out[h, d] = sum_s exp(lse[s, h] - L) * o[s, h, d]
    ```

    (zeros when every split is empty). A split whose `lse[s, h]` is -inf is
    empty: its `o[s, h, :]` is not read into the sum, whatever it holds (a
    producer with no positions marks its split so). All threads split the
    elements.

    Example:

    ```mlir
    et.attention_merge %o, %lse, %attn : memref<?x32x64xf32>, memref<?x32xf32>, memref<32x64xbf16>
    ```
  }];
  let arguments = (ins Arg<MemRefRankOf<[F32], [3]>, "", [MemRead]>:$o,
                       Arg<MemRefRankOf<[F32], [2]>, "", [MemRead]>:$lse,
                       Arg<MemRefRankOf<[BF16, F32], [2]>, "", [MemWrite]>:$out);
  let assemblyFormat = [{
    $o `,` $lse `,` $out attr-dict `:` type($o) `,` type($lse) `,` type($out)
  }];
  let hasVerifier = 1;
}

#endif // EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORTILEOPS_TD
