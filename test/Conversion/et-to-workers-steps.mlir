// RUN: et-opt %s --et-static-schedule=workers=2 --convert-et-to-cpu | FileCheck %s

// The steps of an et.repeat kernel: a loop over steps around the worker's
// program, a gate at each step after the first (a wait for the previous
// steps' signals to %done, then the stop flag), waits of step s for s + 1
// times their count, and et.step replaced by the loop's step.

// CHECK-LABEL: func.func @steps_worker
// The step loop: (step, all ran, not stopped).
// CHECK: scf.while (%[[S:.*]] = %{{.*}}, %{{.*}} = %true{{.*}}, %{{.*}} = %true{{.*}}) : (index, i1, i1) -> (index, i1, i1)
// CHECK: arith.cmpi ult, %[[S]], %arg6
// The gate: step 0 runs at once; later steps wait for s times the count of
// %done, then read the stop flag.
// CHECK: ^bb{{.*}}(%[[STEP:.*]]: index, %{{.*}}: i1, %{{.*}}: i1):
// CHECK: arith.cmpi eq, %[[STEP]], %c0
// CHECK: arith.muli %{{.*}}, %[[STEP]] : index
// CHECK: llvm.load %{{.*}} atomic monotonic {alignment = 4 : i64} : !llvm.ptr -> i32
// CHECK: arith.cmpi eq, %{{.*}}, %c0_i32
// The program of the step: the wait of @finish waits for (step + 1) x 2.
// CHECK: scf.if
// CHECK: arith.addi %[[STEP]], %c1
// CHECK: arith.muli
// CHECK: memref.store %[[STEP]], %arg{{[0-9]+}}[%[[STEP]]] : memref<16xindex>
et.kernel @steps(%n: index, %stop: memref<1xi32>, %log: memref<16xindex>) {
  %c1 = arith.constant 1 : index
  %c2 = arith.constant 2 : index
  %half = et.event.create() : !et.event<>
  %done = et.event.create() : !et.event<>
  et.repeat %n until %stop after %done : memref<1xi32>, !et.event<>
  et.task @produce tiles(%i) in (%c2) {
    et.event.signal %half[] : !et.event<>
  }
  et.task @finish tiles(%i) in (%c1) {
    et.event.wait %half[] : !et.event<>
    %s = et.step
    memref.store %s, %log[%s] : memref<16xindex>
    et.event.signal %done[] : !et.event<>
  }
}
