// The plan of each et.attention_split (et.attention_plan): its form, the
// first that applies, with the tasks whose dynamic shared memory the ops
// before it took (plan-only plans every op up front, in the lowering's
// order).
// RUN: et-opt %s --split-input-file --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=256 kv-prefetch=shared prefetch-bytes=32768 kv-mma-bytes=65536 plan-only}))" | FileCheck %s --check-prefix=PLAN
// RUN: et-opt %s --split-input-file --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=256 plan-only}))" | FileCheck %s --check-prefix=CUDA
// The lowering emits a plan written by hand (warps, although the tensor
// cores apply).
// RUN: et-opt %s --split-input-file --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=256 kv-mma-bytes=65536}))" | FileCheck %s --check-prefix=KEPT

// With a `stable` operand and the split's rows in the KV prefetch budget,
// after a wait: staged. Without `stable`: tensor cores, which take the
// task's dynamic shared memory, so a second op of the same task takes one
// warp per query group. A dynamic group size: loops. Without kv-prefetch
// and kv-mma-bytes, the CUDA cores.
// The tasks whose dynamic shared memory an op holds say which
// (et.dynamic_shared_owner).
// PLAN-LABEL: et.kernel @forms
// PLAN: et.task @staged {{.*}} attributes {et.dynamic_shared_owner = "et.attention_split"}
// PLAN: et.attention_split {{.*}} {et.attention_plan = {form = "staged"}}
// PLAN: et.task @mma {{.*}} attributes {et.dynamic_shared_owner = "et.attention_split"}
// PLAN: et.attention_split {{.*}} {et.attention_plan = {form = "mma"}}
// PLAN: et.attention_split {{.*}} {et.attention_plan = {form = "warps"}}
// PLAN-NOT: et.dynamic_shared_owner
// PLAN: et.task @loops
// PLAN-NOT: et.dynamic_shared_owner
// PLAN: et.attention_split {{.*}} {et.attention_plan = {form = "loops"}}
// CUDA-LABEL: et.kernel @forms
// CUDA: et.task @staged
// CUDA: et.attention_split {{.*}} {et.attention_plan = {form = "warps"}}
// CUDA: et.task @mma
// CUDA: et.attention_split {{.*}} {et.attention_plan = {form = "warps"}}
// CUDA: et.attention_split {{.*}} {et.attention_plan = {form = "warps"}}
// CUDA: et.task @loops
// CUDA: et.attention_split {{.*}} {et.attention_plan = {form = "loops"}}
et.kernel @forms(%q: memref<8x64xf32>, %k: memref<256x2x64xbf16>, %v: memref<256x2x64xbf16>,
                 %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>, %qd: memref<?x64xf32>, %od: memref<2x?x64xf32>,
                 %lsed: memref<2x?xf32>, %n: index, %p: index) {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %e = et.event.create() : !et.event<>
  et.task @ready tiles(%t) in (%c1) {
    et.event.signal %e[] : !et.event<>
  }
  et.task @staged tiles(%g, %s) in (%c2, %c2) {
    %c128 = arith.constant 128 : index
    et.event.wait %e[] : !et.event<>
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%c128) len(%n) stable(%p) scale(0.125)
        : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
  }
  et.task @mma tiles(%g, %s) in (%c2, %c2) {
    %c128 = arith.constant 128 : index
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%c128) len(%n) scale(0.125)
        : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%c128) len(%n) scale(0.125)
        : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
  }
  et.task @loops tiles(%g, %s) in (%c2, %c2) {
    %c128 = arith.constant 128 : index
    et.attention_split %qd, %k, %v, %od, %lsed kv_head(%g) split(%s) split_len(%c128) len(%n) scale(0.125)
        : memref<?x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x?x64xf32>, memref<2x?xf32>
  }
}

// -----

// A plan written by hand is kept by plan-only, and the lowering emits it:
// one warp per query group (the partials of 8 warps in shared memory, no
// ring in the dynamic shared memory, no tensor cores) where the tensor
// cores would apply.
// PLAN-LABEL: et.kernel @kept
// PLAN: et.attention_split {{.*}} {et.attention_plan = {form = "warps"}}
// KEPT-LABEL: et.kernel @kept
// KEPT-NOT: et.dynamic_shared
// KEPT: memref.alloca() : memref<8x4x64xf32, #gpu.address_space<workgroup>>
// KEPT-NOT: nvvm.mma.sync
// KEPT: math.log2
et.kernel @kept(%q: memref<8x64xf32>, %k: memref<256x2x64xbf16>, %v: memref<256x2x64xbf16>,
                %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>, %n: index) {
  %c2 = arith.constant 2 : index
  et.task @t tiles(%g, %s) in (%c2, %c2) {
    %c128 = arith.constant 128 : index
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%c128) len(%n) scale(0.125)
        {et.attention_plan = {form = "warps"}}
        : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
  }
}

// -----

// et.attention_prefill is planned too: tensor cores where the op and the
// worker allow them and the task's dynamic shared memory is free (which
// they then hold), else loops; a task whose memory the input gives to
// another op keeps it there. D = 32 has no tensor-core form.
// PLAN-LABEL: et.kernel @prefill
// PLAN: et.task @mma {{.*}} attributes {et.dynamic_shared_owner = "et.attention_prefill"}
// PLAN: et.attention_prefill {{.*}} {et.attention_plan = {form = "mma"}}
// PLAN: et.task @held {{.*}} attributes {et.dynamic_shared_owner = "et.linear"}
// PLAN: et.attention_prefill {{.*}} {et.attention_plan = {form = "loops"}}
// PLAN-NOT: et.dynamic_shared_owner
// PLAN: et.task @small_head
// PLAN-NOT: et.dynamic_shared_owner
// PLAN: et.attention_prefill {{.*}} {et.attention_plan = {form = "loops"}}
et.kernel @prefill(%q: memref<?x32x64xbf16>, %k: memref<4096x8x64xbf16>, %v: memref<4096x8x64xbf16>,
                   %o: memref<?x32x64xbf16>, %qs: memref<?x4x32xbf16>, %ks: memref<64x4x32xbf16>,
                   %os: memref<?x4x32xf32>, %blocks: index, %p0: index) {
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  et.task @mma tiles(%tb, %g) in (%blocks, %c8) {
    %t0 = arith.muli %tb, %c16 : index
    et.attention_prefill %q, %k, %v, %o kv_head(%g) tokens(%t0) pos0(%p0) block(16) scale(0.125)
        : memref<?x32x64xbf16>, memref<4096x8x64xbf16>, memref<4096x8x64xbf16>, memref<?x32x64xbf16>
  }
  et.task @held tiles(%tb, %g) in (%blocks, %c8) attributes {et.dynamic_shared_owner = "et.linear"} {
    %t0 = arith.muli %tb, %c16 : index
    et.attention_prefill %q, %k, %v, %o kv_head(%g) tokens(%t0) pos0(%p0) block(16) scale(0.125)
        : memref<?x32x64xbf16>, memref<4096x8x64xbf16>, memref<4096x8x64xbf16>, memref<?x32x64xbf16>
  }
  et.task @small_head tiles(%tb, %g) in (%blocks, %c4) {
    %t0 = arith.muli %tb, %c16 : index
    et.attention_prefill %qs, %ks, %ks, %os kv_head(%g) tokens(%t0) pos0(%p0) block(16) scale(0.176)
        : memref<?x4x32xbf16>, memref<64x4x32xbf16>, memref<64x4x32xbf16>, memref<?x4x32xf32>
  }
}
