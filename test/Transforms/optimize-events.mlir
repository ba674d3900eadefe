// RUN: et-opt %s --split-input-file --et-optimize-events=emit-remarks --verify-diagnostics --verify-roundtrip | FileCheck %s
// RUN: et-opt %s --split-input-file --et-optimize-events --mlir-pass-statistics 2>&1 >/dev/null | FileCheck %s --check-prefix=STATS
// RUN: et-opt %s --split-input-file --et-optimize-events="transitive-reduction=false coarsen=false" | FileCheck %s --check-prefix=OFF

// STATS: OptimizeEventsPass
// STATS-DAG: (S) 1 num-redundant-waits
// STATS-DAG: (S) 1 num-coarsened-events
// STATS-DAG: (S) 3 num-merged-waits

// @r's wait on %a is implied by its wait on %b: @q[i] waited on %a[i]
// before signalling %b[i].
// CHECK-LABEL: et.kernel @redundant
// CHECK: et.task @r
// CHECK-NEXT: et.event.wait %{{.*}}[%{{.*}}] : !et.event<4>
// CHECK-NEXT: }
// OFF-LABEL: et.kernel @redundant
// OFF: et.task @r
// OFF-NEXT: et.event.wait
// OFF-NEXT: et.event.wait
et.kernel @redundant() {
  %c4 = arith.constant 4 : index
  %a = et.event.create() : !et.event<4>
  %b = et.event.create() : !et.event<4>
  et.task @p tiles(%i) in (%c4) {
    et.event.signal %a[%i] : !et.event<4>
  }
  et.task @q tiles(%i) in (%c4) {
    et.event.wait %a[%i] : !et.event<4>
    et.event.signal %b[%i] : !et.event<4>
  }
  et.task @r tiles(%i) in (%c4) {
    // expected-remark @+1 {{wait implied by the task's other waits; removed}}
    et.event.wait %a[%i] : !et.event<4>
    et.event.wait %b[%i] : !et.event<4>
  }
}

// -----

// Not implied: @r[i] waits on %a[(i + 1) mod 4], but its wait on %b only
// orders it after %a[i].
// CHECK-LABEL: et.kernel @shifted
// CHECK: et.task @r
// CHECK-NEXT: affine.apply
// CHECK-NEXT: et.event.wait
// CHECK-NEXT: et.event.wait
et.kernel @shifted() {
  %c4 = arith.constant 4 : index
  %a = et.event.create() : !et.event<4>
  %b = et.event.create() : !et.event<4>
  et.task @p tiles(%i) in (%c4) {
    et.event.signal %a[%i] : !et.event<4>
  }
  et.task @q tiles(%i) in (%c4) {
    et.event.wait %a[%i] : !et.event<4>
    et.event.signal %b[%i] : !et.event<4>
  }
  et.task @r tiles(%i) in (%c4) {
    %j = affine.apply affine_map<(d0) -> ((d0 + 1) mod 4)>(%i)
    et.event.wait %a[%j] : !et.event<4>
    et.event.wait %b[%i] : !et.event<4>
  }
}

// -----

// A wait whose element is computed from data is no evidence: it may wait on
// any element, so the wait on %a stays.
// CHECK-LABEL: et.kernel @data_dependent
// CHECK: et.task @r
// CHECK-NEXT: memref.load
// CHECK-NEXT: et.event.wait
// CHECK-NEXT: et.event.wait
et.kernel @data_dependent(%route: memref<4xindex>) {
  %c4 = arith.constant 4 : index
  %a = et.event.create() : !et.event<4>
  %b = et.event.create() : !et.event<4>
  et.task @p tiles(%i) in (%c4) {
    et.event.signal %a[%i] : !et.event<4>
  }
  et.task @q tiles(%i) in (%c4) {
    et.event.wait %a[%i] : !et.event<4>
    et.event.signal %b[%i] : !et.event<4>
  }
  et.task @r tiles(%i) in (%c4) {
    %k = memref.load %route[%i] : memref<4xindex>
    et.event.wait %b[%k] : !et.event<4>
    et.event.wait %a[%i] : !et.event<4>
  }
}

// -----

// A wait that is not exact (its element comes from data) is still implied
// by an exact one: @r's wait on %b needs all of @q, which waited on every
// element of %a. (No task here has two exact waits.)
// CHECK-LABEL: et.kernel @implied_by_exact
// CHECK: et.task @r
// CHECK-NEXT: memref.load
// CHECK-NEXT: et.event.wait %{{.*}}[] : !et.event<>
// CHECK-NEXT: }
et.kernel @implied_by_exact(%route: memref<4xindex>) {
  %c4 = arith.constant 4 : index
  %a = et.event.create() : !et.event<4>
  %b = et.event.create() : !et.event<>
  et.task @p tiles(%i) in (%c4) {
    et.event.signal %a[%i] : !et.event<4>
  }
  et.task @q tiles(%i) in (%c4) {
    et.event.wait %a[%i] : !et.event<4>
    et.event.signal %b[] : !et.event<>
  }
  et.task @r tiles(%i) in (%c4) {
    %k = memref.load %route[%i] : memref<4xindex>
    // expected-remark @+1 {{wait implied by the task's other waits; removed}}
    et.event.wait %a[%k] : !et.event<4>
    et.event.wait %b[] : !et.event<>
  }
}

// -----

// Every @merge tile waits on all 4 partials: one counter, one wait.
// CHECK-LABEL: et.kernel @coarsen
// CHECK: %[[E:.*]] = et.event.create() : !et.event<>
// CHECK-NOT: et.event.create
// CHECK: et.task @partial
// CHECK-NEXT: et.event.signal %[[E]][] : !et.event<>
// CHECK: et.task @merge
// CHECK-NEXT: et.event.wait %[[E]][] : !et.event<>
// CHECK-NEXT: }
et.kernel @coarsen() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c3 = arith.constant 3 : index
  %c4 = arith.constant 4 : index
  // expected-remark @+1 {{event coarsened into one counter: every waiting tile needs all 4 elements}}
  %p = et.event.create() : !et.event<4>
  et.task @partial tiles(%i) in (%c4) {
    et.event.signal %p[%i] : !et.event<4>
  }
  et.task @merge tiles(%j) in (%c2) {
    et.event.wait %p[%c0] : !et.event<4>
    et.event.wait %p[%c1] : !et.event<4>
    et.event.wait %p[%c2] : !et.event<4>
    et.event.wait %p[%c3] : !et.event<4>
  }
}

// -----

// Not every element: %p stays fine-grained.
// CHECK-LABEL: et.kernel @no_coarsen
// CHECK: et.event.create() : !et.event<4>
// CHECK: et.task @merge
// CHECK-NEXT: et.event.wait
// CHECK-NEXT: et.event.wait
// CHECK-NEXT: et.event.wait
et.kernel @no_coarsen() {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %c4 = arith.constant 4 : index
  %p = et.event.create() : !et.event<4>
  et.task @partial tiles(%i) in (%c4) {
    et.event.signal %p[%i] : !et.event<4>
  }
  et.task @merge tiles(%j) in (%c2) {
    et.event.wait %p[%c0] : !et.event<4>
    et.event.wait %p[%c1] : !et.event<4>
    et.event.wait %p[%c2] : !et.event<4>
  }
}

// -----

// Dead events: nobody waits on %unused, so it goes with its signals. Runtime
// tile counts leave everything else as it is.
// CHECK-LABEL: et.kernel @dead
// CHECK-COUNT-1: et.event.create
// CHECK-NOT: et.event.create
// CHECK: et.task @a
// CHECK-NEXT: et.event.signal
// CHECK-NEXT: }
et.kernel @dead(%n: index) {
  %e = et.event.create() : !et.event<>
  // expected-remark @+1 {{nobody waits on this event; erased with its signals}}
  %unused = et.event.create(%n) : !et.event<?>
  et.task @a tiles(%i) in (%n) {
    et.event.signal %e[] : !et.event<>
    et.event.signal %unused[%i] : !et.event<?>
  }
  et.task @b tiles(%i) in (%n) {
    et.event.wait %e[] : !et.event<>
  }
}

// -----

// Devices: @c's wait on %e2 looks implied by its wait on %f (through @b and
// %e1), but %e2 is signalled on another device (peer 1), whose @a tile the
// local path says nothing about: the wait stays.
// CHECK-LABEL: et.kernel @remote_not_redundant
// CHECK: et.task @c
// CHECK-NEXT: et.event.wait %{{.*}}[%{{.*}}] : !et.event<4>
// CHECK-NEXT: et.event.wait %{{.*}}[%{{.*}}] : !et.event<4>
et.kernel @remote_not_redundant() attributes {devices = 2} {
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %e1 = et.event.create() : !et.event<4>
  %e2 = et.event.create() : !et.event<4>
  %f = et.event.create() : !et.event<4>
  et.task @a tiles(%i) in (%c4) {
    et.event.signal %e1[%i] : !et.event<4>
    et.event.signal %e2[%i] peer(%c1) : !et.event<4>
  }
  et.task @b tiles(%i) in (%c4) {
    et.event.wait %e1[%i] : !et.event<4>
    et.event.signal %f[%i] : !et.event<4>
  }
  et.task @c tiles(%i) in (%c4) {
    et.event.wait %e2[%i] : !et.event<4>
    et.event.wait %f[%i] : !et.event<4>
  }
}
