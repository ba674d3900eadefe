// RUN: et-opt %s --et-static-schedule=workers=2 --et-optimize-events=emit-remarks --verify-diagnostics | FileCheck %s

// After a static schedule, @b[i] runs on the worker of @a[i], after it: the
// wait is satisfied by program order, and the event then has no waiter.
// @c[i] waits on @b tiles of both workers and keeps its counter.
// CHECK-LABEL: et.kernel @chain
// CHECK-COUNT-1: et.event.create
// CHECK-NOT: et.event.create
// CHECK: et.task @a
// CHECK-NEXT: }
// CHECK: et.task @b
// CHECK-NEXT: et.event.signal
// CHECK: et.task @c
// CHECK-NEXT: et.event.wait
et.kernel @chain() {
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  // expected-remark @+1 {{nobody waits on this event; erased with its signals}}
  %e = et.event.create() : !et.event<4>
  %all = et.event.create() : !et.event<>
  et.task @a tiles(%i) in (%c4) {
    et.event.signal %e[%i] : !et.event<4>
  }
  et.task @b tiles(%i) in (%c4) {
    // expected-remark @+1 {{wait satisfied by program order on one worker; removed}}
    et.event.wait %e[%i] : !et.event<4>
    et.event.signal %all[] : !et.event<>
  }
  et.task @c tiles(%i) in (%c1) {
    et.event.wait %all[] : !et.event<>
  }
}

// On two devices, @rb[i] runs after @ra[i] on the same worker, but the
// signal it waits for comes from @ra[i] of the other device (peer 1): the
// wait stays.
// CHECK-LABEL: et.kernel @remote_chain
// CHECK: et.task @rb
// CHECK-NEXT: et.event.wait
et.kernel @remote_chain() attributes {devices = 2} {
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  %e = et.event.create() : !et.event<4>
  et.task @ra tiles(%i) in (%c4) {
    et.event.signal %e[%i] peer(%c1) : !et.event<4>
  }
  et.task @rb tiles(%i) in (%c4) {
    et.event.wait %e[%i] : !et.event<4>
  }
}
