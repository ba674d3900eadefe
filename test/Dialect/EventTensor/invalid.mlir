// RUN: et-opt %s --split-input-file --verify-diagnostics

// Test: fewer size operands than dynamic dimensions.
func.func @missing_dynamic_size(%n: index) {
  // expected-error @+1 {{'et.event.create' op expected 2 dynamic size operands for '!et.event<?x?>', got 1}}
  %e = et.event.create(%n) : !et.event<?x?>
  return
}

// -----

// Test: a size operand for a static dimension.
func.func @extra_dynamic_size(%n: index) {
  // expected-error @+1 {{'et.event.create' op expected 0 dynamic size operands for '!et.event<4>', got 1}}
  %e = et.event.create(%n) : !et.event<4>
  return
}

// -----

// Test: a zero-sized dimension.
func.func @zero_dim() {
  // expected-error @+1 {{event tensor dimension 1 must be positive or '?', got 0}}
  %e = et.event.create() : !et.event<4x0>
  return
}

// -----

// Test: a size operand that is not an index.
func.func @non_index_size(%n: i32) {
  // expected-error @+1 {{'et.event.create' op operand #0 must be variadic of index, but got 'i32'}}
  %e = "et.event.create"(%n) : (i32) -> !et.event<?>
  return
}
