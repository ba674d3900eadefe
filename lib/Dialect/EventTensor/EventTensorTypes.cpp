//===- EventTensorTypes.cpp - EventTensor types ---------------------------===//
//
// Parsing, printing and verification of the et dialect's types.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Dialect/EventTensor/EventTensorTypes.h"
#include "EventTensor/Dialect/EventTensor/EventTensorDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::et;

#define GET_TYPEDEF_CLASSES
#include "EventTensor/Dialect/EventTensor/EventTensorOpsTypes.cpp.inc"

void EventTensorDialect::registerTypes() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "EventTensor/Dialect/EventTensor/EventTensorOpsTypes.cpp.inc"
      >();
}

//===----------------------------------------------------------------------===//
// EventType
//===----------------------------------------------------------------------===//

int64_t EventType::getNumDynamicDims() const {
  return llvm::count_if(getShape(), ShapedType::isDynamic);
}

LogicalResult
EventType::verify(function_ref<InFlightDiagnostic()> emitError,
                  ArrayRef<int64_t> shape) {
  for (auto [dim, size] : llvm::enumerate(shape)) {
    if (!ShapedType::isDynamic(size) && size < 1)
      return emitError() << "event tensor dimension " << dim
                         << " must be positive or '?', got " << size;
  }
  return success();
}

// `<` (dim (`x` dim)*)? `>` where dim is an integer or `?`.
Type EventType::parse(AsmParser &parser) {
  SmallVector<int64_t> shape;
  if (parser.parseLess())
    return {};
  if (failed(parser.parseOptionalGreater())) {
    if (parser.parseDimensionList(shape, /*allowDynamic=*/true,
                                  /*withTrailingX=*/false) ||
        parser.parseGreater())
      return {};
  }
  return parser.getChecked<EventType>(parser.getContext(), shape);
}

void EventType::print(AsmPrinter &printer) const {
  printer << "<";
  printer.printDimensionList(getShape());
  printer << ">";
}
