//===- EventTensorRegistration.cpp - Dialect and pass registration --------===//
//
// The `_etRegistration` nanobind extension, loaded by
// `_mlir_libs/_site_initialize_0.py` so that every Context created through
// `event_tensor.ir` knows the et dialect, the upstream dialects it lowers
// through, and the project's passes.
//
//===----------------------------------------------------------------------===//

#include "EventTensor-c/Dialects.h"

#include "mlir-c/IR.h"
#include "mlir/Bindings/Python/Nanobind.h"
#include "mlir/Bindings/Python/NanobindAdaptors.h"

namespace nb = nanobind;

NB_MODULE(_etRegistration, m) {
  m.doc() = "EventTensor dialect and pass registration";

  m.def(
      "register_dialects",
      [](MlirDialectRegistry registry) {
        mlirEventTensorRegisterAllDialects(registry);
      },
      nb::arg("registry"),
      "Adds the et dialect and the upstream dialects it lowers through.");

  m.def(
      "register_passes", []() { mlirEventTensorRegisterAllPasses(); },
      "Registers the et passes and pipelines and the upstream passes used.");
}
