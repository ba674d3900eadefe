//===- MultiDevice.cpp - Peers and the barrier across devices -------------===//
//
// A kernel with devices = N runs as N copies, one per device: each copy
// reaches the others' memory through the copies of its symmetric arguments
// and their counter buffers (its parameters), and the copies meet at the
// end of every launch (docs/lowering.md, "Several devices").
//
//===----------------------------------------------------------------------===//

#include "WorkerEmitter.h"

using namespace mlir;
using namespace mlir::et;
using namespace mlir::et::workers;

Value WorkerEmitter::peerDevice(Value k) {
  Value n = idx(numDevices);
  Value r = arith::RemSIOp::create(b, loc, k, n);
  Value nonNegative = arith::AddIOp::create(b, loc, r, n);
  return arith::RemUIOp::create(
      b, loc, arith::AddIOp::create(b, loc, deviceIndex, nonNegative), n);
}

Value WorkerEmitter::selectCopy(ArrayRef<Value> copies, Value device) {
  Value chosen = copies[0];
  for (int64_t d = 1; d < static_cast<int64_t>(copies.size()); ++d)
    chosen = arith::SelectOp::create(
        b, loc,
        arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, device,
                              idx(d)),
        copies[d], chosen);
  return chosen;
}

void WorkerEmitter::bindDeviceParameters() {
  if (numDevices <= 1) {
    deviceIndex = idx(0);
    return;
  }
  deviceIndex = toIndex(param(abi::WorkerParam::Device));
  for (int64_t d = 0; d < numDevices; ++d)
    peerCounters.push_back(param(abi::WorkerParam::PeerCounters, d));
  unsigned next = 0;
  for (unsigned i : symmetric) {
    SmallVector<Value> &copies = peerCopies[param(abi::WorkerParam::Arguments, i)];
    for (int64_t d = 0; d < numDevices; ++d)
      copies.push_back(param(abi::WorkerParam::PeerArguments, next++));
  }
}

Value WorkerEmitter::peerCopy(PeerOp peer) {
  if (numDevices <= 1)
    return peer.getBuffer();
  // The verifier makes the buffer a symmetric kernel argument, which is now
  // the worker's argument for the local copy.
  auto it = peerCopies.find(peer.getBuffer());
  assert(it != peerCopies.end() && "et.peer of a non-symmetric buffer");
  b.setInsertionPoint(peer);
  return selectCopy(it->second, peerDevice(peer.getOffset()));
}

void WorkerEmitter::emitDeviceBarrier(Value ok) {
  auto ifOk = scf::IfOp::create(b, loc, ok, /*withElse=*/false);
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(ifOk.thenBlock());
  Value word = arith::AddIOp::create(b, loc, bankBase, eventCounters);
  {
    auto first = scf::IfOp::create(b, loc, isThread0(), /*withElse=*/false);
    OpBuilder::InsertionGuard inner(b);
    b.setInsertionPointToStart(first.thenBlock());
    LLVM::FenceOp::create(b, loc, LLVM::AtomicOrdering::release, StringRef());
    for (int64_t k = 1; k < numDevices; ++k) {
      Value copy = selectCopy(peerCounters, peerDevice(idx(k)));
      target.systemAdd(*this, elementPointer(basePointer(copy), word, b.getI32Type()));
    }
  }
  auto worker0 = scf::IfOp::create(
      b, loc,
      arith::CmpIOp::create(b, loc, arith::CmpIPredicate::eq, workerId, idx(0)),
      /*withElse=*/false);
  b.setInsertionPointToStart(worker0.thenBlock());
  auto [region, scope] = openRegion(TypeRange{}, [] { return SmallVector<Value>{}; });
  // Reported as a wait of no task on the event after the last one. A
  // timeout here is the consequence of another device's trouble, which
  // that device reports: it stops only this device, so it cannot cut the
  // other device short before it records the cause.
  emitSpin(scope, word, idx((numDevices - 1) * numWorkers), idx(-1), idx(-1),
           idx(layouts.size()), idx(0), StringRef(), /*localOnly=*/true);
  scf::YieldOp::create(b, loc);
}
