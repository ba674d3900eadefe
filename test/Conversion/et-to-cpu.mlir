// RUN: et-opt %s --split-input-file --convert-et-to-cpu | FileCheck %s
// RUN: et-opt %s --split-input-file --convert-et-to-cpu | FileCheck %s --check-prefix=WAIT

// A static schedule: the program table, the worker function and its
// parameters, the wait (acquire load, bounded spin, sched_yield) and the
// signal (release fence, then a relaxed atomic add).

// CHECK-DAG: memref.global "private" constant @__et_chain_starts : memref<3xi32> = dense<[0, 2, 4]>
// CHECK-DAG: memref.global "private" constant @__et_chain_program : memref<4x3xi32> = dense<{{\[\[}}0, 0, -1], [1, 0, -1], [0, 1, -1], [1, 1, -1]]>
// CHECK-DAG: func.func private @sched_yield() -> i32
// CHECK-DAG: func.func private @clock_gettime(i32, !llvm.ptr) -> i32
// CHECK-LABEL: func.func @chain_worker(
// CHECK-SAME: %[[W:.*]]: index, %[[EPOCH:.*]]: i64, %[[SPIN:.*]]: i64, %[[COUNTERS:.*]]: memref<?xi32>, %[[CONTROL:.*]]: memref<?xi32>, %[[ERROR:.*]]: memref<?xi64>, %{{.*}}: memref<2xi64>)
// The capacity check, then the next launch's bank is cleared, then the
// program loop dispatches on the task id.
// CHECK: memref.dim %[[COUNTERS]]
// CHECK: scf.for
// CHECK: scf.while
// CHECK: scf.execute_region -> i1
// CHECK: cf.switch
// The wait: thread 0 reads the monotonic clock, polls with an acquire load
// at system scope, checks the abort flag, gives up once spin_limit
// nanoseconds have passed since the wait began (recording the error and
// raising the abort flag), else yields its thread. The signal: a release
// fence, then a relaxed atomic add.
// CHECK-DAG: llvm.load %{{.*}} atomic acquire {alignment = 4 : i64} : !llvm.ptr -> i32
// CHECK-DAG: llvm.load %{{.*}} atomic monotonic {alignment = 4 : i64} : !llvm.ptr -> i32
// CHECK-DAG: func.call @clock_gettime(%{{.*}}, %{{.*}}) : (i32, !llvm.ptr) -> i32
// CHECK-DAG: arith.cmpi sge, %{{.*}}, %[[SPIN]] : i64
// CHECK-DAG: llvm.cmpxchg %{{.*}}, %{{.*}}, %{{.*}} acq_rel monotonic
// CHECK-DAG: llvm.store %{{.*}}, %{{.*}} atomic release
// CHECK-DAG: func.call @sched_yield()
// CHECK-DAG: llvm.fence release
// CHECK-DAG: llvm.atomicrmw add %{{.*}}, %{{.*}} monotonic
// The wait's watchdog in order: the clock read before the wait's first
// poll, handed to the poll loop's block; after a short poll (no abort),
// the clock again, its distance from that start against spin_limit, and
// the start carried on to the next poll.
// WAIT-LABEL: func.func @chain_worker(
// WAIT: func.call @clock_gettime
// WAIT: %[[T0:.*]] = arith.addi %{{.*}}, %{{.*}} : i64
// WAIT: cf.cond_br %{{.*}}, ^bb{{[0-9]+}}(%[[T0]] : i64), ^bb{{[0-9]+}}(%{{.*}} : i1)
// WAIT: func.call @clock_gettime
// WAIT: %[[NS:.*]] = arith.addi %{{.*}}, %{{.*}} : i64
// WAIT-NEXT: %[[WAITED:.*]] = arith.subi %[[NS]], %[[START:[0-9]+]] : i64
// WAIT-NEXT: %[[EXPIRED:.*]] = arith.cmpi sge, %[[WAITED]], %arg2 : i64
// WAIT-NEXT: cf.cond_br %[[EXPIRED]], ^bb{{[0-9]+}}, ^bb{{[0-9]+}}(%[[START]] : i64)
et.kernel @chain(%out: memref<2xi64>) {
  %c2 = arith.constant 2 : index
  %e = et.event.create() : !et.event<2>
  et.task @a tiles(%i) in (%c2) {
    et.event.signal %e[%i] : !et.event<2>
  }
  et.task @b tiles(%i) in (%c2) {
    et.event.wait %e[%i] : !et.event<2>
  }
  et.schedule static workers(2) {
    et.worker 0 {
      et.run @a tiles [0]
      et.run @b tiles [0]
    }
    et.worker 1 {
      et.run @a tiles [1]
      et.run @b tiles [1]
    }
  }
}

// -----

// A dynamic schedule: tickets from the control buffer (a 64-bit word, the
// first or second by the epoch's parity), mapped to tasks in queue order;
// thread ids become 0. The tile count of a task whose extent is a kernel
// argument is checked at run time (at most 2^31 - 1, not negative).
// CHECK-LABEL: func.func @queue_worker(
// CHECK: arith.andi %{{.*}}, %c1_i64 : i64
// CHECK: scf.while
// CHECK: %[[TICKET:.*]] = llvm.getelementptr %{{.*}}[%{{.*}}] : (!llvm.ptr, i64) -> !llvm.ptr, i64
// CHECK-NEXT: llvm.atomicrmw add %[[TICKET]], %{{.*}} monotonic {alignment = 8 : i64} : !llvm.ptr, i64
// CHECK: scf.execute_region -> (i1, i1)
// CHECK: arith.cmpi sle, %{{.*}}, %c2147483647
// CHECK-NOT: et.thread_id
et.kernel @queue(%n: index, %acc: memref<?xi64>) {
  %e = et.event.create(%n) : !et.event<?>
  et.task @p tiles(%i) in (%n) {
    %t = et.thread_id
    et.event.signal %e[%i] : !et.event<?>
  }
  et.task @q tiles(%i) in (%n) {
    et.event.wait %e[%i] : !et.event<?>
  }
  et.schedule dynamic workers(4) {
    et.run @p
    et.run @q
  }
}
