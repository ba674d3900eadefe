//===- EventTensorAttrs.cpp - EventTensor attributes ----------------------===//
//
// Attributes and enums of the et dialect, and the verifier of its
// discardable attributes.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Dialect/EventTensor/EventTensorAttrs.h"
#include "EventTensor/Dialect/EventTensor/EventTensorDialect.h"
#include "EventTensor/Dialect/EventTensor/EventTensorOps.h"

#include "mlir/Dialect/GPU/IR/GPUDialect.h"
#include "mlir/Dialect/MemRef/IR/MemRef.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/TypeSwitch.h"

using namespace mlir;
using namespace mlir::et;

#include "EventTensor/Dialect/EventTensor/EventTensorEnums.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "EventTensor/Dialect/EventTensor/EventTensorAttrs.cpp.inc"

void EventTensorDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "EventTensor/Dialect/EventTensor/EventTensorAttrs.cpp.inc"
      >();
}

LogicalResult CostAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                               int64_t bytes, int64_t flops,
                               int64_t prologueBytes) {
  if (bytes < 0 || flops < 0 || prologueBytes < 0)
    return emitError() << "cost must be non-negative, got bytes = " << bytes
                       << ", flops = " << flops
                       << ", prologue_bytes = " << prologueBytes;
  if (prologueBytes > bytes)
    return emitError() << "prologue_bytes (" << prologueBytes
                       << ") exceeds bytes (" << bytes << ")";
  return success();
}

LogicalResult
CostModelAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                      int64_t bandwidthGbps, int64_t gflops, int64_t dispatchNs,
                      int64_t syncNs) {
  if (bandwidthGbps < 1 || gflops < 1)
    return emitError() << "cost model bandwidth and flops must be positive, "
                          "got bandwidth_gbps = "
                       << bandwidthGbps << ", gflops = " << gflops;
  if (dispatchNs < 0 || syncNs < 0)
    return emitError() << "cost model latencies must be non-negative, got "
                          "dispatch_ns = "
                       << dispatchNs << ", sync_ns = " << syncNs;
  return success();
}

/// A tile plan attribute `name` on `op`: a dictionary, on an op of kind
/// `OpTy` (named `opName`), or a diagnostic and null.
template <typename OpTy>
static DictionaryAttr planDictionary(Operation *op, StringRef name, StringRef opName, Attribute value) {
  if (!isa<OpTy>(op)) {
    op->emitOpError("'") << name << "' is only meaningful on '" << opName << "'";
    return {};
  }
  auto plan = dyn_cast<DictionaryAttr>(value);
  if (!plan)
    op->emitOpError("'") << name << "' must be a dictionary, got " << value;
  return plan;
}

/// Plan `name`'s entry `key` is one of the strings `allowed`.
static LogicalResult verifyPlanChoice(Operation *op, StringRef name, DictionaryAttr plan, StringRef key,
                                      ArrayRef<StringRef> allowed) {
  auto v = dyn_cast_or_null<StringAttr>(plan.get(key));
  if (!v || !llvm::is_contained(allowed, v.getValue()))
    return op->emitOpError("'") << name << "' needs " << key << " = one of \""
                                << llvm::join(allowed, "\", \"") << "\", got " << plan.get(key);
  return success();
}

/// et.linear_plan: on an et.linear, a dictionary of a known layout and
/// prefetch, an optional [offset >= 0, rows >= 1] stage and an optional
/// unit early_loads, nothing else.
static LogicalResult verifyLinearPlan(Operation *op, Attribute value) {
  StringRef name = EventTensorDialect::getLinearPlanAttrName();
  DictionaryAttr plan = planDictionary<LinearOp>(op, name, "et.linear", value);
  if (!plan || failed(verifyPlanChoice(op, name, plan, "layout", {"short", "spread", "rows"})) ||
      failed(verifyPlanChoice(op, name, plan, "prefetch", {"none", "registers", "shared"})))
    return failure();
  for (NamedAttribute entry : plan) {
    StringRef key = entry.getName().getValue();
    if (key == "layout" || key == "prefetch")
      continue;
    if (key == "early_loads" && isa<UnitAttr>(entry.getValue()))
      continue;
    auto stage = dyn_cast<DenseI64ArrayAttr>(entry.getValue());
    if (key == "stage" && stage && stage.size() == 2 && stage[0] >= 0 && stage[1] >= 1)
      continue;
    return op->emitOpError("'") << name << "' has a bad entry " << key << " = " << entry.getValue()
                                << " (stage = array<i64: offset >= 0, rows >= 1>, early_loads a unit)";
  }
  return success();
}

/// et.attention_plan: on an et.attention_split or et.attention_prefill, a
/// dictionary of one form known for the op.
static LogicalResult verifyAttentionPlan(Operation *op, Attribute value) {
  StringRef name = EventTensorDialect::getAttentionPlanAttrName();
  bool prefill = isa<AttentionPrefillOp>(op);
  DictionaryAttr plan = prefill ? planDictionary<AttentionPrefillOp>(op, name, "et.attention_prefill", value)
                                : planDictionary<AttentionSplitOp>(op, name, "et.attention_split' or "
                                                                             "'et.attention_prefill", value);
  if (!plan)
    return failure();
  static const StringRef prefillForms[] = {"mma", "loops"};
  static const StringRef splitForms[] = {"staged", "mma", "warps", "loops"};
  if (failed(verifyPlanChoice(op, name, plan, "form",
                              prefill ? ArrayRef<StringRef>(prefillForms) : ArrayRef<StringRef>(splitForms))))
    return failure();
  for (NamedAttribute entry : plan)
    if (entry.getName().getValue() != "form")
      return op->emitOpError("'") << name << "' has a bad entry " << entry.getName().getValue() << " = "
                                  << entry.getValue() << " (only form)";
  return success();
}

LogicalResult
EventTensorDialect::verifyOperationAttribute(Operation *op,
                                             NamedAttribute attr) {
  if (attr.getName() == getCostAttrName()) {
    if (!isa<TaskOp>(op))
      return op->emitOpError("'")
             << getCostAttrName() << "' is only meaningful on 'et.task'";
    if (!isa<CostAttr>(attr.getValue()))
      return op->emitOpError("'")
             << getCostAttrName()
             << "' must be a #et.cost<bytes = B, flops = F> attribute, got "
             << attr.getValue();
    return success();
  }
  if (attr.getName() == getDynamicSharedAttrName()) {
    auto alloca = dyn_cast<memref::AllocaOp>(op);
    auto space = alloca ? dyn_cast_or_null<gpu::AddressSpaceAttr>(alloca.getType().getMemorySpace())
                        : gpu::AddressSpaceAttr();
    if (!space || space.getValue() != gpu::AddressSpace::Workgroup ||
        !alloca.getType().hasStaticShape())
      return op->emitOpError("'")
             << getDynamicSharedAttrName()
             << "' is only meaningful on a statically shaped workgroup 'memref.alloca'";
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitOpError("'") << getDynamicSharedAttrName() << "' must be a unit attribute";
    return success();
  }
  if (attr.getName() == getDynamicSharedOwnerAttrName()) {
    auto owner = dyn_cast<StringAttr>(attr.getValue());
    if (!isa<TaskOp>(op) || !owner ||
        !llvm::is_contained({"et.matmul", "et.attention_prefill", "et.attention_split", "et.linear"},
                            owner.getValue()))
      return op->emitOpError("'") << getDynamicSharedOwnerAttrName()
                                  << "' must be a tile op's name (\"et.matmul\", \"et.attention_prefill\", "
                                     "\"et.attention_split\" or \"et.linear\") on an 'et.task', got "
                                  << attr.getValue();
    return success();
  }
  if (attr.getName() == getOutlineAttrName()) {
    // By name: the dialect does not depend on SCF for one op kind.
    if (op->getName().getStringRef() != "scf.execute_region" || !op->getParentOfType<TaskOp>())
      return op->emitOpError("'") << getOutlineAttrName()
                                  << "' is only meaningful on an 'scf.execute_region' inside an 'et.task'";
    if (!isa<UnitAttr>(attr.getValue()))
      return op->emitOpError("'") << getOutlineAttrName() << "' must be a unit attribute";
    if (!op->getRegion(0).hasOneBlock())
      return op->emitOpError("'") << getOutlineAttrName()
                                  << "' needs a region of one block (its code becomes a function's body)";
    return success();
  }
  if (attr.getName() == getLinearPlanAttrName())
    return verifyLinearPlan(op, attr.getValue());
  if (attr.getName() == getAttentionPlanAttrName())
    return verifyAttentionPlan(op, attr.getValue());
  return op->emitOpError("unknown et dialect attribute '")
         << attr.getName().getValue() << "'";
}
