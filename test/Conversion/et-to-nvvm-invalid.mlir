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

// -----

// Two staging regions that do not fit the dynamic shared memory beside the
// tiles' own buffers.
// expected-error @+1 {{stages weights in two regions of 131072 bytes after 0 bytes of tile buffers: 262144 bytes of dynamic shared memory, more than 204800 (lower stage-bytes)}}
et.kernel @staged_too_big(%w: memref<256x1024xbf16>) {
  %c1 = arith.constant 1 : index
  %c64 = arith.constant 64 : index
  et.task @a tiles(%i) in (%c1) {
    %v, %n = et.staged_rows %w rows(%i, %c64) offset 0 : memref<256x1024xbf16> -> memref<64x1024xbf16, #gpu.address_space<workgroup>>
  }
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @a tiles [0]
    }
  }
}

// -----

// More shared memory than an SM gives one CTA: refused here, not at launch.
// expected-error @+1 {{'et.kernel' op needs 240064 bytes of shared memory per worker (240064 static: tile buffers, the program; 0 dynamic: prefetched and staged weights, tile buffers marked et.dynamic_shared), more than the 232448 an SM gives one CTA on sm_90}}
et.kernel @too_much_shared(%x: memref<4xf32>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  et.task @t tiles(%i) in (%c1) {
    %s = memref.alloca() : memref<60000xf32, #gpu.address_space<workgroup>>
    %v = memref.load %x[%c0] : memref<4xf32>
    memref.store %v, %s[%c0] : memref<60000xf32, #gpu.address_space<workgroup>>
  }
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @t tiles [0]
    }
  }
}
