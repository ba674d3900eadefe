//===- InitAll.h - Register the project's dialects and passes -----*- C++ -*-===//
//
// One place that lists what et-opt and the Python package register: the et
// dialect, its passes, and the upstream dialects, extensions and passes that
// the project lowers through.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_INITALL_H
#define EVENTTENSOR_INITALL_H

namespace mlir {
class DialectRegistry;
namespace et {

/// Adds the et dialect and the upstream dialects (func, arith, math, scf, cf,
/// memref, vector, index, gpu, nvvm, llvm, affine) and their extensions.
void registerAllDialects(DialectRegistry &registry);

/// Registers the et passes and pipelines and the upstream passes the project
/// lowers through (conversions to LLVM/NVVM, gpu-module-to-binary, ...).
void registerAllPasses();

} // namespace et
} // namespace mlir

#endif // EVENTTENSOR_INITALL_H
