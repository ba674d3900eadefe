// RUN: et-opt %s --split-input-file --convert-et-to-nvvm="stage-issue=warp" --verify-diagnostics
// RUN: et-opt %s --split-input-file --convert-et-to-nvvm="stage-issue=warp-ready threads=1024" --verify-diagnostics

// A loader warp joins the worker's threads, so the CTA needs a fixed
// thread count with room for one more warp (at most 992 + 32): 0 (first
// RUN line) and 1024 (second) are rejected.
// expected-error @+1 {{), which needs a fixed thread count of at most 992 (threads), got}}
et.kernel @loader_needs_threads(%w: memref<16x512xbf16>) {
  %c1 = arith.constant 1 : index
  %c4 = arith.constant 4 : index
  et.task @a tiles(%i) in (%c1) {
    %v, %n = et.staged_rows %w rows(%i, %c4) offset 0 : memref<16x512xbf16> -> memref<4x512xbf16, #gpu.address_space<workgroup>>
  }
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @a tiles [0]
    }
  }
}

// -----

// Nothing is staged: no loader warp, whatever the thread count.
et.kernel @no_stage(%y: memref<16xf32>) {
  %c1 = arith.constant 1 : index
  et.task @a tiles(%i) in (%c1) {
  }
  et.schedule static workers(1) {
    et.worker 0 {
      et.run @a tiles [0]
    }
  }
}
