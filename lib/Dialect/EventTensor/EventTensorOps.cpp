//===- EventTensorOps.cpp - EventTensor ops -------------------------------===//
//
// Parsers, printers, builders and verifiers of the et dialect's ops.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Dialect/EventTensor/EventTensorOps.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/Matchers.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/Interfaces/FunctionImplementation.h"

using namespace mlir;
using namespace mlir::et;

#define GET_OP_CLASSES
#include "EventTensor/Dialect/EventTensor/EventTensorOps.cpp.inc"

//===----------------------------------------------------------------------===//
// KernelOp
//===----------------------------------------------------------------------===//

void KernelOp::build(OpBuilder &builder, OperationState &state, StringRef name,
                     FunctionType type) {
  state.addAttribute(::mlir::SymbolTable::getSymbolAttrName(),
                     builder.getStringAttr(name));
  state.addAttribute(getFunctionTypeAttrName(state.name), TypeAttr::get(type));
  Region *body = state.addRegion();
  Block *block = new Block();
  body->push_back(block);
  for (Type input : type.getInputs())
    block->addArgument(input, state.location);
}

ParseResult KernelOp::parse(OpAsmParser &parser, OperationState &result) {
  auto buildFuncType =
      [](Builder &builder, ArrayRef<Type> argTypes, ArrayRef<Type> results,
         function_interface_impl::VariadicFlag,
         std::string &) { return builder.getFunctionType(argTypes, results); };
  return function_interface_impl::parseFunctionOp(
      parser, result, /*allowVariadic=*/false,
      getFunctionTypeAttrName(result.name), buildFuncType,
      getArgAttrsAttrName(result.name), getResAttrsAttrName(result.name));
}

void KernelOp::print(OpAsmPrinter &p) {
  function_interface_impl::printFunctionOp(
      p, *this, /*isVariadic=*/false, getFunctionTypeAttrName(),
      getArgAttrsAttrName(), getResAttrsAttrName());
}

LogicalResult KernelOp::verify() {
  if (!getFunctionType().getResults().empty())
    return emitOpError("expected no results, got ")
           << getFunctionType().getNumResults();
  // FunctionOpInterface has already checked the entry block against the
  // signature.
  return success();
}

//===----------------------------------------------------------------------===//
// TaskOp
//===----------------------------------------------------------------------===//

void TaskOp::build(OpBuilder &builder, OperationState &state, StringRef name,
                   ValueRange extents) {
  state.addAttribute(::mlir::SymbolTable::getSymbolAttrName(),
                     builder.getStringAttr(name));
  state.addOperands(extents);
  Region *body = state.addRegion();
  Block *block = new Block();
  body->push_back(block);
  for (size_t i = 0, e = extents.size(); i < e; ++i)
    block->addArgument(builder.getIndexType(), state.location);
}

// et.task @name tiles(%i, %j) in (%a, %b) attributes {...} { body }
ParseResult TaskOp::parse(OpAsmParser &parser, OperationState &result) {
  StringAttr name;
  if (parser.parseSymbolName(name, ::mlir::SymbolTable::getSymbolAttrName(),
                             result.attributes))
    return failure();

  SmallVector<OpAsmParser::Argument> tileIds;
  SmallVector<OpAsmParser::UnresolvedOperand> extents;
  if (parser.parseKeyword("tiles") ||
      parser.parseArgumentList(tileIds, OpAsmParser::Delimiter::Paren) ||
      parser.parseKeyword("in") ||
      parser.parseOperandList(extents, OpAsmParser::Delimiter::Paren))
    return failure();
  if (tileIds.size() != extents.size())
    return parser.emitError(parser.getCurrentLocation())
           << "expected as many extents as tile coordinates ("
           << tileIds.size() << "), got " << extents.size();

  Type indexType = parser.getBuilder().getIndexType();
  if (parser.resolveOperands(extents, indexType, result.operands))
    return failure();
  for (OpAsmParser::Argument &arg : tileIds)
    arg.type = indexType;

  if (parser.parseOptionalAttrDictWithKeyword(result.attributes))
    return failure();
  Region *body = result.addRegion();
  if (parser.parseRegion(*body, tileIds))
    return failure();
  if (body->empty())
    body->push_back(new Block());
  return success();
}

void TaskOp::print(OpAsmPrinter &p) {
  p << " ";
  p.printSymbolName(getSymName());
  p << " tiles(";
  llvm::interleaveComma(getTileIds(), p,
                        [&](BlockArgument arg) { p.printOperand(arg); });
  p << ") in (";
  p.printOperands(getExtents());
  p << ")";
  p.printOptionalAttrDictWithKeyword((*this)->getAttrs(),
                                     {::mlir::SymbolTable::getSymbolAttrName()});
  p << " ";
  p.printRegion(getBody(), /*printEntryBlockArgs=*/false,
                /*printBlockTerminators=*/false);
}

LogicalResult TaskOp::verify() {
  Block &body = getBody().front();
  if (body.getNumArguments() != getExtents().size())
    return emitOpError("expected ")
           << getExtents().size()
           << " tile coordinates (one per extent), got "
           << body.getNumArguments();
  for (auto [i, arg] : llvm::enumerate(body.getArguments()))
    if (!arg.getType().isIndex())
      return emitOpError("tile coordinate #")
             << i << " must be of type index, got " << arg.getType();
  if (getExtents().empty())
    return emitOpError("expected at least one tile dimension");
  for (auto [i, extent] : llvm::enumerate(getExtents())) {
    APInt value;
    if (matchPattern(extent, m_ConstantInt(&value)) && value.getSExtValue() < 1)
      return emitOpError("tile extent #")
             << i << " must be positive, got " << value.getSExtValue();
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Events
//===----------------------------------------------------------------------===//

LogicalResult EventCreateOp::verify() {
  EventType type = getResult().getType();
  int64_t expected = type.getNumDynamicDims();
  int64_t actual = getDynamicSizes().size();
  if (expected != actual)
    return emitOpError("expected ")
           << expected << " dynamic size operands for " << type << ", got "
           << actual;
  return success();
}

/// Shared by wait and signal: one index per event dimension, and no
/// statically negative index.
static LogicalResult verifyEventAccess(Operation *op, EventType type,
                                       ValueRange indices) {
  if (static_cast<int64_t>(indices.size()) != type.getRank())
    return op->emitOpError("expected ")
           << type.getRank() << " indices for " << type << ", got "
           << indices.size();
  for (auto [i, index] : llvm::enumerate(indices)) {
    APInt value;
    if (!matchPattern(index, m_ConstantInt(&value)))
      continue;
    int64_t v = value.getSExtValue();
    int64_t size = type.getShape()[i];
    if (v < 0 || (!ShapedType::isDynamic(size) && v >= size))
      return op->emitOpError("index #")
             << i << " is out of bounds: " << v << " not in [0, "
             << (ShapedType::isDynamic(size) ? std::string("?")
                                             : std::to_string(size))
             << ")";
  }
  return success();
}

LogicalResult EventWaitOp::verify() {
  return verifyEventAccess(*this, getEvent().getType(), getIndices());
}

LogicalResult EventSignalOp::verify() {
  return verifyEventAccess(*this, getEvent().getType(), getIndices());
}

//===----------------------------------------------------------------------===//
// ExtentLoadOp
//===----------------------------------------------------------------------===//

LogicalResult ExtentLoadOp::verify() {
  auto memref = cast<MemRefType>(getSource().getType());
  if (static_cast<int64_t>(getIndices().size()) != memref.getRank())
    return emitOpError("expected ")
           << memref.getRank() << " indices for " << memref << ", got "
           << getIndices().size();
  Type elt = memref.getElementType();
  if (!elt.isIndex() && !elt.isSignlessInteger())
    return emitOpError("expected a memref of integers or index, got ")
           << memref;
  if (getAfterEvent())
    return verifyEventAccess(*this, getAfterEvent().getType(),
                             getAfterIndices());
  if (!getAfterIndices().empty())
    return emitOpError("has 'after' indices but no 'after' event");
  return success();
}
