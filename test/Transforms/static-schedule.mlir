// RUN: et-opt %s --split-input-file --et-static-schedule=workers=2 --mlir-pass-statistics --verify-roundtrip 2>%t.stats | FileCheck %s
// RUN: FileCheck %s --check-prefix=STATS < %t.stats
// RUN: et-opt %s --split-input-file --et-static-schedule="workers=2 sync-ns=0 dispatch-ns=100" | FileCheck %s --check-prefix=NOSYNC

// A chain a[i] -> b[i] with a costly cross-worker sync: each b tile runs on
// the worker of the a tile it waits on, after it (tiles of equal rank go in
// id order, so all a tiles are placed first).
// CHECK-LABEL: et.kernel @chain
// CHECK: et.schedule static workers(2) attributes {cost_model = #et.cost_model<bandwidth_gbps = 4800, gflops = 989000, dispatch_ns = 300, sync_ns = 1000>}
// CHECK-NEXT: et.worker 0 {
// CHECK-NEXT: et.run @a tiles [0, 2]
// CHECK-NEXT: et.run @b tiles [0, 2]
// CHECK-NEXT: }
// CHECK-NEXT: et.worker 1 {
// CHECK-NEXT: et.run @a tiles [1, 3]
// CHECK-NEXT: et.run @b tiles [1, 3]
// STATS: StaticSchedulePass
// STATS-DAG: (S) 8 num-tiles
// STATS-DAG: (S) 0 num-cyclic-tasks
et.kernel @chain() {
  %c4 = arith.constant 4 : index
  %e = et.event.create() : !et.event<4>
  et.task @a tiles(%i) in (%c4) {
    et.event.signal %e[%i] : !et.event<4>
  }
  et.task @b tiles(%i) in (%c4) {
    et.event.wait %e[%i] : !et.event<4>
  }
}

// -----

// The critical path goes first: @long feeds @next, @short feeds nothing, so
// @short runs last although it comes first in the program.
// CHECK-LABEL: et.kernel @critical_path
// CHECK: et.worker 0 {
// CHECK-NEXT: et.run @long tiles [0]
// CHECK-NEXT: et.run @next tiles [0]
// CHECK-NEXT: et.run @short tiles [0]
// CHECK: et.worker 1 {
// CHECK-NEXT: et.run @long tiles [1]
// CHECK-NEXT: et.run @next tiles [1]
// CHECK-NEXT: et.run @short tiles [1]
// NOSYNC-LABEL: et.kernel @critical_path
// NOSYNC: et.worker 0 {
// NOSYNC-NEXT: et.run @long
et.kernel @critical_path() {
  %c2 = arith.constant 2 : index
  %done = et.event.create() : !et.event<2>
  et.task @short tiles(%i) in (%c2) attributes {et.cost = #et.cost<bytes = 1000, flops = 0>} {
  }
  et.task @long tiles(%i) in (%c2) attributes {et.cost = #et.cost<bytes = 4000000, flops = 0>} {
    et.event.signal %done[%i] : !et.event<2>
  }
  et.task @next tiles(%i) in (%c2) attributes {et.cost = #et.cost<bytes = 4000000, flops = 0>} {
    et.event.wait %done[%i] : !et.event<2>
  }
}

// -----

// The cost is derived from the body: a loop of 64 vector loads of 16 bf16
// (2 KiB per tile) and 64 vector fmas.
// CHECK-LABEL: et.kernel @derived_cost
// CHECK: et.run @load tiles
et.kernel @derived_cost(%w: memref<4x1024xbf16>) {
  %c4 = arith.constant 4 : index
  et.task @load tiles(%i) in (%c4) {
    %c0 = arith.constant 0 : index
    %c16 = arith.constant 16 : index
    %c1024 = arith.constant 1024 : index
    %z = arith.constant dense<0.0> : vector<16xbf16>
    %r = scf.for %k = %c0 to %c1024 step %c16 iter_args(%acc = %z) -> vector<16xbf16> {
      %v = vector.load %w[%i, %k] : memref<4x1024xbf16>, vector<16xbf16>
      %f = vector.fma %v, %v, %acc : vector<16xbf16>
      scf.yield %f : vector<16xbf16>
    }
  }
}

// -----

// Runtime tile counts: the task is spread over both workers by formula,
// after the tiles it depends on.
// CHECK-LABEL: et.kernel @dynamic_count
// CHECK: et.worker 0 {
// CHECK-NEXT: et.run @head tiles [0]
// CHECK-NEXT: et.run @rows cyclic [[K:[0-9]]]
// CHECK-NEXT: }
// CHECK-NEXT: et.worker 1 {
// CHECK-NEXT: et.run @rows cyclic [[K]]
et.kernel @dynamic_count(%n: index) {
  %c1 = arith.constant 1 : index
  %e = et.event.create() : !et.event<>
  et.task @head tiles(%i) in (%c1) {
    et.event.signal %e[] : !et.event<>
  }
  et.task @rows tiles(%i) in (%n) {
    et.event.wait %e[] : !et.event<>
  }
}
