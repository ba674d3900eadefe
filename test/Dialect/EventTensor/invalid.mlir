// RUN: et-opt %s --split-input-file --verify-diagnostics

// Test: an event tensor with a zero-sized dimension.
et.kernel @zero_dim() {
  // expected-error @+1 {{event tensor dimension 1 must be positive or '?', got 0}}
  %e = et.event.create() : !et.event<4x0>
}

// -----

// Test: fewer size operands than dynamic dimensions.
et.kernel @missing_dynamic_size(%n: index) {
  // expected-error @+1 {{'et.event.create' op expected 2 dynamic size operands for '!et.event<?x?>', got 1}}
  %e = et.event.create(%n) : !et.event<?x?>
}

// -----

// Test: a size operand for a static dimension.
et.kernel @extra_dynamic_size(%n: index) {
  // expected-error @+1 {{'et.event.create' op expected 0 dynamic size operands for '!et.event<4>', got 1}}
  %e = et.event.create(%n) : !et.event<4>
}

// -----

// Test: a size operand that is not an index.
et.kernel @non_index_size(%n: i32) {
  // expected-error @+1 {{'et.event.create' op operand #0 must be variadic of index, but got 'i32'}}
  %e = "et.event.create"(%n) : (i32) -> !et.event<?>
}

// -----

// Test: an explicit expected count below one.
et.kernel @zero_expected() {
  // expected-error @+1 {{'et.event.create' op attribute 'expected' failed to satisfy constraint: 64-bit signless integer attribute whose minimum value is 1}}
  %e = et.event.create() {expected = 0} : !et.event<4>
}

// -----

// Test: an event tensor outside a kernel.
func.func @event_outside_kernel() {
  // expected-error @+1 {{'et.event.create' op expects parent op 'et.kernel'}}
  %e = et.event.create() : !et.event<4>
  return
}

// -----

// Test: a kernel with results.
// expected-error @+1 {{'et.kernel' op expected no results, got 1}}
et.kernel @with_result() -> index {
  %e = et.event.create() : !et.event<4>
}

// -----

// Test: kernel body arguments that do not match the signature (count).
// expected-error @+1 {{'et.kernel' op entry block must have 1 arguments to match function signature}}
"et.kernel"() ({
^bb0:
}) {sym_name = "k", function_type = (index) -> ()} : () -> ()

// -----

// Test: kernel body arguments that do not match the signature (type).
// expected-error @+1 {{'et.kernel' op type of entry block argument #0('i32') must match the type of the corresponding argument in function signature('index')}}
"et.kernel"() ({
^bb0(%a: i32):
}) {sym_name = "k", function_type = (index) -> ()} : () -> ()

// -----

// Test: a task outside a kernel.
func.func @task_outside_kernel(%n: index) {
  // expected-error @+1 {{'et.task' op expects parent op 'et.kernel'}}
  et.task @t tiles(%i) in (%n) {
  }
  return
}

// -----

// Test: more tile coordinates than extents.
et.kernel @coords_vs_extents(%n: index) {
  // expected-error @+1 {{expected as many extents as tile coordinates (2), got 1}}
  et.task @t tiles(%i, %j) in (%n) {
  }
}

// -----

// Test: a task body whose block arguments do not match the extents.
et.kernel @body_args(%n: index) {
  // expected-error @+1 {{'et.task' op expected 1 tile coordinates (one per extent), got 0}}
  "et.task"(%n) ({
  ^bb0:
  }) {sym_name = "t"} : (index) -> ()
}

// -----

// Test: a tile coordinate that is not an index.
et.kernel @coord_type(%n: index) {
  // expected-error @+1 {{'et.task' op tile coordinate #0 must be of type index, got 'i32'}}
  "et.task"(%n) ({
  ^bb0(%i: i32):
  }) {sym_name = "t"} : (index) -> ()
}

// -----

// Test: a task without tile dimensions.
et.kernel @no_dims() {
  // expected-error @+1 {{'et.task' op expected at least one tile dimension}}
  et.task @t tiles() in () {
  }
}

// -----

// Test: a constant extent of zero.
et.kernel @zero_extent() {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'et.task' op tile extent #0 must be positive, got 0}}
  et.task @t tiles(%i) in (%c0) {
  }
}

// -----

// Test: a wait with fewer indices than the event's rank.
et.kernel @wait_rank(%n: index) {
  %e = et.event.create() : !et.event<4x4>
  et.task @t tiles(%i) in (%n) {
    // expected-error @+1 {{'et.event.wait' op expected 2 indices for '!et.event<4x4>', got 1}}
    et.event.wait %e[%i] : !et.event<4x4>
  }
}

// -----

// Test: a signal with more indices than the event's rank.
et.kernel @signal_rank(%n: index) {
  %e = et.event.create() : !et.event<4>
  et.task @t tiles(%i) in (%n) {
    // expected-error @+1 {{'et.event.signal' op expected 1 indices for '!et.event<4>', got 2}}
    et.event.signal %e[%i, %i] : !et.event<4>
  }
}

// -----

// Test: a constant index past the end of a static dimension.
et.kernel @wait_constant_oob(%n: index) {
  %c4 = arith.constant 4 : index
  %e = et.event.create() : !et.event<4>
  et.task @t tiles(%i) in (%n) {
    // expected-error @+1 {{'et.event.wait' op index #0 is out of bounds: 4 not in [0, 4)}}
    et.event.wait %e[%c4] : !et.event<4>
  }
}

// -----

// Test: a negative constant index into a dynamic dimension.
et.kernel @signal_negative(%n: index) {
  %cm1 = arith.constant -1 : index
  %e = et.event.create(%n) : !et.event<?>
  et.task @t tiles(%i) in (%n) {
    // expected-error @+1 {{'et.event.signal' op index #0 is out of bounds: -1 not in [0, ?)}}
    et.event.signal %e[%cm1] : !et.event<?>
  }
}

// -----

// Test: a wait outside a task.
et.kernel @wait_outside_task() {
  %c0 = arith.constant 0 : index
  %e = et.event.create() : !et.event<4>
  // expected-error @+1 {{'et.event.wait' op expects parent op 'et.task'}}
  et.event.wait %e[%c0] : !et.event<4>
}

// -----

// Test: a signal nested in a loop of the task body (not once per tile).
et.kernel @signal_in_loop(%n: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %e = et.event.create() : !et.event<4>
  et.task @t tiles(%i) in (%n) {
    scf.for %k = %c0 to %n step %c1 {
      // expected-error @+1 {{'et.event.signal' op expects parent op 'et.task'}}
      et.event.signal %e[%c0] : !et.event<4>
    }
  }
}

// -----

// Test: an extent load with the wrong number of indices.
et.kernel @extent_rank(%m: memref<8xi32>) {
  // expected-error @+1 {{'et.extent.load' op expected 1 indices for 'memref<8xi32>', got 0}}
  %n = et.extent.load %m[] : memref<8xi32>
}

// -----

// Test: an extent load from a memref of floats.
et.kernel @extent_float(%m: memref<8xf32>, %i: index) {
  // expected-error @+1 {{'et.extent.load' op expected a memref of integers or index, got 'memref<8xf32>'}}
  %n = et.extent.load %m[%i] : memref<8xf32>
}

// -----

// Test: an extent load whose 'after' element has the wrong rank.
et.kernel @extent_after_rank(%m: memref<8xi32>, %i: index) {
  %e = et.event.create() : !et.event<2>
  // expected-error @+1 {{'et.extent.load' op expected 1 indices for '!et.event<2>', got 0}}
  %n = et.extent.load %m[%i] : memref<8xi32> after %e[] : !et.event<2>
}

// -----

// Test: 'after' indices without an 'after' event (generic form).
et.kernel @extent_after_missing(%m: memref<8xi32>, %i: index) {
  // expected-error @+1 {{'et.extent.load' op has 'after' indices but no 'after' event}}
  %n = "et.extent.load"(%m, %i, %i) {operandSegmentSizes = array<i32: 1, 1, 0, 1>} : (memref<8xi32>, index, index) -> index
}

// -----

et.kernel @thread_id_outside_task() {
  // expected-error @+1 {{'et.thread_id' op must be nested in an 'et.task' body}}
  %t = et.thread_id
}

// -----

et.kernel @num_threads_outside_task() {
  // expected-error @+1 {{'et.num_threads' op must be nested in an 'et.task' body}}
  %t = et.num_threads
}

// -----

et.kernel @linear_outside_task(%x: memref<1x8xbf16>, %w: memref<4x8xbf16>, %y: memref<1x4xf32>) {
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'et.linear' op must be nested in an 'et.task' body}}
  et.linear %x, %w, %y rows(%c0, %c0) : memref<1x8xbf16>, memref<4x8xbf16>, memref<1x4xf32>
}

// -----

et.kernel @linear_k_mismatch(%x: memref<1x16xbf16>, %w: memref<4x8xbf16>, %y: memref<1x4xf32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{x has K = 16 but w has K = 8}}
    et.linear %x, %w, %y rows(%i, %c1) : memref<1x16xbf16>, memref<4x8xbf16>, memref<1x4xf32>
  }
}

// -----

et.kernel @linear_m_mismatch(%x: memref<2x8xbf16>, %w: memref<4x8xbf16>, %y: memref<1x4xf32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{x has 2 tokens but y has 1}}
    et.linear %x, %w, %y rows(%i, %c1) : memref<2x8xbf16>, memref<4x8xbf16>, memref<1x4xf32>
  }
}

// -----

et.kernel @linear_n_mismatch(%x: memref<1x8xbf16>, %w: memref<4x8xbf16>, %y: memref<1x5xf32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{w has N = 4 rows but y has 5 columns}}
    et.linear %x, %w, %y rows(%i, %c1) : memref<1x8xbf16>, memref<4x8xbf16>, memref<1x5xf32>
  }
}

// -----

et.kernel @linear_too_many_tokens(%x: memref<17x8xbf16>, %w: memref<4x8xbf16>, %y: memref<17x4xf32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{supports at most 16 tokens, x has 17}}
    et.linear %x, %w, %y rows(%i, %c1) : memref<17x8xbf16>, memref<4x8xbf16>, memref<17x4xf32>
  }
}

// -----

et.kernel @linear_k_alignment(%x: memref<1x12xbf16>, %w: memref<4x12xbf16>, %y: memref<1x4xf32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{needs K to be a multiple of 8 (16-byte loads), got 12}}
    et.linear %x, %w, %y rows(%i, %c1) : memref<1x12xbf16>, memref<4x12xbf16>, memref<1x4xf32>
  }
}

// -----

et.kernel @linear_accumulate_bf16(%x: memref<1x8xbf16>, %w: memref<4x8xbf16>, %y: memref<1x4xbf16>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{with accumulate needs an f32 y, got 'memref<1x4xbf16>'}}
    et.linear %x, %w, %y rows(%i, %c1) accumulate : memref<1x8xbf16>, memref<4x8xbf16>, memref<1x4xbf16>
  }
}

// -----

et.kernel @linear_gated_shape(%x: memref<1x8xbf16>, %w: memref<4x8xbf16>, %y: memref<1x4xf32>, %u: memref<5x8xbf16>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{gated weights must have w's shape 'memref<4x8xbf16>', got 'memref<5x8xbf16>'}}
    et.linear %x, %w, %y rows(%i, %c1) gated(%u) : memref<1x8xbf16>, memref<4x8xbf16>, memref<1x4xf32>, memref<5x8xbf16>
  }
}

// -----

et.kernel @linear_gated_accumulate(%x: memref<1x8xbf16>, %w: memref<4x8xbf16>, %y: memref<1x4xf32>, %u: memref<4x8xbf16>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{cannot both accumulate and be gated}}
    et.linear %x, %w, %y rows(%i, %c1) accumulate gated(%u) : memref<1x8xbf16>, memref<4x8xbf16>, memref<1x4xf32>, memref<4x8xbf16>
  }
}

// -----

et.kernel @linear_atomic_alone(%x: memref<1x8xbf16>, %w: memref<4x8xbf16>, %y: memref<1x4xf32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{atomic needs accumulate (it makes the adds into y atomic)}}
    et.linear %x, %w, %y rows(%i, %c1) atomic : memref<1x8xbf16>, memref<4x8xbf16>, memref<1x4xf32>
  }
}

// -----

et.kernel @linear_norm_no_eps(%h: memref<1x8xf32>, %w: memref<4x8xbf16>, %y: memref<1x4xf32>, %g: memref<8xbf16>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{with norm needs eps}}
    et.linear %h, %w, %y rows(%i, %c1) norm(%g : memref<8xbf16>) : memref<1x8xf32>, memref<4x8xbf16>, memref<1x4xf32>
  }
}

// -----

et.kernel @linear_norm_negative_eps(%h: memref<1x8xf32>, %w: memref<4x8xbf16>, %y: memref<1x4xf32>, %g: memref<8xbf16>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{eps must be non-negative, got -1.000000e+00}}
    et.linear %h, %w, %y rows(%i, %c1) norm(%g : memref<8xbf16>) eps(-1.0) : memref<1x8xf32>, memref<4x8xbf16>, memref<1x4xf32>
  }
}

// -----

et.kernel @linear_norm_bf16_x(%x: memref<1x8xbf16>, %w: memref<4x8xbf16>, %y: memref<1x4xf32>, %g: memref<8xbf16>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{with norm reads the f32 residual stream: x must be f32, got 'memref<1x8xbf16>'}}
    et.linear %x, %w, %y rows(%i, %c1) norm(%g : memref<8xbf16>) eps(1.0e-05) : memref<1x8xbf16>, memref<4x8xbf16>, memref<1x4xf32>
  }
}

// -----

et.kernel @linear_norm_size(%h: memref<1x8xf32>, %w: memref<4x8xbf16>, %y: memref<1x4xf32>, %g: memref<16xbf16>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{norm weights must have K = 8 elements, got 16}}
    et.linear %h, %w, %y rows(%i, %c1) norm(%g : memref<16xbf16>) eps(1.0e-05) : memref<1x8xf32>, memref<4x8xbf16>, memref<1x4xf32>
  }
}

// -----

et.kernel @linear_eps_alone(%x: memref<1x8xbf16>, %w: memref<4x8xbf16>, %y: memref<1x4xf32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{eps without norm}}
    et.linear %x, %w, %y rows(%i, %c1) eps(1.0e-05) : memref<1x8xbf16>, memref<4x8xbf16>, memref<1x4xf32>
  }
}

// -----

et.kernel @linear_f32_x(%h: memref<1x8xf32>, %w: memref<4x8xbf16>, %y: memref<1x4xf32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{needs a bf16 x (an f32 x only with norm), got 'memref<1x8xf32>'}}
    et.linear %h, %w, %y rows(%i, %c1) : memref<1x8xf32>, memref<4x8xbf16>, memref<1x4xf32>
  }
}

// -----

et.kernel @linear_f32_weights(%x: memref<1x8xbf16>, %w: memref<4x8xf32>, %y: memref<1x4xf32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{operand #1 must be 2D memref of bfloat16 type values}}
    et.linear %x, %w, %y rows(%i, %c1) : memref<1x8xbf16>, memref<4x8xf32>, memref<1x4xf32>
  }
}

// -----

et.kernel @silu_shapes(%g: memref<1x8xf32>, %u: memref<1x4xf32>, %y: memref<1x8xf32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{gate, up and y must have the same shape, got 'memref<1x8xf32>', 'memref<1x4xf32>' and 'memref<1x8xf32>'}}
    et.silu_mul %g, %u, %y cols(%i, %c1) : memref<1x8xf32>, memref<1x4xf32>, memref<1x8xf32>
  }
}

// -----

et.kernel @silu_outside_task(%g: memref<1x8xf32>) {
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{'et.silu_mul' op must be nested in an 'et.task' body}}
  et.silu_mul %g, %g, %g cols(%c1, %c1) : memref<1x8xf32>, memref<1x8xf32>, memref<1x8xf32>
}

// -----

et.kernel @prefetch_outside_task(%w: memref<8x64xbf16>) {
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{'et.prefetch' op must be nested in an 'et.task' body}}
  et.prefetch %w rows(%c1, %c1) : memref<8x64xbf16>
}

// -----

et.kernel @prefetch_strided_rows(%w: memref<8x64xbf16, strided<[128, 1]>>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{w must hold its rows contiguously (strides [K, 1]), got 'memref<8x64xbf16, strided<[128, 1]>>'}}
    et.prefetch %w rows(%i, %c1) : memref<8x64xbf16, strided<[128, 1]>>
  }
}

// -----

et.kernel @prefetch_column(%w: memref<8x64xbf16, strided<[1, 8]>>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{w must hold its rows contiguously (strides [K, 1]), got 'memref<8x64xbf16, strided<[1, 8]>>'}}
    et.prefetch %w rows(%i, %c1) : memref<8x64xbf16, strided<[1, 8]>>
  }
}

// -----

et.kernel @prefetch_short_rows(%w: memref<8x4xbf16>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{a row of w must be a multiple of 16 bytes (bulk prefetch granule), got 'memref<8x4xbf16>'}}
    et.prefetch %w rows(%i, %c1) : memref<8x4xbf16>
  }
}

// -----

et.kernel @rmsnorm_shapes(%x: memref<1x8xf32>, %w: memref<8xf32>, %y: memref<2x8xf32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{x and y must have the same shape, got 'memref<1x8xf32>' and 'memref<2x8xf32>'}}
    et.rmsnorm %x, %w, %y eps(1.0e-05) : memref<1x8xf32>, memref<8xf32>, memref<2x8xf32>
  }
}

// -----

et.kernel @rmsnorm_weights(%x: memref<1x8xf32>, %w: memref<4xf32>, %y: memref<1x8xf32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{w has 4 weights but rows have 8 elements}}
    et.rmsnorm %x, %w, %y eps(1.0e-05) : memref<1x8xf32>, memref<4xf32>, memref<1x8xf32>
  }
}

// -----

et.kernel @rmsnorm_residual(%x: memref<1x8xf32>, %w: memref<8xf32>, %y: memref<1x8xf32>, %r: memref<1x4xf32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{residual must have x's shape, got 'memref<1x4xf32>'}}
    et.rmsnorm %x, %w, %y eps(1.0e-05) residual(%r) : memref<1x8xf32>, memref<8xf32>, memref<1x8xf32>, memref<1x4xf32>
  }
}

// -----

et.kernel @rmsnorm_eps(%x: memref<1x8xf32>, %w: memref<8xf32>, %y: memref<1x8xf32>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{eps must be non-negative, got -1}}
    et.rmsnorm %x, %w, %y eps(-1.0) : memref<1x8xf32>, memref<8xf32>, memref<1x8xf32>
  }
}

// -----

et.kernel @rmsnorm_outside_task(%x: memref<1x8xf32>, %w: memref<8xf32>) {
  // expected-error @+1 {{'et.rmsnorm' op must be nested in an 'et.task' body}}
  et.rmsnorm %x, %w, %x eps(1.0e-05) : memref<1x8xf32>, memref<8xf32>, memref<1x8xf32>
}

// -----

et.kernel @embedding_cols(%t: memref<5x8xbf16>, %ids: memref<1xi32>, %y: memref<1x4xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{table rows have 8 elements but y rows have 4}}
    et.embedding %t, %ids, %y : memref<5x8xbf16>, memref<1xi32>, memref<1x4xf32>
  }
}
// -----

et.kernel @embedding_ids(%t: memref<5x8xbf16>, %ids: memref<2xi32>, %y: memref<1x8xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{has 2 ids but y has 1 rows}}
    et.embedding %t, %ids, %y : memref<5x8xbf16>, memref<2xi32>, memref<1x8xf32>
  }
}
// -----

et.kernel @kv_append_dims(%n: memref<1x2x8xf32>, %cache: memref<4x2x16xbf16>, %p: index) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{new values 'memref<1x2x8xf32>' and cache 'memref<4x2x16xbf16>' differ in dimension 2}}
    et.kv_append %n, %cache, %p : memref<1x2x8xf32>, memref<4x2x16xbf16>
  }
}
// -----

et.kernel @rope_odd(%x: memref<1x2x7xf32>, %p: memref<1xi32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{head dimension must be even, got 7}}
    et.rope %x, %p theta(1.0e+04) : memref<1x2x7xf32>, memref<1xi32>
  }
}
// -----

et.kernel @rope_positions(%x: memref<2x2x8xf32>, %p: memref<1xi32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{has 1 positions for 2 tokens}}
    et.rope %x, %p theta(1.0e+04) : memref<2x2x8xf32>, memref<1xi32>
  }
}
// -----

et.kernel @rope_theta(%x: memref<1x2x8xf32>, %p: memref<1xi32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{theta must be greater than 1, got 5.000000e-01}}
    et.rope %x, %p theta(0.5) : memref<1x2x8xf32>, memref<1xi32>
  }
}
// -----

et.kernel @rope_scaling_size(%x: memref<1x2x8xf32>, %p: memref<1xi32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{llama3_scaling needs [factor, low_freq_factor, high_freq_factor, original_max_position], got 2 values}}
    et.rope %x, %p theta(1.0e+04) llama3_scaling([32.0, 1.0]) : memref<1x2x8xf32>, memref<1xi32>
  }
}
// -----

et.kernel @rope_scaling_values(%x: memref<1x2x8xf32>, %p: memref<1xi32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{llama3_scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and original_max_position > 0}}
    et.rope %x, %p theta(1.0e+04) llama3_scaling([32.0, 4.0, 1.0, 8192.0]) : memref<1x2x8xf32>, memref<1xi32>
  }
}
// -----

et.kernel @rope_into_odd(%x: memref<1x2x7xf32>, %p: memref<1xi32>, %r: index) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{head dimension must be even, got 7}}
    et.rope_into %x, %p, %x[%r] theta(1.0e+04) : memref<1x2x7xf32>, memref<1xi32>, memref<1x2x7xf32>
  }
}
// -----

et.kernel @rope_into_out(%x: memref<1x2x8xf32>, %p: memref<1xi32>, %o: memref<16x1x8xbf16>, %r: index) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{x 'memref<1x2x8xf32>' and out 'memref<16x1x8xbf16>' differ in dimension 1}}
    et.rope_into %x, %p, %o[%r] theta(1.0e+04) : memref<1x2x8xf32>, memref<1xi32>, memref<16x1x8xbf16>
  }
}
// -----

et.kernel @rope_into_norm_size(%x: memref<1x2x8xf32>, %p: memref<1xi32>, %w: memref<4xf32>, %r: index) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{norm has 4 weights but heads have 8 elements}}
    et.rope_into %x, %p, %x[%r] theta(1.0e+04) norm(%w) eps(1.0e-06) : memref<1x2x8xf32>, memref<1xi32>, memref<1x2x8xf32>, memref<4xf32>
  }
}
// -----

et.kernel @rope_into_norm_eps(%x: memref<1x2x8xf32>, %p: memref<1xi32>, %w: memref<8xf32>, %r: index) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{norm needs eps}}
    et.rope_into %x, %p, %x[%r] theta(1.0e+04) norm(%w) : memref<1x2x8xf32>, memref<1xi32>, memref<1x2x8xf32>, memref<8xf32>
  }
}
// -----

et.kernel @rope_into_negative_eps(%x: memref<1x2x8xf32>, %p: memref<1xi32>, %w: memref<8xf32>, %r: index) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{eps must be non-negative, got -1.000000e+00}}
    et.rope_into %x, %p, %x[%r] theta(1.0e+04) norm(%w) eps(-1.0) : memref<1x2x8xf32>, memref<1xi32>, memref<1x2x8xf32>, memref<8xf32>
  }
}
// -----

et.kernel @rope_into_eps_alone(%x: memref<1x2x8xf32>, %p: memref<1xi32>, %r: index) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{eps without norm}}
    et.rope_into %x, %p, %x[%r] theta(1.0e+04) eps(1.0e-06) : memref<1x2x8xf32>, memref<1xi32>, memref<1x2x8xf32>
  }
}
// -----

et.kernel @rope_into_outside_task(%x: memref<1x2x8xf32>, %p: memref<1xi32>, %r: index) {
  // expected-error @+1 {{must be nested in an 'et.task' body}}
  et.rope_into %x, %p, %x[%r] theta(1.0e+04) : memref<1x2x8xf32>, memref<1xi32>, memref<1x2x8xf32>
}
// -----

et.kernel @argmax_shapes(%x: memref<2x8xf32>, %v: memref<1x1xf32>, %i: memref<1x1xi32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{x, values and indices must agree on the tokens}}
    et.argmax %x, %v, %i cols(%c, %c) slot(%c) : memref<2x8xf32>, memref<1x1xf32>, memref<1x1xi32>
  }
}
// -----

et.kernel @argmax_from(%x: memref<1x8xf32>, %v: memref<1x1xf32>, %i: memref<1x1xi32>, %f: memref<1x4xi32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{from must have x's shape, got 'memref<1x4xi32>'}}
    et.argmax %x, %v, %i cols(%c, %c) slot(%c) from(%f) : memref<1x8xf32>, memref<1x1xf32>, memref<1x1xi32>, memref<1x4xi32>
  }
}
// -----

et.kernel @argmax_sample_rows(%x: memref<2x8xf32>, %v: memref<2x1xf32>, %i: memref<2x1xi32>,
                              %t: memref<3xf32>, %s: memref<2xi64>, %n: memref<2xi32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{sample's temperature, seed and counter must have one entry per token of x, got 'memref<3xf32>' for 'memref<2x8xf32>'}}
    et.argmax %x, %v, %i cols(%c, %c) slot(%c) sample(%t, %s, %n : memref<3xf32>, memref<2xi64>, memref<2xi32>) : memref<2x8xf32>, memref<2x1xf32>, memref<2x1xi32>
  }
}
// -----

et.kernel @argmax_above_without_sample(%x: memref<1x8xf32>, %v: memref<1x1xf32>, %i: memref<1x1xi32>, %tau: memref<1xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{above (a sampling threshold) needs sample}}
    "et.argmax"(%x, %v, %i, %c, %c, %c, %tau) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 1, 0>} : (memref<1x8xf32>, memref<1x1xf32>, memref<1x1xi32>, index, index, index, memref<1xf32>) -> ()
  }
}
// -----

et.kernel @argmax_key_offset_without_sample(%x: memref<1x8xf32>, %v: memref<1x1xf32>, %i: memref<1x1xi32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{key_offset (the noise's column offset) needs sample}}
    "et.argmax"(%x, %v, %i, %c, %c, %c, %c) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 1>} : (memref<1x8xf32>, memref<1x1xf32>, memref<1x1xi32>, index, index, index, index) -> ()
  }
}
// -----

et.kernel @argmax_above_rows(%x: memref<2x8xf32>, %v: memref<2x1xf32>, %i: memref<2x1xi32>,
                             %t: memref<2xf32>, %s: memref<2xi64>, %n: memref<2xi32>, %tau: memref<3xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{above's threshold must have one entry per token of x, got 'memref<3xf32>' for 'memref<2x8xf32>'}}
    et.argmax %x, %v, %i cols(%c, %c) slot(%c) sample(%t, %s, %n : memref<2xf32>, memref<2xi64>, memref<2xi32>) above(%tau : memref<3xf32>) : memref<2x8xf32>, memref<2x1xf32>, memref<2x1xi32>
  }
}
// -----

et.kernel @sample_threshold_rows(%x: memref<2x8xf32>, %t: memref<2xf32>, %k: memref<2xi32>, %p: memref<4xf32>,
                                 %mp: memref<2xf32>, %tau: memref<2xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{temperature, top_k, top_p, min_p and threshold must have one entry per token of x, got 'memref<4xf32>' for 'memref<2x8xf32>'}}
    et.sample_threshold %x token(%m) temperature(%t) top_k(%k) top_p(%p) min_p(%mp) into(%tau) : memref<2x8xf32>, memref<2xf32>, memref<2xi32>, memref<4xf32>, memref<2xf32>, memref<2xf32>
  }
}
// -----

et.kernel @sample_threshold_outside(%x: memref<2x8xf32>, %t: memref<2xf32>, %k: memref<2xi32>, %p: memref<2xf32>,
                                    %mp: memref<2xf32>, %tau: memref<2xf32>) {
  %c = arith.constant 1 : index
  // expected-error @+1 {{'et.sample_threshold' op must be nested in an 'et.task' body}}
  et.sample_threshold %x token(%c) temperature(%t) top_k(%k) top_p(%p) min_p(%mp) into(%tau) : memref<2x8xf32>, memref<2xf32>, memref<2xi32>, memref<2xf32>, memref<2xf32>, memref<2xf32>
}
// -----

et.kernel @penalize_rows(%x: memref<2x8xf32>, %h: memref<2x5xi32>, %from: memref<2xi32>, %r: memref<2xf32>,
                         %f: memref<3xf32>, %p: memref<2xf32>, %counts: memref<2x8xi32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{outputs_from, repetition, frequency and presence must have one entry per token of x, got 'memref<3xf32>' for 'memref<2x8xf32>'}}
    et.penalize %x token(%m) history(%h, %m, %c) outputs_from(%from) repetition(%r) frequency(%f) presence(%p) counts(%counts) : memref<2x8xf32>, memref<2x5xi32>, memref<2xi32>, memref<2xf32>, memref<3xf32>, memref<2xf32>, memref<2x8xi32>
  }
}
// -----

et.kernel @penalize_counts(%x: memref<?x8xf32>, %h: memref<2x5xi32>, %from: memref<?xi32>, %r: memref<?xf32>,
                           %f: memref<?xf32>, %p: memref<?xf32>, %counts: memref<?x7xi32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{counts must have the shape of x, got 'memref<?x7xi32>' for 'memref<?x8xf32>'}}
    et.penalize %x token(%m) history(%h, %m, %c) outputs_from(%from) repetition(%r) frequency(%f) presence(%p) counts(%counts) : memref<?x8xf32>, memref<2x5xi32>, memref<?xi32>, memref<?xf32>, memref<?xf32>, memref<?xf32>, memref<?x7xi32>
  }
}
// -----

et.kernel @penalize_outside(%x: memref<2x8xf32>, %h: memref<2x5xi32>, %from: memref<2xi32>, %r: memref<2xf32>,
                            %f: memref<2xf32>, %p: memref<2xf32>, %counts: memref<2x8xi32>) {
  %c = arith.constant 1 : index
  // expected-error @+1 {{'et.penalize' op must be nested in an 'et.task' body}}
  et.penalize %x token(%c) history(%h, %c, %c) outputs_from(%from) repetition(%r) frequency(%f) presence(%p) counts(%counts) : memref<2x8xf32>, memref<2x5xi32>, memref<2xi32>, memref<2xf32>, memref<2xf32>, memref<2xf32>, memref<2x8xi32>
}
// -----

et.kernel @logit_bias_entries(%x: memref<2x8xf32>, %ids: memref<2x4xi32>, %v: memref<2x3xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{ids and values need the same static number of entries per token (K >= 1), got 'memref<2x4xi32>' and 'memref<2x3xf32>'}}
    et.logit_bias %x token(%m) bias(%ids, %v) : memref<2x8xf32>, memref<2x4xi32>, memref<2x3xf32>
  }
}
// -----

et.kernel @logit_bias_dynamic_entries(%x: memref<2x8xf32>, %ids: memref<2x?xi32>, %v: memref<2x?xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{ids and values need the same static number of entries per token (K >= 1), got 'memref<2x?xi32>' and 'memref<2x?xf32>'}}
    et.logit_bias %x token(%m) bias(%ids, %v) : memref<2x8xf32>, memref<2x?xi32>, memref<2x?xf32>
  }
}
// -----

et.kernel @logit_bias_rows(%x: memref<2x8xf32>, %ids: memref<3x4xi32>, %v: memref<3x4xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{ids and values must have one row per token of x, got 'memref<3x4xi32>' and 'memref<3x4xf32>' for 'memref<2x8xf32>'}}
    et.logit_bias %x token(%m) bias(%ids, %v) : memref<2x8xf32>, memref<3x4xi32>, memref<3x4xf32>
  }
}
// -----

et.kernel @logit_bias_outside(%x: memref<2x8xf32>, %ids: memref<2x4xi32>, %v: memref<2x4xf32>) {
  %c = arith.constant 1 : index
  // expected-error @+1 {{'et.logit_bias' op must be nested in an 'et.task' body}}
  et.logit_bias %x token(%c) bias(%ids, %v) : memref<2x8xf32>, memref<2x4xi32>, memref<2x4xf32>
}
// -----

et.kernel @top_logprobs_count(%x: memref<2x8xf32>, %n: memref<3xi32>, %l: memref<2xf32>, %ids: memref<4x5xi32>, %v: memref<4x5xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{count and lse must have one entry per token of x, got 'memref<3xi32>' for 'memref<2x8xf32>'}}
    et.top_logprobs %x token(%m) count(%n) into(%l, %ids, %v) row(%m) : memref<2x8xf32>, memref<3xi32>, memref<2xf32>, memref<4x5xi32>, memref<4x5xf32>
  }
}
// -----

et.kernel @top_logprobs_lse(%x: memref<2x8xf32>, %n: memref<2xi32>, %l: memref<1xf32>, %ids: memref<4x5xi32>, %v: memref<4x5xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{count and lse must have one entry per token of x, got 'memref<1xf32>' for 'memref<2x8xf32>'}}
    et.top_logprobs %x token(%m) count(%n) into(%l, %ids, %v) row(%m) : memref<2x8xf32>, memref<2xi32>, memref<1xf32>, memref<4x5xi32>, memref<4x5xf32>
  }
}
// -----

et.kernel @top_logprobs_entries(%x: memref<2x8xf32>, %n: memref<2xi32>, %l: memref<2xf32>, %ids: memref<4x5xi32>, %v: memref<4x4xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{ids and values need the same static number of entries per row (N >= 1), got 'memref<4x5xi32>' and 'memref<4x4xf32>'}}
    et.top_logprobs %x token(%m) count(%n) into(%l, %ids, %v) row(%m) : memref<2x8xf32>, memref<2xi32>, memref<2xf32>, memref<4x5xi32>, memref<4x4xf32>
  }
}
// -----

et.kernel @top_logprobs_dynamic_entries(%x: memref<2x8xf32>, %n: memref<2xi32>, %l: memref<2xf32>, %ids: memref<4x?xi32>, %v: memref<4x?xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{ids and values need the same static number of entries per row (N >= 1), got 'memref<4x?xi32>' and 'memref<4x?xf32>'}}
    et.top_logprobs %x token(%m) count(%n) into(%l, %ids, %v) row(%m) : memref<2x8xf32>, memref<2xi32>, memref<2xf32>, memref<4x?xi32>, memref<4x?xf32>
  }
}
// -----

et.kernel @top_logprobs_rows(%x: memref<2x8xf32>, %n: memref<2xi32>, %l: memref<2xf32>, %ids: memref<4x5xi32>, %v: memref<3x5xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{ids and values must have the same rows, got 'memref<4x5xi32>' and 'memref<3x5xf32>'}}
    et.top_logprobs %x token(%m) count(%n) into(%l, %ids, %v) row(%m) : memref<2x8xf32>, memref<2xi32>, memref<2xf32>, memref<4x5xi32>, memref<3x5xf32>
  }
}
// -----

et.kernel @top_logprobs_width(%x: memref<2x16777217xf32>, %n: memref<2xi32>, %l: memref<2xf32>, %ids: memref<4x5xi32>, %v: memref<4x5xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{rows of x must have at most 2^24 columns, got 'memref<2x16777217xf32>'}}
    et.top_logprobs %x token(%m) count(%n) into(%l, %ids, %v) row(%m) : memref<2x16777217xf32>, memref<2xi32>, memref<2xf32>, memref<4x5xi32>, memref<4x5xf32>
  }
}
// -----

et.kernel @top_candidates_temperature(%x: memref<2x8xf32>, %t: memref<3xf32>, %i: memref<2x3x4xi32>, %v: memref<2x3x4xf32>, %s: memref<2x3x4xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{temperature must have one entry per token of x, got 'memref<3xf32>' for 'memref<2x8xf32>'}}
    et.top_candidates %x token(%m) cols(%c, %c) temperature(%t) into(%i, %v, %s) slot(%m) : memref<2x8xf32>, memref<3xf32>, memref<2x3x4xi32>, memref<2x3x4xf32>, memref<2x3x4xf32>
  }
}
// -----

et.kernel @top_candidates_width(%x: memref<2x16777217xf32>, %t: memref<2xf32>, %i: memref<2x3x4xi32>, %v: memref<2x3x4xf32>, %s: memref<2x3x4xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{rows of x must have at most 2^24 columns, got 'memref<2x16777217xf32>'}}
    et.top_candidates %x token(%m) cols(%c, %c) temperature(%t) into(%i, %v, %s) slot(%m) : memref<2x16777217xf32>, memref<2xf32>, memref<2x3x4xi32>, memref<2x3x4xf32>, memref<2x3x4xf32>
  }
}
// -----

et.kernel @top_candidates_entries(%x: memref<2x8xf32>, %t: memref<2xf32>, %i: memref<2x3x4xi32>, %v: memref<2x3x5xf32>, %s: memref<2x3x4xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{candidate ids and values need the same static chunks and entries (C x K >= 1), got 'memref<2x3x4xi32>' and 'memref<2x3x5xf32>'}}
    et.top_candidates %x token(%m) cols(%c, %c) temperature(%t) into(%i, %v, %s) slot(%m) : memref<2x8xf32>, memref<2xf32>, memref<2x3x4xi32>, memref<2x3x5xf32>, memref<2x3x4xf32>
  }
}
// -----

et.kernel @top_candidates_dynamic(%x: memref<2x8xf32>, %t: memref<2xf32>, %i: memref<2x3x?xi32>, %v: memref<2x3x?xf32>, %s: memref<2x3x4xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{candidate ids and values need the same static chunks and entries (C x K >= 1), got 'memref<2x3x?xi32>' and 'memref<2x3x?xf32>'}}
    et.top_candidates %x token(%m) cols(%c, %c) temperature(%t) into(%i, %v, %s) slot(%m) : memref<2x8xf32>, memref<2xf32>, memref<2x3x?xi32>, memref<2x3x?xf32>, memref<2x3x4xf32>
  }
}
// -----

et.kernel @top_candidates_stats(%x: memref<2x8xf32>, %t: memref<2xf32>, %i: memref<2x3x4xi32>, %v: memref<2x3x4xf32>, %s: memref<2x3x3xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{candidate stats need 4 values per chunk of the candidates, got 'memref<2x3x3xf32>' for 'memref<2x3x4xi32>'}}
    et.top_candidates %x token(%m) cols(%c, %c) temperature(%t) into(%i, %v, %s) slot(%m) : memref<2x8xf32>, memref<2xf32>, memref<2x3x4xi32>, memref<2x3x4xf32>, memref<2x3x3xf32>
  }
}
// -----

et.kernel @top_candidates_stats_chunks(%x: memref<2x8xf32>, %t: memref<2xf32>, %i: memref<2x3x4xi32>, %v: memref<2x3x4xf32>, %s: memref<2x2x4xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{candidate stats need 4 values per chunk of the candidates, got 'memref<2x2x4xf32>' for 'memref<2x3x4xi32>'}}
    et.top_candidates %x token(%m) cols(%c, %c) temperature(%t) into(%i, %v, %s) slot(%m) : memref<2x8xf32>, memref<2xf32>, memref<2x3x4xi32>, memref<2x3x4xf32>, memref<2x2x4xf32>
  }
}
// -----

et.kernel @top_candidates_rows(%x: memref<2x8xf32>, %t: memref<2xf32>, %i: memref<3x3x4xi32>, %v: memref<3x3x4xf32>, %s: memref<2x3x4xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{candidates must have one row per token of x, got 'memref<3x3x4xi32>' for 'memref<2x8xf32>'}}
    et.top_candidates %x token(%m) cols(%c, %c) temperature(%t) into(%i, %v, %s) slot(%m) : memref<2x8xf32>, memref<2xf32>, memref<3x3x4xi32>, memref<3x3x4xf32>, memref<2x3x4xf32>
  }
}
// -----

et.kernel @top_candidates_outside(%x: memref<2x8xf32>, %t: memref<2xf32>, %i: memref<2x3x4xi32>, %v: memref<2x3x4xf32>, %s: memref<2x3x4xf32>) {
  %c = arith.constant 1 : index
  // expected-error @+1 {{'et.top_candidates' op must be nested in an 'et.task' body}}
  et.top_candidates %x token(%c) cols(%c, %c) temperature(%t) into(%i, %v, %s) slot(%c) : memref<2x8xf32>, memref<2xf32>, memref<2x3x4xi32>, memref<2x3x4xf32>, memref<2x3x4xf32>
}
// -----

et.kernel @top_logprobs_candidates_k(%x: memref<2x8xf32>, %n: memref<2xi32>, %l: memref<2xf32>, %ids: memref<4x5xi32>, %v: memref<4x5xf32>, %ci: memref<2x3x4xi32>, %cv: memref<2x3x4xf32>, %cs: memref<2x3x4xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{candidates must hold at least 5 entries a chunk, got 'memref<2x3x4xi32>'}}
    et.top_logprobs %x token(%m) count(%n) into(%l, %ids, %v) row(%m) candidates(%ci, %cv, %cs : memref<2x3x4xi32>, memref<2x3x4xf32>, memref<2x3x4xf32>) : memref<2x8xf32>, memref<2xi32>, memref<2xf32>, memref<4x5xi32>, memref<4x5xf32>
  }
}
// -----

et.kernel @sample_threshold_candidates_rows(%x: memref<2x8xf32>, %t: memref<2xf32>, %k: memref<2xi32>, %p: memref<2xf32>, %mp: memref<2xf32>, %tau: memref<2xf32>, %ci: memref<1x3x4xi32>, %cv: memref<1x3x4xf32>, %cs: memref<1x3x4xf32>, %cov: memref<?xi32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{candidates must have one row per token of x, got 'memref<1x3x4xi32>' for 'memref<2x8xf32>'}}
    et.sample_threshold %x token(%m) temperature(%t) top_k(%k) top_p(%p) min_p(%mp) into(%tau) candidates(%ci, %cv, %cs, %cov : memref<1x3x4xi32>, memref<1x3x4xf32>, memref<1x3x4xf32>, memref<?xi32>) : memref<2x8xf32>, memref<2xf32>, memref<2xi32>, memref<2xf32>, memref<2xf32>, memref<2xf32>
  }
}
// -----

et.kernel @sample_threshold_covered(%x: memref<2x8xf32>, %t: memref<2xf32>, %k: memref<2xi32>, %p: memref<2xf32>, %mp: memref<2xf32>, %tau: memref<2xf32>, %ci: memref<2x3x4xi32>, %cv: memref<2x3x4xf32>, %cs: memref<2x3x4xf32>, %cov: memref<3xi32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%m) in (%c) {
    // expected-error @+1 {{covered must have one entry per token of x, got 'memref<3xi32>' for 'memref<2x8xf32>'}}
    et.sample_threshold %x token(%m) temperature(%t) top_k(%k) top_p(%p) min_p(%mp) into(%tau) candidates(%ci, %cv, %cs, %cov : memref<2x3x4xi32>, memref<2x3x4xf32>, memref<2x3x4xf32>, memref<3xi32>) : memref<2x8xf32>, memref<2xf32>, memref<2xi32>, memref<2xf32>, memref<2xf32>, memref<2xf32>
  }
}
// -----

et.kernel @top_logprobs_outside(%x: memref<2x8xf32>, %n: memref<2xi32>, %l: memref<2xf32>, %ids: memref<4x5xi32>, %v: memref<4x5xf32>) {
  %c = arith.constant 1 : index
  // expected-error @+1 {{'et.top_logprobs' op must be nested in an 'et.task' body}}
  et.top_logprobs %x token(%c) count(%n) into(%l, %ids, %v) row(%c) : memref<2x8xf32>, memref<2xi32>, memref<2xf32>, memref<4x5xi32>, memref<4x5xf32>
}
// -----

et.kernel @argmax_sample_partial(%x: memref<1x8xf32>, %v: memref<1x1xf32>, %i: memref<1x1xi32>, %t: memref<1xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{sample needs a temperature, a seed and a counter per token}}
    "et.argmax"(%x, %v, %i, %c, %c, %c, %t) {operandSegmentSizes = array<i32: 1, 1, 1, 1, 1, 1, 0, 1, 0, 0, 0, 0>} : (memref<1x8xf32>, memref<1x1xf32>, memref<1x1xi32>, index, index, index, memref<1xf32>) -> ()
  }
}
// -----

et.kernel @embedding_outside(%t: memref<5x8xbf16>, %ids: memref<1xi32>, %y: memref<1x8xf32>) {
  %c = arith.constant 1 : index
  // expected-error @+1 {{'et.embedding' op must be nested in an 'et.task' body}}
  et.embedding %t, %ids, %y : memref<5x8xbf16>, memref<1xi32>, memref<1x8xf32>
}
// -----

et.kernel @kv_append_outside(%n: memref<1x2x8xf32>, %c2: memref<4x2x8xbf16>, %p: index) {
  %c = arith.constant 1 : index
  // expected-error @+1 {{'et.kv_append' op must be nested in an 'et.task' body}}
  et.kv_append %n, %c2, %p : memref<1x2x8xf32>, memref<4x2x8xbf16>
}
// -----

et.kernel @rope_outside(%x: memref<1x2x8xf32>, %p: memref<1xi32>) {
  %c = arith.constant 1 : index
  // expected-error @+1 {{'et.rope' op must be nested in an 'et.task' body}}
  et.rope %x, %p theta(1.0e+04) : memref<1x2x8xf32>, memref<1xi32>
}
// -----

et.kernel @argmax_outside(%x: memref<1x8xf32>, %v: memref<1x1xf32>, %i: memref<1x1xi32>) {
  %c = arith.constant 1 : index
  // expected-error @+1 {{'et.argmax' op must be nested in an 'et.task' body}}
  et.argmax %x, %v, %i cols(%c, %c) slot(%c) : memref<1x8xf32>, memref<1x1xf32>, memref<1x1xi32>
}

// -----

et.kernel @attn_kv_shapes(%q: memref<8x64xf32>, %k: memref<100x2x64xbf16>, %v: memref<100x2x32xbf16>, %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{k and v caches must have the same shape, got 'memref<100x2x64xbf16>' and 'memref<100x2x32xbf16>'}}
    et.attention_split %q, %k, %v, %o, %lse kv_head(%c) split(%c) split_len(%c) len(%c) scale(0.125) : memref<8x64xf32>, memref<100x2x64xbf16>, memref<100x2x32xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
  }
}
// -----

et.kernel @attn_head_dim(%q: memref<8x48xf32>, %k: memref<100x2x64xbf16>, %v: memref<100x2x64xbf16>, %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{needs a static head dimension that is a multiple of 32, got 'memref<8x48xf32>'}}
    et.attention_split %q, %k, %v, %o, %lse kv_head(%c) split(%c) split_len(%c) len(%c) scale(0.125) : memref<8x48xf32>, memref<100x2x64xbf16>, memref<100x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
  }
}
// -----

et.kernel @attn_head_dims_differ(%q: memref<8x64xf32>, %k: memref<100x2x64xbf16>, %v: memref<100x2x64xbf16>, %o: memref<2x8x32xf32>, %lse: memref<2x8xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{q, k and o must have the same head dimension}}
    et.attention_split %q, %k, %v, %o, %lse kv_head(%c) split(%c) split_len(%c) len(%c) scale(0.125) : memref<8x64xf32>, memref<100x2x64xbf16>, memref<100x2x64xbf16>, memref<2x8x32xf32>, memref<2x8xf32>
  }
}
// -----

et.kernel @attn_groups(%q: memref<7x64xf32>, %k: memref<100x2x64xbf16>, %v: memref<100x2x64xbf16>, %o: memref<2x7x64xf32>, %lse: memref<2x7xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{query heads (7) must be a multiple of KV heads (2)}}
    et.attention_split %q, %k, %v, %o, %lse kv_head(%c) split(%c) split_len(%c) len(%c) scale(0.125) : memref<7x64xf32>, memref<100x2x64xbf16>, memref<100x2x64xbf16>, memref<2x7x64xf32>, memref<2x7xf32>
  }
}
// -----

et.kernel @attn_outputs(%q: memref<8x64xf32>, %k: memref<100x2x64xbf16>, %v: memref<100x2x64xbf16>, %o: memref<2x8x64xf32>, %lse: memref<3x8xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{o must be splits x Hq x D and lse splits x Hq}}
    et.attention_split %q, %k, %v, %o, %lse kv_head(%c) split(%c) split_len(%c) len(%c) scale(0.125) : memref<8x64xf32>, memref<100x2x64xbf16>, memref<100x2x64xbf16>, memref<2x8x64xf32>, memref<3x8xf32>
  }
}

// -----

et.kernel @attn_append_no_stable(%q: memref<8x64xf32>, %k: memref<100x2x64xbf16>, %v: memref<100x2x64xbf16>, %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>, %kn: memref<1x64xf32>, %vn: memref<1x64xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{append needs stable: the appended rows start at it}}
    et.attention_split %q, %k, %v, %o, %lse kv_head(%c) split(%c) split_len(%c) len(%c) append(%kn, %vn) scale(0.125) : memref<8x64xf32>, memref<100x2x64xbf16>, memref<100x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>, memref<1x64xf32>, memref<1x64xf32>
  }
}

// -----

et.kernel @attn_append_shapes(%q: memref<8x64xf32>, %k: memref<100x2x64xbf16>, %v: memref<100x2x64xbf16>, %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>, %kn: memref<1x64xf32>, %vn: memref<2x64xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{appended keys and values must have the same shape, got 'memref<1x64xf32>' and 'memref<2x64xf32>'}}
    et.attention_split %q, %k, %v, %o, %lse kv_head(%c) split(%c) split_len(%c) len(%c) stable(%c) append(%kn, %vn) scale(0.125) : memref<8x64xf32>, memref<100x2x64xbf16>, memref<100x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>, memref<1x64xf32>, memref<2x64xf32>
  }
}

// -----

et.kernel @attn_append_dim(%q: memref<8x64xf32>, %k: memref<100x2x64xbf16>, %v: memref<100x2x64xbf16>, %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>, %kn: memref<1x32xbf16>, %vn: memref<1x32xbf16>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{appended rows must be N x D with q's head dimension, got 'memref<1x32xbf16>' and 'memref<8x64xf32>'}}
    et.attention_split %q, %k, %v, %o, %lse kv_head(%c) split(%c) split_len(%c) len(%c) stable(%c) append(%kn, %vn) scale(0.125) : memref<8x64xf32>, memref<100x2x64xbf16>, memref<100x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>, memref<1x32xbf16>, memref<1x32xbf16>
  }
}
// -----

et.kernel @attn_scale(%q: memref<8x64xf32>, %k: memref<100x2x64xbf16>, %v: memref<100x2x64xbf16>, %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{scale must be positive, got -1}}
    et.attention_split %q, %k, %v, %o, %lse kv_head(%c) split(%c) split_len(%c) len(%c) scale(-1.0) : memref<8x64xf32>, memref<100x2x64xbf16>, memref<100x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
  }
}
// -----

et.kernel @attn_outside(%q: memref<8x64xf32>, %k: memref<100x2x64xbf16>, %v: memref<100x2x64xbf16>, %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>) {
  %c = arith.constant 1 : index
  // expected-error @+1 {{'et.attention_split' op must be nested in an 'et.task' body}}
  et.attention_split %q, %k, %v, %o, %lse kv_head(%c) split(%c) split_len(%c) len(%c) scale(0.125) : memref<8x64xf32>, memref<100x2x64xbf16>, memref<100x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
}

// -----

et.kernel @merge_shapes(%o: memref<2x8x64xf32>, %lse: memref<2x8xf32>, %out: memref<8x32xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{o (splits x H x D), lse (splits x H) and out (H x D) disagree}}
    et.attention_merge %o, %lse, %out : memref<2x8x64xf32>, memref<2x8xf32>, memref<8x32xf32>
  }
}

// -----

et.kernel @merge_outside(%o: memref<2x8x64xf32>, %lse: memref<2x8xf32>, %out: memref<8x64xf32>) {
  // expected-error @+1 {{'et.attention_merge' op must be nested in an 'et.task' body}}
  et.attention_merge %o, %lse, %out : memref<2x8x64xf32>, memref<2x8xf32>, memref<8x64xf32>
}

// -----

et.kernel @attn_subsplits(%q: memref<8x64xf32>, %k: memref<100x2x64xbf16>, %o: memref<2x8x64xf32>, %lse: memref<2x8xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{attribute 'subsplits' failed to satisfy constraint}}
    et.attention_split %q, %k, %k, %o, %lse kv_head(%c) split(%c) split_len(%c) len(%c) scale(0.125) {subsplits = 0 : i64} : memref<8x64xf32>, memref<100x2x64xbf16>, memref<100x2x64xbf16>, memref<2x8x64xf32>, memref<2x8xf32>
  }
}

// -----

et.kernel @matmul_outside_task(%x: memref<?x64xbf16>, %w: memref<32x64xbf16>, %y: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{must be nested in an 'et.task' body}}
  et.matmul %x, %w, %y at(%c0, %c0) tile [16, 16, 16] : memref<?x64xbf16>, memref<32x64xbf16>, memref<?x32xf32>
}

// -----

et.kernel @matmul_k_mismatch(%x: memref<?x64xbf16>, %w: memref<32x32xbf16>, %y: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{x has K = 64 but w has K = 32}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [16, 16, 16] : memref<?x64xbf16>, memref<32x32xbf16>, memref<?x32xf32>
  }
}

// -----

et.kernel @matmul_m_mismatch(%x: memref<8x64xbf16>, %w: memref<32x64xbf16>, %y: memref<9x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{x has 8 tokens but y has 9}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [16, 16, 16] : memref<8x64xbf16>, memref<32x64xbf16>, memref<9x32xf32>
  }
}

// -----

et.kernel @matmul_n_mismatch(%x: memref<?x64xbf16>, %w: memref<32x64xbf16>, %y: memref<?x48xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{w has N = 32 rows but y has 48 columns}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [16, 16, 16] : memref<?x64xbf16>, memref<32x64xbf16>, memref<?x48xf32>
  }
}

// -----

et.kernel @matmul_k_alignment(%x: memref<?x12xbf16>, %w: memref<32x12xbf16>, %y: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{needs a static K that is a multiple of 8 (16-byte aligned rows), got 12}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [16, 16, 16] : memref<?x12xbf16>, memref<32x12xbf16>, memref<?x32xf32>
  }
}

// -----

et.kernel @matmul_k_dynamic(%x: memref<?x?xbf16>, %w: memref<32x?xbf16>, %y: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{needs a static K that is a multiple of 8 (16-byte aligned rows), got ?}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [16, 16, 16] : memref<?x?xbf16>, memref<32x?xbf16>, memref<?x32xf32>
  }
}

// -----

et.kernel @matmul_tile_rank(%x: memref<?x64xbf16>, %w: memref<32x64xbf16>, %y: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{tile must be [BM, BN, BK], got 2 sizes}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [16, 16] : memref<?x64xbf16>, memref<32x64xbf16>, memref<?x32xf32>
  }
}

// -----

et.kernel @matmul_tile_mn(%x: memref<?x64xbf16>, %w: memref<32x64xbf16>, %y: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{tile BM and BN must be multiples of 16 in [16, 256], got 24 x 16}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [24, 16, 16] : memref<?x64xbf16>, memref<32x64xbf16>, memref<?x32xf32>
  }
}

// -----

et.kernel @matmul_tile_n_large(%x: memref<?x64xbf16>, %w: memref<32x64xbf16>, %y: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{tile BM and BN must be multiples of 16 in [16, 256], got 16 x 512}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [16, 512, 16] : memref<?x64xbf16>, memref<32x64xbf16>, memref<?x32xf32>
  }
}

// -----

et.kernel @matmul_tile_k(%x: memref<?x64xbf16>, %w: memref<32x64xbf16>, %y: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{tile BK must be a multiple of 16 in [16, 128], got 8}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [16, 16, 8] : memref<?x64xbf16>, memref<32x64xbf16>, memref<?x32xf32>
  }
}

// -----

et.kernel @matmul_stages(%x: memref<?x64xbf16>, %w: memref<32x64xbf16>, %y: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{stages must be in [1, 8], got 9}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [16, 16, 16] stages 9 : memref<?x64xbf16>, memref<32x64xbf16>, memref<?x32xf32>
  }
}

// -----

et.kernel @matmul_accumulate_bf16(%x: memref<?x64xbf16>, %w: memref<32x64xbf16>, %y: memref<?x32xbf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{with accumulate needs an f32 y, got 'memref<?x32xbf16>'}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [16, 16, 16] accumulate : memref<?x64xbf16>, memref<32x64xbf16>, memref<?x32xbf16>
  }
}

// -----

et.kernel @matmul_k_range_size(%x: memref<?x64xbf16>, %w: memref<32x64xbf16>, %y: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{k range takes two bounds (k0, k1), got 3}}
    et.matmul %x, %w, %y at(%c0, %c0) k(%c0, %c0, %c0) tile [16, 16, 16] : memref<?x64xbf16>, memref<32x64xbf16>, memref<?x32xf32>
  }
}

// -----

et.kernel @matmul_k_range_alignment(%x: memref<?x64xbf16>, %w: memref<32x64xbf16>, %y: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c12 = arith.constant 12 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{k range bounds must be non-negative multiples of 8, got 12}}
    et.matmul %x, %w, %y at(%c0, %c0) k(%c0, %c12) tile [16, 16, 16] : memref<?x64xbf16>, memref<32x64xbf16>, memref<?x32xf32>
  }
}

// -----

et.kernel @matmul_registers_bm(%x: memref<?x64xbf16>, %w: memref<32x64xbf16>, %y: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{registers tiles take BM up to 64, got 128}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [128, 16, 32] registers : memref<?x64xbf16>, memref<32x64xbf16>, memref<?x32xf32>
  }
}

// -----

et.kernel @matmul_registers_bk(%x: memref<?x64xbf16>, %w: memref<32x64xbf16>, %y: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{registers tiles take BK 32 (a warp's 16-byte loads cover 32 columns), got 64}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [16, 16, 64] registers : memref<?x64xbf16>, memref<32x64xbf16>, memref<?x32xf32>
  }
}

// -----

et.kernel @matmul_registers_k(%x: memref<?x48xbf16>, %w: memref<32x48xbf16>, %y: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{registers tiles need K a multiple of 32, got 48}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [16, 16, 32] registers : memref<?x48xbf16>, memref<32x48xbf16>, memref<?x32xf32>
  }
}

// -----

et.kernel @matmul_registers_k_range(%x: memref<?x64xbf16>, %w: memref<32x64xbf16>, %y: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c32 = arith.constant 32 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{registers tiles take the whole K of one weight (no k range, not gated)}}
    et.matmul %x, %w, %y at(%c0, %c0) k(%c0, %c32) tile [16, 16, 32] registers : memref<?x64xbf16>, memref<32x64xbf16>, memref<?x32xf32>
  }
}

// -----

et.kernel @prefill_outside_task(%q: memref<?x8x64xbf16>, %k: memref<64x2x64xbf16>, %v: memref<64x2x64xbf16>, %o: memref<?x8x64xbf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{must be nested in an 'et.task' body}}
  et.attention_prefill %q, %k, %v, %o kv_head(%c0) tokens(%c0) pos0(%c0) block(16) scale(0.125) : memref<?x8x64xbf16>, memref<64x2x64xbf16>, memref<64x2x64xbf16>, memref<?x8x64xbf16>
}

// -----

et.kernel @prefill_kv_shapes(%q: memref<?x8x64xbf16>, %k: memref<64x2x64xbf16>, %v: memref<32x2x64xbf16>, %o: memref<?x8x64xbf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{k and v caches must have the same shape, got 'memref<64x2x64xbf16>' and 'memref<32x2x64xbf16>'}}
    et.attention_prefill %q, %k, %v, %o kv_head(%c0) tokens(%c0) pos0(%c0) block(16) scale(0.125) : memref<?x8x64xbf16>, memref<64x2x64xbf16>, memref<32x2x64xbf16>, memref<?x8x64xbf16>
  }
}

// -----

et.kernel @prefill_dim(%q: memref<?x8x40xbf16>, %k: memref<64x2x40xbf16>, %v: memref<64x2x40xbf16>, %o: memref<?x8x40xbf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{needs a static head dimension that is a multiple of 16, got 'memref<?x8x40xbf16>'}}
    et.attention_prefill %q, %k, %v, %o kv_head(%c0) tokens(%c0) pos0(%c0) block(16) scale(0.125) : memref<?x8x40xbf16>, memref<64x2x40xbf16>, memref<64x2x40xbf16>, memref<?x8x40xbf16>
  }
}

// -----

et.kernel @prefill_dims_differ(%q: memref<?x8x64xbf16>, %k: memref<64x2x32xbf16>, %v: memref<64x2x32xbf16>, %o: memref<?x8x64xbf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{q, k and o must have the same head dimension}}
    et.attention_prefill %q, %k, %v, %o kv_head(%c0) tokens(%c0) pos0(%c0) block(16) scale(0.125) : memref<?x8x64xbf16>, memref<64x2x32xbf16>, memref<64x2x32xbf16>, memref<?x8x64xbf16>
  }
}

// -----

et.kernel @prefill_o_shape(%q: memref<?x8x64xbf16>, %k: memref<64x2x64xbf16>, %v: memref<64x2x64xbf16>, %o: memref<?x4x64xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{o must have q's shape (T x Hq x D)}}
    et.attention_prefill %q, %k, %v, %o kv_head(%c0) tokens(%c0) pos0(%c0) block(16) scale(0.125) : memref<?x8x64xbf16>, memref<64x2x64xbf16>, memref<64x2x64xbf16>, memref<?x4x64xf32>
  }
}

// -----

et.kernel @prefill_heads(%q: memref<?x6x64xbf16>, %k: memref<64x4x64xbf16>, %v: memref<64x4x64xbf16>, %o: memref<?x6x64xbf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{query heads (6) must be a static multiple of KV heads (4)}}
    et.attention_prefill %q, %k, %v, %o kv_head(%c0) tokens(%c0) pos0(%c0) block(16) scale(0.125) : memref<?x6x64xbf16>, memref<64x4x64xbf16>, memref<64x4x64xbf16>, memref<?x6x64xbf16>
  }
}

// -----

et.kernel @prefill_scale(%q: memref<?x8x64xbf16>, %k: memref<64x2x64xbf16>, %v: memref<64x2x64xbf16>, %o: memref<?x8x64xbf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{scale must be positive, got 0.000000e+00}}
    et.attention_prefill %q, %k, %v, %o kv_head(%c0) tokens(%c0) pos0(%c0) block(16) scale(0.0) : memref<?x8x64xbf16>, memref<64x2x64xbf16>, memref<64x2x64xbf16>, memref<?x8x64xbf16>
  }
}

// -----

et.kernel @prefill_block(%q: memref<?x8x64xbf16>, %k: memref<64x2x64xbf16>, %v: memref<64x2x64xbf16>, %o: memref<?x8x64xbf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{attribute 'block' failed to satisfy constraint: 64-bit signless integer attribute whose minimum value is 1}}
    et.attention_prefill %q, %k, %v, %o kv_head(%c0) tokens(%c0) pos0(%c0) block(0) scale(0.125) : memref<?x8x64xbf16>, memref<64x2x64xbf16>, memref<64x2x64xbf16>, memref<?x8x64xbf16>
  }
}

// -----

et.kernel @matmul_gated_shape(%x: memref<?x64xbf16>, %w: memref<32x64xbf16>, %u: memref<16x64xbf16>, %y: memref<?x32xbf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{gated up weight must have the shape of w, got 'memref<16x64xbf16>' and 'memref<32x64xbf16>'}}
    et.matmul %x, %w, %y at(%c0, %c0) gated(%u : memref<16x64xbf16>) tile [64, 64, 64] : memref<?x64xbf16>, memref<32x64xbf16>, memref<?x32xbf16>
  }
}

// -----

et.kernel @matmul_gated_accumulate(%x: memref<?x64xbf16>, %w: memref<32x64xbf16>, %u: memref<32x64xbf16>, %y: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{gated tiles cannot accumulate (the activation applies to the whole sum)}}
    et.matmul %x, %w, %y at(%c0, %c0) gated(%u : memref<32x64xbf16>) tile [64, 64, 64] accumulate : memref<?x64xbf16>, memref<32x64xbf16>, memref<?x32xf32>
  }
}

// -----

// Test: a kernel on zero devices.
// expected-error @+1 {{'et.kernel' op attribute 'devices' failed to satisfy constraint: 64-bit signless integer attribute whose minimum value is 1}}
et.kernel @no_devices() attributes {devices = 0} {
  %c0 = arith.constant 0 : index
}

// -----

// Test: more devices than a kernel supports.
// expected-error @+1 {{'et.kernel' op runs on 4294967296 devices, more than the 64 a kernel supports}}
et.kernel @too_many_devices() attributes {devices = 4294967296} {
  %c0 = arith.constant 0 : index
}

// -----

// Test: a symmetric argument that is not a memref.
// expected-error @+1 {{'et.kernel' op argument #0: only a memref can be 'et.symmetric' (allocated on every device), got 'index'}}
et.kernel @symmetric_index(%n: index {et.symmetric}) attributes {devices = 2} {
  %c0 = arith.constant 0 : index
}

// -----

// Test: et.symmetric with a value.
// expected-error @+1 {{'et.kernel' op argument #0: 'et.symmetric' must be a unit attribute}}
et.kernel @symmetric_value(%x: memref<4xf32> {et.symmetric = 1}) attributes {devices = 2} {
  %c0 = arith.constant 0 : index
}

// -----

// Test: et.peer of an argument that is not symmetric.
et.kernel @peer_not_symmetric(%x: memref<4xf32>) attributes {devices = 2} {
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{'et.peer' op buffer must be an argument of the kernel marked 'et.symmetric' (allocated on every device)}}
  %p = et.peer %x[%c1] : memref<4xf32>
}

// -----

// Test: et.peer of a buffer that is not a kernel argument.
et.kernel @peer_of_alloca() attributes {devices = 2} {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    %a = memref.alloca() : memref<4xf32>
    // expected-error @+1 {{'et.peer' op buffer must be an argument of the kernel marked 'et.symmetric'}}
    %p = et.peer %a[%c1] : memref<4xf32>
  }
}

// -----

// Test: et.peer outside a kernel.
func.func @peer_outside(%x: memref<4xf32>, %k: index) {
  // expected-error @+1 {{'et.peer' op must be nested in an 'et.kernel'}}
  %p = et.peer %x[%k] : memref<4xf32>
  return
}

// -----

// Test: et.device_id outside a kernel.
func.func @device_id_outside() -> index {
  // expected-error @+1 {{'et.device_id' op must be nested in an 'et.kernel'}}
  %d = et.device_id
  return %d : index
}

// -----

// Test: a peer offset computed from the device id (each device would not
// receive one signal per tile).
et.kernel @peer_from_device_id() attributes {devices = 2} {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %e = et.event.create() : !et.event<1>
  // expected-note @+1 {{device id used here}}
  %d = et.device_id
  et.task @t tiles(%i) in (%c1) {
    %k = arith.subi %c2, %d : index
    // expected-error @+1 {{'et.event.signal' op peer offset depends on 'et.device_id'; it must be the same on every device, so that each tile signals each device once}}
    et.event.signal %e[%i] peer(%k) : !et.event<1>
  }
  et.task @u tiles(%i) in (%c1) {
    et.event.wait %e[%i] : !et.event<1>
  }
}

// -----

// Test: et.allreduce of a buffer that is not symmetric.
et.kernel @allreduce_not_symmetric(%part: memref<4x64xf32>, %h: memref<?x64xf32>, %rows: index) attributes {devices = 2} {
  %o = et.event.create() : !et.event<2>
  %s = et.event.create() : !et.event<2>
  // expected-error @+1 {{'et.allreduce' op partial must be an argument of the kernel marked 'et.symmetric' (every device's copy is read)}}
  et.allreduce %part into %h rows(%rows) after %o signal %s block(16) : memref<4x64xf32>, memref<?x64xf32>, !et.event<2>
}

// -----

// Test: et.allreduce of bf16 partial sums.
et.kernel @allreduce_bf16(%part: memref<4x64xbf16> {et.symmetric}, %h: memref<?x64xf32>, %rows: index) attributes {devices = 2} {
  %o = et.event.create() : !et.event<2>
  %s = et.event.create() : !et.event<2>
  // expected-error @+1 {{'et.allreduce' op partial must be a 2-d memref of f32, got 'memref<4x64xbf16>'}}
  et.allreduce %part into %h rows(%rows) after %o signal %s block(16) : memref<4x64xbf16>, memref<?x64xf32>, !et.event<2>
}

// -----

// Test: et.allreduce into a buffer of another width.
et.kernel @allreduce_columns(%part: memref<4x64xf32> {et.symmetric}, %h: memref<?x32xf32>, %rows: index) attributes {devices = 2} {
  %o = et.event.create() : !et.event<2>
  %s = et.event.create() : !et.event<2>
  // expected-error @+1 {{'et.allreduce' op partial and into need the same static number of columns, got 'memref<4x64xf32>' and 'memref<?x32xf32>'}}
  et.allreduce %part into %h rows(%rows) after %o signal %s block(16) : memref<4x64xf32>, memref<?x32xf32>, !et.event<2>
}

// -----

// Test: et.allreduce with a block that does not divide the columns.
et.kernel @allreduce_block(%part: memref<4x64xf32> {et.symmetric}, %h: memref<?x64xf32>, %rows: index) attributes {devices = 2} {
  %o = et.event.create() : !et.event<2>
  %s = et.event.create() : !et.event<2>
  // expected-error @+1 {{'et.allreduce' op block 24 must divide the 64 columns and be a multiple of 4}}
  et.allreduce %part into %h rows(%rows) after %o signal %s block(24) : memref<4x64xf32>, memref<?x64xf32>, !et.event<2>
}

// -----

// Test: et.allreduce with a block of 0.
et.kernel @allreduce_block_zero(%part: memref<4x64xf32> {et.symmetric}, %h: memref<?x64xf32>, %rows: index) attributes {devices = 2} {
  %o = et.event.create() : !et.event<2>
  %s = et.event.create() : !et.event<2>
  // expected-error @+1 {{'et.allreduce' op attribute 'block' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  et.allreduce %part into %h rows(%rows) after %o signal %s block(0) : memref<4x64xf32>, memref<?x64xf32>, !et.event<2>
}

// -----

// Test: et.allreduce that signals the event it waits on.
et.kernel @allreduce_same_event(%part: memref<4x64xf32> {et.symmetric}, %h: memref<?x64xf32>, %rows: index) attributes {devices = 2} {
  %o = et.event.create() : !et.event<2>
  // expected-error @+1 {{'et.allreduce' op after and done must be different event tensors}}
  et.allreduce %part into %h rows(%rows) after %o signal %o block(16) : memref<4x64xf32>, memref<?x64xf32>, !et.event<2>
}

// -----

// Test: et.allreduce on an event the kernel receives as an argument.
et.kernel @allreduce_event_argument(%part: memref<4x64xf32> {et.symmetric}, %h: memref<?x64xf32>, %rows: index, %o: !et.event<2>) attributes {devices = 2} {
  %s = et.event.create() : !et.event<2>
  // expected-error @+1 {{'et.allreduce' op after and done must be event tensors created in this kernel}}
  et.allreduce %part into %h rows(%rows) after %o signal %s block(16) : memref<4x64xf32>, memref<?x64xf32>, !et.event<2>
}

// -----

// Test: et.allreduce whose events differ in shape.
et.kernel @allreduce_shapes(%part: memref<4x64xf32> {et.symmetric}, %h: memref<?x64xf32>, %rows: index) attributes {devices = 2} {
  %o = et.event.create() : !et.event<2>
  %s = et.event.create() : !et.event<3>
  // expected-error @+1 {{'et.allreduce' op failed to verify that all of {after, done} have same type}}
  "et.allreduce"(%part, %h, %rows, %o, %s) <{block = 16 : i64}> : (memref<4x64xf32>, memref<?x64xf32>, index, !et.event<2>, !et.event<3>) -> ()
}

// -----

// Test: et.staged_rows outside a task's top level.
et.kernel @staged_outside_task(%w: memref<8x64xbf16>) {
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{'et.staged_rows' op must be at the top level of an et.task body}}
  %v, %n = et.staged_rows %w rows(%c1, %c1) offset 0 : memref<8x64xbf16> -> memref<1x64xbf16, #gpu.address_space<workgroup>>
}

// -----

// Test: et.staged_rows of a matrix whose rows are not contiguous.
et.kernel @staged_strided(%w: memref<8x64xbf16, strided<[128, 1]>>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{'et.staged_rows' op w must hold its rows contiguously (strides [K, 1]), got 'memref<8x64xbf16, strided<[128, 1]>>'}}
    %v, %n = et.staged_rows %w rows(%i, %c1) offset 0 : memref<8x64xbf16, strided<[128, 1]>> -> memref<1x64xbf16, #gpu.address_space<workgroup>>
  }
}

// -----

// Test: et.staged_rows with a dynamic K.
et.kernel @staged_dynamic_k(%w: memref<8x?xbf16>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{'et.staged_rows' op needs a static K whose rows are a multiple of 16 bytes (bulk copy granule), got 'memref<8x?xbf16>'}}
    %v, %n = et.staged_rows %w rows(%i, %c1) offset 0 : memref<8x?xbf16> -> memref<1x64xbf16, #gpu.address_space<workgroup>>
  }
}

// -----

// Test: et.staged_rows whose view is not in workgroup memory.
et.kernel @staged_global_view(%w: memref<8x64xbf16>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{'et.staged_rows' op view must be a statically shaped, identity-layout memref in workgroup memory, got 'memref<1x64xbf16>'}}
    %v, %n = et.staged_rows %w rows(%i, %c1) offset 0 : memref<8x64xbf16> -> memref<1x64xbf16>
  }
}

// -----

// Test: et.staged_rows whose view has another K.
et.kernel @staged_view_k(%w: memref<8x64xbf16>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{'et.staged_rows' op view must be R x K with R >= 1 and the K of w (64), got 'memref<1x32xbf16, #gpu.address_space<workgroup>>'}}
    %v, %n = et.staged_rows %w rows(%i, %c1) offset 0 : memref<8x64xbf16> -> memref<1x32xbf16, #gpu.address_space<workgroup>>
  }
}

// -----

// Test: et.staged_rows at an offset that is not a multiple of 16 bytes.
et.kernel @staged_offset(%w: memref<8x64xbf16>) {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{'et.staged_rows' op offset must be a non-negative multiple of 16 bytes, got 8}}
    %v, %n = et.staged_rows %w rows(%i, %c1) offset 8 : memref<8x64xbf16> -> memref<1x64xbf16, #gpu.address_space<workgroup>>
  }
}

// -----

// Test: a kernel with two et.repeat.
et.kernel @two_repeats(%n: index, %stop: memref<1xi32>) {
  %done = et.event.create() : !et.event<>
  // expected-note @+1 {{first one here}}
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<>
  // expected-error @+1 {{'et.repeat' op is the kernel's second 'et.repeat' (a kernel has one)}}
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<>
}


// -----

// Test: a stop flag of two words.
et.kernel @repeat_wide_stop(%n: index, %stop: memref<2xi32>) {
  %done = et.event.create() : !et.event<>
  // expected-error @+1 {{'et.repeat' op stop flag must be a memref<1xi32>, got 'memref<2xi32>'}}
  et.repeat %n until %stop after %done : memref<2xi32>, !et.event<>
}

// -----

// Test: a stop flag that is not i32.
et.kernel @repeat_i64_stop(%n: index, %stop: memref<1xi64>) {
  %done = et.event.create() : !et.event<>
  // expected-error @+1 {{'et.repeat' op operand #1 must be 1D memref of 32-bit signless integer values}}
  et.repeat %n until %stop after %done : memref<1xi64>, !et.event<>
}

// -----

// Test: the end of a step that is not a rank-0 event.
et.kernel @repeat_after_rank1(%n: index, %stop: memref<1xi32>) {
  %done = et.event.create() : !et.event<4>
  // expected-error @+1 {{'et.repeat' op 'after' must be a rank-0 event (the end of a step), got '!et.event<4>'}}
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<4>
}

// -----

// Test: et.repeat outside a kernel.
func.func @repeat_outside(%n: index, %stop: memref<1xi32>, %done: !et.event<>) {
  // expected-error @+1 {{'et.repeat' op expects parent op 'et.kernel'}}
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<>
  return
}

// -----

// Test: et.step in a kernel without steps.
et.kernel @step_without_repeat() {
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{'et.step' op in a kernel without 'et.repeat' (it has one step)}}
    %s = et.step
  }
}

// -----

// Test: et.step outside a task body.
et.kernel @step_at_kernel_level(%n: index, %stop: memref<1xi32>) {
  %done = et.event.create() : !et.event<>
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<>
  // expected-error @+1 {{'et.step' op must be nested in an 'et.task' body}}
  %s = et.step
}

// -----

// Test: a task whose tile count is an extent loaded after an event that the
// task itself signals (the event's count needs the load, the load waits for
// the count).
et.kernel @extent_after_own_signal(%n: memref<1xi32>) {
  %ready = et.event.create() : !et.event<>
  %c0 = arith.constant 0 : index
  // expected-error @+1 {{'et.extent.load' op waits for an event whose count (the tiles of task @a that signal it) depends on this load's value: a cycle that no worker can resolve}}
  %m = et.extent.load %n[%c0] : memref<1xi32> after %ready[] : !et.event<>
  et.task @a tiles(%i) in (%m) {
    et.event.signal %ready[] : !et.event<>
  }
}

// -----

// Test: the same cycle through two loads (each one's event counted by tiles
// whose number is the other load's value, computed through arith).
et.kernel @extent_cycle_of_two(%n: memref<2xi32>) {
  %ea = et.event.create() : !et.event<>
  %eb = et.event.create() : !et.event<>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // expected-error @+1 {{'et.extent.load' op waits for an event whose count (the tiles of task @b that signal it) depends on this load's value: a cycle that no worker can resolve}}
  %ma = et.extent.load %n[%c0] : memref<2xi32> after %ea[] : !et.event<>
  %mb = et.extent.load %n[%c1] : memref<2xi32> after %eb[] : !et.event<>
  %mb2 = arith.addi %mb, %c1 : index
  et.task @a tiles(%i) in (%ma) {
    et.event.signal %eb[] : !et.event<>
  }
  et.task @b tiles(%i) in (%mb2) {
    et.event.signal %ea[] : !et.event<>
  }
}

// -----

// Test: more tiles than a task can have (2^62 + 1 times 4 would overflow
// the product; the schedules' tickets are 32-bit).
et.kernel @too_many_tiles() {
  %a = arith.constant 4611686018427387905 : index
  %b = arith.constant 4 : index
  // expected-error @+1 {{'et.task' op has more than 2147483647 tiles (2^31 - 1, the most a task can have): extent #0 (4611686018427387905) times the extents before it (1)}}
  et.task @t tiles(%i, %j) in (%a, %b) {
  }
}

// -----

// Test: the same through the declared bound of a runtime extent.
et.kernel @too_many_tiles_bounded(%n: index) {
  %b = arith.constant 65536 : index
  // expected-error @+1 {{'et.task' op has more than 2147483647 tiles (2^31 - 1, the most a task can have): extent #1 (65536) times the extents before it (65536)}}
  et.task @t tiles(%i, %j) in (%n, %b) attributes {max_extents = array<i64: 65536, 65536>} {
  }
}

// -----

// Test: extents that fit alone but not together (the product is checked
// as it grows, never overflowing).
et.kernel @too_many_tiles_product() {
  %a = arith.constant 65536 : index
  %b = arith.constant 32768 : index
  // expected-error @+1 {{'et.task' op has more than 2147483647 tiles (2^31 - 1, the most a task can have): extent #1 (32768) times the extents before it (65536)}}
  et.task @t tiles(%i, %j) in (%a, %b) {
  }
}

// -----

// Test: an event tensor of more elements than it can have counter words
// for (dimensions near 2^63: the product is checked as it grows).
et.kernel @huge_event() {
  // expected-error @+1 {{event tensor of more than 2147483647 elements (2^31 - 1, one counter word each): dimension 1 (9223372036854775000) times the dimensions before it (2)}}
  %e = et.event.create() : !et.event<2x9223372036854775000>
}

// -----

// Test: the same with the dimensions each small enough alone.
et.kernel @huge_event_product(%n: index) {
  // expected-error @+1 {{event tensor of more than 2147483647 elements (2^31 - 1, one counter word each): dimension 2 (65536) times the dimensions before it (65536)}}
  %e = et.event.create(%n) : !et.event<?x65536x65536>
}

// -----

// Test: a load downstream of another load's cycle is not the one blamed
// (%first's event is counted by tiles that %second sizes; %second's own
// event is counted by tiles that %second sizes).
et.kernel @extent_cycle_downstream(%n: memref<2xi32>) {
  %ea = et.event.create() : !et.event<>
  %eb = et.event.create() : !et.event<>
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %first = et.extent.load %n[%c0] : memref<2xi32> after %ea[] : !et.event<>
  // expected-error @+1 {{'et.extent.load' op waits for an event whose count (the tiles of task @b that signal it) depends on this load's value: a cycle that no worker can resolve}}
  %second = et.extent.load %n[%c1] : memref<2xi32> after %eb[] : !et.event<>
  et.task @a tiles(%i) in (%second) {
    et.event.signal %ea[] : !et.event<>
  }
  et.task @b tiles(%i) in (%second) {
    et.event.signal %eb[] : !et.event<>
  }
  et.task @c tiles(%i) in (%first) {
  }
}

et.kernel @router_k(%s: memref<1x8xf32>, %i: memref<1x2xi32>, %w: memref<1x3xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{ids and weights need the same static number of experts per token (K >= 1)}}
    et.router_topk %s, %i, %w : memref<1x8xf32>, memref<1x2xi32>, memref<1x3xf32>
  }
}
// -----

et.kernel @router_k_dynamic(%s: memref<1x8xf32>, %i: memref<1x?xi32>, %w: memref<1x?xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{ids and weights need the same static number of experts per token (K >= 1)}}
    et.router_topk %s, %i, %w : memref<1x8xf32>, memref<1x?xi32>, memref<1x?xf32>
  }
}
// -----

et.kernel @router_rows(%s: memref<2x8xf32>, %i: memref<1x2xi32>, %w: memref<1x2xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{logits, ids and weights must have one row per token}}
    et.router_topk %s, %i, %w : memref<2x8xf32>, memref<1x2xi32>, memref<1x2xf32>
  }
}
// -----

et.kernel @router_more_than_experts(%s: memref<1x4xf32>, %i: memref<1x8xi32>, %w: memref<1x8xf32>) {
  %c = arith.constant 1 : index
  et.task @t tiles(%tt) in (%c) {
    // expected-error @+1 {{chooses 8 experts of 4}}
    et.router_topk %s, %i, %w : memref<1x4xf32>, memref<1x8xi32>, memref<1x8xf32>
  }
}
// -----

et.kernel @router_outside_task(%s: memref<1x8xf32>, %i: memref<1x2xi32>, %w: memref<1x2xf32>) {
  // expected-error @+1 {{must be nested in an 'et.task' body}}
  et.router_topk %s, %i, %w : memref<1x8xf32>, memref<1x2xi32>, memref<1x2xf32>
}

// -----

// Test: a memref argument whose static sizes hold more than 2^63 - 1 bytes
// (its strides overflowed in the lowerings, an abort in upstream code).
// expected-error @+1 {{'et.kernel' op argument #1: 'memref<?x4611686018427387904xbf16>' holds more than 2^63 - 1 bytes}}
et.kernel @huge_memref(%a: memref<4xf32>, %b: memref<?x4611686018427387904xbf16>) {
  %c0 = arith.constant 0 : index
}

// -----

// Test: the same through the product of several sizes.
// expected-error @+1 {{'et.kernel' op argument #0: 'memref<4611686018427387904x512xbf16>' holds more than 2^63 - 1 bytes}}
et.kernel @huge_product(%a: memref<4611686018427387904x512xbf16>) {
  %c0 = arith.constant 0 : index
}

// -----

// Test: the same for a memref made inside a task.
et.kernel @huge_alloca(%x: memref<4xbf16>) {
  %c4 = arith.constant 4 : index
  et.task @a tiles(%i) in (%c4) {
    // expected-error @+1 {{'memref.alloca' op result 'memref<4611686018427387904x512xbf16>' holds more than 2^63 - 1 bytes}}
    %m = memref.alloca() : memref<4611686018427387904x512xbf16>
  }
}

// -----

et.kernel @matmul_atomic_without_accumulate(%x: memref<?x64xbf16>, %w: memref<32x64xbf16>, %y: memref<?x32xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    // expected-error @+1 {{atomic needs accumulate (it makes the adds into y atomic)}}
    et.matmul %x, %w, %y at(%c0, %c0) tile [16, 16, 16] atomic : memref<?x64xbf16>, memref<32x64xbf16>, memref<?x32xf32>
  }
}
