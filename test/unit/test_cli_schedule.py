"""`event-tensor schedule`: schedule, simulate, trace and draw from the command line."""

import json
from pathlib import Path

import pytest

from event_tensor.cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


@pytest.mark.parametrize("mode", ["static", "dynamic"])
def test_schedule_writes_trace_gantt_and_ir(tmp_path, capsys, mode):
    pytest.importorskip("matplotlib")
    trace, gantt, ir = tmp_path / "t.json", tmp_path / "g.png", tmp_path / "s.mlir"
    rc = main(["schedule", str(EXAMPLES / "attention-split-kv.mlir"), "--mode", mode, "--workers", "8",
               "--optimize", "--size", "arg3=4", "--trace", str(trace), "--gantt", str(gantt), "-o", str(ir)])
    assert rc == 0
    out = capsys.readouterr().out
    assert f"attention: {mode} schedule on 8 workers, 89 tiles" in out
    assert "makespan" in out
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(1 for e in events if e.get("ph") == "X") == 89
    assert gantt.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert f"et.schedule {mode} workers(8)" in ir.read_text()


def test_schedule_errors(capsys):
    path = str(EXAMPLES / "attention-split-kv.mlir")
    assert main(["schedule", path, "--size", "arg3"]) == 2
    assert "malformed --size 'arg3'" in capsys.readouterr().err
    assert main(["schedule", path]) == 1
    assert "no value for extent #1 of @attn_split (arg3)" in capsys.readouterr().err
    assert main(["schedule", path, "--workers", "0"]) == 1
    assert "needs a worker count in [1, 1048576], got 0" in capsys.readouterr().err
    assert main(["schedule", "/nonexistent.mlir"]) == 2


def test_errors_point_into_the_input_file(tmp_path, capsys, monkeypatch):
    """A parse error, and a pass's error with its notes, name the input file
    at the op's line and column (stdin stays `-`)."""
    import io

    bad = tmp_path / "bad.mlir"
    bad.write_text("et.kernel @k( {\n")
    assert main(["opt", str(bad)]) == 1
    assert f"{bad}:1:14: error: expected non-function type" in capsys.readouterr().err
    waits = tmp_path / "waits.mlir"
    waits.write_text("et.kernel @k() {\n  %c1 = arith.constant 1 : index\n  %e = et.event.create() : !et.event<>\n"
                     "  et.task @a tiles(%i) in (%c1) {\n    et.event.wait %e[] : !et.event<>\n  }\n}\n")
    assert main(["opt", str(waits), "--pass-pipeline", "builtin.module(et.kernel(et-verify-event-graph))"]) == 1
    err = capsys.readouterr().err
    assert f"{waits}:5:5: error: 'et.event.wait' op waits on an event that no task signals" in err
    assert f"{waits}:3:8: note: event created here" in err
    monkeypatch.setattr("sys.stdin", io.StringIO("et.kernel @k( {\n"))
    assert main(["opt", "-"]) == 1
    assert "\n-:1:14: error: expected non-function type" in capsys.readouterr().err
