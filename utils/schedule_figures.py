#!/usr/bin/env python3
"""Regenerates the schedule figures of docs/scheduling.md: schedules the
examples in test/examples statically and dynamically, simulates them with the
cost model for the runtime sizes below, writes a Gantt chart per case into
docs/figures/ and prints a Markdown table of predicted makespans.

    .venv/bin/python utils/schedule_figures.py [--workers 8]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from event_tensor import analysis, compiler, ir, simulator

ROOT = Path(__file__).resolve().parent.parent
CASES = [
    ("attention-split-kv", {"arg3": 4}),
    ("mlp-dynamic-rows", {"arg5": 300}),
    ("moe-dispatch-combine", {"arg2": 64, "load0": 40, "load1": 24}),
]
PIPELINES = {
    "static": "et-optimize-events,et-static-schedule{{workers={w}}},et-optimize-events",
    "dynamic": "et-optimize-events,et-dynamic-schedule{{workers={w}}}",
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args()
    out = ROOT / "docs" / "figures"
    out.mkdir(parents=True, exist_ok=True)
    print("| example | sizes | schedule | makespan (us) | mean utilization |")
    print("|---|---|---|---|---|")
    for name, sizes in CASES:
        text = (ROOT / "test" / "examples" / f"{name}.mlir").read_text()
        for mode, pipeline in PIPELINES.items():
            with ir.Context():
                module = compiler.parse(text)
                compiler.run_pipeline(module, f"builtin.module(et.kernel({pipeline.format(w=args.workers)}))")
                plan = analysis.schedule_plan(module, sizes)
            result = simulator.simulate(plan)
            simulator.gantt_png(result, out / f"{name}-{mode}.png")
            shown = ", ".join(f"{k}={v}" for k, v in sizes.items())
            print(f"| {name} | {shown} | {mode} | {result.makespan_ns / 1000:.2f} | "
                  f"{100 * result.mean_utilization:.0f}% |")


if __name__ == "__main__":
    main()
