//===- EventTensorTypes.td - EventTensor types -------------*- tablegen -*-===//
//
// Types of the et dialect.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORTYPES_TD
#define EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORTYPES_TD

include "EventTensor/Dialect/EventTensor/EventTensorDialect.td"

def ET_EventType : ET_Type<"Event", "event"> {
  let summary = "an N-d array of event counters";
  let description = [{
    An event tensor: an N-d array of counters, one per element, indexed by
    tile coordinates. Each dimension is either static (an integer) or dynamic
    (`?`, its extent given by an SSA value where the tensor is created). A
    rank-0 event tensor (`!et.event<>`) is a single counter.

    An element is *ready* when it has received its expected number of
    signals; the expected count is derived from the tasks that signal it.

    Example:

    ```mlir
    !et.event<>          // one counter
    !et.event<16>        // 16 counters, e.g. one per output tile
    !et.event<?x4>       // a dynamic number of rows of 4 counters
    ```

    Lowering: a region of 32-bit counters in GPU global memory (or host memory
    on the CPU target), signalled with a release fence followed by an atomic
    add and waited on with `ld.acquire.gpu` in a bounded spin.
  }];
  let parameters = (ins ArrayRefParameter<"int64_t", "dimension sizes">:$shape);
  let hasCustomAssemblyFormat = 1;
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// Number of dimensions.
    int64_t getRank() const { return getShape().size(); }
    /// Number of dynamic (`?`) dimensions.
    int64_t getNumDynamicDims() const;
    /// True when every dimension is static.
    bool hasStaticShape() const { return getNumDynamicDims() == 0; }
    /// True when dimension `dim` is dynamic.
    bool isDynamicDim(unsigned dim) const {
      return ::mlir::ShapedType::isDynamic(getShape()[dim]);
    }
  }];
}

#endif // EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORTYPES_TD
