//===- Dialects.cpp - C API for the et dialect ----------------------------===//
//
// Implements include/EventTensor-c/Dialects.h.
//
//===----------------------------------------------------------------------===//

#include "EventTensor-c/Dialects.h"

#include "EventTensor/Analysis/EventGraph.h"
#include "EventTensor/Analysis/TileGraph.h"
#include "EventTensor/Conversion/RuntimeABI.h"
#include "EventTensor/Dialect/EventTensor/EventTensorDialect.h"
#include "EventTensor/Dialect/EventTensor/EventTensorTypes.h"
#include "EventTensor/InitAll.h"

#include "mlir/CAPI/IR.h"
#include "mlir/CAPI/Registration.h"
#include "mlir/CAPI/Support.h"
#include "mlir/CAPI/Utils.h"
#include "mlir/IR/Diagnostics.h"

using namespace mlir;

MLIR_DEFINE_CAPI_DIALECT_REGISTRATION(EventTensor, et, et::EventTensorDialect)

void mlirEventTensorRegisterAllDialects(MlirDialectRegistry registry) {
  et::registerAllDialects(*unwrap(registry));
}

void mlirEventTensorRegisterAllPasses(void) {
  static bool once = [] {
    et::registerAllPasses();
    return true;
  }();
  (void)once;
}

bool mlirTypeIsAEventTensorEventType(MlirType type) {
  return isa<et::EventType>(unwrap(type));
}

MlirTypeID mlirEventTensorEventTypeGetTypeID(void) {
  return wrap(et::EventType::getTypeID());
}

MlirType mlirEventTensorEventTypeGet(MlirContext ctx, intptr_t rank,
                                     const int64_t *shape) {
  MLIRContext *context = unwrap(ctx);
  return wrap(et::EventType::getChecked(
      [context] { return emitError(UnknownLoc::get(context)); }, context,
      ArrayRef<int64_t>(shape, rank)));
}

intptr_t mlirEventTensorEventTypeGetRank(MlirType type) {
  return cast<et::EventType>(unwrap(type)).getRank();
}

int64_t mlirEventTensorEventTypeGetDimSize(MlirType type, intptr_t dim) {
  return cast<et::EventType>(unwrap(type)).getShape()[dim];
}

template <typename PrintFn>
static bool printGraph(MlirOperation kernel, MlirStringCallback callback,
                       void *userData, PrintFn print) {
  auto op = dyn_cast<et::KernelOp>(unwrap(kernel));
  if (!op)
    return false;
  et::EventGraph graph(op);
  mlir::detail::CallbackOstream stream(callback, userData);
  print(graph, stream);
  stream.flush();
  return true;
}

bool mlirEventTensorPrintEventGraphJSON(MlirOperation kernel,
                                        MlirStringCallback callback,
                                        void *userData) {
  return printGraph(kernel, callback, userData,
                    [](et::EventGraph &g, raw_ostream &os) { g.printJSON(os); });
}

bool mlirEventTensorPrintEventGraphDOT(MlirOperation kernel,
                                       MlirStringCallback callback,
                                       void *userData) {
  return printGraph(kernel, callback, userData,
                    [](et::EventGraph &g, raw_ostream &os) { g.printDOT(os); });
}

bool mlirEventTensorPrintSchedulePlanJSON(MlirOperation kernel,
                                          MlirStringRef bindings,
                                          MlirStringCallback callback,
                                          void *userData) {
  mlir::detail::CallbackOstream stream(callback, userData);
  auto fail = [&](const std::string &message) {
    stream << message;
    stream.flush();
    return false;
  };
  auto op = dyn_cast<et::KernelOp>(unwrap(kernel));
  if (!op)
    return fail("expected an 'et.kernel' operation");
  et::SizeBindings sizes;
  SmallVector<StringRef> items;
  unwrap(bindings).split(items, ',', -1, /*KeepEmpty=*/false);
  for (StringRef item : items) {
    auto [name, value] = item.split('=');
    int64_t v;
    if (name.trim().empty() || value.trim().getAsInteger(10, v))
      return fail("malformed size binding '" + item.str() +
                  "' (expected name=integer)");
    sizes[name.trim()] = v;
  }
  std::string error;
  std::string out;
  llvm::raw_string_ostream os(out);
  if (failed(et::printSchedulePlan(op, sizes, os, error)))
    return fail(error);
  stream << out;
  stream.flush();
  return true;
}

void mlirEventTensorPrintRuntimeABIJSON(bool hostWorker, bool profile, bool multiDevice,
                                        MlirStringCallback callback, void *userData) {
  mlir::detail::CallbackOstream stream(callback, userData);
  stream << llvm::json::Value(et::abi::runtimeABIToJSON(hostWorker, profile, multiDevice));
  stream.flush();
}
