// RUN: et-opt %s --convert-et-to-nvvm | FileCheck %s
// RUN: et-opt %s --pass-pipeline="builtin.module(et-lower-to-nvvm-pipeline{mode=keep})" | FileCheck %s --check-prefix=PTX

// Workgroup allocas marked et.dynamic_shared all start at the beginning of
// the kernel's dynamic shared memory (an external zero-sized workgroup
// global, sized at launch), each viewed with its own type; the other
// allocas are views into one static workgroup arena of bytes that every
// task lays its buffers out in from 0 (here 8 x f32: 32 bytes). The kernel
// states the bytes its launch must provide, the largest such buffer's
// (256), in a global the runtime reads.
// CHECK: gpu.module @two_module
// CHECK: memref.global "public" @__et_dynamic_shared : memref<0xi8, #gpu.address_space<workgroup>> {alignment = 16 : i64}
// CHECK: llvm.mlir.global external constant @__et_dynamic_shared_bytes(256 : i32) {addr_space = 1 : i32, alignment = 4 : i64} : i32
// CHECK: gpu.func @two({{.*}}) workgroup(%{{.*}} : memref<4xi64, #gpu.address_space<workgroup>>, %[[ARENA:.*]] : memref<32xi8, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}) kernel
// CHECK: memref.view %[[ARENA]][%{{.*}}][] : memref<32xi8, #gpu.address_space<workgroup>> to memref<8xf32, #gpu.address_space<workgroup>>
// CHECK: %[[DYN:.*]] = memref.get_global @__et_dynamic_shared : memref<0xi8, #gpu.address_space<workgroup>>
// CHECK: %[[A:.*]] = memref.reinterpret_cast %[[DYN]] to offset: [0], sizes: [256], strides: [1]
// CHECK: memref.view %[[A]][%{{.*}}][] : memref<256xi8, #gpu.address_space<workgroup>> to memref<128xbf16, #gpu.address_space<workgroup>>
// CHECK: %[[B:.*]] = memref.reinterpret_cast %[[DYN]] to offset: [0], sizes: [64], strides: [1]
// CHECK: memref.view %[[B]][%{{.*}}][] : memref<64xi8, #gpu.address_space<workgroup>> to memref<16xf32, #gpu.address_space<workgroup>>
// CHECK-NOT: memref.alloca

// PTX: .extern .shared .align 16 .b8 __et_dynamic_shared[];
// PTX: .visible .global .align 4 .u32 __et_dynamic_shared_bytes = 256;
et.kernel @two(%x: memref<128xbf16>, %y: memref<16xf32>) {
  %c1 = arith.constant 1 : index
  %c0 = arith.constant 0 : index
  %e = et.event.create() : !et.event<>
  et.task @a tiles(%i) in (%c1) {
    %s = memref.alloca() {et.dynamic_shared} : memref<128xbf16, #gpu.address_space<workgroup>>
    %v = memref.load %x[%c0] : memref<128xbf16>
    memref.store %v, %s[%c0] : memref<128xbf16, #gpu.address_space<workgroup>>
    %w = memref.load %s[%c0] : memref<128xbf16, #gpu.address_space<workgroup>>
    memref.store %w, %x[%c0] : memref<128xbf16>
    et.event.signal %e[] : !et.event<>
  }
  et.task @b tiles(%i) in (%c1) {
    %s = memref.alloca() {et.dynamic_shared} : memref<16xf32, #gpu.address_space<workgroup>>
    %t = memref.alloca() : memref<8xf32, #gpu.address_space<workgroup>>
    et.event.wait %e[] : !et.event<>
    %v = memref.load %y[%c0] : memref<16xf32>
    memref.store %v, %s[%c0] : memref<16xf32, #gpu.address_space<workgroup>>
    memref.store %v, %t[%c0] : memref<8xf32, #gpu.address_space<workgroup>>
    %w = memref.load %s[%c0] : memref<16xf32, #gpu.address_space<workgroup>>
    %u = memref.load %t[%c0] : memref<8xf32, #gpu.address_space<workgroup>>
    %z = arith.addf %w, %u : f32
    memref.store %z, %y[%c0] : memref<16xf32>
  }
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @a tiles [0]
      et.run @b tiles [0]
    }
  }
}
