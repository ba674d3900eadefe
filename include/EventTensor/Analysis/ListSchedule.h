//===- ListSchedule.h - Critical-path list scheduling of tiles -*- C++ -*-===//
//
// A static schedule of a tile graph onto persistent workers, computed on the
// graph alone (no IR is read or written): et-static-schedule records the
// result as an `et.schedule static` op.
//
//===----------------------------------------------------------------------===//

#ifndef EVENTTENSOR_ANALYSIS_LISTSCHEDULE_H
#define EVENTTENSOR_ANALYSIS_LISTSCHEDULE_H

#include "EventTensor/Analysis/TileGraph.h"

namespace mlir::et {

/// Per worker, its program: (task index in the tile graph, tile) entries in
/// order, tile -1 for all of a task with a runtime tile count, whose tiles
/// go to the workers cyclically from `cyclicOffset[task]`.
struct TileSchedule {
  SmallVector<SmallVector<std::pair<unsigned, int64_t>>> programs;
  SmallVector<int64_t> cyclicOffset;
  /// When the last worker is done, under the cost model (ns).
  double makespanNs = 0;
  /// Tiles placed one by one, and tasks placed cyclically.
  int64_t numTiles = 0, numCyclic = 0;
};

/// Critical-path list scheduling of `graph` onto `workers` workers: each
/// tile, highest upward rank first (its duration under `model` plus the
/// largest rank of what waits on it), goes to the worker where it can start
/// first (a dependency on another worker costs `model.syncNs`), among equal
/// starts the one idle longest; a task with a runtime tile count takes every
/// worker, cyclically from the worker free first. Fails when the tiles
/// depend on each other in a cycle.
FailureOr<TileSchedule> listSchedule(const TileGraph &graph, const CostModel &model, int64_t workers);

} // namespace mlir::et

#endif // EVENTTENSOR_ANALYSIS_LISTSCHEDULE_H
