// RUN: et-opt %s --split-input-file --convert-et-to-nvvm --verify-diagnostics

// Workgroup memory must be at the task body's top level, where every thread
// of the worker reaches it.
et.kernel @nested_shared(%c: i1) {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
    scf.if %c {
      // expected-error @+1 {{allocates workgroup memory; it must be statically shaped and at the top level of the task body}}
      %s = memref.alloca() : memref<32xf32, #gpu.address_space<workgroup>>
    }
  }
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @a tiles [0]
    }
  }
}
