"""A discrete-event simulator for schedules of persistent-kernel tiled tasks.

The compiler lowers a megakernel to a *plan*: tiled tasks (each tile with a
duration from the compiler's cost model), the tiles every tile waits on, and a
schedule for `workers` persistent workers (e.g. thread blocks, one per SM):

* ``"static"``: every worker runs its own ordered program of tiles;
* ``"dynamic"``: workers take tiles from one global queue through a ticket
  counter; a free worker takes the next ticket (earliest-free worker first,
  ties to the lowest worker id).

A tile that a worker starts at time ``start`` first runs its producer-independent
prologue ``[start, start + prologue_ns)`` (e.g. loading weights); its main part
begins at ``main_start = max(start + prologue_ns, end(d) + sync)`` over its
dependencies ``d``, where ``sync`` is ``sync_ns`` when ``d`` ran on another
worker and 0 on the same one, and ends ``tile_ns - prologue_ns`` later. The
worker is occupied from ``start`` to ``end``; time spent waiting is not counted
as busy. When tiles remain but every worker that still has work waits on a tile
that can never finish, `simulate` raises `DeadlockError`.

`simulate` returns a `SimResult`; `chrome_trace`, `gantt_png` and `summary`
present it, and `check_dependencies` checks it against a set of dependencies
(e.g. those of the unoptimized graph).
"""

from __future__ import annotations

import heapq
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

__all__ = [
    "DeadlockError",
    "SimResult",
    "TaskInfo",
    "TileRecord",
    "check_dependencies",
    "chrome_trace",
    "gantt_png",
    "simulate",
    "summary",
]

MODES = ("static", "dynamic")

# At most this many stuck workers are spelled out in a DeadlockError.
_MAX_STUCK_LISTED = 32
# At most this many violations are spelled out by check_dependencies.
_MAX_VIOLATIONS_LISTED = 10


class DeadlockError(RuntimeError):
    """No progress is possible: every worker with work left waits forever.

    `stuck` holds one ``(worker, (task, tile), (dep_task, dep_tile))`` entry per
    stuck worker, with task names, for programmatic inspection.
    """

    def __init__(self, message: str, stuck: list[tuple[int, tuple[str, int], tuple[str, int]]]):
        super().__init__(message)
        self.stuck = stuck


@dataclass(frozen=True)
class TaskInfo:
    """A task of the plan as the simulator used it."""

    name: str
    num_tiles: int
    tile_ns: float
    prologue_ns: float


@dataclass(frozen=True)
class TileRecord:
    """When and where one tile ran (times in ns from the kernel start)."""

    task: str
    task_index: int
    tile: int
    worker: int
    start: float
    main_start: float
    end: float
    prologue_ns: float = 0.0
    step: int = 0  # the step of a kernel that runs several per launch

    @property
    def duration_ns(self) -> float:
        """The tile's own work: prologue plus main part, waiting excluded."""
        return self.prologue_ns + (self.end - self.main_start)

    @property
    def wait_ns(self) -> float:
        """How long the worker spun on dependencies after the prologue."""
        return max(0.0, self.main_start - self.start - self.prologue_ns)


@dataclass
class SimResult:
    """The outcome of `simulate`."""

    makespan_ns: float
    workers: int
    busy_ns: list[float]
    utilization: list[float]
    mean_utilization: float
    records: list[TileRecord]  # in the order the tiles were started
    kernel: str = ""
    mode: str = "static"
    sync_ns: float = 0.0
    tasks: list[TaskInfo] = field(default_factory=list)

    def by_tile(self) -> dict[tuple[int, int], TileRecord]:
        """The records keyed by ``(task_index, tile)``."""
        return {(r.task_index, r.tile): r for r in self.records}

    def worker_records(self, worker: int) -> list[TileRecord]:
        """The tiles `worker` ran, in the order it ran them."""
        return [r for r in self.records if r.worker == worker]

    def check_dependencies(self, plan_or_deps: Mapping[str, Any] | Sequence[Any]) -> None:
        """`check_dependencies(self, deps)`; accepts a plan (its ``"deps"``) too."""
        check_dependencies(self, plan_or_deps)


# --------------------------------------------------------------------------
# Plan validation
# --------------------------------------------------------------------------


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _number(x: Any, what: str) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        raise ValueError(f"{what} must be a number, got {x!r}")
    value = float(x)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{what} must be finite and >= 0, got {x!r}")
    return value


def _tasks(plan: Mapping[str, Any]) -> list[TaskInfo]:
    tasks = plan.get("tasks")
    if not isinstance(tasks, list):
        raise ValueError("plan['tasks'] must be a list")
    out: list[TaskInfo] = []
    for t, task in enumerate(tasks):
        if not isinstance(task, Mapping):
            raise ValueError(f"plan['tasks'][{t}] must be an object")
        name = str(task.get("name", f"task{t}"))
        where = f"task {t} ({name!r})"
        num_tiles = task.get("num_tiles")
        if not _is_int(num_tiles) or num_tiles < 0:
            raise ValueError(f"{where}: num_tiles must be an integer >= 0, got {num_tiles!r}")
        if "tile_ns" not in task:
            raise ValueError(f"{where}: tile_ns is missing")
        tile_ns = _number(task["tile_ns"], f"{where}: tile_ns")
        prologue_ns = _number(task.get("prologue_ns", 0.0), f"{where}: prologue_ns")
        if prologue_ns > tile_ns:
            raise ValueError(f"{where}: prologue_ns {prologue_ns} exceeds tile_ns {tile_ns}")
        out.append(TaskInfo(name, num_tiles, tile_ns, prologue_ns))
    return out


def _tile_ref(ref: Any, tasks: Sequence[TaskInfo], where: str) -> tuple[int, int]:
    if not isinstance(ref, (list, tuple)) or len(ref) != 2:
        raise ValueError(f"{where}: a tile is [task_index, tile], got {ref!r}")
    t, i = ref
    if not _is_int(t) or not 0 <= t < len(tasks):
        raise ValueError(f"{where}: task index {t!r} out of range (the plan has {len(tasks)} tasks)")
    if not _is_int(i) or not 0 <= i < tasks[t].num_tiles:
        raise ValueError(
            f"{where}: tile {i!r} out of range for task {t} ({tasks[t].name!r}, "
            f"{tasks[t].num_tiles} tiles)"
        )
    return t, i


def _deps(raw: Any, tasks: Sequence[TaskInfo], what: str = "plan['deps']") -> list[list[list[tuple[int, int]]]]:
    if not isinstance(raw, list) or len(raw) != len(tasks):
        n = len(raw) if isinstance(raw, list) else type(raw).__name__
        raise ValueError(f"{what} must be a list with one entry per task ({len(tasks)}), got {n}")
    out = []
    for t, per_task in enumerate(raw):
        if not isinstance(per_task, list) or len(per_task) != tasks[t].num_tiles:
            n = len(per_task) if isinstance(per_task, list) else type(per_task).__name__
            raise ValueError(
                f"{what}[{t}] ({tasks[t].name!r}) must list the deps of each of its "
                f"{tasks[t].num_tiles} tiles, got {n}"
            )
        tiles = []
        for i, refs in enumerate(per_task):
            if not isinstance(refs, list):
                raise ValueError(f"{what}[{t}][{i}] must be a list of [task_index, tile]")
            tiles.append([_tile_ref(r, tasks, f"{what}[{t}][{i}]") for r in refs])
        out.append(tiles)
    return out


def _check_cover(order: list[tuple[int, int]], tasks: Sequence[TaskInfo], what: str,
                 where_of: list[str]) -> None:
    """Every tile exactly once in `order` (`where_of[k]` names entry k's place)."""
    seen: dict[tuple[int, int], int] = {}
    for k, ref in enumerate(order):
        if ref in seen:
            t, i = ref
            raise ValueError(
                f"{what}: tile ({tasks[t].name!r}, {i}) appears twice, at "
                f"{where_of[seen[ref]]} and at {where_of[k]}"
            )
        seen[ref] = k
    total = sum(task.num_tiles for task in tasks)
    if len(seen) != total:
        missing = [
            (task.name, i)
            for t, task in enumerate(tasks)
            for i in range(task.num_tiles)
            if (t, i) not in seen
        ]
        shown = ", ".join(f"({n!r}, {i})" for n, i in missing[:8])
        more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
        raise ValueError(f"{what}: {len(missing)} tiles are missing: {shown}{more}")


def _programs(plan: Mapping[str, Any], tasks: Sequence[TaskInfo], workers: int) -> list[list[tuple[int, int]]]:
    raw = plan.get("programs")
    if not isinstance(raw, list) or len(raw) != workers:
        n = len(raw) if isinstance(raw, list) else type(raw).__name__
        raise ValueError(f"plan['programs'] must hold one program per worker ({workers}), got {n}")
    programs: list[list[tuple[int, int]]] = []
    flat: list[tuple[int, int]] = []
    where_of: list[str] = []
    for w, program in enumerate(raw):
        if not isinstance(program, list):
            raise ValueError(f"plan['programs'][{w}] must be a list of [task_index, tile]")
        refs = [_tile_ref(r, tasks, f"plan['programs'][{w}][{k}]") for k, r in enumerate(program)]
        programs.append(refs)
        flat.extend(refs)
        where_of.extend(f"worker {w} position {k}" for k in range(len(refs)))
    _check_cover(flat, tasks, "plan['programs']", where_of)
    return programs


def _queue(plan: Mapping[str, Any], tasks: Sequence[TaskInfo]) -> list[tuple[int, int]]:
    raw = plan.get("queue")
    if not isinstance(raw, list):
        raise ValueError("plan['queue'] must be a list of [task_index, tile]")
    queue = [_tile_ref(r, tasks, f"plan['queue'][{k}]") for k, r in enumerate(raw)]
    _check_cover(queue, tasks, "plan['queue']", [f"ticket {k}" for k in range(len(queue))])
    return queue


# --------------------------------------------------------------------------
# Simulation
# --------------------------------------------------------------------------


def simulate(plan: Mapping[str, Any], *, sync_ns: float | None = None) -> SimResult:
    """Simulate `plan` (see the module docstring); `sync_ns` overrides the cost model's.

    Raises ValueError for a malformed plan and DeadlockError when the schedule
    cannot finish.
    """
    if not isinstance(plan, Mapping):
        raise ValueError(f"a plan must be a dict, got {type(plan).__name__}")
    mode = plan.get("mode")
    if mode not in MODES:
        raise ValueError(f"plan['mode'] must be one of {MODES}, got {mode!r}")
    workers = plan.get("workers")
    if not _is_int(workers) or workers < 1:
        raise ValueError(f"plan['workers'] must be an integer >= 1, got {workers!r}")
    cost_model = plan.get("cost_model", {})
    if not isinstance(cost_model, Mapping):
        raise ValueError("plan['cost_model'] must be an object")
    if sync_ns is None:
        sync = _number(cost_model.get("sync_ns", 0.0), "cost_model sync_ns")
    else:
        sync = _number(sync_ns, "sync_ns")
    kernel = str(plan.get("kernel", ""))

    tasks = _tasks(plan)
    deps = _deps(plan.get("deps"), tasks)
    if mode == "static":
        programs = _programs(plan, tasks, workers)
        queue: list[tuple[int, int]] = []
    else:
        programs = []
        queue = _queue(plan, tasks)

    # Tiles by a global id: offset[t] + i.
    offset = [0] * (len(tasks) + 1)
    for t, task in enumerate(tasks):
        offset[t + 1] = offset[t] + task.num_tiles
    n = offset[-1]
    task_of = [t for t, task in enumerate(tasks) for _ in range(task.num_tiles)]

    def gid(ref: tuple[int, int]) -> int:
        return offset[ref[0]] + ref[1]

    def ref_of(g: int) -> tuple[int, int]:
        t = task_of[g]
        return t, g - offset[t]

    dep_ids: list[list[int]] = [[] for _ in range(n)]
    waiters: list[list[int]] = [[] for _ in range(n)]
    for t, per_task in enumerate(deps):
        for i, refs in enumerate(per_task):
            g = offset[t] + i
            dep_ids[g] = sorted({gid(r) for r in refs})
            for d in dep_ids[g]:
                waiters[d].append(g)
    unresolved = [len(d) for d in dep_ids]  # deps whose end time is not known yet

    start = [math.nan] * n
    main_start = [math.nan] * n
    end = [math.nan] * n
    worker_of = [-1] * n
    resolved = [False] * n

    # `free` holds (time, worker) for every worker whose next free time is known;
    # a worker that holds a tile with unresolved deps is "blocked" and not in it.
    free: list[tuple[float, int]] = [(0.0, w) for w in range(workers)]
    blocked: dict[int, int] = {}  # worker -> the tile it holds
    position = [0] * workers  # static: the next program index of each worker
    next_ticket = 0  # dynamic
    done = 0
    started: list[int] = []  # tiles in the order workers took them (by start time)

    def finish(g: int) -> None:
        """Give tile `g` (started, all deps resolved) its times; cascade."""
        nonlocal done
        stack = [g]
        while stack:
            h = stack.pop()
            w = worker_of[h]
            task = tasks[task_of[h]]
            ready = start[h] + task.prologue_ns
            for d in dep_ids[h]:
                seen = end[d] + (sync if worker_of[d] != w else 0.0)
                if seen > ready:
                    ready = seen
            main_start[h] = ready
            end[h] = ready + (task.tile_ns - task.prologue_ns)
            resolved[h] = True
            done += 1
            blocked.pop(w, None)
            heapq.heappush(free, (end[h], w))
            for x in waiters[h]:
                unresolved[x] -= 1
                if unresolved[x] == 0 and worker_of[x] >= 0 and not resolved[x]:
                    stack.append(x)

    while free:
        now, w = heapq.heappop(free)
        if mode == "static":
            if position[w] >= len(programs[w]):
                continue  # this worker is done
            g = gid(programs[w][position[w]])
            position[w] += 1
        else:
            if next_ticket >= len(queue):
                continue  # no tickets left: the worker exits
            g = gid(queue[next_ticket])
            next_ticket += 1
        start[g] = now
        worker_of[g] = w
        started.append(g)
        if unresolved[g] == 0:
            finish(g)
        else:
            blocked[w] = g

    if done != n:
        raise _deadlock(kernel, mode, workers, tasks, blocked, dep_ids, resolved, worker_of,
                        start, programs, position, queue, next_ticket, gid, ref_of, n - done)

    records = [
        TileRecord(
            task=tasks[task_of[g]].name,
            task_index=task_of[g],
            tile=g - offset[task_of[g]],
            worker=worker_of[g],
            start=start[g],
            main_start=main_start[g],
            end=end[g],
            prologue_ns=tasks[task_of[g]].prologue_ns,
        )
        for g in started
    ]
    makespan = max((r.end for r in records), default=0.0)
    busy = [0.0] * workers
    for r in records:
        busy[r.worker] += tasks[r.task_index].tile_ns
    utilization = [b / makespan if makespan > 0 else 0.0 for b in busy]
    return SimResult(
        makespan_ns=makespan,
        workers=workers,
        busy_ns=busy,
        utilization=utilization,
        mean_utilization=sum(utilization) / workers,
        records=records,
        kernel=kernel,
        mode=mode,
        sync_ns=sync,
        tasks=list(tasks),
    )


def _deadlock(kernel, mode, workers, tasks, blocked, dep_ids, resolved, worker_of, start,
              programs, position, queue, next_ticket, gid, ref_of, unfinished) -> DeadlockError:
    """A DeadlockError that says who is stuck on what, and where that is."""

    def name(g: int) -> tuple[str, int]:
        t, i = ref_of(g)
        return tasks[t].name, i

    def fmt(g: int) -> str:
        task, i = name(g)
        return f"({task!r}, {i})"

    # static: tile -> (worker, program position); dynamic: tile -> (-1, ticket)
    location: dict[int, tuple[int, int]] = {}
    if mode == "static":
        for v, program in enumerate(programs):
            for k, ref in enumerate(program):
                location[gid(ref)] = (v, k)
    else:
        for k, ref in enumerate(queue):
            location[gid(ref)] = (-1, k)

    def place(d: int) -> str:
        v, k = location[d]
        return f"worker {v} program position {k}" if v >= 0 else f"ticket {k}"

    def where(d: int, w: int) -> str:
        v = worker_of[d]
        if v >= 0:
            state = "which is itself stuck" if v in blocked else "which has not finished it"
            return f"held by worker {v} ({place(d)}), {state}"
        if mode == "static":
            owner, k = location[d]
            if owner == w:
                return (f"later in its own program (position {k}; the worker waits at "
                        f"position {position[w] - 1})")
            return (f"not reached: position {k} of worker {owner}'s program, which is "
                    f"stuck at position {position[owner] - 1}")
        return f"not taken: {place(d)} of the queue, the next ticket is {next_ticket}"

    lines = []
    stuck = []
    for w in sorted(blocked):
        g = blocked[w]
        missing = [d for d in dep_ids[g] if not resolved[d]]
        d = missing[0]
        stuck.append((w, name(g), name(d)))
        if len(lines) < _MAX_STUCK_LISTED:
            others = f" (and {len(missing) - 1} more deps)" if len(missing) > 1 else ""
            lines.append(
                f"  worker {w} waits at tile {fmt(g)} (started t={start[g]:g} ns) "
                f"for dependency {fmt(d)}{others}: {where(d, w)}"
            )
    if len(blocked) > _MAX_STUCK_LISTED:
        lines.append(f"  ... and {len(blocked) - _MAX_STUCK_LISTED} more stuck workers")
    label = f" of kernel {kernel!r}" if kernel else ""
    message = (
        f"deadlock in the {mode} schedule{label}: {len(blocked)} of {workers} workers are stuck "
        f"and {unfinished} tiles cannot finish\n" + "\n".join(lines)
    )
    return DeadlockError(message, stuck)


# --------------------------------------------------------------------------
# Checking
# --------------------------------------------------------------------------


def check_dependencies(result: SimResult, deps: Mapping[str, Any] | Sequence[Any]) -> None:
    """Check that no tile's main part started before any of `deps` ended.

    `deps` has the format of ``plan["deps"]`` (a plan dict is accepted too) with
    the task indices of `result`; it may come from another graph, e.g. the
    unoptimized one. Raises ValueError when `deps` names a tile that `result`
    did not run, and AssertionError listing the violations.
    """
    if isinstance(deps, Mapping):
        deps = deps.get("deps")
    if not isinstance(deps, (list, tuple)):
        raise ValueError("deps must be a list (one entry per task) or a plan with 'deps'")
    ran = result.by_tile()

    def lookup(ref: Any, where: str) -> TileRecord:
        if not isinstance(ref, (list, tuple)) or len(ref) != 2:
            raise ValueError(f"{where}: a tile is [task_index, tile], got {ref!r}")
        record = ran.get((ref[0], ref[1]))
        if record is None:
            raise ValueError(f"{where}: tile {list(ref)} was not run in the simulation")
        return record

    violations = []
    for t, per_task in enumerate(deps):
        for i, refs in enumerate(per_task):
            record = lookup((t, i), f"deps[{t}][{i}]")
            for ref in refs:
                dep = lookup(ref, f"deps[{t}][{i}]")
                if record.main_start < dep.end:
                    violations.append(
                        f"({record.task!r}, {record.tile}) on worker {record.worker} starts its "
                        f"main part at {record.main_start:g} ns, before ({dep.task!r}, {dep.tile}) "
                        f"on worker {dep.worker} ends at {dep.end:g} ns"
                    )
    if violations:
        shown = "\n  ".join(violations[:_MAX_VIOLATIONS_LISTED])
        more = len(violations) - _MAX_VIOLATIONS_LISTED
        tail = f"\n  ... and {more} more" if more > 0 else ""
        raise AssertionError(f"{len(violations)} dependency violations:\n  {shown}{tail}")


# --------------------------------------------------------------------------
# Presentation
# --------------------------------------------------------------------------


def chrome_trace(result: SimResult, path: str | Path | None = None) -> dict[str, Any]:
    """The schedule as a Chrome trace (Perfetto, chrome://tracing); written to `path` if given.

    One complete event per tile on thread `worker`; times in microseconds.
    """
    process = result.kernel or "kernel"
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 0, "tid": 0,
         "args": {"name": f"{process} ({result.mode}, {result.workers} workers)"}},
    ]
    for w in range(result.workers):
        events.append({"ph": "M", "name": "thread_name", "pid": 0, "tid": w,
                       "args": {"name": f"worker {w}"}})
        events.append({"ph": "M", "name": "thread_sort_index", "pid": 0, "tid": w,
                       "args": {"sort_index": w}})
    for r in result.records:
        events.append({
            "ph": "X",
            "name": r.task,
            "cat": "tile",
            "pid": 0,
            "tid": r.worker,
            "ts": r.start / 1000.0,
            "dur": (r.end - r.start) / 1000.0,
            "args": {
                "tile": r.tile,
                "task_index": r.task_index,
                "wait_us": r.wait_ns / 1000.0,
                "prologue_us": r.prologue_ns / 1000.0,
                "main_start_us": r.main_start / 1000.0,
                "step": r.step,
            },
        })
    trace = {"traceEvents": events, "displayTimeUnit": "ns"}
    if path is not None:
        Path(path).write_text(json.dumps(trace))
    return trace


def _task_colors(count: int) -> list[Any]:
    from matplotlib import colormaps

    if count <= 10:
        cmap = colormaps["tab10"]
        return [cmap(k) for k in range(count)]
    if count <= 20:
        cmap = colormaps["tab20"]
        return [cmap(k) for k in range(count)]
    cmap = colormaps["turbo"]
    return [cmap(k / max(1, count - 1)) for k in range(count)]


def gantt_png(result: SimResult, path: str | Path, *, title: str | None = None) -> None:
    """Draw the schedule as a Gantt chart PNG at `path` (needs matplotlib).

    One row per worker, tiles colored by task; the part of a tile spent waiting
    on dependencies (after its prologue, before its main part) is hatched.
    """
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    workers = result.workers
    task_names = [t.name for t in result.tasks] or sorted({r.task for r in result.records})
    index_of = {name: k for k, name in enumerate(task_names)}
    colors = _task_colors(len(task_names))

    # Work segments and wait segments per (task, worker), in microseconds.
    work: dict[tuple[int, int], list[tuple[float, float]]] = {}
    wait: dict[tuple[int, int], list[tuple[float, float]]] = {}
    for r in result.records:
        k = index_of.get(r.task, r.task_index)
        key = (k, r.worker)
        w = r.wait_ns
        if w > 0:
            if r.prologue_ns > 0:
                work.setdefault(key, []).append((r.start / 1e3, r.prologue_ns / 1e3))
            wait.setdefault(key, []).append(((r.start + r.prologue_ns) / 1e3, w / 1e3))
            work.setdefault(key, []).append((r.main_start / 1e3, (r.end - r.main_start) / 1e3))
        else:
            work.setdefault(key, []).append((r.start / 1e3, (r.end - r.start) / 1e3))

    height = min(60.0, max(3.0, 1.5 + 0.14 * workers))
    fig = Figure(figsize=(14, height), dpi=100)
    ax = fig.add_subplot(1, 1, 1)
    bar = 0.8 if workers <= 64 else 0.9
    thin = workers > 32
    for (k, w), segments in work.items():
        ax.broken_barh(segments, (w - bar / 2, bar), facecolors=colors[k % len(colors)],
                       edgecolor="black" if not thin else "none",
                       linewidth=0.3 if not thin else 0.0)
    for (k, w), segments in wait.items():
        ax.broken_barh(segments, (w - bar / 2, bar), facecolors="none",
                       edgecolor=colors[k % len(colors)], hatch="////",
                       linewidth=0.0, alpha=0.6)

    # Steps of one launch (et.repeat): a line where each step's first tile
    # starts.
    firsts: dict[int, float] = {}
    for r in result.records:
        firsts[r.step] = min(firsts.get(r.step, r.start), r.start)
    for step, start in sorted(firsts.items()):
        if step > 0:
            ax.axvline(start / 1e3, color="black", linewidth=0.8, linestyle="--")
            ax.text(start / 1e3, -0.5, f" step {step}", fontsize=7, va="bottom")

    ax.set_ylim(workers - 0.5, -0.5)  # worker 0 on top
    step = max(1, math.ceil(workers / 40))
    ax.set_yticks(list(range(0, workers, step)))
    ax.tick_params(axis="y", labelsize=8 if workers <= 40 else 6)
    ax.set_ylabel("worker")
    ax.set_xlabel("time (us)")
    ax.set_xlim(0, max(result.makespan_ns / 1e3, 1e-6) * 1.01)
    ax.grid(axis="x", linewidth=0.3, alpha=0.5)
    if title is None:
        label = result.kernel or "kernel"
        title = (f"{label} ({result.mode}, {workers} workers): makespan "
                 f"{result.makespan_ns / 1e3:.3f} us, mean utilization "
                 f"{100 * result.mean_utilization:.1f}%")
    ax.set_title(title)

    # Past 48 tasks a legend would not fit: name every k-th task (colors run
    # in task order, so the named ones mark the rest).
    every = max(1, math.ceil(len(task_names) / 48))
    handles = [Patch(facecolor=colors[k], label=name) for k, name in enumerate(task_names) if k % every == 0]
    handles.append(Patch(facecolor="white", edgecolor="gray", hatch="////", label="waiting"))
    columns = 1 if len(handles) <= 24 else 2
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8,
              ncols=columns, frameon=False)
    fig.tight_layout()
    fig.savefig(str(path), format="png")


def summary(result: SimResult) -> str:
    """A short text summary: makespan, utilization and each task's time span."""
    label = result.kernel or "kernel"
    util = result.utilization
    lines = [
        f"{label}: {result.mode} schedule on {result.workers} workers, "
        f"{len(result.records)} tiles, sync {result.sync_ns:g} ns",
        f"makespan {result.makespan_ns / 1e3:.3f} us, mean utilization "
        f"{100 * result.mean_utilization:.1f}% "
        f"(min {100 * min(util, default=0):.1f}%, max {100 * max(util, default=0):.1f}%)",
    ]
    spans: dict[int, list[float]] = {}
    waits: dict[int, float] = {}
    for r in result.records:
        span = spans.setdefault(r.task_index, [r.start, r.end, 0])
        span[0] = min(span[0], r.start)
        span[1] = max(span[1], r.end)
        span[2] += 1
        waits[r.task_index] = waits.get(r.task_index, 0.0) + r.wait_ns
    names = {r.task_index: r.task for r in result.records}
    width = max((len(n) for n in names.values()), default=4)
    for t in sorted(spans):
        first, last, count = spans[t]
        lines.append(
            f"  {names[t]:<{width}}  {int(count):>5} tiles  {first / 1e3:9.3f} .. {last / 1e3:9.3f} us "
            f"(span {(last - first) / 1e3:.3f} us, wait {waits[t] / 1e3:.3f} us)"
        )
    return "\n".join(lines)

