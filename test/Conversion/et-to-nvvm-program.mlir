// RUN: et-opt %s --split-input-file --convert-et-to-nvvm | FileCheck %s
// RUN: et-opt %s --split-input-file --convert-et-to-nvvm=profile=true | FileCheck %s --check-prefix=PROFILE

// A static worker copies its entries of the program table into shared
// memory at the start (row 0: its entry count and first entry; row 1 + j:
// entry j), then walks them there: the loop reads no global memory. The
// table has the same rows per worker (worker w's from w x 2), so the
// copy's addresses and bound (2 rows, 6 words) do not wait for a load:
// only the entry count is loaded, beside them.
// CHECK-LABEL: gpu.module @chain_module
// CHECK: memref.global "private" @__et_chain_program_shared : memref<3x3xi32, #gpu.address_space<workgroup>>
// CHECK: memref.global "private" constant @__et_chain_counts : memref<2xi32> = dense<2>
// CHECK: memref.global "private" constant @__et_chain_program : memref<4x3xi32> = dense<{{\[\[}}0, 0, -1], [1, 0, -1], [0, 1, -1], [1, 1, -1]]>
// CHECK-NOT: __et_chain_starts
// CHECK: gpu.func @chain
// CHECK: %[[TABLE:.*]] = memref.get_global @__et_chain_program :
// CHECK: %[[COUNTS:.*]] = memref.get_global @__et_chain_counts :
// CHECK: %[[BEGIN:.*]] = arith.muli %block_id_x, %c2
// CHECK: memref.load %[[COUNTS]][%block_id_x]
// CHECK: %[[SHARED:.*]] = memref.get_global @__et_chain_program_shared
// CHECK: scf.if
// CHECK: memref.store %{{.*}}, %[[SHARED]][%c0{{.*}}, %c0{{.*}}]
// CHECK: memref.store %{{.*}}, %[[SHARED]][%c0{{.*}}, %c1{{.*}}]
// CHECK: scf.for %{{.*}} = %thread_id_x to %c6 step %block_dim_x
// CHECK: memref.load %[[TABLE]]
// CHECK: memref.store %{{.*}}, %[[SHARED]]
// CHECK: gpu.barrier
// CHECK: scf.while
// CHECK: memref.load %[[SHARED]][%c0{{.*}}, %c0{{.*}}]
// CHECK: } do {
// CHECK-NOT: memref.load %[[TABLE]]
// CHECK-NOT: memref.load %[[COUNTS]]
// CHECK: cf.switch

// Profiled: each worker writes its own region of the trace buffer. At
// launch thread 0 puts the region's first slot (worker * capacity /
// workers) and its end in two shared-memory words; a record takes the next
// slot below the end (no division per record) and adds to the cursor
// without waiting for the result.
// PROFILE-LABEL: gpu.module @chain_module
// PROFILE: gpu.func @chain({{.*}}) workgroup({{.*}}, %[[SLOTS:.*]] : memref<2xi32, #gpu.address_space<workgroup>>
// PROFILE: %[[WORKERS:.*]] = gpu.grid_dim x
// PROFILE: %[[PER:.*]] = arith.divui %{{.*}}, %[[WORKERS]]
// PROFILE: %[[BEGIN:.*]] = arith.muli %{{.*}}, %[[PER]]
// PROFILE: %[[END:.*]] = arith.addi %[[BEGIN]], %[[PER]]
// PROFILE: memref.store %{{.*}}, %[[SLOTS]][%c0
// PROFILE: memref.store %{{.*}}, %[[SLOTS]][%c1
// PROFILE: nvvm.read.ptx.sreg.globaltimer
// PROFILE-NOT: gpu.grid_dim
// PROFILE: %[[K:.*]] = memref.load %[[SLOTS]][%c0
// PROFILE: %[[LIMIT:.*]] = memref.load %[[SLOTS]][%c1
// PROFILE: memref.store %{{.*}}, %[[SLOTS]][%c0
// PROFILE: llvm.atomicrmw add {{.*}} monotonic
// PROFILE-NOT: arith.divui
// PROFILE: arith.cmpi ult, %[[K]], %[[LIMIT]]
et.kernel @chain() {
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

// 340 entries and the header row fill the 4 KiB that a worker's copy may
// take: still in shared memory.
// CHECK-LABEL: gpu.module @fits_module
// CHECK: memref.global "private" @__et_fits_program_shared : memref<341x3xi32, #gpu.address_space<workgroup>>
et.kernel @fits() {
  %c340 = arith.constant 340 : index
  et.task @a tiles(%i) in (%c340) {
  }
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @a tiles [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 138, 139, 140, 141, 142, 143, 144, 145, 146, 147, 148, 149, 150, 151, 152, 153, 154, 155, 156, 157, 158, 159, 160, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 173, 174, 175, 176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191, 192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223, 224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239, 240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255, 256, 257, 258, 259, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271, 272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287, 288, 289, 290, 291, 292, 293, 294, 295, 296, 297, 298, 299, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317, 318, 319, 320, 321, 322, 323, 324, 325, 326, 327, 328, 329, 330, 331, 332, 333, 334, 335, 336, 337, 338, 339]
    }
  }
}

// -----

// 341 entries do not: the worker reads the global table.
// CHECK-LABEL: gpu.module @long_module
// CHECK-NOT: program_shared
// CHECK: scf.while
// CHECK: memref.load %{{.*}} : memref<341x3xi32>
et.kernel @long() {
  %c341 = arith.constant 341 : index
  et.task @a tiles(%i) in (%c341) {
  }
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @a tiles [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73, 74, 75, 76, 77, 78, 79, 80, 81, 82, 83, 84, 85, 86, 87, 88, 89, 90, 91, 92, 93, 94, 95, 96, 97, 98, 99, 100, 101, 102, 103, 104, 105, 106, 107, 108, 109, 110, 111, 112, 113, 114, 115, 116, 117, 118, 119, 120, 121, 122, 123, 124, 125, 126, 127, 128, 129, 130, 131, 132, 133, 134, 135, 136, 137, 138, 139, 140, 141, 142, 143, 144, 145, 146, 147, 148, 149, 150, 151, 152, 153, 154, 155, 156, 157, 158, 159, 160, 161, 162, 163, 164, 165, 166, 167, 168, 169, 170, 171, 172, 173, 174, 175, 176, 177, 178, 179, 180, 181, 182, 183, 184, 185, 186, 187, 188, 189, 190, 191, 192, 193, 194, 195, 196, 197, 198, 199, 200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214, 215, 216, 217, 218, 219, 220, 221, 222, 223, 224, 225, 226, 227, 228, 229, 230, 231, 232, 233, 234, 235, 236, 237, 238, 239, 240, 241, 242, 243, 244, 245, 246, 247, 248, 249, 250, 251, 252, 253, 254, 255, 256, 257, 258, 259, 260, 261, 262, 263, 264, 265, 266, 267, 268, 269, 270, 271, 272, 273, 274, 275, 276, 277, 278, 279, 280, 281, 282, 283, 284, 285, 286, 287, 288, 289, 290, 291, 292, 293, 294, 295, 296, 297, 298, 299, 300, 301, 302, 303, 304, 305, 306, 307, 308, 309, 310, 311, 312, 313, 314, 315, 316, 317, 318, 319, 320, 321, 322, 323, 324, 325, 326, 327, 328, 329, 330, 331, 332, 333, 334, 335, 336, 337, 338, 339, 340]
    }
  }
}

// -----

// Workers of 3, 1 and 1 entries: padded to 3 rows each (9 rows against 5,
// within twice the table), the pad rows (0, 0, -1) never read.
// CHECK-LABEL: gpu.module @uneven_module
// CHECK: memref.global "private" constant @__et_uneven_counts : memref<3xi32> = dense<[3, 1, 1]>
// CHECK: memref.global "private" constant @__et_uneven_program : memref<9x3xi32> = dense<{{\[\[}}0, 0, -1], [0, 1, -1], [0, 2, -1], [0, 3, -1], [0, 0, -1], [0, 0, -1], [0, 4, -1], [0, 0, -1], [0, 0, -1]]>
et.kernel @uneven() {
  %c5 = arith.constant 5 : index
  et.task @a tiles(%i) in (%c5) {
  }
  et.schedule static workers(3) {
    et.worker 0 {
      et.run @a tiles [0, 1, 2]
    }
    et.worker 1 {
      et.run @a tiles [3]
    }
    et.worker 2 {
      et.run @a tiles [4]
    }
  }
}

// -----

// Workers of 8, 1, 1 and 1 entries: padding would take 32 rows for 11, more
// than twice the table; the table stays dense, with each worker's range.
// CHECK-LABEL: gpu.module @skewed_module
// CHECK-NOT: __et_skewed_counts
// CHECK: memref.global "private" constant @__et_skewed_starts : memref<5xi32> = dense<[0, 8, 9, 10, 11]>
// CHECK: memref.global "private" constant @__et_skewed_program : memref<11x3xi32>
et.kernel @skewed() {
  %c11 = arith.constant 11 : index
  et.task @a tiles(%i) in (%c11) {
  }
  et.schedule static workers(4) {
    et.worker 0 {
      et.run @a tiles [0, 1, 2, 3, 4, 5, 6, 7]
    }
    et.worker 1 {
      et.run @a tiles [8]
    }
    et.worker 2 {
      et.run @a tiles [9]
    }
    et.worker 3 {
      et.run @a tiles [10]
    }
  }
}
