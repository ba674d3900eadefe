// The CUDA-core split attention with a wide query group: 8 query heads of
// 128 per KV head (Qwen3-30B-A3B) leave room in the warps' combine buffers
// for 9 of a 512-thread worker's 16 warps. The plan is the CUDA-core form
// (not the scalar loops); the lowering sizes the buffers for 9 warps, takes
// min(warps, 9) warps, starts the others past the last block and lets only
// working warps publish their partial results.
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=512 plan-only}))" | FileCheck %s --check-prefix=PLAN
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=512}))" | FileCheck %s --check-prefix=LOWER

// PLAN-LABEL: et.kernel @wide_group
// PLAN: et.attention_split {{.*}} {et.attention_plan = {form = "warps"}}
// LOWER-LABEL: et.kernel @wide_group
// LOWER: memref.alloca() : memref<9x8x128xf32, #gpu.address_space<workgroup>>
// LOWER: memref.alloca() : memref<9x8x2xf32, #gpu.address_space<workgroup>>
// LOWER: %[[C9:.*]] = arith.constant 9 : index
// LOWER: %[[WARPS:.*]] = arith.minui %{{.*}}, %[[C9]] : index
// LOWER: %[[WORKING:.*]] = arith.cmpi ult, %{{.*}}, %[[WARPS]] : index
// LOWER: arith.select %[[WORKING]]
// LOWER: scf.for
// LOWER: arith.andi %[[WORKING]]
// LOWER-NOT: et.attention_split
et.kernel @wide_group(%q: memref<32x128xf32>, %k: memref<1024x4x128xbf16>, %v: memref<1024x4x128xbf16>,
                      %o: memref<8x32x128xf32>, %lse: memref<8x32xf32>, %n: index) {
  %c4 = arith.constant 4 : index
  %c8 = arith.constant 8 : index
  et.task @attn tiles(%g, %s) in (%c4, %c8) {
    %c128 = arith.constant 128 : index
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%c128) len(%n) scale(0.088)
        : memref<32x128xf32>, memref<1024x4x128xbf16>, memref<1024x4x128xbf16>, memref<8x32x128xf32>, memref<8x32xf32>
  }
}
