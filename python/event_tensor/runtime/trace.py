"""In-kernel profiles: what a kernel compiled with `profile=True` records for
every tile (worker, task, tile, start and end time in ns), turned into the
simulator's result type so that the same Chrome trace and Gantt chart code
draws measured and predicted schedules."""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .abi import RECORD_END, RECORD_START, RECORD_WORDS

__all__ = ["Trace"]


@dataclass
class Trace:
    """The tiles one launch ran, with times in ns relative to the first
    start: (worker, task, tile, start, ready, end), where `start` is the
    dispatch, `ready` the moment the tile's last wait was satisfied (equal
    to `start` without waits) and `end` the end of the tile."""

    kernel: str
    workers: int
    tasks: list[str]
    records: list[tuple[int, int, int, int, int, int]]  # worker, task, tile, start, ready, end
    dropped: int = 0  # records that did not fit in the trace buffer
    mode: str = "static"
    extra: dict[str, Any] = field(default_factory=dict)
    # The step of each record (kernels with several steps per launch; else 0).
    steps: list[int] = field(default_factory=list)

    @classmethod
    def from_words(cls, metadata: dict, words: list[int], count: int, capacity: int,
                   origin: int | None = None, per_worker: bool = False) -> "Trace":
        """Times are relative to the earliest record, or to `origin` (a raw
        clock value: the earliest of several devices' records that share a
        clock). `count` records were written; the first `capacity` slots of
        `words` hold them in order, or, with `per_worker` (the GPU's layout:
        each worker fills its own region of capacity / workers slots, the
        buffer cleared before the launch), wherever their end is nonzero."""
        if per_worker:
            ends = words[RECORD_END:capacity * RECORD_WORDS:RECORD_WORDS]
            raw = [tuple(words[i * RECORD_WORDS:(i + 1) * RECORD_WORDS]) for i, e in enumerate(ends) if e]
        else:
            raw = [tuple(words[i * RECORD_WORDS:(i + 1) * RECORD_WORDS]) for i in range(min(count, capacity))]
        t0 = min((r[RECORD_START] for r in raw), default=0) if origin is None else origin
        stepped = [((w, t, tile, s - t0, r - t0, e - t0), step) for w, t, tile, s, r, e, step in raw]
        stepped.sort(key=lambda x: (x[0][3], x[0][0]))
        records = [rec for rec, _ in stepped]
        dropped = max(0, count - len(raw))
        if dropped:
            where = (f"the workers' regions of {capacity // max(int(metadata['workers']), 1)} records each"
                     if per_worker else f"the buffer of {capacity} records")
            warnings.warn(f"profile of {metadata['kernel']}: {dropped} of {count} tile records did not fit in "
                          f"{where}; pass a larger trace_capacity to the launcher", RuntimeWarning, stacklevel=3)
        return cls(metadata["kernel"], int(metadata["workers"]), list(metadata.get("tasks", [])), records,
                   dropped=dropped, mode=metadata.get("mode", "static"), steps=[step for _, step in stepped])

    @property
    def makespan_ns(self) -> int:
        return max((r[5] for r in self.records), default=0)

    def to_result(self):
        """A `simulator.SimResult` of the measured schedule: each tile spans
        dispatch to end, its `main_start` is when its waits were done."""
        from ..simulator import SimResult, TaskInfo, TileRecord

        busy = [0.0] * self.workers
        tiles = []
        counts = [0] * len(self.tasks)
        steps = self.steps or [0] * len(self.records)
        for (w, t, tile, s, r, e), step in zip(self.records, steps):
            busy[w] += e - s
            if 0 <= t < len(counts):
                counts[t] += 1
            name = self.tasks[t] if 0 <= t < len(self.tasks) else f"task{t}"
            tiles.append(TileRecord(name, t, tile, w, float(s), float(r), float(e), step=step))
        span = float(self.makespan_ns)
        util = [b / span if span else 0.0 for b in busy]
        infos = [TaskInfo(n, counts[i], 0.0, 0.0) for i, n in enumerate(self.tasks)]
        return SimResult(span, self.workers, busy, util, sum(util) / max(len(util), 1), tiles,
                         kernel=self.kernel, mode=f"{self.mode}, measured", tasks=infos)

    def breakdown(self, key=None) -> dict[str, dict[str, float]]:
        """Time per task kind (`key(task name)`, default: the name up to its
        last `_`, so `q_3` counts as `q`): tiles, waiting (dispatch to
        ready) and working (ready to end) in ns, summed over workers; plus
        `idle`: worker time outside any tile."""
        if key is None:
            key = lambda n: n.rsplit("_", 1)[0] if n.rsplit("_", 1)[-1].isdigit() else n  # noqa: E731
        out: dict[str, dict[str, float]] = {}
        covered = 0.0
        for w, t, tile, s, r, e in self.records:
            name = self.tasks[t] if 0 <= t < len(self.tasks) else f"task{t}"
            row = out.setdefault(key(name), {"tiles": 0, "wait_ns": 0.0, "work_ns": 0.0})
            row["tiles"] += 1
            row["wait_ns"] += r - s
            row["work_ns"] += e - r
            covered += e - s
        out["idle"] = {"tiles": 0, "wait_ns": 0.0,
                       "work_ns": max(0.0, self.workers * float(self.makespan_ns) - covered)}
        return out

    def chrome_trace(self, path: str | Path | None = None) -> dict:
        from ..simulator import chrome_trace

        return chrome_trace(self.to_result(), path)

    def gantt_png(self, path: str | Path, *, title: str | None = None) -> None:
        from ..simulator import gantt_png

        gantt_png(self.to_result(), path, title=title)
