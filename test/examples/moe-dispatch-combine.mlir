// RUN: et-opt %s --et-verify-event-graph=emit-counts --verify-diagnostics --verify-roundtrip | FileCheck %s
// RUN: et-opt %s --et-static-schedule=workers=4 --verify-roundtrip | FileCheck %s --check-prefix=STATIC
// RUN: et-opt %s --et-dynamic-schedule=workers=4 --verify-roundtrip | FileCheck %s --check-prefix=DYNAMIC

// MoE dispatch/combine with data-dependent routing: the router signals, per
// token, the expert chosen in the routing buffer; each expert's tile count is
// the number of tokens routed to it, read from memory once routing is done;
// the combine waits on every token's expert output. The expert tile counts
// are only known on the device, so a static schedule needs their bound
// (`max_extents`).
// CHECK-LABEL: et.kernel @moe
et.kernel @moe(%route: memref<?xindex>, %counts: memref<4xindex>, %tokens: index) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  // expected-remark @+1 {{expected count: symbolic, arg2}}
  %routed = et.event.create() : !et.event<>
  // expected-remark @+1 {{expected count: device, ? (signal index computed from data in @router)}}
  %dispatched = et.event.create() : !et.event<4>
  // expected-remark @+1 {{expected count: device, ? (signal index computed from data in @expert0)}}
  %expert_out = et.event.create(%tokens) : !et.event<?>
  et.task @router tiles(%t) in (%tokens) attributes {et.cost = #et.cost<bytes = 4096, flops = 4096>} {
    %e = memref.load %route[%t] : memref<?xindex>
    et.event.signal %dispatched[%e] : !et.event<4>
    et.event.signal %routed[] : !et.event<>
  }
  // CHECK: et.extent.load
  %n0 = et.extent.load %counts[%c0] : memref<4xindex> after %routed[] : !et.event<>
  %n1 = et.extent.load %counts[%c1] : memref<4xindex> after %routed[] : !et.event<>
  et.task @expert0 tiles(%i) in (%n0) attributes {max_extents = array<i64: 256>, et.cost = #et.cost<bytes = 1048576, flops = 2097152, prologue_bytes = 1048576>} {
    et.event.wait %dispatched[%c0] : !et.event<4>
    %tok = memref.load %route[%i] : memref<?xindex>
    et.event.signal %expert_out[%tok] : !et.event<?>
  }
  et.task @expert1 tiles(%i) in (%n1) attributes {max_extents = array<i64: 256>, et.cost = #et.cost<bytes = 1048576, flops = 2097152, prologue_bytes = 1048576>} {
    et.event.wait %dispatched[%c1] : !et.event<4>
    %tok = memref.load %route[%i] : memref<?xindex>
    et.event.signal %expert_out[%tok] : !et.event<?>
  }
  et.task @combine tiles(%t) in (%tokens) attributes {et.cost = #et.cost<bytes = 8192, flops = 8192>} {
    et.event.wait %expert_out[%t] : !et.event<?>
  }
}

// Every task has a runtime tile count: each is spread over all workers by
// formula, in a topological order (the experts after the router, whose
// routing they read their tile count from).
// STATIC-LABEL: et.kernel @moe
// STATIC: et.schedule static workers(4)
// STATIC: et.worker 0 {
// STATIC-NEXT: et.run @router cyclic [[R:[0-9]+]]
// STATIC-NEXT: et.run @expert{{[01]}} cyclic
// STATIC-NEXT: et.run @expert{{[01]}} cyclic
// STATIC-NEXT: et.run @combine cyclic
// STATIC: et.worker 3 {
// STATIC-NEXT: et.run @router cyclic [[R]]

// DYNAMIC-LABEL: et.kernel @moe
// DYNAMIC: et.schedule dynamic workers(4) {
// DYNAMIC-NEXT: et.run @router
// DYNAMIC-NEXT: et.run @expert{{[01]}}
// DYNAMIC-NEXT: et.run @expert{{[01]}}
// DYNAMIC-NEXT: et.run @combine
// DYNAMIC-NEXT: }
