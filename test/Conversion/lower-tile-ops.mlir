// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu unroll=2}))" | FileCheck %s --check-prefix=GPU
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=cpu}))" | FileCheck %s --check-prefix=CPU

// On the GPU target: a warp per row (rows strided by the number of warps),
// 16-byte vector loads of w and x, FMAs into vector<8xf32> accumulators, a
// 5-step shuffle butterfly, lane 0 stores. On the CPU target: scalar loops.
// GPU-LABEL: et.kernel @gemv
// GPU: et.thread_id
// GPU: et.num_threads
// GPU: scf.for
// GPU: scf.for {{.*}} iter_args
// GPU-COUNT-2: vector.load %{{.*}} {alignment = 16 : i64} : memref<4096x1024xbf16>, vector<8xbf16>
// GPU: vector.fma
// GPU: vector.reduction <add>
// GPU-COUNT-5: gpu.shuffle  xor
// GPU: memref.store
// GPU-NOT: et.linear
// CPU-LABEL: et.kernel @gemv
// CPU: scf.for
// CPU: scf.for
// CPU: scf.for {{.*}} iter_args
// CPU: arith.extf
// CPU: arith.mulf
// CPU-NOT: vector.
// CPU-NOT: et.linear
et.kernel @gemv(%x: memref<1x1024xbf16>, %w: memref<4096x1024xbf16>, %y: memref<1x4096xf32>) {
  %c32 = arith.constant 32 : index
  %c128 = arith.constant 128 : index
  et.task @rows tiles(%t) in (%c32) {
    %r0 = arith.muli %t, %c128 : index
    et.linear %x, %w, %y rows(%r0, %c128) : memref<1x1024xbf16>, memref<4096x1024xbf16>, memref<1x4096xf32>
  }
}

// RMSNorm: on the GPU a warp per token with a shuffle butterfly and rsqrt;
// SiLU-mul: columns strided by thread, exp.
// GPU-LABEL: et.kernel @norm
// GPU: arith.divui
// GPU: scf.for
// GPU-COUNT-5: gpu.shuffle  xor
// GPU: math.rsqrt
// GPU: math.exp
// CPU-LABEL: et.kernel @norm
// CPU-NOT: gpu.shuffle
// CPU: math.rsqrt
// CPU: math.exp
et.kernel @norm(%x: memref<1x64xbf16>, %w: memref<64xbf16>, %y: memref<1x64xbf16>) {
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  et.task @t tiles(%i) in (%c1) {
    et.rmsnorm %x, %w, %y eps(1.0e-05) : memref<1x64xbf16>, memref<64xbf16>, memref<1x64xbf16>
    et.silu_mul %x, %x, %y cols(%c0, %c1) : memref<1x64xbf16>, memref<1x64xbf16>, memref<1x64xbf16>
  }
}
