// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=gpu threads=256}))" | FileCheck %s --check-prefix=WG
// RUN: et-opt %s --pass-pipeline="builtin.module(et.kernel(et-lower-tile-ops{target=cpu}))" | FileCheck %s --check-prefix=CPU

// A gated tile (silu(x w^T) * (x up^T)): 128 output columns from 128 rows
// of each weight. Each warpgroup's 256 B rows hold 128 gate rows then the
// 128 matching up rows (two copies per slice, one per weight), one
// 64 x 256 wgmma per k16 step, and the epilogue combines accumulator i
// (gate) with i + 64 (its up column) before the 128-column block is
// staged and stored as bf16. On the CPU, two sums per element.
// WG-LABEL: et.kernel @gated
// WG: scf.for
// WG-COUNT-4: nvvm.wgmma.mma_async {{.*}}, <m = 64, n = 256, k = 16>
// WG: nvvm.wgmma.wait.group.sync.aligned 0
// WG: llvm.extractvalue %{{.*}}[0]
// WG-NEXT: llvm.extractvalue %{{.*}}[64]
// WG-NEXT: arith.negf
// WG-NEXT: math.exp %{{.*}} fastmath<afn>
// WG: arith.divf %{{.*}}, %{{.*}} fastmath<afn>
// WG: arith.truncf %{{.*}} : vector<2xf32> to vector<2xbf16>
// WG-COUNT-32: llvm.store %{{.*}}, %{{.*}} {alignment = 4 : i64} : vector<2xbf16>, !llvm.ptr<3>
// WG-NOT: llvm.store {{.*}} vector<2xbf16>
// WG: vector.store %{{.*}}, %{{.*}}[%{{.*}}, %{{.*}}] {alignment = 16 : i64} : memref<?x512xbf16>, vector<8xbf16>
// CPU-LABEL: et.kernel @gated
// CPU: scf.for {{.*}} iter_args({{.*}}) -> (f32, f32)
// CPU: math.exp
// CPU: arith.truncf
et.kernel @gated(%x: memref<?x256xbf16>, %wg: memref<512x256xbf16>, %wu: memref<512x256xbf16>,
                 %y: memref<?x512xbf16>, %rows: index) {
  %c4 = arith.constant 4 : index
  %c128 = arith.constant 128 : index
  %tm = arith.ceildivsi %rows, %c128 : index
  et.task @gemm tiles(%i, %j) in (%tm, %c4) {
    %m0 = arith.muli %i, %c128 : index
    %n0 = arith.muli %j, %c128 : index
    et.matmul %x, %wg, %y at(%m0, %n0) gated(%wu : memref<512x256xbf16>) tile [128, 256, 64] stages 4
        : memref<?x256xbf16>, memref<512x256xbf16>, memref<?x512xbf16>
  }
}
