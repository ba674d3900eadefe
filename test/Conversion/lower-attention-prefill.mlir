// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=128}))" | FileCheck %s --check-prefix=GPU
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu}))" | FileCheck %s --check-prefix=LOOPS
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=cpu}))" | FileCheck %s --check-prefix=LOOPS

// 16 tokens x 4 query heads per KV head = 64 rows: 4 warps of 16 rows.
// Three slots of a K and a V block (64 positions x (64 + 8) bf16) in
// dynamic shared memory; blocks 0 and 1 are copied before the loop over the
// blocks the last token sees (a commit group each). Per block: wait for
// all but the newest group, barrier, copy block jb + 2, commit, then
// (active warps) 4 k16 steps x 4 ldmatrix of K and 8 mma.sync for the
// scores, the mask and the row maxima (quad shuffles), exp2, and per 16
// positions 4 ldmatrix.trans of V and 8 mma.sync; at the end O / l is
// stored for live tokens.
// GPU-LABEL: et.kernel @prefill
// GPU: memref.alloca() {et.dynamic_shared} : memref<27648xbf16, #gpu.address_space<workgroup>>
// GPU: nvvm.cp.async.shared.global
// GPU: nvvm.cp.async.commit.group
// GPU: nvvm.cp.async.commit.group
// GPU: scf.for
// GPU: nvvm.cp.async.wait.group 1
// GPU-NEXT: gpu.barrier
// GPU: nvvm.cp.async.commit.group
// GPU: scf.if
// GPU-COUNT-16: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<row>
// GPU: arith.select
// GPU: gpu.shuffle xor
// GPU: math.exp2
// GPU: nvvm.ldmatrix {{.*}}layout = #nvvm.mma_layout<col>
// GPU: nvvm.mma.sync
// GPU: scf.yield
// GPU: nvvm.cp.async.wait.group 0
// GPU: gpu.shuffle xor
// GPU: arith.divf
// GPU: memref.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] : memref<?x32x64xbf16>
// GPU: gpu.barrier
// GPU-NOT: et.attention_prefill
//
// Without a fixed CTA size (and on the CPU), loops: a (token, head) row
// per thread, three passes over the visible positions.
// LOOPS-LABEL: et.kernel @prefill
// LOOPS-NOT: nvvm.mma.sync
// LOOPS: arith.maximumf
// LOOPS: math.exp
// LOOPS: memref.alloca() : memref<64xf32>
// LOOPS: memref.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}, %{{.*}}] : memref<?x32x64xbf16>
// LOOPS-NOT: et.attention_prefill
et.kernel @prefill(%q: memref<?x32x64xbf16>, %k: memref<4096x8x64xbf16>, %v: memref<4096x8x64xbf16>, %o: memref<?x32x64xbf16>, %blocks: index, %p0: index) {
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  et.task @attn tiles(%tb, %g) in (%blocks, %c8) {
    %t0 = arith.muli %tb, %c16 : index
    et.attention_prefill %q, %k, %v, %o kv_head(%g) tokens(%t0) pos0(%p0) block(16) scale(0.125) : memref<?x32x64xbf16>, memref<4096x8x64xbf16>, memref<4096x8x64xbf16>, memref<?x32x64xbf16>
  }
}

// D = 32 has no tensor-core path: loops on the GPU too.
// GPU-LABEL: et.kernel @small_head
// GPU-NOT: nvvm.mma.sync
// GPU: math.exp
// GPU-NOT: et.attention_prefill
et.kernel @small_head(%q: memref<?x4x32xbf16>, %k: memref<64x4x32xbf16>, %v: memref<64x4x32xbf16>, %o: memref<?x4x32xf32>, %blocks: index) {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c16 = arith.constant 16 : index
  et.task @attn tiles(%tb, %g) in (%blocks, %c4) {
    %t0 = arith.muli %tb, %c16 : index
    et.attention_prefill %q, %k, %v, %o kv_head(%g) tokens(%t0) pos0(%c0) block(16) scale(0.176) : memref<?x4x32xbf16>, memref<64x4x32xbf16>, memref<64x4x32xbf16>, memref<?x4x32xf32>
  }
}

// An f32 q (as RoPE leaves it): two f32 per fragment register, rounded to
// a bf16 pair.
// GPU-LABEL: et.kernel @f32_q
// GPU: llvm.load %{{.*}} {alignment = 8 : i64} : !llvm.ptr<1> -> vector<2xf32>
// GPU: arith.truncf %{{.*}} : vector<2xf32> to vector<2xbf16>
// GPU: llvm.bitcast %{{.*}} : vector<2xbf16> to i32
// GPU: nvvm.mma.sync
// LOOPS-LABEL: et.kernel @f32_q
// LOOPS: %[[QV:.*]] = memref.load %{{.*}} : memref<?x16x128xf32>
// LOOPS-NEXT: memref.load
// LOOPS-NEXT: arith.extf
// LOOPS-NEXT: arith.mulf %[[QV]]
et.kernel @f32_q(%q: memref<?x16x128xf32>, %k: memref<1024x8x128xbf16>, %v: memref<1024x8x128xbf16>, %o: memref<?x16x128xf32>, %blocks: index) {
  %c0 = arith.constant 0 : index
  %c8 = arith.constant 8 : index
  %c32 = arith.constant 32 : index
  et.task @attn tiles(%tb, %g) in (%blocks, %c8) {
    %t0 = arith.muli %tb, %c32 : index
    et.attention_prefill %q, %k, %v, %o kv_head(%g) tokens(%t0) pos0(%c0) block(32) scale(0.088) : memref<?x16x128xf32>, memref<1024x8x128xbf16>, memref<1024x8x128xbf16>, memref<?x16x128xf32>
  }
}
