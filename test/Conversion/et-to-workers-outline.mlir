// RUN: et-opt %s --split-input-file --convert-et-to-cpu | FileCheck %s
// RUN: et-opt %s --split-input-file --convert-et-to-nvvm | FileCheck %s --check-prefix=GPU

// A region marked et.outline becomes a private function that is never
// inlined, called where the region was: its captured values (the tile's
// coordinate, a kernel buffer, a value computed before it) are the
// function's arguments, constants are rematerialized inside it, and the
// region's results are the call's. The unmarked region stays in place.

// CHECK-LABEL: func.func private @rows_outlined_0(
// CHECK-SAME: %[[X:[^:]*]]: i64, %[[OUT:[^:]*]]: memref<2xi64>, %[[I:[^:]*]]: index) -> i64
// CHECK-SAME: attributes {passthrough = ["noinline"]}
// CHECK: %[[C7:.*]] = arith.constant 7 : i64
// CHECK: %[[Y:.*]] = arith.addi %[[X]], %[[C7]] : i64
// CHECK: memref.store %[[Y]], %[[OUT]][%[[I]]] : memref<2xi64>
// CHECK: return %[[Y]] : i64
// CHECK-LABEL: func.func @rows_worker(
// CHECK: %[[R:.*]] = func.call @rows_outlined_0(%{{.*}}, %{{.*}}, %{{.*}}) : (i64, memref<2xi64>, index) -> i64
// CHECK: scf.execute_region -> i64 no_inline {
// CHECK-NEXT: arith.addi %[[R]], %[[R]] : i64
// CHECK-NOT: et.outline

// GPU-LABEL: gpu.module @rows_module
// GPU: func.func private @rows_outlined_0(
// GPU-SAME: attributes {passthrough = ["noinline"]}
// GPU: gpu.func @rows(
// GPU: func.call @rows_outlined_0(
// GPU-NOT: et.outline
et.kernel @rows(%out: memref<2xi64>) {
  %c2 = arith.constant 2 : index
  %e = et.event.create() : !et.event<2>
  et.task @a tiles(%i) in (%c2) {
    %x = arith.index_cast %i : index to i64
    %c7 = arith.constant 7 : i64
    %y = scf.execute_region -> i64 no_inline {
      %s = arith.addi %x, %c7 : i64
      memref.store %s, %out[%i] : memref<2xi64>
      scf.yield %s : i64
    } {et.outline}
    %z = scf.execute_region -> i64 no_inline {
      %t = arith.addi %y, %y : i64
      scf.yield %t : i64
    }
    memref.store %z, %out[%i] : memref<2xi64>
    et.event.signal %e[%i] : !et.event<2>
  }
  et.schedule static workers(2) {
    et.worker 0 {
      et.run @a tiles [0]
    }
    et.worker 1 {
      et.run @a tiles [1]
    }
  }
}

// -----

// The function takes the first free name: a symbol of the module already
// holds `_outlined_0`.
// CHECK-LABEL: func.func private @taken_outlined_0()
// CHECK-NEXT: return
// CHECK-LABEL: func.func private @taken_outlined_1(
// CHECK-SAME: attributes {passthrough = ["noinline"]}
// CHECK-LABEL: func.func @taken_worker(
// CHECK: func.call @taken_outlined_1(
func.func private @taken_outlined_0() {
  return
}
et.kernel @taken(%out: memref<1xi64>) {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
    scf.execute_region no_inline {
      %c7 = arith.constant 7 : i64
      memref.store %c7, %out[%i] : memref<1xi64>
      scf.yield
    } {et.outline}
  }
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @a tiles [0]
    }
  }
}
