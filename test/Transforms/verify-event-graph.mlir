// RUN: et-opt %s --split-input-file --et-verify-event-graph=emit-counts --verify-diagnostics | FileCheck %s

// The pass leaves valid IR unchanged; with emit-counts it reports every
// event's expected count and whether it is static, symbolic or device-known.

// CHECK-LABEL: et.kernel @fan_in
et.kernel @fan_in() {
  %c16 = arith.constant 16 : index
  %c4 = arith.constant 4 : index
  // expected-remark @+1 {{expected count: static, 4}}
  %partials = et.event.create() {expected = 4} : !et.event<16>
  et.task @split_k tiles(%n, %k) in (%c16, %c4) {
    et.event.signal %partials[%n] : !et.event<16>
  }
  et.task @reduce tiles(%n) in (%c16) {
    et.event.wait %partials[%n] : !et.event<16>
  }
}

// -----

// Uneven retiling: 15 producer tiles, pairs merged: the last element gets 1.
et.kernel @retile_uneven() {
  %c15 = arith.constant 15 : index
  %c8 = arith.constant 8 : index
  // expected-remark @+1 {{expected count: static, 1..2 (per element)}}
  %rows = et.event.create() : !et.event<8>
  et.task @rows64 tiles(%i) in (%c15) {
    %j = affine.apply affine_map<(d0) -> (d0 floordiv 2)>(%i)
    et.event.signal %rows[%j] : !et.event<8>
  }
  et.task @rows128 tiles(%j) in (%c8) {
    et.event.wait %rows[%j] : !et.event<8>
  }
}

// -----

// Broadcast: one signal, every consumer tile waits on it.
et.kernel @broadcast(%n: index) {
  %c1 = arith.constant 1 : index
  // expected-remark @+1 {{expected count: static, 1}}
  %normed = et.event.create() : !et.event<>
  et.task @norm tiles(%t) in (%c1) {
    et.event.signal %normed[] : !et.event<>
  }
  et.task @linear tiles(%i) in (%n) {
    et.event.wait %normed[] : !et.event<>
  }
}

// -----

// Dynamic shapes: counts are expressions of the runtime sizes.
et.kernel @dynamic(%rows: index, %splits: index) {
  %c64 = arith.constant 64 : index
  %tiles = arith.ceildivsi %rows, %c64 : index
  // expected-remark @+1 {{expected count: symbolic, arg1}}
  %partials = et.event.create(%tiles) : !et.event<?>
  et.task @attn_split tiles(%r, %s) in (%tiles, %splits) {
    et.event.signal %partials[%r] : !et.event<?>
  }
  %half = arith.ceildivsi %tiles, %c64 : index
  // expected-remark @+1 {{expected count: symbolic, min(2, ceildiv(arg0, 64) - 2*e0)}}
  %merged = et.event.create(%half) : !et.event<?>
  et.task @merge tiles(%r) in (%tiles) {
    et.event.wait %partials[%r] : !et.event<?>
    %h = affine.apply affine_map<(d0) -> (d0 floordiv 2)>(%r)
    et.event.signal %merged[%h] : !et.event<?>
  }
}

// -----

// Data dependence: the element is read from a routing buffer, and the tile
// count of the consumer is read from memory: known only on the device.
et.kernel @moe(%route: memref<?xindex>, %counts: memref<8xi32>, %tokens: index) {
  %c3 = arith.constant 3 : index
  // expected-remark @+1 {{expected count: symbolic, arg2}}
  %routed = et.event.create() : !et.event<>
  // expected-remark @+1 {{expected count: device, ? (signal index computed from data in @router)}}
  %expert_in = et.event.create() : !et.event<8>
  et.task @router tiles(%t) in (%tokens) {
    %e = memref.load %route[%t] : memref<?xindex>
    et.event.signal %expert_in[%e] : !et.event<8>
    et.event.signal %routed[] : !et.event<>
  }
  %n3 = et.extent.load %counts[%c3] : memref<8xi32> after %routed[] : !et.event<>
  // expected-remark @+1 {{expected count: device, load(arg1) (a signalling task's extent is read from memory)}}
  %done = et.event.create() : !et.event<>
  et.task @expert3 tiles(%t) in (%n3) {
    et.event.wait %expert_in[%c3] : !et.event<8>
    et.event.signal %done[] : !et.event<>
  }
}

// CHECK-LABEL: et.kernel @moe
// CHECK: et.task @expert3

// -----

// A layer loop: @norm and @mlp wait on each other as tasks, but tile (l, t)
// of @norm waits on element l of %mlp and signals element l + 1 of %norm, so
// the tiles form no cycle and the kernel is valid.
et.kernel @layer_loop() {
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  // expected-remark @+1 {{expected count: static, 2}}
  %norm = et.event.create() : !et.event<3>
  // expected-remark @+1 {{expected count: static, 2}}
  %mlp = et.event.create() : !et.event<3>
  et.task @first tiles(%t) in (%c2) {
    %z = arith.constant 0 : index
    et.event.signal %norm[%z] : !et.event<3>
  }
  et.task @norm tiles(%l, %t) in (%c2, %c2) {
    et.event.wait %mlp[%l] : !et.event<3>
    %n = affine.apply affine_map<(d0) -> (d0 + 1)>(%l)
    et.event.signal %norm[%n] : !et.event<3>
  }
  et.task @mlp tiles(%l, %t) in (%c3, %c2) {
    et.event.wait %norm[%l] : !et.event<3>
    et.event.signal %mlp[%l] : !et.event<3>
  }
}

// CHECK-LABEL: et.kernel @layer_loop
// CHECK: et.task @mlp
