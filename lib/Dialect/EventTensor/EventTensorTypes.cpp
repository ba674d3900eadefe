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

#include <limits>

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
  // One counter word per element and bank: at most 2^31 - 1 elements
  // (the product of the static dimensions, formed without overflow).
  constexpr int64_t kMaxElements = std::numeric_limits<int32_t>::max();
  int64_t elements = 1;
  for (auto [dim, size] : llvm::enumerate(shape)) {
    if (ShapedType::isDynamic(size))
      continue;
    if (size < 1)
      return emitError() << "event tensor dimension " << dim
                         << " must be positive or '?', got " << size;
    if (size > kMaxElements / elements)
      return emitError() << "event tensor of more than " << kMaxElements
                         << " elements (2^31 - 1, one counter word each): dimension " << dim << " (" << size
                         << ") times the dimensions before it (" << elements << ")";
    elements *= size;
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
