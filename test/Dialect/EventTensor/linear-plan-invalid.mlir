// RUN: et-opt %s --split-input-file --verify-diagnostics

// Test: et.linear_plan on an op other than et.linear.
et.kernel @not_linear() {
  // expected-error @+1 {{'arith.constant' op 'et.linear_plan' is only meaningful on 'et.linear'}}
  %c1 = arith.constant {et.linear_plan = {layout = "rows", prefetch = "none"}} 1 : index
}

// -----

// Test: a plan that is not a dictionary.
et.kernel @not_dict(%x: memref<1x256xbf16>, %w: memref<64x256xbf16>, %y: memref<1x64xf32>) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  // expected-error @+1 {{'et.linear' op 'et.linear_plan' must be a dictionary, got "rows"}}
  et.linear %x, %w, %y rows(%c0, %c16) {et.linear_plan = "rows"} : memref<1x256xbf16>, memref<64x256xbf16>, memref<1x64xf32>
}

// -----

// Test: an unknown layout.
et.kernel @bad_layout(%x: memref<1x256xbf16>, %w: memref<64x256xbf16>, %y: memref<1x64xf32>) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  // expected-error @+1 {{'et.linear' op 'et.linear_plan' needs layout = one of "short", "spread", "rows", got "stream"}}
  et.linear %x, %w, %y rows(%c0, %c16) {et.linear_plan = {layout = "stream", prefetch = "none"}} : memref<1x256xbf16>, memref<64x256xbf16>, memref<1x64xf32>
}

// -----

// Test: no prefetch entry.
et.kernel @no_prefetch(%x: memref<1x256xbf16>, %w: memref<64x256xbf16>, %y: memref<1x64xf32>) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  // expected-error @+1 {{'et.linear' op 'et.linear_plan' needs prefetch = one of "none", "registers", "shared", got <<NULL ATTRIBUTE>>}}
  et.linear %x, %w, %y rows(%c0, %c16) {et.linear_plan = {layout = "rows"}} : memref<1x256xbf16>, memref<64x256xbf16>, memref<1x64xf32>
}

// -----

// Test: a stage of no rows.
et.kernel @bad_stage(%x: memref<1x256xbf16>, %w: memref<64x256xbf16>, %y: memref<1x64xf32>) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  // expected-error @+1 {{'et.linear' op 'et.linear_plan' has a bad entry stage = array<i64: 0, 0> (stage = array<i64: offset >= 0, rows >= 1>, early_loads a unit)}}
  et.linear %x, %w, %y rows(%c0, %c16) {et.linear_plan = {layout = "rows", prefetch = "none", stage = array<i64: 0, 0>}} : memref<1x256xbf16>, memref<64x256xbf16>, memref<1x64xf32>
}
