//===- EventTensorAttrs.td - EventTensor attributes --------*- tablegen -*-===//
//
// Attributes and enums of the et dialect: per-task costs, the cost model a
// schedule was computed with, and the schedule kind.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORATTRS_TD
#define EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORATTRS_TD

include "EventTensor/Dialect/EventTensor/EventTensorDialect.td"
include "mlir/IR/EnumAttr.td"

class ET_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<EventTensor_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def ET_CostAttr : ET_Attr<"Cost", "cost"> {
  let summary = "the work of one tile of a task: bytes moved and flops";
  let description = [{
    The cost of one tile of an `et.task`: the bytes it moves to or from
    global memory and the floating-point operations it performs. Schedulers
    derive a cost from the task body; an `et.cost` attribute on the task
    overrides it (for bodies whose work the derivation cannot see, such as
    calls, or to model a task before its body is written).

    The optional `prologue_bytes` (at most `bytes`) is the part of the bytes
    a tile may load before its dependencies are ready, such as its weights;
    derived costs count the loads before the first `et.event.wait`.

    Example:

    ```mlir
    et.task @qkv_proj tiles(%n) in (%c32) attributes {et.cost = #et.cost<bytes = 262144, flops = 131072, prologue_bytes = 262144>} {
      ...
    }
    ```
  }];
  let parameters = (ins "int64_t":$bytes, "int64_t":$flops,
                        DefaultValuedParameter<"int64_t", "0">:$prologue_bytes);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def ET_CostModelAttr : ET_Attr<"CostModel", "cost_model"> {
  let summary = "the machine parameters a schedule was computed with";
  let description = [{
    The cost model that turns a tile's bytes and flops into a duration:
    `max(bytes / (bandwidth_gbps / workers), flops / (gflops / workers)) +
    dispatch_ns`, in nanoseconds (a worker's share of the device's memory
    bandwidth and peak flops, plus the per-tile dispatch overhead). A
    dependency between tiles on different workers costs `sync_ns` more (the
    latency for a waiting worker to see the signal). Recorded on
    `et.schedule` so that the simulator and the runtime reuse it.

    Example:

    ```mlir
    #et.cost_model<bandwidth_gbps = 4800, gflops = 989000, dispatch_ns = 300, sync_ns = 1000>
    ```
  }];
  let parameters = (ins "int64_t":$bandwidth_gbps, "int64_t":$gflops,
                        "int64_t":$dispatch_ns, "int64_t":$sync_ns);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def ET_ScheduleKind : I32EnumAttr<"ScheduleKind",
    "how the tiles of a kernel are assigned to persistent workers", [
      I32EnumAttrCase<"Static", 0, "static">,
      I32EnumAttrCase<"Dynamic", 1, "dynamic">]> {
  let cppNamespace = "::mlir::et";
  let genSpecializedAttr = 0;
}

def ET_ScheduleKindAttr : EnumAttr<EventTensor_Dialect, ET_ScheduleKind,
                                   "schedule_kind">;

#endif // EVENTTENSOR_DIALECT_EVENTTENSOR_EVENTTENSORATTRS_TD
