//===- EventTensorOps.td - EventTensor ops -----------------*- tablegen -*-===//
//
// Ops of the et dialect, grouped by concept.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSOROPS_TD
#define EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSOROPS_TD

include "EventTensor/Dialect/EventTensor/EventTensorDialect.td"
include "EventTensor/Dialect/EventTensor/EventTensorTypes.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Events
//===----------------------------------------------------------------------===//

def ET_EventCreateOp : ET_Op<"event.create", [
    MemoryEffects<[MemAlloc<DefaultResource>]>]> {
  let summary = "creates an event tensor";
  let description = [{
    Creates an event tensor of the result type. Each dynamic (`?`) dimension
    of the result type takes its extent from one `index` operand, in order.
    Every counter starts at zero at the start of each kernel launch.

    Example:

    ```mlir
    %done = et.event.create() : !et.event<16>
    %rows = et.event.create(%num_rows) : !et.event<?x4>
    ```

    Lowering: a slice of the kernel's counter buffer; the offsets of the
    slices are computed on the device from the dynamic extents. Counters are
    epoch-based, so launches need not clear them.
  }];
  let arguments = (ins Variadic<Index>:$dynamic_sizes);
  let results = (outs ET_EventType:$result);
  let assemblyFormat = "`(` $dynamic_sizes `)` attr-dict `:` qualified(type($result))";
  let hasVerifier = 1;
}

#endif // EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSOROPS_TD
