// RUN: et-opt %s --verify-roundtrip | FileCheck %s
// RUN: et-opt %s | et-opt | FileCheck %s
// RUN: et-opt %s --mlir-print-op-generic | et-opt | FileCheck %s

// CHECK-LABEL: func.func @static_events
func.func @static_events() {
  // CHECK: et.event.create() : !et.event<>
  %scalar = et.event.create() : !et.event<>
  // CHECK: et.event.create() : !et.event<16>
  %tiles = et.event.create() : !et.event<16>
  // CHECK: et.event.create() : !et.event<4x8>
  %grid = et.event.create() : !et.event<4x8>
  return
}

// CHECK-LABEL: func.func @dynamic_events
// CHECK-SAME: (%[[ROWS:.*]]: index, %[[SPLITS:.*]]: index)
func.func @dynamic_events(%rows: index, %splits: index) {
  // CHECK: et.event.create(%[[ROWS]]) : !et.event<?x4>
  %a = et.event.create(%rows) : !et.event<?x4>
  // CHECK: et.event.create(%[[ROWS]], %[[SPLITS]]) : !et.event<?x?>
  %b = et.event.create(%rows, %splits) : !et.event<?x?>
  return
}
