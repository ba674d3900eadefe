// RUN: et-opt %s --convert-et-to-nvvm | FileCheck %s

// Tiles of a worker run one after another, so the tasks' static workgroup
// buffers share one arena: @a's two buffers at offsets 0 and 16 (the f32
// buffer of 12 bytes rounded up to 16), @b's bf16 buffer at 0 again; the
// arena holds the larger task's 16 + 64 bytes.
// CHECK: gpu.func @arena({{.*}}) workgroup(%{{.*}} : memref<4xi64, #gpu.address_space<workgroup>>, %[[ARENA:.*]] : memref<80xi8, #gpu.address_space<workgroup>> {llvm.align = 16 : i64}) kernel
// CHECK: %[[C0:.*]] = arith.constant 0 : index
// CHECK: memref.view %[[ARENA]][%[[C0]]][] : memref<80xi8, #gpu.address_space<workgroup>> to memref<3xf32, #gpu.address_space<workgroup>>
// CHECK: %[[C16:.*]] = arith.constant 16 : index
// CHECK: memref.view %[[ARENA]][%[[C16]]][] : memref<80xi8, #gpu.address_space<workgroup>> to memref<16xf32, #gpu.address_space<workgroup>>
// CHECK: %[[B0:.*]] = arith.constant 0 : index
// CHECK: memref.view %[[ARENA]][%[[B0]]][] : memref<80xi8, #gpu.address_space<workgroup>> to memref<8xbf16, #gpu.address_space<workgroup>>
// CHECK-NOT: memref.alloca
et.kernel @arena(%x: memref<16xf32>, %y: memref<8xbf16>) {
  %c0 = arith.constant 0 : index
  %c1 = arith.constant 1 : index
  %done = et.event.create() : !et.event<>
  et.task @a tiles(%i) in (%c1) {
    %s = memref.alloca() : memref<3xf32, #gpu.address_space<workgroup>>
    %t = memref.alloca() : memref<16xf32, #gpu.address_space<workgroup>>
    %v = memref.load %x[%c0] : memref<16xf32>
    memref.store %v, %s[%c0] : memref<3xf32, #gpu.address_space<workgroup>>
    memref.store %v, %t[%c0] : memref<16xf32, #gpu.address_space<workgroup>>
    et.event.signal %done[] : !et.event<>
  }
  et.task @b tiles(%i) in (%c1) {
    et.event.wait %done[] : !et.event<>
    %u = memref.alloca() : memref<8xbf16, #gpu.address_space<workgroup>>
    %w = memref.load %y[%c0] : memref<8xbf16>
    memref.store %w, %u[%c0] : memref<8xbf16, #gpu.address_space<workgroup>>
  }
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @a tiles [0]
      et.run @b tiles [0]
    }
  }
}
