// RUN: et-opt %s --split-input-file --verify-diagnostics --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=512}))"
// RUN: not et-opt %s --split-input-file --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu}))" 2>&1 | FileCheck %s --check-prefix=THREADS

// The GPU lowering of et.matmul fails with a diagnostic on the op where
// the tile does not fit the worker.

// 16 warps of 512 threads hold at most 64 accumulators per thread: a
// 256 x 256 tile needs 128.
et.kernel @registers(%x: memref<?x64xbf16>, %w: memref<256x64xbf16>, %y: memref<?x256xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{'et.matmul' op tile 256 x 256 needs more than 64 f32 accumulators per thread with 512 threads per worker}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [256, 256, 16] : memref<?x64xbf16>, memref<256x64xbf16>, memref<?x256xf32>
  }
}

// -----

// A task whose dynamic shared memory the input gives to another op.
et.kernel @owner(%x: memref<?x64xbf16>, %w: memref<128x64xbf16>, %y: memref<?x128xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) attributes {et.dynamic_shared_owner = "et.linear"} {
    // expected-error @+1 {{'et.matmul' op needs its task's dynamic shared memory, which 'et.dynamic_shared_owner' gives to "et.linear"}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [128, 128, 64] : memref<?x64xbf16>, memref<128x64xbf16>, memref<?x128xf32>
  }
}

// -----

// On the mma.sync path (BK not a multiple of 64), 4 stages of (128 + 256)
// rows of 112 + 8 bf16 are 368640 bytes.
et.kernel @shared(%x: memref<?x256xbf16>, %w: memref<256x256xbf16>, %y: memref<?x256xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{'et.matmul' op tile 128 x 256 x 112 with 4 stages needs 368640 bytes of shared memory, more than 204800}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [128, 256, 112] stages 4 : memref<?x256xbf16>, memref<256x256xbf16>, memref<?x256xf32>
  }
}

// -----

// On the wgmma path, 5 stages of (128 + 256) rows of 128 bytes, plus 1024
// bytes of alignment, are 246784 bytes.
et.kernel @wgmma_shared(%x: memref<?x256xbf16>, %w: memref<256x256xbf16>, %y: memref<?x256xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{'et.matmul' op tile 128 x 256 x 64 with 5 stages needs 246784 bytes of shared memory, more than 204800}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [128, 256, 64] stages 5 : memref<?x256xbf16>, memref<256x256xbf16>, memref<?x256xf32>
  }
}

// Without a fixed CTA size there is no warp tiling to choose.
// THREADS: :14:5: error: 'et.matmul' op on the GPU needs the threads per worker fixed at compile time (the pass's `threads` option)

// -----

// A gated tile needs warpgroup MMA: 3 stages at the least.
et.kernel @gated_stages(%x: memref<?x64xbf16>, %w: memref<64x64xbf16>, %u: memref<64x64xbf16>, %y: memref<?x64xbf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{'et.matmul' op gated tile 64 x 64 x 64 with 2 stages on 512 threads needs warpgroup MMA (mma=wgmma, BM and BK multiples of 64, at least 3 stages, a warpgroup per 64 rows)}}
    et.matmul %x, %w, %y at(%c0, %c0) gated(%u : memref<64x64xbf16>) tile [64, 64, 64] stages 2 : memref<?x64xbf16>, memref<64x64xbf16>, memref<?x64xbf16>
  }
}
