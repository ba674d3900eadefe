// RUN: et-opt %s --verify-roundtrip | FileCheck %s
// RUN: et-opt %s | et-opt | FileCheck %s
// RUN: et-opt %s --mlir-print-op-generic | et-opt | FileCheck %s

// Event tensors of every rank, static and dynamic.
// CHECK-LABEL: et.kernel @events
// CHECK-SAME: (%[[ROWS:.*]]: index, %[[SPLITS:.*]]: index)
et.kernel @events(%rows: index, %splits: index) {
  // CHECK: et.event.create() : !et.event<>
  %scalar = et.event.create() : !et.event<>
  // CHECK: et.event.create() : !et.event<16>
  %tiles = et.event.create() : !et.event<16>
  // CHECK: et.event.create() {expected = 4 : i64} : !et.event<4x8>
  %grid = et.event.create() {expected = 4} : !et.event<4x8>
  // CHECK: et.event.create(%[[ROWS]]) : !et.event<?x4>
  %a = et.event.create(%rows) : !et.event<?x4>
  // CHECK: et.event.create(%[[ROWS]], %[[SPLITS]]) : !et.event<?x?>
  %b = et.event.create(%rows, %splits) : !et.event<?x?>
}

// 1. One-to-one: tile i of the consumer waits on element i, signalled by tile
// i of the producer.
// CHECK-LABEL: et.kernel @one_to_one
et.kernel @one_to_one(%x: memref<1024xf32>, %y: memref<1024xf32>) {
  %c8 = arith.constant 8 : index
  %ready = et.event.create() : !et.event<8>
  // CHECK: et.task @producer tiles(%[[I:.*]]) in (%{{.*}}) {
  et.task @producer tiles(%i) in (%c8) {
    // CHECK: et.event.signal %{{.*}}[%[[I]]] : !et.event<8>
    et.event.signal %ready[%i] : !et.event<8>
  }
  // CHECK: et.task @consumer tiles(%[[J:.*]]) in (%{{.*}}) {
  et.task @consumer tiles(%j) in (%c8) {
    // CHECK-NEXT: et.event.wait %{{.*}}[%[[J]]] : !et.event<8>
    et.event.wait %ready[%j] : !et.event<8>
  }
}

// 2. Many-to-one (fan-in): each output tile waits for its 4 split-K partial
// tiles; the expected count (4) follows from the signal map, which drops k.
// CHECK-LABEL: et.kernel @fan_in
et.kernel @fan_in() {
  %c16 = arith.constant 16 : index
  %c4 = arith.constant 4 : index
  %partials = et.event.create() : !et.event<16>
  // CHECK: et.task @gemv_split_k tiles(%[[N:.*]], %[[K:.*]]) in
  et.task @gemv_split_k tiles(%n, %k) in (%c16, %c4) {
    // CHECK: et.event.signal %{{.*}}[%[[N]]]
    et.event.signal %partials[%n] : !et.event<16>
  }
  et.task @reduce tiles(%n) in (%c16) {
    et.event.wait %partials[%n] : !et.event<16>
  }
}

// 3. One-to-many (broadcast): every tile of the linear layer waits on the
// single element the norm signals.
// CHECK-LABEL: et.kernel @broadcast
et.kernel @broadcast() {
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  %normed = et.event.create() : !et.event<>
  et.task @rmsnorm tiles(%t) in (%c1) {
    et.event.signal %normed[] : !et.event<>
  }
  et.task @linear tiles(%n) in (%c64) {
    // CHECK: et.event.wait %{{.*}}[] : !et.event<>
    et.event.wait %normed[] : !et.event<>
  }
}

// 4. Different tilings: 64-row producer tiles, 128-row consumer tiles. The
// consumer tile j needs producer tiles 2j and 2j+1: the producer signals
// element i floordiv 2 (count 2 per element).
// CHECK-LABEL: et.kernel @retile
et.kernel @retile() {
  %c16 = arith.constant 16 : index
  %c8 = arith.constant 8 : index
  %rows = et.event.create() : !et.event<8>
  et.task @rows64 tiles(%i) in (%c16) {
    // CHECK: %[[J:.*]] = affine.apply #{{.*}}(%{{.*}})
    // CHECK: et.event.signal %{{.*}}[%[[J]]] : !et.event<8>
    %j = affine.apply affine_map<(d0) -> (d0 floordiv 2)>(%i)
    et.event.signal %rows[%j] : !et.event<8>
  }
  et.task @rows128 tiles(%j) in (%c8) {
    et.event.wait %rows[%j] : !et.event<8>
  }
}

// 5. Shape dynamism: extents and event dims are runtime values (rows, KV
// splits); counts become expressions of them.
// CHECK-LABEL: et.kernel @dynamic
et.kernel @dynamic(%rows: index, %splits: index) {
  %c64 = arith.constant 64 : index
  %row_tiles = arith.ceildivsi %rows, %c64 : index
  %partials = et.event.create(%row_tiles) : !et.event<?>
  // CHECK: et.task @attn_split tiles(%{{.*}}, %{{.*}}) in (%{{.*}}, %{{.*}})
  et.task @attn_split tiles(%r, %s) in (%row_tiles, %splits) {
    et.event.signal %partials[%r] : !et.event<?>
  }
  et.task @merge tiles(%r) in (%row_tiles) {
    et.event.wait %partials[%r] : !et.event<?>
  }
}

// 6. Data dependence: the signalled element is an expert id read from the
// routing buffer, and the expert task's tile count is read from memory
// after the router has finished.
// CHECK-LABEL: et.kernel @moe
et.kernel @moe(%route: memref<?xindex>, %counts: memref<8xi32>, %tokens: index) {
  %c0 = arith.constant 0 : index
  %c3 = arith.constant 3 : index
  %routed = et.event.create() : !et.event<>
  %expert_in = et.event.create() : !et.event<8>
  et.task @router tiles(%t) in (%tokens) {
    // CHECK: %[[E:.*]] = memref.load
    // CHECK: et.event.signal %{{.*}}[%[[E]]] : !et.event<8>
    %e = memref.load %route[%t] : memref<?xindex>
    et.event.signal %expert_in[%e] : !et.event<8>
    et.event.signal %routed[] : !et.event<>
  }
  // CHECK: et.extent.load %{{.*}}[%{{.*}}] : memref<8xi32> after %{{.*}}[] : !et.event<>
  %n3 = et.extent.load %counts[%c3] : memref<8xi32> after %routed[] : !et.event<>
  // CHECK: et.extent.load %{{.*}}[%{{.*}}] : memref<8xi32>
  %n0 = et.extent.load %counts[%c0] : memref<8xi32>
  et.task @expert3 tiles(%t) in (%n3) {
    et.event.wait %expert_in[%c3] : !et.event<8>
  }
}

// -----

// CHECK-LABEL: et.kernel @threads
et.kernel @threads(%acc: memref<4xi64>) {
  %c4 = arith.constant 4 : index
  et.task @t tiles(%i) in (%c4) {
    // CHECK: %{{.*}} = et.thread_id
    // CHECK: %{{.*}} = et.num_threads
    %t = et.thread_id
    %n = et.num_threads
    %c0 = arith.constant 0 : index
    %first = arith.cmpi eq, %t, %c0 : index
    scf.if %first {
      %one = arith.constant 1 : i64
      %old = memref.atomic_rmw addi %one, %acc[%i] : (i64, memref<4xi64>) -> i64
    }
  }
}

// -----

// CHECK-LABEL: et.kernel @linear
et.kernel @linear(%x: memref<?x2048xbf16>, %w: memref<8192x2048xbf16>, %y: memref<?x8192xbf16>) {
  %c16 = arith.constant 16 : index
  %c512 = arith.constant 512 : index
  et.task @rows tiles(%t) in (%c512) {
    %r0 = arith.muli %t, %c16 : index
    // CHECK: et.linear %{{.*}}, %{{.*}}, %{{.*}} rows(%{{.*}}, %{{.*}}) : memref<?x2048xbf16>, memref<8192x2048xbf16>, memref<?x8192xbf16>
    et.linear %x, %w, %y rows(%r0, %c16) : memref<?x2048xbf16>, memref<8192x2048xbf16>, memref<?x8192xbf16>
    // CHECK: et.linear %{{.*}}, %{{.*}}, %{{.*}} rows(%{{.*}}, %{{.*}}) gated(%{{.*}}) : memref<?x2048xbf16>, memref<8192x2048xbf16>, memref<?x8192xbf16>, memref<8192x2048xbf16>
    et.linear %x, %w, %y rows(%r0, %c16) gated(%w) : memref<?x2048xbf16>, memref<8192x2048xbf16>, memref<?x8192xbf16>, memref<8192x2048xbf16>
  }
}

// CHECK-LABEL: et.kernel @linear_norm
et.kernel @linear_norm(%h: memref<?x2048xf32>, %g: memref<2048xbf16>, %w: memref<8192x2048xbf16>, %y: memref<?x8192xbf16>) {
  %c16 = arith.constant 16 : index
  %c512 = arith.constant 512 : index
  et.task @rows tiles(%t) in (%c512) {
    %r0 = arith.muli %t, %c16 : index
    // CHECK: et.linear %{{.*}}, %{{.*}}, %{{.*}} rows(%{{.*}}, %{{.*}}) norm(%{{.*}} : memref<2048xbf16>) eps(9.99999974E-6) : memref<?x2048xf32>, memref<8192x2048xbf16>, memref<?x8192xbf16>
    et.linear %h, %w, %y rows(%r0, %c16) norm(%g : memref<2048xbf16>) eps(1.0e-05) : memref<?x2048xf32>, memref<8192x2048xbf16>, memref<?x8192xbf16>
    // CHECK: et.linear %{{.*}}, %{{.*}}, %{{.*}} rows(%{{.*}}, %{{.*}}) gated(%{{.*}}) norm(%{{.*}} : memref<2048xbf16>) eps(9.99999974E-6) : memref<?x2048xf32>, memref<8192x2048xbf16>, memref<?x8192xbf16>, memref<8192x2048xbf16>
    et.linear %h, %w, %y rows(%r0, %c16) gated(%w) norm(%g : memref<2048xbf16>) eps(1.0e-05) : memref<?x2048xf32>, memref<8192x2048xbf16>, memref<?x8192xbf16>, memref<8192x2048xbf16>
  }
}

// CHECK-LABEL: et.kernel @matmul
et.kernel @matmul(%x: memref<?x2048xbf16>, %w: memref<8192x2048xbf16>, %y: memref<?x8192xbf16>, %h: memref<?x8192xf32>, %rows: index) {
  %c64 = arith.constant 64 : index
  %c128 = arith.constant 128 : index
  %tm = arith.ceildivsi %rows, %c128 : index
  et.task @gemm tiles(%i, %j) in (%tm, %c64) {
    %m0 = arith.muli %i, %c128 : index
    %n0 = arith.muli %j, %c128 : index
    // CHECK: et.matmul %{{.*}}, %{{.*}}, %{{.*}} at(%{{.*}}, %{{.*}}) tile [128, 128, 32] stages 4 : memref<?x2048xbf16>, memref<8192x2048xbf16>, memref<?x8192xbf16>
    et.matmul %x, %w, %y at(%m0, %n0) tile [128, 128, 32] stages 4 : memref<?x2048xbf16>, memref<8192x2048xbf16>, memref<?x8192xbf16>
    // The default of 3 stages is not printed.
    // CHECK: et.matmul %{{.*}}, %{{.*}}, %{{.*}} at(%{{.*}}, %{{.*}}) tile [64, 128, 64] accumulate : memref<?x2048xbf16>
    et.matmul %x, %w, %h at(%m0, %n0) tile [64, 128, 64] stages 3 accumulate : memref<?x2048xbf16>, memref<8192x2048xbf16>, memref<?x8192xf32>
    // A K range (split-K).
    // CHECK: et.matmul %{{.*}}, %{{.*}}, %{{.*}} at(%{{.*}}, %{{.*}}) k(%{{.*}}, %{{.*}}) tile [128, 128, 64] : memref<?x2048xbf16>
    et.matmul %x, %w, %h at(%m0, %n0) k(%c64, %c128) tile [128, 128, 64] : memref<?x2048xbf16>, memref<8192x2048xbf16>, memref<?x8192xf32>
  }
}

// CHECK-LABEL: et.kernel @attention_prefill
et.kernel @attention_prefill(%q: memref<?x32x64xbf16>, %k: memref<8192x8x64xbf16>, %v: memref<8192x8x64xbf16>, %o: memref<?x32x64xbf16>, %blocks: index, %p0: index) {
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  et.task @attn tiles(%tb, %g) in (%blocks, %c8) {
    %t0 = arith.muli %tb, %c16 : index
    // CHECK: et.attention_prefill %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} kv_head(%{{.*}}) tokens(%{{.*}}) pos0(%{{.*}}) block(16) scale(1.250000e-01) : memref<?x32x64xbf16>, memref<8192x8x64xbf16>, memref<8192x8x64xbf16>, memref<?x32x64xbf16>
    et.attention_prefill %q, %k, %v, %o kv_head(%g) tokens(%t0) pos0(%p0) block(16) scale(0.125) : memref<?x32x64xbf16>, memref<8192x8x64xbf16>, memref<8192x8x64xbf16>, memref<?x32x64xbf16>
  }
}

// CHECK-LABEL: et.kernel @linear_accumulate
et.kernel @linear_accumulate(%x: memref<?x2048xbf16>, %w: memref<2048x2048xbf16>, %h: memref<?x2048xf32>) {
  %c16 = arith.constant 16 : index
  %c128 = arith.constant 128 : index
  et.task @rows tiles(%t) in (%c128) {
    %r0 = arith.muli %t, %c16 : index
    // CHECK: et.linear %{{.*}}, %{{.*}}, %{{.*}} rows(%{{.*}}, %{{.*}}) accumulate : memref<?x2048xbf16>
    et.linear %x, %w, %h rows(%r0, %c16) accumulate : memref<?x2048xbf16>, memref<2048x2048xbf16>, memref<?x2048xf32>
  }
}

// CHECK-LABEL: et.kernel @linear_split_k
et.kernel @linear_split_k(%x: memref<?x2048xbf16>, %w: memref<2048x2048xbf16>, %h: memref<?x2048xf32>) {
  %c0 = arith.constant 0 : index
  %c32 = arith.constant 32 : index
  %c64 = arith.constant 64 : index
  %c2048 = arith.constant 2048 : index
  %m = memref.dim %x, %c0 : memref<?x2048xbf16>
  et.task @heads tiles(%g) in (%c32) {
    %k0 = arith.muli %g, %c64 : index
    %xg = memref.subview %x[0, %k0] [%m, 64] [1, 1] : memref<?x2048xbf16> to memref<?x64xbf16, strided<[2048, 1], offset: ?>>
    %wg = memref.subview %w[0, %k0] [2048, 64] [1, 1] : memref<2048x2048xbf16> to memref<2048x64xbf16, strided<[2048, 1], offset: ?>>
    // CHECK: et.linear %{{.*}}, %{{.*}}, %{{.*}} rows(%{{.*}}, %{{.*}}) accumulate atomic : memref<?x64xbf16
    et.linear %xg, %wg, %h rows(%c0, %c2048) accumulate atomic : memref<?x64xbf16, strided<[2048, 1], offset: ?>>, memref<2048x64xbf16, strided<[2048, 1], offset: ?>>, memref<?x2048xf32>
  }
}

// -----

// CHECK-LABEL: et.kernel @norm_and_act
et.kernel @norm_and_act(%x: memref<1x2048xbf16>, %w: memref<2048xbf16>, %y: memref<1x2048xbf16>, %r: memref<1x2048xf32>) {
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  et.task @t tiles(%i) in (%c1) {
    // CHECK: et.rmsnorm %{{.*}}, %{{.*}}, %{{.*}} eps(9.99999974E-6) residual(%{{.*}}) : memref<1x2048xbf16>, memref<2048xbf16>, memref<1x2048xbf16>, memref<1x2048xf32>
    et.rmsnorm %x, %w, %y eps(1.0e-05) residual(%r) : memref<1x2048xbf16>, memref<2048xbf16>, memref<1x2048xbf16>, memref<1x2048xf32>
    // CHECK: et.silu_mul %{{.*}}, %{{.*}}, %{{.*}} cols(%{{.*}}, %{{.*}}) : memref<1x2048xf32>
    et.silu_mul %r, %r, %y cols(%c0, %c1) : memref<1x2048xf32>, memref<1x2048xf32>, memref<1x2048xbf16>
    // CHECK: et.prefetch %{{.*}} rows(%{{.*}}, %{{.*}}) : memref<1x2048xf32>
    et.prefetch %r rows(%c0, %c1) : memref<1x2048xf32>
  }
}

// -----

// CHECK-LABEL: et.kernel @decode_ops
et.kernel @decode_ops(%table: memref<128256x2048xbf16>, %ids: memref<1xi32>, %h: memref<1x2048xf32>,
                      %q: memref<1x32x64xf32>, %pos: memref<1xi32>, %k: memref<1x8x64xf32>,
                      %cache: memref<8192x8x64xbf16>, %at: index, %logits: memref<1x128256xf32>,
                      %pv: memref<1x32xf32>, %pi: memref<1x32xi32>, %kn: memref<64xbf16>) {
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  %c4096 = arith.constant 4096 : index
  et.task @t tiles(%i) in (%c1) {
    // CHECK: et.embedding
    et.embedding %table, %ids, %h : memref<128256x2048xbf16>, memref<1xi32>, memref<1x2048xf32>
    // CHECK: et.rope %{{.*}}, %{{.*}} theta(5.000000e+05) llama3_scaling([3.200000e+01, 1.000000e+00, 4.000000e+00, 8.192000e+03])
    et.rope %q, %pos theta(5.0e+05) llama3_scaling([32.0, 1.0, 4.0, 8192.0]) : memref<1x32x64xf32>, memref<1xi32>
    // CHECK: et.kv_append
    et.kv_append %k, %cache, %at : memref<1x8x64xf32>, memref<8192x8x64xbf16>
    // CHECK: et.rope_into %{{.*}}, %{{.*}}, %{{.*}}[%{{.*}}] theta(1.000000e+06) norm(%{{.*}}) eps(9.99999997E-7)
    et.rope_into %k, %pos, %cache[%at] theta(1.0e+06) norm(%kn) eps(1.0e-06) : memref<1x8x64xf32>, memref<1xi32>, memref<8192x8x64xbf16>, memref<64xbf16>
    // CHECK: et.rope_into %{{.*}}, %{{.*}}, %{{.*}}[%{{.*}}] theta(5.000000e+05) llama3_scaling(
    et.rope_into %q, %pos, %q[%c0] theta(5.0e+05) llama3_scaling([32.0, 1.0, 4.0, 8192.0]) : memref<1x32x64xf32>, memref<1xi32>, memref<1x32x64xf32>
    // CHECK: et.argmax %{{.*}} cols(%{{.*}}, %{{.*}}) slot(%{{.*}})
    et.argmax %logits, %pv, %pi cols(%c0, %c4096) slot(%i) : memref<1x128256xf32>, memref<1x32xf32>, memref<1x32xi32>
  }
}

// A router's top 8 of 128 experts, with and without renormalized weights.
// CHECK-LABEL: et.kernel @router
// CHECK: et.router_topk %{{.*}}, %{{.*}}, %{{.*}} normalize : memref<?x128xf32>, memref<?x8xi32>, memref<?x8xf32>
// CHECK: et.router_topk %{{.*}}, %{{.*}}, %{{.*}} : memref<?x128xf32>, memref<?x8xi32>, memref<?x8xf32>
et.kernel @router(%scores: memref<?x128xf32>, %ids: memref<?x8xi32>, %w: memref<?x8xf32>) {
  %c1 = arith.constant 1 : index
  et.task @topk tiles(%b) in (%c1) {
    et.router_topk %scores, %ids, %w normalize : memref<?x128xf32>, memref<?x8xi32>, memref<?x8xf32>
    et.router_topk %scores, %ids, %w : memref<?x128xf32>, memref<?x8xi32>, memref<?x8xf32>
  }
}

// -----

// CHECK-LABEL: et.kernel @attention_ops
et.kernel @attention_ops(%q: memref<32x64xf32>, %k: memref<8192x8x64xbf16>, %v: memref<8192x8x64xbf16>,
                         %o: memref<?x32x64xf32>, %lse: memref<?x32xf32>, %out: memref<32x64xbf16>, %n: index,
                         %vn: memref<1x64xbf16>) {
  %c8 = arith.constant 8 : index
  %c256 = arith.constant 256 : index
  et.task @split tiles(%g, %s) in (%c8, %n) {
    // CHECK: et.attention_split %{{.*}} kv_head(%{{.*}}) split(%{{.*}}) split_len(%{{.*}}) len(%{{.*}}) scale(1.250000e-01)
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%c256) len(%n) scale(0.125)
        : memref<32x64xf32>, memref<8192x8x64xbf16>, memref<8192x8x64xbf16>, memref<?x32x64xf32>, memref<?x32xf32>
    // CHECK: et.attention_split %{{.*}} len(%{{.*}}) stable(%{{.*}}) scale(1.250000e-01)
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%c256) len(%n) stable(%c256) scale(0.125)
        : memref<32x64xf32>, memref<8192x8x64xbf16>, memref<8192x8x64xbf16>, memref<?x32x64xf32>, memref<?x32xf32>
    // CHECK: et.attention_split %{{.*}} stable(%{{.*}}) append(%{{.*}}, %{{.*}}) scale(1.250000e-01)
    // CHECK-SAME: memref<1x64xf32, #gpu.address_space<workgroup>>, memref<1x64xbf16>
    %kn = memref.alloca() : memref<1x64xf32, #gpu.address_space<workgroup>>
    et.attention_split %q, %k, %v, %o, %lse kv_head(%g) split(%s) split_len(%c256) len(%n) stable(%c256)
        append(%kn, %vn) scale(0.125)
        : memref<32x64xf32>, memref<8192x8x64xbf16>, memref<8192x8x64xbf16>, memref<?x32x64xf32>, memref<?x32xf32>,
          memref<1x64xf32, #gpu.address_space<workgroup>>, memref<1x64xbf16>
  }
  et.task @merge tiles(%t) in (%c8) {
    // CHECK: et.attention_merge
    et.attention_merge %o, %lse, %out : memref<?x32x64xf32>, memref<?x32xf32>, memref<32x64xbf16>
  }
}

// -----

// A kernel on two devices: a symmetric inbox, another device's copy of it,
// the device id, and a signal to another device's copy of an event.
// CHECK-LABEL: et.kernel @two_devices
// CHECK-SAME: %{{.*}}: memref<2x64xf32> {et.symmetric}
// CHECK-SAME: attributes {devices = 2 : i64}
// CHECK: et.peer %{{.*}}[%{{.*}}] : memref<2x64xf32>
// CHECK: et.device_id
// CHECK: et.event.signal %{{.*}}[%{{.*}}] peer(%{{.*}}) : !et.event<2>
et.kernel @two_devices(%x: memref<64xf32>, %inbox: memref<2x64xf32> {et.symmetric}) attributes {devices = 2} {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %got = et.event.create() : !et.event<2>
  et.task @push tiles(%k) in (%c2) {
    %remote = et.peer %inbox[%k] : memref<2x64xf32>
    %d = et.device_id
    et.event.signal %got[%d] peer(%k) : !et.event<2>
  }
}

// -----

// A sum across devices at kernel level (et-lower-collectives makes it tasks).
// CHECK-LABEL: et.kernel @allreduce_op
// CHECK: et.allreduce %{{.*}} into %{{.*}} rows(%{{.*}}) after %{{.*}} signal %{{.*}} block(16) {task = "sum"} : memref<4x64xf32>, memref<?x64xf32>, !et.event<2>
et.kernel @allreduce_op(%part: memref<4x64xf32> {et.symmetric}, %h: memref<?x64xf32>, %rows: index) attributes {devices = 2} {
  %o = et.event.create() : !et.event<2>
  %sum = et.event.create() : !et.event<2>
  et.allreduce %part into %h rows(%rows) after %o signal %sum block(16) {task = "sum"} : memref<4x64xf32>, memref<?x64xf32>, !et.event<2>
}

// -----

// Weight rows a worker may have staged in shared memory (et.staged_rows).
// CHECK-LABEL: et.kernel @staged
// CHECK: %{{.*}}, %{{.*}} = et.staged_rows %{{.*}} rows(%{{.*}}, %{{.*}}) offset 32768 : memref<128x1024xbf16> -> memref<16x1024xbf16, #gpu.address_space<workgroup>>
et.kernel @staged(%w: memref<128x1024xbf16>) {
  %c8 = arith.constant 8 : index
  %c16 = arith.constant 16 : index
  et.task @lin tiles(%t) in (%c8) {
    %r0 = arith.muli %t, %c16 : index
    %view, %count = et.staged_rows %w rows(%r0, %c16) offset 32768 : memref<128x1024xbf16> -> memref<16x1024xbf16, #gpu.address_space<workgroup>>
  }
}

// Steps: the tasks run up to %n times in one launch; @finish decides, on the
// device, whether another step runs.
// CHECK-LABEL: et.kernel @steps
// CHECK: et.repeat %{{.*}} until %{{.*}} after %{{.*}} : memref<1xi32>, !et.event<>
// CHECK: et.step
et.kernel @steps(%n: index, %stop: memref<1xi32>, %log: memref<16xindex>) {
  %c1 = arith.constant 1 : index
  %done = et.event.create() : !et.event<>
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<>
  et.task @finish tiles(%i) in (%c1) {
    %s = et.step
    memref.store %s, %log[%s] : memref<16xindex>
    et.event.signal %done[] : !et.event<>
  }
}

// A token's logit biases, before its penalties.
// CHECK-LABEL: et.kernel @biased
// CHECK: et.logit_bias %{{.*}} token(%{{.*}}) bias(%{{.*}}, %{{.*}}) : memref<?x64xf32>, memref<?x4xi32>, memref<?x4xf32>
et.kernel @biased(%x: memref<?x64xf32>, %ids: memref<?x4xi32>, %v: memref<?x4xf32>, %rows: index) {
  et.task @bias tiles(%m) in (%rows) {
    et.logit_bias %x token(%m) bias(%ids, %v) : memref<?x64xf32>, memref<?x4xi32>, memref<?x4xf32>
  }
}

// A token's log-sum-exp and its most likely ids, into a row of a history of top lists.
// CHECK-LABEL: et.kernel @top_logprobs
// CHECK: et.top_logprobs %{{.*}} token(%{{.*}}) count(%{{.*}}) into(%{{.*}}, %{{.*}}, %{{.*}}) row(%{{.*}}) : memref<?x64xf32>, memref<?xi32>, memref<?xf32>, memref<40x5xi32>, memref<40x5xf32>
et.kernel @top_logprobs(%x: memref<?x64xf32>, %n: memref<?xi32>, %lse: memref<?xf32>, %ids: memref<40x5xi32>,
                        %v: memref<40x5xf32>, %rows: index) {
  et.task @top tiles(%m) in (%rows) {
    et.top_logprobs %x token(%m) count(%n) into(%lse, %ids, %v) row(%m) : memref<?x64xf32>, memref<?xi32>, memref<?xf32>, memref<40x5xi32>, memref<40x5xf32>
  }
}

// A chunk of a token's logits reduced to its candidates; the log-probabilities
// and the threshold from every chunk's candidates.
// CHECK-LABEL: et.kernel @candidates
// CHECK: et.top_candidates %{{.*}} token(%{{.*}}) cols(%{{.*}}, %{{.*}}) temperature(%{{.*}}) into(%{{.*}}, %{{.*}}, %{{.*}}) slot(%{{.*}}) : memref<?x64xf32>, memref<?xf32>, memref<?x4x16xi32>, memref<?x4x16xf32>, memref<?x4x4xf32>
// CHECK: et.top_logprobs %{{.*}} candidates(%{{.*}}, %{{.*}}, %{{.*}} : memref<?x4x16xi32>, memref<?x4x16xf32>, memref<?x4x4xf32>) : memref<?x64xf32>
// CHECK: et.sample_threshold %{{.*}} into(%{{.*}}) candidates(%{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : memref<?x4x16xi32>, memref<?x4x16xf32>, memref<?x4x4xf32>, memref<?xi32>) : memref<?x64xf32>
et.kernel @candidates(%x: memref<?x64xf32>, %t: memref<?xf32>, %ci: memref<?x4x16xi32>, %cv: memref<?x4x16xf32>,
                      %cs: memref<?x4x4xf32>, %n: memref<?xi32>, %lse: memref<?xf32>, %ids: memref<40x5xi32>,
                      %v: memref<40x5xf32>, %k: memref<?xi32>, %p: memref<?xf32>, %mp: memref<?xf32>,
                      %tau: memref<?xf32>, %cov: memref<?xi32>, %rows: index) {
  %c0 = arith.constant 0 : index
  %c16 = arith.constant 16 : index
  et.task @chunk tiles(%m) in (%rows) {
    et.top_candidates %x token(%m) cols(%c0, %c16) temperature(%t) into(%ci, %cv, %cs) slot(%c0) : memref<?x64xf32>, memref<?xf32>, memref<?x4x16xi32>, memref<?x4x16xf32>, memref<?x4x4xf32>
  }
  et.task @row tiles(%m) in (%rows) {
    et.top_logprobs %x token(%m) count(%n) into(%lse, %ids, %v) row(%m) candidates(%ci, %cv, %cs : memref<?x4x16xi32>, memref<?x4x16xf32>, memref<?x4x4xf32>) : memref<?x64xf32>, memref<?xi32>, memref<?xf32>, memref<40x5xi32>, memref<40x5xf32>
    et.sample_threshold %x token(%m) temperature(%t) top_k(%k) top_p(%p) min_p(%mp) into(%tau) candidates(%ci, %cv, %cs, %cov : memref<?x4x16xi32>, memref<?x4x16xf32>, memref<?x4x4xf32>, memref<?xi32>) : memref<?x64xf32>, memref<?xf32>, memref<?xi32>, memref<?xf32>, memref<?xf32>, memref<?xf32>
  }
}

// The penalties of a token's history, before its filters.
// CHECK-LABEL: et.kernel @penalized
// CHECK: et.penalize %{{.*}} token(%{{.*}}) history(%{{.*}}, %{{.*}}, %{{.*}}) outputs_from(%{{.*}}) repetition(%{{.*}}) frequency(%{{.*}}) presence(%{{.*}}) counts(%{{.*}}) : memref<?x64xf32>, memref<4x33xi32>, memref<?xi32>, memref<?xf32>, memref<?xf32>, memref<?xf32>, memref<?x64xi32>
et.kernel @penalized(%x: memref<?x64xf32>, %h: memref<4x33xi32>, %from: memref<?xi32>, %r: memref<?xf32>,
                     %f: memref<?xf32>, %p: memref<?xf32>, %counts: memref<?x64xi32>, %rows: index) {
  %c9 = arith.constant 9 : index
  et.task @penalize tiles(%m) in (%rows) {
    et.penalize %x token(%m) history(%h, %m, %c9) outputs_from(%from) repetition(%r) frequency(%f) presence(%p) counts(%counts) : memref<?x64xf32>, memref<4x33xi32>, memref<?xi32>, memref<?xf32>, memref<?xf32>, memref<?xf32>, memref<?x64xi32>
  }
}

// The sampling filters' threshold, and the argmax that samples above it.
// CHECK-LABEL: et.kernel @filtered
// CHECK: et.sample_threshold %{{.*}} token(%{{.*}}) temperature(%{{.*}}) top_k(%{{.*}}) top_p(%{{.*}}) min_p(%{{.*}}) into(%{{.*}}) : memref<?x64xbf16>, memref<?xf32>, memref<?xi32>, memref<?xf32>, memref<?xf32>, memref<?xf32>
// CHECK: et.argmax {{.*}} sample(%{{.*}}, %{{.*}}, %{{.*}} : memref<?xf32>, memref<?xi64>, memref<?xi32>) above(%{{.*}} : memref<?xf32>) : memref<?x64xbf16>
// CHECK: et.argmax {{.*}} sample(%{{.*}}, %{{.*}}, %{{.*}} : memref<?xf32>, memref<?xi64>, memref<?xi32>) key_offset(%{{.*}}) : memref<?x64xbf16>
et.kernel @filtered(%x: memref<?x64xbf16>, %v: memref<?x2xf32>, %i: memref<?x2xi32>, %t: memref<?xf32>,
                    %s: memref<?xi64>, %n: memref<?xi32>, %k: memref<?xi32>, %p: memref<?xf32>, %mp: memref<?xf32>,
                    %tau: memref<?xf32>, %rows: index) {
  %c2 = arith.constant 2 : index
  %c32 = arith.constant 32 : index
  et.task @filter tiles(%m) in (%rows) {
    et.sample_threshold %x token(%m) temperature(%t) top_k(%k) top_p(%p) min_p(%mp) into(%tau) : memref<?x64xbf16>, memref<?xf32>, memref<?xi32>, memref<?xf32>, memref<?xf32>, memref<?xf32>
  }
  et.task @draw tiles(%j) in (%c2) {
    %col0 = arith.muli %j, %c32 : index
    et.argmax %x, %v, %i cols(%col0, %c32) slot(%j) sample(%t, %s, %n : memref<?xf32>, memref<?xi64>, memref<?xi32>) above(%tau : memref<?xf32>) : memref<?x64xbf16>, memref<?x2xf32>, memref<?x2xi32>
    // Keys of columns 64.. of a wider row (a device's share of a vocabulary).
    %c64 = arith.constant 64 : index
    et.argmax %x, %v, %i cols(%col0, %c32) slot(%j) sample(%t, %s, %n : memref<?xf32>, memref<?xi64>, memref<?xi32>) key_offset(%c64) : memref<?x64xbf16>, memref<?x2xf32>, memref<?x2xi32>
  }
}

// The argmax that samples (per token: temperature, seed, counter).
// CHECK-LABEL: et.kernel @sample
// CHECK: et.argmax %{{.*}}, %{{.*}}, %{{.*}} cols(%{{.*}}, %{{.*}}) slot(%{{.*}}) sample(%{{.*}}, %{{.*}}, %{{.*}} : memref<?xf32>, memref<?xi64>, memref<?xi32>) : memref<?x64xf32>, memref<?x2xf32>, memref<?x2xi32>
et.kernel @sample(%x: memref<?x64xf32>, %v: memref<?x2xf32>, %i: memref<?x2xi32>, %t: memref<?xf32>,
                  %s: memref<?xi64>, %n: memref<?xi32>) {
  %c0 = arith.constant 0 : index
  %c2 = arith.constant 2 : index
  %c32 = arith.constant 32 : index
  et.task @draw tiles(%k) in (%c2) {
    %col0 = arith.muli %k, %c32 : index
    et.argmax %x, %v, %i cols(%col0, %c32) slot(%k) sample(%t, %s, %n : memref<?xf32>, memref<?xi64>, memref<?xi32>) : memref<?x64xf32>, memref<?x2xf32>, memref<?x2xi32>
  }
}
