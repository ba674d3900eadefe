//===- Dialects.h - C API for the et dialect ----------------------*- C -*-===//
//
// C API of the et dialect: dialect registration and its types. The Python
// extension is built on this API only.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_C_DIALECTS_H
#define EVENTTENSOR_C_DIALECTS_H

#include "mlir-c/IR.h"

#ifdef __cplusplus
extern "C" {
#endif

MLIR_DECLARE_CAPI_DIALECT_REGISTRATION(EventTensor, et);

/// Adds the et dialect and every upstream dialect the project lowers through
/// (and their extensions) to `registry`.
MLIR_CAPI_EXPORTED void
mlirEventTensorRegisterAllDialects(MlirDialectRegistry registry);

/// Registers the project's passes and pipelines and the upstream passes it
/// uses, so that `PassManager.parse` understands them.
MLIR_CAPI_EXPORTED void mlirEventTensorRegisterAllPasses(void);

//===----------------------------------------------------------------------===//
// EventType
//===----------------------------------------------------------------------===//

/// True when `type` is an `!et.event<...>` type.
MLIR_CAPI_EXPORTED bool mlirTypeIsAEventTensorEventType(MlirType type);

/// The TypeID of `!et.event<...>`.
MLIR_CAPI_EXPORTED MlirTypeID mlirEventTensorEventTypeGetTypeID(void);

/// Returns `!et.event<shape>`; dynamic dimensions are
/// `mlirShapedTypeGetDynamicSize()`. Returns a null type (and emits a
/// diagnostic) when the shape is invalid.
MLIR_CAPI_EXPORTED MlirType mlirEventTensorEventTypeGet(MlirContext ctx,
                                                        intptr_t rank,
                                                        const int64_t *shape);

/// Rank of an event type.
MLIR_CAPI_EXPORTED intptr_t mlirEventTensorEventTypeGetRank(MlirType type);

/// Extent of dimension `dim`; `mlirShapedTypeGetDynamicSize()` when dynamic.
MLIR_CAPI_EXPORTED int64_t mlirEventTensorEventTypeGetDimSize(MlirType type,
                                                              intptr_t dim);

//===----------------------------------------------------------------------===//
// Event graph analysis
//===----------------------------------------------------------------------===//

/// Writes the task/event graph of `kernel` (an et.kernel op) as JSON through
/// `callback`. Returns false, writing nothing, if `kernel` is not an
/// et.kernel.
MLIR_CAPI_EXPORTED bool
mlirEventTensorPrintEventGraphJSON(MlirOperation kernel,
                                   MlirStringCallback callback, void *userData);

/// Same as mlirEventTensorPrintEventGraphJSON, in Graphviz DOT.
MLIR_CAPI_EXPORTED bool
mlirEventTensorPrintEventGraphDOT(MlirOperation kernel,
                                  MlirStringCallback callback, void *userData);

/// Writes the schedule plan of a scheduled `kernel` for concrete runtime
/// sizes as JSON through `callback` (see et::printSchedulePlan). `bindings`
/// is a comma-separated list of `name=value` (kernel argument `i` is `argi`,
/// the `k`-th et.extent.load is `loadk`). On failure writes the error message
/// through `callback` instead and returns false.
MLIR_CAPI_EXPORTED bool
mlirEventTensorPrintSchedulePlanJSON(MlirOperation kernel,
                                     MlirStringRef bindings,
                                     MlirStringCallback callback,
                                     void *userData);

//===----------------------------------------------------------------------===//
// Runtime ABI
//===----------------------------------------------------------------------===//

/// Writes the contract between the worker code and the runtime (control
/// words, error and trace records, counter layout, parameter order; see
/// EventTensor/Conversion/RuntimeABI.h) as JSON through `callback`, for an
/// artifact of the host worker (`hostWorker`) or the GPU kernel, with or
/// without a trace (`profile`), on one device or several (`multiDevice`).
MLIR_CAPI_EXPORTED void mlirEventTensorPrintRuntimeABIJSON(bool hostWorker, bool profile,
                                                           bool multiDevice,
                                                           MlirStringCallback callback,
                                                           void *userData);

#ifdef __cplusplus
}
#endif

#endif // EVENTTENSOR_C_DIALECTS_H
