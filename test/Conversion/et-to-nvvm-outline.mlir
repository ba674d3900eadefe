// RUN: et-opt %s --convert-et-to-nvvm | FileCheck %s

// On the GPU a tile's workgroup buffer crosses the outlined function's call
// as a generic memref (the function lowering that runs before the GPU
// module's own maps no GPU address space) and is cast back to workgroup
// memory inside, so that its loads and stores stay shared-memory ones.

// CHECK-LABEL: func.func private @scratch_outlined_0(
// CHECK-SAME: %[[G:[^:]*]]: memref<4xi64>, %[[I:[^:]*]]: index) attributes {passthrough = ["noinline"]}
// CHECK: %[[W:.*]] = memref.memory_space_cast %[[G]] : memref<4xi64> to memref<4xi64, #gpu.address_space<workgroup>>
// CHECK: memref.store %{{.*}}, %[[W]][%[[I]]] : memref<4xi64, #gpu.address_space<workgroup>>
// CHECK: gpu.barrier
// CHECK-LABEL: gpu.func @scratch(
// CHECK: %[[P:.*]] = memref.memory_space_cast %{{.*}} : memref<4xi64, #gpu.address_space<workgroup>> to memref<4xi64>
// CHECK: func.call @scratch_outlined_0(%[[P]], %{{.*}}) : (memref<4xi64>, index) -> ()
et.kernel @scratch(%out: memref<2xi64>) {
  %c2 = arith.constant 2 : index
  %e = et.event.create() : !et.event<2>
  et.task @a tiles(%i) in (%c2) {
    %s = memref.alloca() : memref<4xi64, #gpu.address_space<workgroup>>
    scf.execute_region no_inline {
      %c7 = arith.constant 7 : i64
      memref.store %c7, %s[%i] : memref<4xi64, #gpu.address_space<workgroup>>
      gpu.barrier
      scf.yield
    } {et.outline}
    %v = memref.load %s[%i] : memref<4xi64, #gpu.address_space<workgroup>>
    memref.store %v, %out[%i] : memref<2xi64>
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
