//===- EventTensorModule.cpp - Python extension of the et dialect ---------===//
//
// The `_etDialects` nanobind extension: the et dialect's custom type classes
// and the compiler's queries (event graph, schedule plan, runtime ABI).
// Ops are generated from ODS, never bound here. Dialect and pass registration
// live in `_etRegistration` (EventTensorRegistration.cpp), which the package
// imports while `event_tensor.ir` is still initializing; this module needs a
// fully initialized `ir` to subclass its Type.
//
//===----------------------------------------------------------------------===//

#include "EventTensor-c/Dialects.h"

#include "mlir-c/BuiltinTypes.h"
#include "mlir-c/IR.h"
#include "mlir/Bindings/Python/Nanobind.h"
#include "mlir/Bindings/Python/NanobindAdaptors.h"

#include <string>
#include <vector>

namespace nb = nanobind;
using namespace mlir::python::nanobind_adaptors;

NB_MODULE(_etDialects, m) {
  m.doc() = "EventTensor dialect types";

  auto printer = [](bool (*print)(MlirOperation, MlirStringCallback, void *)) {
    return [print](MlirOperation op) {
      std::string out;
      auto append = [](MlirStringRef part, void *user) {
        static_cast<std::string *>(user)->append(part.data, part.length);
      };
      if (!print(op, append, &out))
        throw nb::value_error("expected an 'et.kernel' operation");
      return out;
    };
  };
  m.def("event_graph_json", printer(mlirEventTensorPrintEventGraphJSON),
        nb::arg("kernel"),
        "The task/event graph of an et.kernel, with expected counts, as JSON.");
  m.def("event_graph_dot", printer(mlirEventTensorPrintEventGraphDOT),
        nb::arg("kernel"), "The task/event graph of an et.kernel in DOT.");

  m.def(
      "schedule_plan_json",
      [](MlirOperation op, const std::string &bindings) {
        std::string out;
        auto append = [](MlirStringRef part, void *user) {
          static_cast<std::string *>(user)->append(part.data, part.length);
        };
        if (!mlirEventTensorPrintSchedulePlanJSON(
                op, mlirStringRefCreate(bindings.data(), bindings.size()),
                append, &out))
          throw nb::value_error(out.c_str());
        return out;
      },
      nb::arg("kernel"), nb::arg("bindings") = "",
      "The schedule plan of a scheduled et.kernel for concrete sizes "
      "(`name=value,...`), as JSON.");

  m.def(
      "runtime_abi_json",
      [](bool hostWorker, bool profile, bool multiDevice) {
        std::string out;
        auto append = [](MlirStringRef part, void *user) {
          static_cast<std::string *>(user)->append(part.data, part.length);
        };
        mlirEventTensorPrintRuntimeABIJSON(hostWorker, profile, multiDevice, append, &out);
        return out;
      },
      nb::arg("host_worker"), nb::arg("profile"), nb::arg("multi_device"),
      "The contract between the worker code and the runtime (the metadata's "
      "`abi`) as JSON, for the host worker or the GPU kernel.");

  auto et = m.def_submodule("et");

  mlir_type_subclass(et, "EventType", mlirTypeIsAEventTensorEventType,
                     mlirEventTensorEventTypeGetTypeID)
      .def_classmethod(
          "get",
          [](const nb::object &cls, const std::vector<int64_t> &shape,
             MlirContext ctx) {
            MlirType type =
                mlirEventTensorEventTypeGet(ctx, shape.size(), shape.data());
            if (mlirTypeIsNull(type))
              throw nb::value_error(
                  "invalid event tensor shape: every dimension must be "
                  "positive or dynamic");
            return cls(type);
          },
          nb::arg("cls"), nb::arg("shape"), nb::arg("context").none() = nb::none(),
          "Returns !et.event<shape>; use EventType.DYNAMIC for a dynamic dim.")
      .def_property_readonly(
          "rank",
          [](MlirType self) { return mlirEventTensorEventTypeGetRank(self); })
      .def_property_readonly("shape", [](MlirType self) {
        std::vector<int64_t> shape;
        for (intptr_t i = 0, e = mlirEventTensorEventTypeGetRank(self); i < e;
             ++i)
          shape.push_back(mlirEventTensorEventTypeGetDimSize(self, i));
        return shape;
      });
  et.attr("DYNAMIC") = mlirShapedTypeGetDynamicSize();
}
