// RUN: et-opt %s --split-input-file --pass-pipeline="builtin.module(et.kernel(et-lower-collectives))" | FileCheck %s
// RUN: et-opt %s --split-input-file --pass-pipeline="builtin.module(et.kernel(et-lower-collectives,et-verify-event-graph{emit-counts}))" 2>&1 >/dev/null | FileCheck %s --check-prefix=COUNTS
// RUN: et-opt %s --split-input-file --pass-pipeline="builtin.module(et.kernel(et-lower-collectives))" --mlir-pass-statistics 2>&1 >/dev/null | FileCheck %s --check-prefix=STATS

// STATS: LowerCollectivesPass
// STATS: (S) 1 num-allreduces

// Two devices: @o's signal goes to both devices; the sum task runs over
// (layer, column block), waits on o[l], adds both devices' partials (each
// device's copy at offset (d - device_id) mod 2) into h and signals sum[l].
// CHECK-LABEL: et.kernel @tp
// CHECK: %[[O:.*]] = et.event.create() : !et.event<2>
// CHECK: %[[SUM:.*]] = et.event.create() : !et.event<2>
// CHECK: et.task @o
// CHECK: et.event.signal %[[O]][%{{.*}}] peer(%c0{{.*}}) : !et.event<2>
// CHECK: et.event.signal %[[O]][%{{.*}}] peer(%c1{{.*}}) : !et.event<2>
// CHECK: et.task @sum tiles(%[[L:.*]], %[[C:.*]]) in (%c2{{.*}}, %c4{{.*}}) attributes {et.cost
// CHECK: et.event.wait %[[O]][%[[L]]] : !et.event<2>
// CHECK: %[[D:.*]] = et.device_id
// CHECK: et.peer %arg0[%{{.*}}] : memref<4x64xf32>
// CHECK: et.peer %arg0[%{{.*}}] : memref<4x64xf32>
// CHECK: et.thread_id
// CHECK: scf.for
// CHECK: vector.load {{.*}} : memref<4x64xf32>, vector<4xf32>
// CHECK: vector.load {{.*}} : memref<4x64xf32>, vector<4xf32>
// CHECK: arith.addf
// CHECK: vector.load {{.*}} : memref<?x64xf32>, vector<4xf32>
// CHECK: vector.store {{.*}} : memref<?x64xf32>, vector<4xf32>
// CHECK: et.event.signal %[[SUM]][%[[L]]] : !et.event<2>
// CHECK: et.task @next
// CHECK-NOT: et.allreduce
// Counts: o[l] gets 8 tiles from each of 2 devices; sum[l] one per block.
// COUNTS: remark: expected count: static, 16
// COUNTS: remark: expected count: static, 4
et.kernel @tp(%part: memref<4x64xf32> {et.symmetric}, %h: memref<?x64xf32>, %rows: index) attributes {devices = 2} {
  %c2 = arith.constant 2 : index
  %c8 = arith.constant 8 : index
  %o = et.event.create() : !et.event<2>
  %sum = et.event.create() : !et.event<2>
  et.task @o tiles(%l, %t) in (%c2, %c8) {
    et.event.signal %o[%l] : !et.event<2>
  }
  et.allreduce %part into %h rows(%rows) after %o signal %sum block(16) {task = "sum"} : memref<4x64xf32>, memref<?x64xf32>, !et.event<2>
  et.task @next tiles(%l) in (%c2) {
    et.event.wait %sum[%l] : !et.event<2>
  }
}

// -----

// One device, a dynamic event: the signal stays local, the task reads the
// one partial, its first extent is the event's size; no name given.
// CHECK-LABEL: et.kernel @one_device
// CHECK: et.task @o
// CHECK-NEXT: et.event.signal %{{.*}}[%{{.*}}] : !et.event<?>
// CHECK: et.task @allreduce_0 tiles(%{{.*}}, %{{.*}}) in (%arg3, %c2
// CHECK-NOT: et.peer
// CHECK: vector.load %arg0
// CHECK-NOT: arith.addf {{.*}} : vector<4xf32>
// CHECK: vector.load %arg1
// CHECK: arith.addf
et.kernel @one_device(%part: memref<4x64xf32> {et.symmetric}, %h: memref<?x64xf32>, %rows: index, %n: index) {
  %c8 = arith.constant 8 : index
  %o = et.event.create(%n) : !et.event<?>
  %sum = et.event.create(%n) : !et.event<?>
  et.task @o tiles(%l, %t) in (%n, %c8) {
    et.event.signal %o[%l] : !et.event<?>
  }
  et.allreduce %part into %h rows(%rows) after %o signal %sum block(32) : memref<4x64xf32>, memref<?x64xf32>, !et.event<?>
  et.task @next tiles(%l) in (%n) {
    et.event.wait %sum[%l] : !et.event<?>
  }
}
