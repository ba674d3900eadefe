// RUN: et-opt %s --split-input-file --verify-diagnostics

// Test: et.attention_plan on an op other than the attention ops.
et.kernel @not_attention() {
  // expected-error @+1 {{'arith.constant' op 'et.attention_plan' is only meaningful on 'et.attention_split' or 'et.attention_prefill'}}
  %c1 = arith.constant {et.attention_plan = {form = "loops"}} 1 : index
}

// -----

// Test: a plan that is not a dictionary.
et.kernel @not_dict(%q: memref<8x64xf32>, %k: memref<256x2x64xbf16>, %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>,
                    %n: index) {
  %c0 = arith.constant 0 : index
  %c128 = arith.constant 128 : index
  // expected-error @+1 {{'et.attention_split' op 'et.attention_plan' must be a dictionary, got "loops"}}
  et.attention_split %q, %k, %k, %o, %lse kv_head(%c0) split(%c0) split_len(%c128) len(%n) scale(0.125)
      {et.attention_plan = "loops"}
      : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
}

// -----

// Test: an unknown form.
et.kernel @bad_form(%q: memref<8x64xf32>, %k: memref<256x2x64xbf16>, %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>,
                    %n: index) {
  %c0 = arith.constant 0 : index
  %c128 = arith.constant 128 : index
  // expected-error @+1 {{'et.attention_split' op 'et.attention_plan' needs form = one of "staged", "mma", "warps", "loops", got "wgmma"}}
  et.attention_split %q, %k, %k, %o, %lse kv_head(%c0) split(%c0) split_len(%c128) len(%n) scale(0.125)
      {et.attention_plan = {form = "wgmma"}}
      : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
}

// -----

// Test: no form entry.
et.kernel @no_form(%q: memref<8x64xf32>, %k: memref<256x2x64xbf16>, %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>,
                   %n: index) {
  %c0 = arith.constant 0 : index
  %c128 = arith.constant 128 : index
  // expected-error @+1 {{'et.attention_split' op 'et.attention_plan' needs form = one of "staged", "mma", "warps", "loops", got <<NULL ATTRIBUTE>>}}
  et.attention_split %q, %k, %k, %o, %lse kv_head(%c0) split(%c0) split_len(%c128) len(%n) scale(0.125)
      {et.attention_plan = {}}
      : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
}

// -----

// Test: an entry besides the form.
et.kernel @extra_entry(%q: memref<8x64xf32>, %k: memref<256x2x64xbf16>, %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>,
                       %n: index) {
  %c0 = arith.constant 0 : index
  %c128 = arith.constant 128 : index
  // expected-error @+1 {{'et.attention_split' op 'et.attention_plan' has a bad entry warps = 4 : i64 (only form)}}
  et.attention_split %q, %k, %k, %o, %lse kv_head(%c0) split(%c0) split_len(%c128) len(%n) scale(0.125)
      {et.attention_plan = {form = "mma", warps = 4}}
      : memref<8x64xf32>, memref<256x2x64xbf16>, memref<256x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
}

// -----

// Test: a form of et.attention_split on et.attention_prefill.
et.kernel @prefill_staged(%q: memref<?x32x64xbf16>, %k: memref<4096x8x64xbf16>, %o: memref<?x32x64xbf16>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'et.attention_prefill' op 'et.attention_plan' needs form = one of "mma", "loops", got "staged"}}
  et.attention_prefill %q, %k, %k, %o kv_head(%c0) tokens(%c0) pos0(%c0) block(16) scale(0.125)
      {et.attention_plan = {form = "staged"}}
      : memref<?x32x64xbf16>, memref<4096x8x64xbf16>, memref<4096x8x64xbf16>, memref<?x32x64xbf16>
}
