"""Random, valid `et.kernel` IR for property tests of schedulers and passes.

`random_kernel(seed)` builds a random task DAG (tasks only wait on events that
earlier tasks signal, so it is acyclic) and prints it as one `et.kernel`. Every
generated kernel is accepted by `et-opt --et-verify-event-graph`, and it stays
correct for *every* value >= 1 of its runtime sizes, not only the ones in
`bindings`: every event element is signalled by at least one tile, and every
wait index is in bounds for every consumer tile.

Signal patterns (producer P with tiles (i[, j])):

- identity      E[i, j]            event shape = P's tile shape (maybe transposed)
- reduction     E[i] or E[j]       2-D P, one dim kept: every tile of a row signals
- coarsening    E[i floordiv f]    event dim ceildiv(extent, f) (kernel-level
                                   `arith.ceildivsi` when the extent is dynamic)
- all-to-one    E[]                rank-0 event, every tile signals it

Wait patterns (consumer C, per event dim of extent X):

- identity on a tile dim of C whose extent is the same SSA value X
- `affine.apply (d0 floordiv f)` of a tile dim of extent Y with Y <= f * X for
  all sizes (Y = N when X = ceildiv(N, f), or constants)
- a constant index (kernel-level `arith.constant`) below X's minimum value
- rank-0 events: E[]
- "every element": one wait per element of a small static event, constant indices

Dynamic extents are a kernel `index` argument itself or `ceildiv(arg, c)`.
Only `random` is used; the output depends on the seed only.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["RandomKernel", "random_kernel"]


@dataclass
class RandomKernel:
    text: str  # the module text (one et.kernel)
    name: str  # kernel symbol
    args: list[str]  # SSA names (without '%') of the index arguments, in order
    bindings: dict[str, int]  # "arg0", "arg1", ... (position) -> a concrete value
    tasks: list[str]  # task names in program order
    costs: dict[str, tuple[int, int]] = field(default_factory=dict)  # task -> (bytes, flops)


# Bound on the number of tiles of a task (a dynamic dim counts as max_tiles).
_MAX_TILE_PRODUCT = 64


class _Extent:
    """A kernel-level index value used as a tile extent or an event size."""

    def __init__(self, name, const=None, arg=None, div=1, parent=None, factor=1):
        self.name = name  # SSA name without '%'
        self.const = const  # int for constants
        self.arg = arg  # argument position: value = ceildiv(arg, div)
        self.div = div
        self.parent = parent  # value = ceildiv(parent, factor)
        self.factor = factor

    @property
    def static(self):
        return self.const is not None

    def value(self, sizes):
        if self.const is not None:
            return self.const
        if self.parent is not None:
            return -(-self.parent.value(sizes) // self.factor)
        return -(-sizes[self.arg] // self.div)


class _Event:
    def __init__(self, name, dims):
        self.name = name
        self.dims = dims  # list[_Extent]

    @property
    def type(self):
        return "!et.event<" + "x".join(str(d.const) if d.static else "?" for d in self.dims) + ">"

    @property
    def num_elements(self):
        n = 1
        for d in self.dims:
            n *= d.const
        return n


class _Task:
    def __init__(self, name):
        self.name = name
        self.dims = []  # list[_Extent]
        self.body = []  # lines of the body
        self.events = []  # events it signals
        self.temps = 0

    def temp(self):
        self.temps += 1
        return f"%w{self.temps - 1}"


class _Gen:
    def __init__(self, seed, max_tasks, max_tiles, dynamic, with_costs, kernel_name):
        self.rng = random.Random(seed)
        self.cost_rng = random.Random(seed * 1_000_003 + 17)
        self.max_tasks = max(2, max_tasks)
        self.max_tiles = max(1, max_tiles)
        self.dynamic = dynamic
        self.with_costs = with_costs
        self.kernel_name = kernel_name
        self.consts = set()
        self.lines = []  # kernel-level lines after the constants, in order
        self.extents = {}  # interning key -> _Extent
        self.arg_divs = []  # per argument: the divisors it is used with
        self.num_derived = 0
        self.events = []
        self.tasks = []
        self.costs = {}

    # -- kernel-level values -------------------------------------------------

    def const(self, v):
        self.consts.add(v)
        return f"%c{v}"

    def const_extent(self, v):
        key = ("const", v)
        if key not in self.extents:
            self.const(v)
            self.extents[key] = _Extent(f"c{v}", const=v)
        return self.extents[key]

    def arg_extent(self):
        """A dynamic extent: an argument or ceildiv(argument, c), often reused."""
        rng = self.rng
        existing = [e for k, e in self.extents.items() if k[0] == "arg"]
        if existing and rng.random() < 0.5:
            return rng.choice(existing)
        if self.arg_divs and (len(self.arg_divs) >= 3 or rng.random() < 0.4):
            arg = rng.randrange(len(self.arg_divs))
        else:
            arg = len(self.arg_divs)
            self.arg_divs.append(set())
        div = rng.choice([1, 1, 8, 16, 32, 64])
        key = ("arg", arg, div)
        if key not in self.extents:
            self.arg_divs[arg].add(div)
            if div == 1:
                ext = _Extent(f"n{arg}", arg=arg)
            else:
                name = f"x{self.num_derived}"
                self.num_derived += 1
                self.lines.append(f"%{name} = arith.ceildivsi %n{arg}, {self.const(div)} : index")
                ext = _Extent(name, arg=arg, div=div)
            self.extents[key] = ext
        return self.extents[key]

    def coarse_extent(self, ext, f):
        """ceildiv(ext, f): a constant, or a kernel-level arith.ceildivsi."""
        if ext.static:
            return self.const_extent(-(-ext.const // f))
        key = ("coarse", id(ext), f)
        if key not in self.extents:
            name = f"x{self.num_derived}"
            self.num_derived += 1
            self.lines.append(f"%{name} = arith.ceildivsi %{ext.name}, {self.const(f)} : index")
            self.extents[key] = _Extent(name, parent=ext, factor=f)
        return self.extents[key]

    def upper(self, ext):
        return ext.const if ext.static else self.max_tiles

    def fits(self, dims):
        n = 1
        for d in dims:
            n *= self.upper(d)
        return len(dims) <= 2 and n <= max(_MAX_TILE_PRODUCT, self.max_tiles)

    def fresh_extent(self, others):
        """A random extent for a new tile dim that keeps the tile count bounded."""
        rng = self.rng
        room = max(_MAX_TILE_PRODUCT, self.max_tiles)
        for d in others:
            room //= self.upper(d)
        if self.dynamic and room >= self.max_tiles and rng.random() < 0.4:
            return self.arg_extent()
        return self.const_extent(rng.randint(1, max(1, min(self.max_tiles, room))))

    # -- tasks -----------------------------------------------------------------

    def producers(self, k):
        avail = [t for t in self.tasks if t.events]
        if not avail:
            return []
        n = min(len(avail), self.rng.choice([0, 1, 1, 1, 2, 2, 2, 3, 3]))
        return self.rng.sample(avail, n)

    def wait_index(self, task, x, fresh_ok):
        """An index expression (SSA name) for waiting on an event dim of extent x."""
        rng = self.rng
        options = []
        for p, y in enumerate(task.dims):
            tid = f"%{'ij'[p]}"
            if y is x or (y.static and x.static and y.const == x.const):
                options += [("id", tid)] * 3
            elif x.parent is not None and x.parent is y:
                options += [("div", tid, x.factor)] * 3
            elif y.static and x.static and y.const > x.const:
                options.append(("div", tid, -(-y.const // x.const)))
        if fresh_ok and len(task.dims) < 2:
            if self.fits(task.dims + [x]):
                options += [("new-id", x)] * 2
            if x.parent is not None and self.fits(task.dims + [x.parent]):
                options.append(("new-div", x.parent, x.factor))
            if x.static and x.const < self.max_tiles:
                f = rng.choice([2, 3, 4])
                y = self.const_extent(rng.randint(x.const + 1, min(self.max_tiles, f * x.const)))
                if self.fits(task.dims + [y]):
                    options.append(("new-div", y, -(-y.const // x.const)))
        options.append(("const",))
        choice = rng.choice(options)
        if choice[0] in ("new-id", "new-div"):
            task.dims.append(choice[1])
            tid = f"%{'ij'[len(task.dims) - 1]}"
            choice = ("id", tid) if choice[0] == "new-id" else ("div", tid, choice[2])
        if choice[0] == "id":
            return choice[1]
        if choice[0] == "div":
            w = task.temp()
            task.body.append(f"{w} = affine.apply affine_map<(d0) -> (d0 floordiv {choice[2]})>({choice[1]})")
            return w
        return self.const(rng.randrange(x.const) if x.static else 0)

    def add_waits(self, task, events):
        rng = self.rng
        for ev in events:
            if not ev.dims:
                task.body.append(f"et.event.wait %{ev.name}[] : {ev.type}")
                continue
            if all(d.static for d in ev.dims) and ev.num_elements <= 8 and rng.random() < 0.3:
                # Wait on every element (fan-in of a whole small event).
                idx = [[]]
                for d in ev.dims:
                    idx = [i + [self.const(v)] for i in idx for v in range(d.const)]
                for i in idx:
                    task.body.append(f"et.event.wait %{ev.name}[{', '.join(i)}] : {ev.type}")
                continue
            fresh_ok = rng.random() < 0.85
            idx = [self.wait_index(task, d, fresh_ok) for d in ev.dims]
            task.body.append(f"et.event.wait %{ev.name}[{', '.join(idx)}] : {ev.type}")

    def add_signal(self, task):
        rng = self.rng
        dims = task.dims
        kinds = ["identity", "identity", "coarsen", "all"]
        if len(dims) == 2:
            kinds += ["reduce", "reduce"]
        kind = rng.choice(kinds)
        tids = [f"%{'ij'[p]}" for p in range(len(dims))]
        if kind == "identity":
            order = list(range(len(dims)))
            if len(dims) == 2 and rng.random() < 0.25:
                order.reverse()
            shape, idx = [dims[p] for p in order], [tids[p] for p in order]
        elif kind == "reduce":
            p = rng.randrange(2)
            shape, idx = [dims[p]], [tids[p]]
        elif kind == "coarsen":
            p = rng.randrange(len(dims))
            f = rng.choice([2, 2, 2, 3, 4])
            w = task.temp()
            task.body.append(f"{w} = affine.apply affine_map<(d0) -> (d0 floordiv {f})>({tids[p]})")
            shape, idx = [self.coarse_extent(dims[p], f)], [w]
            if len(dims) == 2 and rng.random() < 0.5:  # keep the other dim
                q = 1 - p
                shape, idx = (shape + [dims[q]], idx + [tids[q]]) if p == 0 else ([dims[q]] + shape, [tids[q]] + idx)
        else:
            shape, idx = [], []
        ev = _Event(f"e{len(self.events)}", shape)
        self.events.append(ev)
        task.events.append(ev)
        sizes = ", ".join(f"%{d.name}" for d in shape if not d.static)
        self.lines.append(f"%{ev.name} = et.event.create({sizes}) : {ev.type}")
        task.body.append(f"et.event.signal %{ev.name}[{', '.join(idx)}] : {ev.type}")

    def add_task(self, k, last):
        rng = self.rng
        task = _Task(f"t{k}")
        waited = []
        for p in self.producers(k):
            waited += rng.sample(p.events, 1 if len(p.events) == 1 or rng.random() < 0.7 else 2)
        self.add_waits(task, waited)
        if not task.dims:
            if waited and rng.random() < 0.4:
                task.dims.append(self.const_extent(rng.randint(1, 2)))
            else:
                task.dims.append(self.fresh_extent([]))
        if len(task.dims) == 1 and rng.random() < 0.35:
            extra = self.fresh_extent(task.dims)
            if self.fits(task.dims + [extra]):
                task.dims.append(extra)
        nsig = rng.choice([0, 1]) if last else rng.choice([1, 1, 1, 2])
        for _ in range(nsig):
            self.add_signal(task)
        attrs = ""
        if self.with_costs:
            nbytes = 1024 * self.cost_rng.randint(1, 64)
            flops = nbytes * self.cost_rng.choice([1, 2, 4, 8, 16])
            self.costs[task.name] = (nbytes, flops)
            attrs = f" attributes {{et.cost = #et.cost<bytes = {nbytes}, flops = {flops}>}}"
        tiles = ", ".join(f"%{'ij'[p]}" for p in range(len(task.dims)))
        extents = ", ".join(f"%{d.name}" for d in task.dims)
        self.lines.append(f"et.task @{task.name} tiles({tiles}) in ({extents}){attrs} {{")
        self.lines += ["  " + l for l in task.body]
        self.lines.append("}")
        self.tasks.append(task)

    def run(self):
        n = self.rng.randint(2, self.max_tasks)
        for k in range(n):
            self.add_task(k, last=k == n - 1)
        # Bindings: every dynamic extent in [1, max_tiles].
        bindings = {}
        for a, divs in enumerate(self.arg_divs):
            bindings[f"arg{a}"] = self.rng.randint(1, self.max_tiles * min(divs))
        args = [f"n{a}" for a in range(len(self.arg_divs))]
        sig = ", ".join(f"%{a}: index" for a in args)
        out = [f"et.kernel @{self.kernel_name}({sig}) {{"]
        out += [f"  %c{v} = arith.constant {v} : index" for v in sorted(self.consts)]
        out += ["  " + l for l in self.lines]
        out.append("}")
        return RandomKernel(
            text="\n".join(out) + "\n",
            name=self.kernel_name,
            args=args,
            bindings=bindings,
            tasks=[t.name for t in self.tasks],
            costs=dict(self.costs),
        )


def random_kernel(
    seed: int,
    *,
    max_tasks: int = 8,
    max_tiles: int = 16,
    dynamic: bool = True,
    with_costs: bool = False,
    kernel_name: str = "k",
) -> RandomKernel:
    """A random, valid `et.kernel` of 2..max_tasks tasks (see the module doc).

    Constant tile extents are in 1..max_tiles (at most ~64 tiles per task);
    with `dynamic`, some extents are kernel `index` arguments or ceildiv of
    one, and `bindings` gives argument values that put them in 1..max_tiles.
    With `with_costs`, tasks carry `et.cost = #et.cost<bytes = B, flops = F>`
    (recorded in `costs`); costs use their own random stream, so the graph of
    a seed is the same with and without them.
    """
    return _Gen(seed, max_tasks, max_tiles, dynamic, with_costs, kernel_name).run()


# ---------------------------------------------------------------------------
# Executable kernels: bodies that compute, and their sequential reference
# ---------------------------------------------------------------------------

_MIX = 1000003
_MASK = (1 << 64) - 1


def _seed(task_index: int) -> int:
    return 7919 * (task_index + 1)


def with_bodies(rk: RandomKernel) -> str:
    """`rk`'s kernel with task bodies that compute: each tile mixes the values
    of the event elements it waits on (one i64 data slot per element) into a
    value, stores it in its task's output (one slot per tile), and adds it
    atomically to the data slot of every element it signals, before the
    signal. A tile that read a slot before all its signallers had added to it
    would produce a different value, so comparing with `reference` checks
    the synchronization.

    New kernel arguments, after the original ones: one `memref<?xi64>` data
    buffer per event (creation order), then one output buffer per task."""
    lines = rk.text.splitlines()
    events: list[tuple[str, list[str]]] = []  # name, dims (int text or %ssa)
    tasks: list[str] = []
    for line in lines:
        s = line.strip()
        if " = et.event.create(" in s:
            name = s.split(" = ")[0][1:]
            operands = [o.strip() for o in s.split("(", 1)[1].split(")", 1)[0].split(",") if o.strip()]
            shape = s.rsplit("<", 1)[1].rstrip(">")
            dims, dyn = [], iter(operands)
            for d in (shape.split("x") if shape else []):
                dims.append(next(dyn) if d == "?" else d)
            events.append((name, dims))
        elif s.startswith("et.task @"):
            tasks.append(s.split()[1][1:])
    dims_of = dict(events)
    out: list[str] = []
    counter = [0]

    def fresh(prefix: str) -> str:
        counter[0] += 1
        return f"%b{counter[0]}_{prefix}"

    i = 0
    task_index = 0
    while i < len(lines):
        line = lines[i]
        s = line.strip()
        if s.startswith("et.kernel @"):
            head, rest = line.split("(", 1)
            params = rest.rsplit(")", 1)[0]
            extra = [f"%d_{e}: memref<?xi64>" for e, _ in events] + [f"%o_{t}: memref<?xi64>" for t in tasks]
            joined = ", ".join(p for p in [params] + extra if p)
            out.append(f"{head}({joined}) {{")
            i += 1
            continue
        if not s.startswith("et.task @"):
            out.append(line)
            i += 1
            continue
        # A task: header, body lines, closing brace.
        out.append(line)
        tiles = [t.strip() for t in s.split("tiles(", 1)[1].split(")", 1)[0].split(",")]
        extents = [t.strip() for t in s.split(" in (", 1)[1].split(")", 1)[0].split(",")]
        body = []
        i += 1
        while lines[i].strip() != "}":
            body.append(lines[i].strip())
            i += 1
        closing = lines[i]
        i += 1
        waits = [b for b in body if b.startswith("et.event.wait")]
        signals = [b for b in body if b.startswith("et.event.signal")]
        pad = "    "
        for b in body:
            if not b.startswith("et.event.signal"):
                out.append(pad + b)
        tid, c0, first = fresh("tid"), fresh("c0"), fresh("first")
        out += [f"{pad}{tid} = et.thread_id", f"{pad}{c0} = arith.constant 0 : index",
                f"{pad}{first} = arith.cmpi eq, {tid}, {c0} : index", f"{pad}scf.if {first} {{"]
        inner = pad + "  "

        def linear(access: str) -> str:
            event = access.split("%", 2)[1].split("[")[0]
            idx = [x.strip() for x in access.split("[", 1)[1].split("]", 1)[0].split(",") if x.strip()]
            lin = c0
            for pos, (x, d) in enumerate(zip(idx, dims_of[event])):
                if pos == 0:
                    lin = x
                    continue
                dim = d if d.startswith("%") else fresh("dim")
                if not d.startswith("%"):
                    out.append(f"{inner}{dim} = arith.constant {d} : index")
                mul, add = fresh("mul"), fresh("lin")
                out.append(f"{inner}{mul} = arith.muli {lin}, {dim} : index")
                out.append(f"{inner}{add} = arith.addi {mul}, {x} : index")
                lin = add
            return lin

        acc = fresh("acc")
        mix = fresh("mix")
        out += [f"{inner}{acc} = arith.constant {_seed(task_index)} : i64",
                f"{inner}{mix} = arith.constant {_MIX} : i64"]
        for w in waits:
            event = w.split("%", 2)[1].split("[")[0]
            lin = linear(w)
            x, m, a = fresh("x"), fresh("m"), fresh("acc")
            out += [f"{inner}{x} = memref.load %d_{event}[{lin}] : memref<?xi64>",
                    f"{inner}{m} = arith.muli {acc}, {mix} : i64",
                    f"{inner}{a} = arith.addi {m}, {x} : i64"]
            acc = a
        tile = tiles[0]
        if len(tiles) == 2:
            mul, add = fresh("tm"), fresh("tile")
            out += [f"{inner}{mul} = arith.muli {tiles[0]}, {extents[1]} : index",
                    f"{inner}{add} = arith.addi {mul}, {tiles[1]} : index"]
            tile = add
        t64, c31, v0, v = fresh("t64"), fresh("c31"), fresh("v0"), fresh("v")
        out += [f"{inner}{t64} = arith.index_cast {tile} : index to i64",
                f"{inner}{c31} = arith.constant 31 : i64",
                f"{inner}{v0} = arith.muli {acc}, {c31} : i64",
                f"{inner}{v} = arith.addi {v0}, {t64} : i64",
                f"{inner}memref.store {v}, %o_{tasks[task_index]}[{tile}] : memref<?xi64>"]
        for sig in signals:
            event = sig.split("%", 2)[1].split("[")[0]
            lin = linear(sig)
            out.append(f"{inner}{fresh('old')} = memref.atomic_rmw addi {v}, %d_{event}[{lin}] : (i64, memref<?xi64>) -> i64")
        out.append(f"{pad}}}")
        for sig in signals:
            out.append(pad + sig)
        out.append(closing)
        task_index += 1
    return "\n".join(out) + "\n"


def reference(plan: dict) -> tuple[list[list[int]], list[list[int]]]:
    """The outputs and event data slots of a `with_bodies` kernel, computed
    sequentially in a topological order of the tiles of `plan` (a schedule
    plan for the same sizes: its `deps`, `accesses` and `events`)."""
    tasks = plan["tasks"]
    deps = plan["deps"]
    data = [[0] * ev["size"] for ev in plan["events"]]
    outs = [[0] * t["num_tiles"] for t in tasks]
    pending = {(t, i): len(deps[t][i]) for t, task in enumerate(tasks) for i in range(task["num_tiles"])}
    users: dict[tuple[int, int], list[tuple[int, int]]] = {}
    for t, per_task in enumerate(deps):
        for i, refs in enumerate(per_task):
            for r in refs:
                users.setdefault((r[0], r[1]), []).append((t, i))
    ready = [k for k, n in pending.items() if n == 0]
    done = 0
    while ready:
        t, i = ready.pop()
        done += 1
        acc = _seed(t)
        for w in plan["accesses"][t]["waits"]:
            acc = (acc * _MIX + data[w["event"]][w["elements"][i]]) & _MASK
        v = (acc * 31 + i) & _MASK
        outs[t][i] = v
        for s in plan["accesses"][t]["signals"]:
            slot = data[s["event"]]
            e = s["elements"][i]
            slot[e] = (slot[e] + v) & _MASK
        for u in users.get((t, i), []):
            pending[u] -= 1
            if pending[u] == 0:
                ready.append(u)
    if done != len(pending):
        raise ValueError("the plan's dependencies have a cycle")

    def signed(x: int) -> int:
        return x - (1 << 64) if x >= 1 << 63 else x

    return [[signed(x) for x in o] for o in outs], [[signed(x) for x in d] for d in data]
