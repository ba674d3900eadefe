// RUN: et-opt %s --split-input-file --verify-diagnostics --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=512 unroll=8}))"

// Test: a plan of short rows for rows of K = 1024.
et.kernel @short_long_k(%x: memref<1x1024xbf16>, %w: memref<64x1024xbf16>, %y: memref<1x64xf32>) {
  %c8 = arith.constant 8 : index
  et.task @t tiles(%t) in (%c8) {
    %r0 = arith.muli %t, %c8 : index
    // expected-error @+1 {{'et.linear' op et.linear_plan's short layout does not fit this op or worker}}
    et.linear %x, %w, %y rows(%r0, %c8) {et.linear_plan = {layout = "short", prefetch = "none"}} : memref<1x1024xbf16>, memref<64x1024xbf16>, memref<1x64xf32>
  }
}

// -----

// Test: a plan of the spread layout for a row count not known at compile time.
et.kernel @spread_dynamic_rows(%x: memref<1x1024xbf16>, %w: memref<64x1024xbf16>, %y: memref<1x64xf32>, %n: index) {
  %c8 = arith.constant 8 : index
  et.task @t tiles(%t) in (%c8) {
    %r0 = arith.muli %t, %c8 : index
    // expected-error @+1 {{'et.linear' op et.linear_plan's spread layout does not fit this op or worker}}
    et.linear %x, %w, %y rows(%r0, %n) {et.linear_plan = {layout = "spread", prefetch = "none"}} : memref<1x1024xbf16>, memref<64x1024xbf16>, memref<1x64xf32>
  }
}

// -----

// Test: a plan that stages more rows than the op has.
et.kernel @stage_too_many(%x: memref<1x1024xbf16>, %w: memref<64x1024xbf16>, %y: memref<1x64xf32>) {
  %c8 = arith.constant 8 : index
  et.task @t tiles(%t) in (%c8) {
    %r0 = arith.muli %t, %c8 : index
    // expected-error @+1 {{'et.linear' op et.linear_plan's stage does not fit this op}}
    et.linear %x, %w, %y rows(%r0, %c8) {et.linear_plan = {layout = "rows", prefetch = "none", stage = array<i64: 0, 9>}} : memref<1x1024xbf16>, memref<64x1024xbf16>, memref<1x64xf32>
  }
}

// -----

// Test: plans in the input that give the shared weight prefetch to two ops
// of a task (their slots would overlap).
et.kernel @two_shared_prefetches(%x: memref<1x1024xbf16>, %w: memref<64x1024xbf16>, %y: memref<1x64xf32>) {
  %c8 = arith.constant 8 : index
  et.task @t tiles(%t) in (%c8) {
    %r0 = arith.muli %t, %c8 : index
    et.linear %x, %w, %y rows(%r0, %c8) {et.linear_plan = {layout = "rows", prefetch = "shared"}} : memref<1x1024xbf16>, memref<64x1024xbf16>, memref<1x64xf32>
    // expected-error @+1 {{'et.linear' op et.linear_plan's shared prefetch needs its task's dynamic shared memory, which another et.linear's shared prefetch takes}}
    et.linear %x, %w, %y rows(%r0, %c8) {et.linear_plan = {layout = "rows", prefetch = "shared"}} : memref<1x1024xbf16>, memref<64x1024xbf16>, memref<1x64xf32>
  }
}

// -----

// Test: a plan of the shared weight prefetch in a task whose dynamic shared
// memory the input gives to another op.
et.kernel @shared_prefetch_held(%x: memref<1x1024xbf16>, %w: memref<64x1024xbf16>, %y: memref<1x64xf32>) {
  %c8 = arith.constant 8 : index
  et.task @t tiles(%t) in (%c8) attributes {et.dynamic_shared_owner = "et.attention_split"} {
    %r0 = arith.muli %t, %c8 : index
    // expected-error @+1 {{'et.linear' op et.linear_plan's shared prefetch needs its task's dynamic shared memory, which 'et.dynamic_shared_owner' gives to "et.attention_split"}}
    et.linear %x, %w, %y rows(%r0, %c8) {et.linear_plan = {layout = "rows", prefetch = "shared"}} : memref<1x1024xbf16>, memref<64x1024xbf16>, memref<1x64xf32>
  }
}
