"""Property tests of the schedulers and the event-graph optimizer over random
task graphs (random DAGs, tilings, fan-in/fan-out, dynamic extents).

For every seed and worker count:
- the static schedule respects every dependency of the original graph (the
  simulator runs it without deadlock and no tile starts before a tile it
  depends on has ended), with and without et-optimize-events;
- the dynamic schedule never deadlocks and respects every dependency, with
  and without optimization, for any number of workers.
ET_PROPERTY_SEEDS (default 400) sets the number of seeds.
"""

import os
import random

import pytest

from event_tensor import analysis, compiler, ir, simulator
from event_tensor.dag import random_kernel
from event_tensor.testing import reference_plan

SEEDS = int(os.environ.get("ET_PROPERTY_SEEDS", "400"))


def _schedule(text, pipeline):
    module = compiler.parse(text)
    compiler.run_pipeline(module, f"builtin.module(et.kernel({pipeline},et-verify-event-graph))")
    return module


def _case(seed):
    rng = random.Random(seed)
    rk = random_kernel(seed, max_tasks=rng.choice([3, 6, 10]), dynamic=seed % 3 != 0, with_costs=seed % 2 == 0)
    workers = rng.choice([1, 2, 3, 4, 7, 16])
    return rk, workers


@pytest.mark.parametrize("seed", range(SEEDS))
def test_schedules_respect_dependencies(seed):
    rk, workers = _case(seed)
    with ir.Context():
        # The dependencies of the original graph (any schedule exports them).
        reference = reference_plan(rk.text, rk.bindings)
        variants = {
            "static": f"et-static-schedule{{workers={workers}}}",
            "static+opt": f"et-optimize-events,et-static-schedule{{workers={workers}}},et-optimize-events",
            "dynamic": f"et-dynamic-schedule{{workers={workers}}}",
            "dynamic+opt": f"et-optimize-events,et-dynamic-schedule{{workers={workers}}}",
        }
        for name, pipeline in variants.items():
            plan = analysis.schedule_plan(_schedule(rk.text, pipeline), rk.bindings)
            assert plan["workers"] == workers
            assert [t["name"] for t in plan["tasks"]] == [t["name"] for t in reference["tasks"]]
            try:
                result = simulator.simulate(plan)
                simulator.check_dependencies(result, reference["deps"])
            except (simulator.DeadlockError, AssertionError) as err:
                pytest.fail(f"seed {seed}, {name}, {workers} workers: {err}\n{rk.text}")
            ran = sorted((r.task_index, r.tile) for r in result.records)
            expected = sorted((t, i) for t, task in enumerate(plan["tasks"]) for i in range(task["num_tiles"]))
            assert ran == expected, f"seed {seed}, {name}: not every tile ran exactly once"


def test_static_programs_are_topological():
    """Independent of the simulator: in every static program a tile comes
    after each dependency that runs on the same worker, and the union of
    program order and dependencies is acyclic."""
    for seed in range(min(SEEDS, 60)):
        rk, workers = _case(seed)
        with ir.Context():
            plan = analysis.schedule_plan(_schedule(rk.text, f"et-static-schedule{{workers={workers}}}"), rk.bindings)
        edges = {}
        for t, per_task in enumerate(plan["deps"]):
            for i, refs in enumerate(per_task):
                edges.setdefault((t, i), set()).update(tuple(r) for r in refs)
        for program in plan["programs"]:
            for before, after in zip(program, program[1:]):
                edges.setdefault(tuple(after), set()).add(tuple(before))
        state = {}

        def visit(node):
            state[node] = 1
            for pred in edges.get(node, ()):
                if state.get(pred) == 1:
                    raise AssertionError(f"seed {seed}: cycle through {pred} and {node}")
                if pred not in state:
                    visit(pred)
            state[node] = 2

        for node in list(edges):
            if node not in state:
                visit(node)


def test_plan_errors_name_the_problem():
    rk, _ = _case(1)
    with ir.Context():
        module = compiler.parse(rk.text)
        with pytest.raises(ValueError, match="is not scheduled"):
            analysis.schedule_plan(module, rk.bindings)
        module = _schedule(rk.text, "et-dynamic-schedule{workers=2}")
        with pytest.raises(ValueError, match="size binding name 'rows'"):
            analysis.schedule_plan(module, {"rows": 3})
        with pytest.raises(TypeError, match="must be an int"):
            analysis.schedule_plan(module, {"arg0": "3"})


def test_all_to_all_waits_schedule_in_bounded_memory():
    """Four tasks of 16,384 tiles, every tile waiting on a scalar event that
    every tile of the task before signals: the tile graph keeps one
    dependency set per waited element (not a list of 16,384 tiles per tile),
    so scheduling, verifying and lowering to the host stay within 1.5 GB of
    address space (the pairwise lists took 1.3-1.8 GB at 4,096 tiles, about
    13 GB here)."""
    import resource
    import subprocess
    import sys
    from pathlib import Path

    tiles = 16384
    tasks = "\n".join(
        f"  et.task @t{i} tiles(%i) in (%n) {{\n"
        + (f"    et.event.wait %e{i - 1}[] : !et.event<>\n" if i else "")
        + (f"    et.event.signal %e{i}[] : !et.event<>\n" if i < 3 else "")
        + "  }" for i in range(4))
    text = ("et.kernel @a2a() {\n"
            f"  %n = arith.constant {tiles} : index\n"
            + "".join(f"  %e{i} = et.event.create() : !et.event<>\n" for i in range(3))
            + tasks + "\n}\n")

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (1536 << 20, 1536 << 20))

    et_opt = Path(sys.executable).parent / "et-opt"
    for pipeline in ("builtin.module(et.kernel(et-optimize-events,et-static-schedule{workers=132},"
                     "et-verify-event-graph))", "builtin.module(et-lower-to-cpu-pipeline{workers=132})"):
        # One thread and two malloc arenas: the address space then does not
        # grow with the machine's cores (thread stacks, per-thread arenas).
        run = subprocess.run([str(et_opt), "--mlir-disable-threading", f"--pass-pipeline={pipeline}", "-o",
                              os.devnull], input=text, capture_output=True, text=True, preexec_fn=limit,
                             timeout=300, env=dict(os.environ, MALLOC_ARENA_MAX="2"))
        assert run.returncode == 0, (pipeline, run.stderr[-2000:])
