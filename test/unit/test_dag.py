"""The random kernel generator (event_tensor.dag) only produces kernels that
et-opt --et-verify-event-graph accepts, also once the runtime sizes are
replaced by arbitrary constants (then the verifier enumerates every tile and
checks every index and every waited element exactly)."""

import random
import re
import subprocess
import sys
from pathlib import Path

from event_tensor.dag import RandomKernel, random_kernel

ET_OPT = Path(sys.executable).parent / "et-opt"
SEEDS = range(200)


def kernels():
    return [random_kernel(s, dynamic=s % 3 != 2, kernel_name=f"k{s}") for s in SEEDS]


def verify(texts, tmp_path, name):
    """Runs the verifier on all texts at once; returns the failing keys and stderr."""
    path = tmp_path / f"{name}.mlir"
    starts, lines = [], 0
    for key, text in texts:
        starts.append((lines + 1, key))
        lines += text.count("\n")
    path.write_text("".join(t for _, t in texts))
    out = subprocess.run(
        [str(ET_OPT), str(path), "--et-verify-event-graph", "-o", "/dev/null"],
        capture_output=True, text=True, timeout=120,
    )
    bad = set()
    for m in re.finditer(re.escape(str(path)) + r":(\d+):\d+: error", out.stderr):
        line = int(m.group(1))
        bad.add(max((s for s in starts if s[0] <= line), key=lambda s: s[0])[1])
    if out.returncode != 0 and not bad:
        bad.add("?")
    return out.returncode, bad, out.stderr


def concretize(rk: RandomKernel, sizes: dict[str, int], name: str) -> str:
    """The kernel with its arguments replaced by constants: every kernel-level
    value is folded to an arith.constant and every event type made static."""
    values, shapes, out = {}, {}, []
    for a, arg in enumerate(rk.args):
        values[arg] = sizes[f"arg{a}"]
    for line in rk.text.splitlines():
        if line.startswith("et.kernel"):
            out.append(f"et.kernel @{name}() {{")
            out += [f"  %{a} = arith.constant {values[a]} : index" for a in rk.args]
            continue
        m = re.match(r"\s*%(\w+) = arith\.constant (\d+) : index", line)
        if m:
            values[m.group(1)] = int(m.group(2))
        m = re.match(r"\s*%(\w+) = arith\.ceildivsi %(\w+), %(\w+) : index", line)
        if m:
            v = -(-values[m.group(2)] // values[m.group(3)])
            values[m.group(1)] = v
            line = f"  %{m.group(1)} = arith.constant {v} : index"
        m = re.match(r"\s*%(\w+) = et\.event\.create\(([^)]*)\) : !et\.event<([^>]*)>", line)
        if m:
            sizes_it = iter(values[s.strip()[1:]] for s in m.group(2).split(",") if s.strip())
            dims = [str(next(sizes_it)) if d == "?" else d for d in m.group(3).split("x") if d]
            shapes[m.group(1)] = "x".join(dims)
            line = f"  %{m.group(1)} = et.event.create() : !et.event<{shapes[m.group(1)]}>"
        line = re.sub(
            r"%(e\d+)\[([^\]]*)\] : !et\.event<[^>]*>",
            lambda m: f"%{m.group(1)}[{m.group(2)}] : !et.event<{shapes[m.group(1)]}>",
            line,
        )
        out.append(line)
    return "\n".join(out) + "\n"


def test_generated_kernels_verify(tmp_path):
    assert ET_OPT.exists(), f"et-opt not found at {ET_OPT}"
    ks = kernels()
    rc, bad, err = verify([(rk.name, rk.text) for rk in ks], tmp_path, "all")
    assert rc == 0 and not bad and "error" not in err, f"rejected kernels {sorted(bad)}:\n{err[-4000:]}"


def test_other_sizes_verify(tmp_path):
    texts = []
    for s in range(50):
        for max_tasks, max_tiles in [(2, 1), (3, 4), (20, 64)]:
            rk = random_kernel(s, max_tasks=max_tasks, max_tiles=max_tiles, kernel_name=f"k{s}_{max_tasks}_{max_tiles}")
            assert 2 <= len(rk.tasks) <= max_tasks
            texts.append((rk.name, rk.text))
    rc, bad, err = verify(texts, tmp_path, "sizes")
    assert rc == 0 and not bad and "error" not in err, f"rejected kernels {sorted(bad)}:\n{err[-4000:]}"


def test_valid_for_any_runtime_sizes(tmp_path):
    """Dynamic kernels stay valid for sizes other than `bindings` (including
    sizes that make the extents larger than max_tiles)."""
    rng = random.Random(1234)
    texts = []
    for rk in kernels():
        if not rk.args:
            continue
        choices = [rk.bindings] + [{f"arg{a}": rng.choice([1, 2, 3, rng.randint(1, 300)]) for a in range(len(rk.args))} for _ in range(2)]
        for n, sizes in enumerate(choices):
            key = f"{rk.name}_{n}"
            texts.append((f"{key} {sizes}", concretize(rk, sizes, key)))
    assert len(texts) > 100
    rc, bad, err = verify(texts, tmp_path, "static")
    assert rc == 0 and not bad and "error" not in err, f"rejected instances {sorted(bad)}:\n{err[-4000:]}"


def test_deterministic_and_api():
    for s in (0, 7, 42):
        a, b = random_kernel(s), random_kernel(s)
        assert a == b
        assert random_kernel(s, with_costs=True).costs.keys() == set(a.tasks)
        assert a.costs == {}
    assert random_kernel(1).text != random_kernel(2).text
    for rk in kernels():
        assert 2 <= len(rk.tasks) <= 8
        assert rk.tasks == re.findall(r"et\.task @(\w+)", rk.text)
        assert sorted(rk.bindings) == [f"arg{a}" for a in range(len(rk.args))]
        sig = re.match(r"et\.kernel @\w+\(([^)]*)\)", rk.text).group(1)
        assert [p.split(":")[0].strip()[1:] for p in sig.split(",") if p.strip()] == rk.args
        # Dynamic extents under the bindings are in 1..max_tiles.
        values = {a: rk.bindings[f"arg{i}"] for i, a in enumerate(rk.args)}
        for m in re.finditer(r"%(\w+) = arith\.constant (\d+)", rk.text):
            values[m.group(1)] = int(m.group(2))
        for m in re.finditer(r"%(\w+) = arith\.ceildivsi %(\w+), %(\w+)", rk.text):
            values[m.group(1)] = -(-values[m.group(2)] // values[m.group(3)])
        for m in re.finditer(r"in \(([^)]*)\)", rk.text):
            for e in m.group(1).split(","):
                assert 1 <= values[e.strip()[1:]] <= 16, rk.text


def test_variety():
    dynamic = fan_in2 = all_to_one = every_element = coarsen = 0
    for rk in kernels():
        dynamic += bool(re.search(r"tiles\([^)]*\) in \([^)]*%[nx]\d", rk.text))
        all_to_one += "!et.event<>" in rk.text
        every_element += bool(re.search(r"wait %(e\d+)\[%c\d+(?:, %c\d+)?\] .*\n\s*et\.event\.wait %\1\[%c", rk.text))
        coarsen += bool(re.search(r"signal %e\d+\[[^\]]*%w", rk.text))
        # event -> producing task, then the distinct producers of each task
        owner, current = {}, None
        deps = {}
        for line in rk.text.splitlines():
            m = re.match(r"\s*et\.task @(\w+)", line)
            if m:
                current = m.group(1)
                deps[current] = set()
            m = re.match(r"\s*et\.event\.signal %(\w+)", line)
            if m:
                owner[m.group(1)] = current
            m = re.match(r"\s*et\.event\.wait %(\w+)", line)
            if m:
                deps[current].add(owner[m.group(1)])
        fan_in2 += any(len(d) >= 2 for d in deps.values())
    assert dynamic >= 20 and fan_in2 >= 20 and all_to_one >= 20 and every_element >= 5 and coarsen >= 5, (
        dynamic, fan_in2, all_to_one, every_element, coarsen)
