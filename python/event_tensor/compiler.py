"""Runs et-opt pass pipelines from Python.

Pipelines are the strings `PassManager.parse` understands (the same text as
`et-opt --pass-pipeline=...`). On failure `run_pipeline` raises
`EventTensorCompileError` carrying every diagnostic and a command line that
reproduces the failure with `et-opt`.
"""

from __future__ import annotations

import os
import re
import tempfile
from typing import Optional

from .ir import Context, Module, Operation
from .passmanager import PassManager

__all__ = ["EventTensorCompileError", "parse", "run_pipeline", "verify"]


class EventTensorCompileError(Exception):
    """A parse, verification or pass failure, with its diagnostics."""

    def __init__(self, message: str, diagnostics: list[str], repro: Optional[str] = None):
        self.diagnostics = list(diagnostics)
        self.repro = repro
        text = message
        if diagnostics:
            text += "\n" + "\n".join(diagnostics)
        if repro:
            text += f"\nreproduce with: {repro}"
        super().__init__(text)


# Lines of a diagnostic's note kept in the error: MLIR attaches the failing
# operation to a pass error ("see current operation"), and for an
# `et.kernel` that is the whole kernel (megabytes for a model); the
# reproducer file holds the IR.
MAX_NOTE_LINES = 12


def _note_text(message: str) -> str:
    lines = message.split("\n")
    if len(lines) <= MAX_NOTE_LINES:
        return message
    kept = "\n".join(lines[:MAX_NOTE_LINES])
    return f"{kept}\n  ... ({len(lines) - MAX_NOTE_LINES} more lines)"


_FILE_LINE_COL = re.compile(r'^loc\("(.*)":(\d+):(\d+)\)$')


def _where(location) -> str:
    """A diagnostic's location as compilers print one (file:line:col), or
    MLIR's own form where it is not a file position."""
    text = str(location)
    m = _FILE_LINE_COL.match(text)
    return f"{m[1]}:{m[2]}:{m[3]}" if m else text


def _diagnostic_lines(err) -> list[str]:
    lines = []
    for diag in getattr(err, "error_diagnostics", []):
        lines.append(f"{_where(diag.location)}: error: {diag.message}")
        for note in diag.notes:
            lines.append(f"{_where(note.location)}: note: {_note_text(note.message)}")
    if not lines:
        lines.append(str(err))
    return lines


def parse(text: str, context: Optional[Context] = None) -> Module:
    """Parses and verifies `text`; raises EventTensorCompileError on failure.
    The module's locations name the source "-" (`-:line:col` in
    diagnostics)."""
    from .ir import MLIRError

    try:
        return Module.parse(text, context=context)
    except MLIRError as err:
        raise EventTensorCompileError("failed to parse module", _diagnostic_lines(err)) from None


def verify(op) -> None:
    """Verifies `op` (a Module or Operation); raises on failure."""
    from .ir import MLIRError

    operation = op.operation if hasattr(op, "operation") else op
    try:
        operation.verify()
    except MLIRError as err:
        raise EventTensorCompileError("verification failed", _diagnostic_lines(err)) from None


def run_pipeline(module, pipeline: str, *, name: str = "module", keep_repro: bool = True):
    """Runs `pipeline` (e.g. "builtin.module(canonicalize)") on `module` in place.

    Raises EventTensorCompileError with the diagnostics; when `keep_repro` is
    set, the input IR is saved to a temporary file and the error carries an
    `et-opt` command line that reproduces the failure.
    """
    from .ir import MLIRError

    operation: Operation = module.operation if hasattr(module, "operation") else module
    before = operation.get_asm(enable_debug_info=True) if keep_repro else None
    try:
        pm = PassManager.parse(pipeline, context=operation.context)
    except (MLIRError, ValueError) as err:
        raise EventTensorCompileError(f"invalid pass pipeline '{pipeline}'", _diagnostic_lines(err)) from None
    try:
        pm.run(operation)
    except MLIRError as err:
        repro = None
        if before is not None:
            fd, path = tempfile.mkstemp(prefix=f"{name}-", suffix=".mlir")
            with os.fdopen(fd, "w") as f:
                f.write(before)
            repro = f"et-opt --pass-pipeline='{pipeline}' {path}"
        raise EventTensorCompileError(f"pipeline '{pipeline}' failed", _diagnostic_lines(err), repro) from None
    return module
