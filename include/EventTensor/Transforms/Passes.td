//===- Passes.td - EventTensor transformation passes -------*- tablegen -*-===//

#ifndef EVENTTENSOR_TRANSFORMS_PASSES_TD
#define EVENTTENSOR_TRANSFORMS_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// Verification
//===----------------------------------------------------------------------===//

def VerifyEventGraphPass : Pass<"et-verify-event-graph", "KernelOp"> {
  let summary = "checks whole-kernel invariants of the task/event graph";
  let description = [{
    Builds the task/event graph of each `et.kernel` (the `EventGraph`
    analysis) and reports, on the offending op:

    - a wait on an event that no task signals, or on a statically known
      element that no tile signals (a certain deadlock);
    - dependency cycles between tasks (each task on the cycle gets a note);
    - event indices that are statically out of bounds;
    - an explicit `expected` count that disagrees with the derived one.

    Rank mismatches are local and checked by the op verifiers. The pass does
    not change the IR. With `emit-counts`, it also reports each event's
    expected count as a remark: `static` (known at compile time), `symbolic`
    (an expression of runtime sizes; `e0, e1, ...` are the element's
    coordinates) or `device` (known only on the device), for example:

    ```
    remark: expected count: symbolic, arg1
    ```
  }];
  let options = [
    Option<"emitCounts", "emit-counts", "bool", /*default=*/"false",
           "Report each event's derived expected count as a remark">,
  ];
  let statistics = [
    Statistic<"numEvents", "num-events", "Event tensors checked">,
    Statistic<"numEdges", "num-edges", "Producer-consumer task edges">,
  ];
}

#endif // EVENTTENSOR_TRANSFORMS_PASSES_TD
