"""The `event-tensor` command line."""

from __future__ import annotations

import argparse
import sys

from . import __version__


def _cmd_version(args: argparse.Namespace) -> int:
    print(f"event-tensor {__version__}")
    return 0


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
            print(f"event-tensor: error: {err}", file=sys.stderr)
            return 1
        out = str(module)
    if args.output and args.output != "-":
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(out)
    else:
        sys.stdout.write(out)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="event-tensor",
        description="EventTensor: compile tiled tasks with explicit event-tensor "
        "dependencies into one persistent GPU kernel.",
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
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 0
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
