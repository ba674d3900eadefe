// RUN: et-opt %s --split-input-file --et-dynamic-schedule=workers=8 --mlir-pass-statistics --verify-roundtrip 2>%t.stats | FileCheck %s
// RUN: FileCheck %s --check-prefix=STATS < %t.stats
// RUN: et-opt %s --split-input-file --et-dynamic-schedule="workers=8 two-phase=false" | FileCheck %s --check-prefix=ONEPHASE

// Two-phase dispatch: the consumer's reads of the weights (never written in
// the kernel) and the arithmetic on them move above its wait; the read of
// the buffer the producer writes and everything after it stay below.
// CHECK-LABEL: et.kernel @two_phase
// CHECK: et.task @consume
// CHECK-NEXT: %[[C0:.*]] = arith.constant 0 : index
// CHECK-NEXT: %[[W:.*]] = memref.load %arg0[%{{.*}}, %[[C0]]]
// CHECK-NEXT: %[[SQ:.*]] = arith.mulf %[[W]], %[[W]]
// CHECK-NEXT: et.event.wait
// CHECK-NEXT: %[[X:.*]] = memref.load %arg1
// CHECK-NEXT: arith.addf %[[SQ]], %[[X]]
// CHECK-NEXT: memref.store
// CHECK: et.schedule dynamic workers(8) {
// CHECK-NEXT: et.run @produce
// CHECK-NEXT: et.run @consume
// CHECK-NEXT: }
// STATS: DynamicSchedulePass
// STATS: (S) 3 num-hoisted-ops
// ONEPHASE-LABEL: et.kernel @two_phase
// ONEPHASE: et.task @consume
// ONEPHASE-NEXT: et.event.wait
et.kernel @two_phase(%w: memref<4x64xf32>, %x: memref<4xf32>, %y: memref<4xf32>) {
  %c4 = arith.constant 4 : index
  %e = et.event.create() : !et.event<4>
  et.task @produce tiles(%i) in (%c4) {
    %c1 = arith.constant 1 : index
    %v = memref.load %w[%i, %c1] : memref<4x64xf32>
    memref.store %v, %x[%i] : memref<4xf32>
    et.event.signal %e[%i] : !et.event<4>
  }
  et.task @consume tiles(%i) in (%c4) {
    et.event.wait %e[%i] : !et.event<4>
    %c0 = arith.constant 0 : index
    %a = memref.load %w[%i, %c0] : memref<4x64xf32>
    %b = memref.load %x[%i] : memref<4xf32>
    %sq = arith.mulf %a, %a : f32
    %s = arith.addf %sq, %b : f32
    memref.store %s, %y[%i] : memref<4xf32>
  }
}

// -----

// The queue follows the dependencies, not the program order; among ready
// tasks the one with the longest remaining path goes first.
// CHECK-LABEL: et.kernel @topological
// CHECK: et.schedule dynamic workers(8) {
// CHECK-NEXT: et.run @first
// CHECK-NEXT: et.run @heavy
// CHECK-NEXT: et.run @light
// CHECK-NEXT: et.run @last
// CHECK-NEXT: }
et.kernel @topological() {
  %c8 = arith.constant 8 : index
  %a = et.event.create() : !et.event<>
  %b = et.event.create() : !et.event<>
  et.task @last tiles(%i) in (%c8) {
    et.event.wait %b[] : !et.event<>
  }
  et.task @light tiles(%i) in (%c8) attributes {et.cost = #et.cost<bytes = 100, flops = 0>} {
    et.event.wait %a[] : !et.event<>
  }
  et.task @heavy tiles(%i) in (%c8) attributes {et.cost = #et.cost<bytes = 1000000, flops = 0>} {
    et.event.wait %a[] : !et.event<>
    et.event.signal %b[] : !et.event<>
  }
  et.task @first tiles(%i) in (%c8) {
    et.event.signal %a[] : !et.event<>
  }
}
