// RUN: et-opt %s --verify-roundtrip | FileCheck %s

// Scheduled forms: a static schedule (tile lists and a cyclic formula per
// worker), a dynamic one (a task queue), costs and extent bounds.

// CHECK-LABEL: et.kernel @static_form
et.kernel @static_form(%n: index) {
  %c4 = arith.constant 4 : index
  // CHECK: et.task @a tiles(%{{.*}}) in (%{{.*}}) attributes {et.cost = #et.cost<bytes = 4096, flops = 128>}
  et.task @a tiles(%i) in (%c4) attributes {et.cost = #et.cost<bytes = 4096, flops = 128>} {
  }
  // CHECK: et.task @a2 tiles(%{{.*}}) in (%{{.*}}) attributes {et.cost = #et.cost<bytes = 4096, flops = 128, prologue_bytes = 1024>}
  et.task @a2 tiles(%i) in (%c4) attributes {et.cost = #et.cost<bytes = 4096, flops = 128, prologue_bytes = 1024>} {
  }
  // CHECK: et.task @b tiles(%{{.*}}) in (%{{.*}}) attributes {max_extents = array<i64: 64>}
  et.task @b tiles(%i) in (%n) attributes {max_extents = array<i64: 64>} {
  }
  // CHECK: et.schedule static workers(2) attributes {cost_model = #et.cost_model<bandwidth_gbps = 3350, gflops = 989000, dispatch_ns = 250, sync_ns = 800>} {
  // CHECK-NEXT: et.worker 0 {
  // CHECK-NEXT: et.run @a tiles [0, 2]
  // CHECK-NEXT: et.run @a2 tiles [0, 1, 2, 3]
  // CHECK-NEXT: et.run @b cyclic 1
  // CHECK-NEXT: }
  // CHECK-NEXT: et.worker 1 {
  // CHECK-NEXT: et.run @a tiles [3]
  // CHECK-NEXT: et.run @a tiles [1]
  // CHECK-NEXT: et.run @b cyclic 1
  et.schedule static workers(2) attributes {cost_model = #et.cost_model<bandwidth_gbps = 3350, gflops = 989000, dispatch_ns = 250, sync_ns = 800>} {
    et.worker 0 {
      et.run @a tiles [0, 2]
      et.run @a2 tiles [0, 1, 2, 3]
      et.run @b cyclic 1
    }
    et.worker 1 {
      et.run @a tiles [3]
      et.run @a tiles [1]
      et.run @b cyclic 1
    }
  }
}

// CHECK-LABEL: et.kernel @dynamic_form
et.kernel @dynamic_form(%n: index) {
  %e = et.event.create() : !et.event<>
  et.task @first tiles(%i) in (%n) {
    et.event.signal %e[] : !et.event<>
  }
  et.task @second tiles(%i) in (%n) {
    et.event.wait %e[] : !et.event<>
  }
  // CHECK: et.schedule dynamic workers(132) {
  // CHECK-NEXT: et.run @first
  // CHECK-NEXT: et.run @second
  // CHECK-NEXT: }
  et.schedule dynamic workers(132) {
    et.run @first
    et.run @second
  }
}
