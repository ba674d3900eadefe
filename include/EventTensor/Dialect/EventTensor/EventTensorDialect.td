//===- EventTensorDialect.td - EventTensor dialect ---------*- tablegen -*-===//
//
// The et dialect definition and the base classes of its ops and types.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORDIALECT_TD
#define EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORDIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

def EventTensor_Dialect : Dialect {
  let name = "et";
  let cppNamespace = "::mlir::et";
  let summary = "Tiled tasks and event tensors for persistent GPU megakernels";
  let description = [{
    The `et` dialect describes one persistent GPU kernel (a *megakernel*) as a
    set of tiled tasks whose dependencies are explicit. Dependencies are
    carried by *event tensors*: N-d arrays of counters indexed by tile
    coordinates. A task waits on elements of event tensors before it runs a
    tile and signals elements after. An element is ready once it has received
    its expected number of signals.

    Event-tensor shapes may be dynamic (batch size, sequence length, number of
    KV splits), so one compiled kernel serves every runtime shape.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  // Verifies the dialect's discardable attributes (`et.cost`,
  // `et.dynamic_shared`, the plans, `et.dynamic_shared_owner`, `et.outline`).
  let hasOperationAttrVerify = 1;
  let extraClassDeclaration = [{
    void registerTypes();
    void registerAttributes();

    /// The discardable attribute that overrides a task's derived cost.
    static constexpr ::llvm::StringLiteral getCostAttrName() { return "et.cost"; }

    /// The unit attribute of a workgroup `memref.alloca` (from the tile
    /// lowering) that lives in the kernel's dynamic shared memory, which
    /// the launch sizes, instead of a static buffer.
    static constexpr ::llvm::StringLiteral getDynamicSharedAttrName() {
      return "et.dynamic_shared";
    }

    /// The plan of an `et.linear` on the GPU (et-plan-tile-ops), a
    /// dictionary: `layout` ("short", "spread" or "rows"), `prefetch`
    /// ("none", "registers" or "shared": weights before the task's first
    /// wait), optionally `stage` (array<i64: byte offset, rows>: its first
    /// rows staged across tiles) and `early_loads` (unit: the spread
    /// layout's first loads right after the wait).
    static constexpr ::llvm::StringLiteral getLinearPlanAttrName() { return "et.linear_plan"; }

    /// The plan of an `et.attention_split` or `et.attention_prefill` on the
    /// GPU (et-lower-tile-ops), a dictionary: `form` (a split: "staged", the
    /// history staged in shared memory before the wait, "mma": tensor
    /// cores, "warps": every warp on each output entry, or "loops"; a
    /// prefill: "mma" or "loops"). The staged and "mma" forms hold the
    /// task's dynamic shared memory.
    static constexpr ::llvm::StringLiteral getAttentionPlanAttrName() { return "et.attention_plan"; }

    /// The tile op that holds an `et.task`'s dynamic shared memory, by op
    /// name ("et.matmul", "et.attention_prefill", "et.attention_split" or
    /// "et.linear"), as the plans of et-lower-tile-ops give it before the
    /// ops are lowered. A task's dynamic shared memory has one user (the
    /// GEMM tiles of a task share their ring); the attribute is in the IR
    /// so that the lowering, and a lowering redone from a copy, reads it.
    static constexpr ::llvm::StringLiteral getDynamicSharedOwnerAttrName() {
      return "et.dynamic_shared_owner";
    }

    /// The unit attribute of an `scf.execute_region` (one block) inside an
    /// `et.task` whose code the worker conversion moves into a function of
    /// its own, never inlined: code that most launches skip (the sampling
    /// filters' row scans) then takes no registers or stack from the
    /// worker's hot path.
    static constexpr ::llvm::StringLiteral getOutlineAttrName() { return "et.outline"; }

    /// The unit argument attribute of a kernel memref allocated on every
    /// device of a multi-device kernel (reachable through `et.peer`).
    static constexpr ::llvm::StringLiteral getSymmetricAttrName() {
      return "et.symmetric";
    }
  }];
}

class ET_Op<string mnemonic, list<Trait> traits = []>
    : Op<EventTensor_Dialect, mnemonic, traits>;

class ET_PureOp<string mnemonic, list<Trait> traits = []>
    : ET_Op<mnemonic, !listconcat(traits, [Pure])>;

class ET_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<EventTensor_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

#endif // EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORDIALECT_TD
