"""IR mutation fuzzing: random edits of the valid test files, fed through
et-opt and the project's passes (verifier, schedulers, optimizer), must
never crash (only succeed or report diagnostics). Bounded by ET_FUZZ_SECONDS (default 20); the seed of a failing
case is printed so it can be replayed with ET_FUZZ_SEED."""

import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ET_OPT = Path(sys.executable).parent / "et-opt"
SOURCES = [
    ROOT / "Dialect" / "EventTensor" / "ops.mlir",
    ROOT / "Dialect" / "EventTensor" / "schedule.mlir",
    ROOT / "Transforms" / "verify-event-graph.mlir",
    ROOT / "Transforms" / "static-schedule.mlir",
    ROOT / "Transforms" / "dynamic-schedule.mlir",
    ROOT / "Transforms" / "optimize-events.mlir",
    *sorted((ROOT / "examples").glob("*.mlir")),
]


# Every pass sees mutated input; each pipeline ends in the verifier.
PIPELINES = [
    "builtin.module(et.kernel(et-verify-event-graph{emit-counts}))",
    "builtin.module(et.kernel(et-optimize-events,et-static-schedule{workers=3},et-optimize-events,et-verify-event-graph))",
    "builtin.module(et.kernel(et-optimize-events,et-dynamic-schedule{workers=2},et-verify-event-graph))",
]


def chunks(path):
    text = "\n".join(l for l in path.read_text().splitlines() if not l.lstrip().startswith("//"))
    return [c for c in text.split("// -----") if c.strip()]


def mutate(text, rng):
    lines = text.splitlines()
    kind = rng.randrange(7)
    if kind == 0 and len(lines) > 1:  # delete a line
        del lines[rng.randrange(len(lines))]
    elif kind == 1:  # duplicate a line
        i = rng.randrange(len(lines))
        lines.insert(rng.randrange(len(lines) + 1), lines[i])
    elif kind == 2 and len(lines) > 1:  # swap two lines
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == 3:  # change a number
        nums = list(re.finditer(r"\b\d+\b", text))
        if nums:
            m = rng.choice(nums)
            # (The limits of tile counts and event sizes, 2^31 - 1, and
            # one past them; a memref size whose bytes pass 2^63.)
            new = str(rng.choice([0, 1, 2, 3, 7, 64, -1, 1 << 40, (1 << 31) - 1, 1 << 31, 1 << 62]))
            return text[: m.start()] + new + text[m.end():]
    elif kind == 4:  # replace one SSA name by another
        names = sorted(set(re.findall(r"%[A-Za-z_][A-Za-z0-9_]*", text)))
        if len(names) > 1:
            a, b = rng.sample(names, 2)
            occ = [m.start() for m in re.finditer(re.escape(a) + r"\b", text)]
            if occ:
                p = rng.choice(occ)
                return text[:p] + b + text[p + len(a):]
    elif kind == 5:  # swap event types / shapes
        return re.sub(r"!et\.event<[^>]*>", lambda m: rng.choice(["!et.event<>", "!et.event<4>", "!et.event<?x2>", m.group(0)]), text)
    else:  # drop a token
        toks = list(re.finditer(r"\S+", text))
        if toks:
            m = rng.choice(toks)
            return text[: m.start()] + text[m.end():]
    return "\n".join(lines)


def test_mutated_ir_never_crashes(tmp_path):
    budget = float(os.environ.get("ET_FUZZ_SECONDS", "20"))
    seed = int(os.environ.get("ET_FUZZ_SEED", "0")) or random.randrange(1 << 30)
    rng = random.Random(seed)
    corpus = [c for p in SOURCES for c in chunks(p)]
    assert corpus
    deadline = time.monotonic() + budget
    runs = 0
    case = tmp_path / "case.mlir"
    while time.monotonic() < deadline:
        text = rng.choice(corpus)
        for _ in range(rng.randint(1, 3)):
            text = mutate(text, rng)
        case.write_text(text)
        out = subprocess.run(
            [str(ET_OPT), str(case), f"--pass-pipeline={rng.choice(PIPELINES)}", "-o", os.devnull],
            capture_output=True, text=True, timeout=60,
        )
        runs += 1
        if out.returncode not in (0, 1):
            crash = tmp_path / f"crash-{seed}.mlir"
            crash.write_text(text)
            raise AssertionError(
                f"et-opt exited with {out.returncode} (seed {seed}, run {runs}); input kept at {crash}\n{out.stderr[-3000:]}"
            )
    print(f"fuzz: {runs} mutated inputs, seed {seed}, no crash")
    assert runs > 0
