//===- Pipelines.h - End-to-end lowering pipelines ----------------*- C++ -*-===//

#ifndef EVENTTENSOR_CONVERSION_PIPELINES_H
#define EVENTTENSOR_CONVERSION_PIPELINES_H

namespace mlir::et {

/// Registers et-lower-to-nvvm-pipeline and et-lower-to-cpu-pipeline.
void registerEventTensorPipelines();

} // namespace mlir::et

#endif // EVENTTENSOR_CONVERSION_PIPELINES_H
