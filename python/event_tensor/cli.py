"""The `event-tensor` command line."""

from __future__ import annotations

import argparse
import re
import sys

from . import __version__


def _cmd_version(args: argparse.Namespace) -> int:
    print(f"event-tensor {__version__}")
    return 0


def _report(err, path: str) -> None:
    """Prints a compile error of the input at `path`, its diagnostics'
    positions in the parsed text (`-:line:col`) named by the file."""
    text = str(err)
    if path != "-":
        text = re.sub(r"(?m)^-:(\d+:\d+:)", lambda m: f"{path}:{m[1]}", text)
    print(f"event-tensor: error: {text}", file=sys.stderr)


def _read_input(path: str) -> str:
    if path == "-":
        return sys.stdin.read()
    with open(path, encoding="utf-8") as f:
        return f.read()


def _cmd_opt(args: argparse.Namespace) -> int:
    from .compiler import EventTensorCompileError, parse, run_pipeline
    from .ir import Context

    try:
        text = _read_input(args.input)
    except OSError as err:
        print(f"event-tensor: error: cannot read '{args.input}': {err.strerror}", file=sys.stderr)
        return 2
    with Context():
        try:
            module = parse(text)
            if args.pass_pipeline:
                run_pipeline(module, args.pass_pipeline, name="input")
        except EventTensorCompileError as err:
            _report(err, args.input)
            return 1
        out = str(module)
    if args.output and args.output != "-":
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(out)
    else:
        sys.stdout.write(out)
    return 0


def _parse_sizes(items: list[str]) -> dict[str, int]:
    sizes = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            sizes[name.strip()] = int(value)
        except ValueError:
            sep = ""
        if not sep or not name.strip():
            raise ValueError(f"malformed --size '{item}' (expected NAME=INTEGER, e.g. arg3=4)")
    return sizes


def _cmd_schedule(args: argparse.Namespace) -> int:
    from . import analysis, simulator
    from .compiler import EventTensorCompileError, parse, run_pipeline
    from .ir import Context

    try:
        sizes = _parse_sizes(args.size)
        text = _read_input(args.input)
    except ValueError as err:
        print(f"event-tensor: error: {err}", file=sys.stderr)
        return 2
    except OSError as err:
        print(f"event-tensor: error: cannot read '{args.input}': {err.strerror}", file=sys.stderr)
        return 2
    passes = [f"et-{args.mode}-schedule{{workers={args.workers}}}"]
    if args.optimize:
        passes = ["et-optimize-events", *passes]
        if args.mode == "static":
            passes.append("et-optimize-events")
    pipeline = f"builtin.module(et.kernel({','.join(passes)}))"
    with Context():
        try:
            module = parse(text)
            run_pipeline(module, pipeline, name="input")
            plans = [analysis.schedule_plan(k, sizes) for k in analysis.kernels(module)]
        except (EventTensorCompileError, ValueError, TypeError) as err:
            _report(err, args.input)
            return 1
        if args.output:
            with open(args.output, "w", encoding="utf-8") as f:
                f.write(str(module))
    for plan in plans:
        try:
            result = simulator.simulate(plan)
        except simulator.DeadlockError as err:
            print(f"event-tensor: error: {err}", file=sys.stderr)
            return 1
        print(simulator.summary(result))
        suffix = f".{plan['kernel']}" if len(plans) > 1 else ""
        if args.trace:
            simulator.chrome_trace(result, _suffixed(args.trace, suffix))
        if args.gantt:
            simulator.gantt_png(result, _suffixed(args.gantt, suffix))
    return 0


def _suffixed(path: str, suffix: str) -> str:
    if not suffix:
        return path
    stem, dot, ext = path.rpartition(".")
    return f"{stem}{suffix}.{ext}" if dot else path + suffix


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="event-tensor",
        description="EventTensor: compile tiled tasks with explicit event-tensor "
        "dependencies into one persistent GPU kernel. Without a command, runs `demo`.",
    )
    parser.add_argument("--version", action="version", version=f"event-tensor {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("version", help="print the version", description="Print the version.")
    p.set_defaults(func=_cmd_version)

    p = sub.add_parser(
        "opt",
        help="parse, verify and optionally transform an MLIR file",
        description="Parse and verify an MLIR file (with the et dialect), run an optional "
        "pass pipeline on it, and print the result. The pipeline syntax is et-opt's.",
    )
    p.add_argument("input", help="input .mlir file, or - for standard input")
    p.add_argument(
        "--pass-pipeline",
        default="",
        help="pass pipeline, e.g. 'builtin.module(canonicalize,cse)'",
    )
    p.add_argument("-o", "--output", default="-", help="output file (default: standard output)")
    p.set_defaults(func=_cmd_opt)

    p = sub.add_parser(
        "schedule",
        help="schedule the kernels of an MLIR file and simulate the schedule",
        description="Schedule every et.kernel of an MLIR file (et-static-schedule or "
        "et-dynamic-schedule), simulate the schedule with the cost model for concrete "
        "runtime sizes, and print the predicted makespan and worker utilization; "
        "optionally write a Chrome trace (Perfetto) and a Gantt chart.",
    )
    p.add_argument("input", help="input .mlir file, or - for standard input")
    p.add_argument("--mode", choices=["static", "dynamic"], default="static", help="schedule kind")
    p.add_argument("--workers", type=int, default=132, help="persistent workers (default 132, one per SM)")
    p.add_argument("--optimize", action="store_true", help="run et-optimize-events around the scheduler")
    p.add_argument(
        "--size",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a runtime size: kernel argument i as argI, the k-th et.extent.load as loadK",
    )
    p.add_argument("--trace", help="write a Chrome trace JSON here")
    p.add_argument("--gantt", help="write a Gantt chart PNG here")
    p.add_argument("-o", "--output", help="write the scheduled IR here")
    p.set_defaults(func=_cmd_schedule)

    from .model.cli import add_commands
    from .serving.cli import add_commands as add_serving_commands

    add_commands(sub)
    add_serving_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    # The demo is the default command.
    args = parser.parse_args(["demo"] if argv == [] or (argv is None and len(sys.argv) == 1) else argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
