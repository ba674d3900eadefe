// RUN: et-opt %s --split-input-file --verify-diagnostics --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=256}))"

// Test: a plan of the staged form without the KV prefetch (kv-prefetch=none).
et.kernel @staged_no_prefetch(%q: memref<8x64xf32>, %k: memref<256x2x64xbf16>, %v: memref<256x2x64xbf16>,
                              %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>, %n: index, %p: index) {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %e = et.event.create() : !et.event<>
  et.task @ready tiles(%t) in (%c1) {
    et.event.signal %e[] : !et.event<>
  }
  et.task @t tiles(%g, %s) in (%c2, %c2) {
    %c128 = arith.constant 128 : index
    et.event.wait %e[] : !et.event<>
    // expected-error @+1 {{'et.attention_split' op et.attention_plan's staged form does not fit this op or worker}}
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%c128) len(%n) stable(%p) scale(0.125)
        {et.attention_plan = {form = "staged"}}
        : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
  }
}

// -----

// Test: a plan of the tensor-core form without their shared memory (kv-mma-bytes=0).
et.kernel @mma_no_bytes(%q: memref<8x64xf32>, %k: memref<256x2x64xbf16>, %v: memref<256x2x64xbf16>,
                        %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>, %n: index) {
  %c2 = arith.constant 2 : index
  et.task @t tiles(%g, %s) in (%c2, %c2) {
    %c128 = arith.constant 128 : index
    // expected-error @+1 {{'et.attention_split' op et.attention_plan's mma form does not fit this op or worker}}
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%c128) len(%n) scale(0.125)
        {et.attention_plan = {form = "mma"}}
        : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
  }
}

// -----

// Test: a plan of one warp per query group for a dynamic group size.
et.kernel @warps_dynamic_group(%q: memref<?x64xf32>, %k: memref<256x2x64xbf16>, %v: memref<256x2x64xbf16>,
                               %o: memref<2x?x64xf32>, %lse: memref<2x?xf32>, %n: index) {
  %c2 = arith.constant 2 : index
  et.task @t tiles(%g, %s) in (%c2, %c2) {
    %c128 = arith.constant 128 : index
    // expected-error @+1 {{'et.attention_split' op et.attention_plan's warps form does not fit this op or worker}}
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%c128) len(%n) scale(0.125)
        {et.attention_plan = {form = "warps"}}
        : memref<?x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x?x64xf32>, memref<2x?xf32>
  }
}

// -----

// Test: plans in the input that give two ops of a task its dynamic shared
// memory (the tensor cores' rings of both would overlap).
et.kernel @two_mma(%q: memref<8x64xf32>, %k: memref<256x2x64xbf16>, %v: memref<256x2x64xbf16>,
                   %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>, %n: index) {
  %c2 = arith.constant 2 : index
  et.task @t tiles(%g, %s) in (%c2, %c2) {
    %c128 = arith.constant 128 : index
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%c128) len(%n) scale(0.125)
        {et.attention_plan = {form = "mma"}}
        : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
    // expected-error @+1 {{'et.attention_split' op et.attention_plan's mma form needs its task's dynamic shared memory, which 'et.dynamic_shared_owner' gives to "et.attention_split"}}
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%c128) len(%n) scale(0.125)
        {et.attention_plan = {form = "mma"}}
        : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
  }
}

// -----

// Test: a prefill plan of tensor cores in a task whose dynamic shared memory
// the input gives to another op.
et.kernel @prefill_mma_held(%q: memref<?x32x64xbf16>, %k: memref<4096x8x64xbf16>, %v: memref<4096x8x64xbf16>,
                            %o: memref<?x32x64xbf16>, %blocks: index, %p0: index) {
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  et.task @attn tiles(%tb, %g) in (%blocks, %c8) attributes {et.dynamic_shared_owner = "et.linear"} {
    %t0 = arith.muli %tb, %c16 : index
    // expected-error @+1 {{'et.attention_prefill' op et.attention_plan's mma form needs its task's dynamic shared memory, which 'et.dynamic_shared_owner' gives to "et.linear"}}
    et.attention_prefill %q, %k, %v, %o kv_head(%g) tokens(%t0) pos0(%p0) block(16) scale(0.125)
        {et.attention_plan = {form = "mma"}}
        : memref<?x32x64xbf16>, memref<4096x8x64xbf16>, memref<4096x8x64xbf16>, memref<?x32x64xbf16>
  }
}

// -----

// Test: a prefill plan of tensor cores for a head size they do not take.
et.kernel @prefill_mma_small_head(%q: memref<?x4x32xbf16>, %k: memref<64x4x32xbf16>, %v: memref<64x4x32xbf16>,
                                  %o: memref<?x4x32xf32>, %blocks: index) {
  %c0 = arith.constant 0 : index
  %c4 = arith.constant 4 : index
  %c16 = arith.constant 16 : index
  et.task @attn tiles(%tb, %g) in (%blocks, %c4) {
    %t0 = arith.muli %tb, %c16 : index
    // expected-error @+1 {{'et.attention_prefill' op et.attention_plan's mma form does not fit this op or worker}}
    et.attention_prefill %q, %k, %v, %o kv_head(%g) tokens(%t0) pos0(%c0) block(16) scale(0.176)
        {et.attention_plan = {form = "mma"}}
        : memref<?x4x32xbf16>, memref<64x4x32xbf16>, memref<64x4x32xbf16>, memref<?x4x32xf32>
  }
}
