//===- LowerCollectives.cpp - et.allreduce to signals and a sum task ------===//
//
// Implements et-lower-collectives: each et.allreduce of an unscheduled
// kernel becomes signals of its `after` event to every device and one task
// that adds every device's partial sums (read through et.peer) into the
// destination, in device order, per element of `after` and column block.
//
//===----------------------------------------------------------------------===//

#include "EventTensor/Transforms/Passes.h"
#include "EventTensor/Transforms/Scheduling.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

namespace mlir::et {
#define GEN_PASS_DEF_LOWERCOLLECTIVESPASS
#include "EventTensor/Transforms/Passes.h.inc"
} // namespace mlir::et

using namespace mlir;
using namespace mlir::et;

namespace {

/// f32 columns per vector access of the sum.
constexpr int64_t kWidth = 4;

struct LowerCollectivesPass
    : public mlir::et::impl::LowerCollectivesPassBase<LowerCollectivesPass> {
  using Base::Base;

  void runOnOperation() override {
    KernelOp kernel = getOperation();
    SmallVector<AllReduceOp> ops(kernel.getBody().front().getOps<AllReduceOp>());
    if (ops.empty())
      return;
    if (ScheduleOp schedule = getSchedule(kernel)) {
      InFlightDiagnostic diag = ops.front().emitOpError(
          "is in a kernel that is already scheduled; run et-lower-collectives before scheduling");
      diag.attachNote(schedule.getLoc()) << "existing schedule";
      return signalPassFailure();
    }
    SymbolTable symbols(kernel);
    for (AllReduceOp op : ops)
      if (failed(lower(kernel, op, symbols)))
        return signalPassFailure();
    numAllReduces += ops.size();
  }

  LogicalResult lower(KernelOp kernel, AllReduceOp op, SymbolTable &symbols) {
    Location loc = op.getLoc();
    int64_t devices = kernel.getNumDevices();
    Value after = op.getAfter();
    auto create = after.getDefiningOp<EventCreateOp>();
    auto type = cast<EventType>(after.getType());
    // The producers' signals reach every device.
    SmallVector<EventSignalOp> signals;
    for (Operation *user : after.getUsers())
      if (auto signal = dyn_cast<EventSignalOp>(user))
        signals.push_back(signal);
    for (EventSignalOp signal : signals) {
      if (signal.getPeer()) {
        InFlightDiagnostic diag = signal.emitOpError(
            "names a peer, but its event is summed by an et.allreduce, whose lowering sends it to every device");
        diag.attachNote(loc) << "the et.allreduce";
        return diag;
      }
      if (devices == 1)
        continue;
      OpBuilder b(signal);
      for (int64_t k = 0; k < devices; ++k)
        EventSignalOp::create(b, signal.getLoc(), after, signal.getIndices(),
                              arith::ConstantIndexOp::create(b, signal.getLoc(), k));
      signal.erase();
    }

    OpBuilder b(op);
    // The task: (elements of `after`, column blocks).
    auto partialType = cast<MemRefType>(op.getPartial().getType());
    int64_t cols = partialType.getDimSize(1), block = op.getBlock();
    SmallVector<Value> extents;
    unsigned dyn = 0;
    for (int64_t d : type.getShape())
      extents.push_back(ShapedType::isDynamic(d) ? create.getDynamicSizes()[dyn++]
                                                 : arith::ConstantIndexOp::create(b, loc, d).getResult());
    extents.push_back(arith::ConstantIndexOp::create(b, loc, cols / block));
    std::string name;
    if (std::optional<StringRef> given = op.getTask()) {
      name = given->str();
      if (Operation *taken = symbols.lookup(name)) {
        InFlightDiagnostic diag = op.emitOpError("task name '") << name << "' is already taken";
        diag.attachNote(taken->getLoc()) << "by this op";
        return diag;
      }
    } else {
      for (int i = 0;; ++i) {
        name = "allreduce_" + std::to_string(i);
        if (!symbols.lookup(name))
          break;
      }
    }
    auto task = TaskOp::create(b, loc, name, extents);
    symbols.insert(task);
    int64_t rank = type.getRank();
    task->setAttr(EventTensorDialect::getCostAttrName(),
                  CostAttr::get(b.getContext(), /*bytes=*/4 * block * (devices + 2),
                                /*flops=*/block * devices, /*prologue_bytes=*/0));
    Block &body = task.getBody().front();
    b.setInsertionPointToStart(&body);
    auto ids = body.getArguments();
    SmallVector<Value> element(ids.begin(), ids.begin() + rank);
    EventWaitOp::create(b, loc, after, element);
    emitSum(b, loc, op, ids[rank], devices, block);
    EventSignalOp::create(b, loc, op.getDone(), element, Value());
    op.erase();
    return success();
  }

  /// into[0:rows, c*block : (c+1)*block] += the devices' partials, in device
  /// order, 4 f32 columns per thread and step.
  void emitSum(OpBuilder &b, Location loc, AllReduceOp op, Value c, int64_t devices, int64_t block) {
    auto idx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v).getResult(); };
    // Device d's copy: et.peer at offset (d - device_id) mod N.
    SmallVector<Value> copies;
    if (devices == 1) {
      copies.push_back(op.getPartial());
    } else {
      Value self = DeviceIdOp::create(b, loc, b.getIndexType());
      for (int64_t d = 0; d < devices; ++d) {
        Value off = arith::RemUIOp::create(
            b, loc, arith::SubIOp::create(b, loc, idx(d + devices), self), idx(devices));
        copies.push_back(PeerOp::create(b, loc, op.getPartial().getType(), op.getPartial(), off));
      }
    }
    Value tid = ThreadIdOp::create(b, loc, b.getIndexType());
    Value threads = NumThreadsOp::create(b, loc, b.getIndexType());
    Value col0 = arith::MulIOp::create(b, loc, c, idx(block));
    Value total = arith::MulIOp::create(b, loc, op.getRows(), idx(block));
    auto vec = VectorType::get({kWidth}, b.getF32Type());
    scf::ForOp::create(
        b, loc, arith::MulIOp::create(b, loc, tid, idx(kWidth)), total,
        arith::MulIOp::create(b, loc, threads, idx(kWidth)), ValueRange{},
        [&](OpBuilder &b, Location loc, Value e, ValueRange) {
          auto idx = [&](int64_t v) { return arith::ConstantIndexOp::create(b, loc, v).getResult(); };
          Value r = arith::DivUIOp::create(b, loc, e, idx(block));
          Value col = arith::AddIOp::create(b, loc, col0, arith::RemUIOp::create(b, loc, e, idx(block)));
          Value acc;
          for (Value copy : copies) {
            Value v = vector::LoadOp::create(b, loc, vec, copy, ValueRange{r, col});
            acc = acc ? arith::AddFOp::create(b, loc, acc, v).getResult() : v;
          }
          Value old = vector::LoadOp::create(b, loc, vec, op.getInto(), ValueRange{r, col});
          vector::StoreOp::create(b, loc, arith::AddFOp::create(b, loc, old, acc), op.getInto(),
                                  ValueRange{r, col});
          scf::YieldOp::create(b, loc);
        });
  }
};

} // namespace
