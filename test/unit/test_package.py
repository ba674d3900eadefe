"""The installed package: import from anywhere, console scripts, CLI."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

BIN = Path(sys.executable).parent


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def test_import_from_other_folder(tmp_path):
    out = run([sys.executable, "-c", "import event_tensor, event_tensor.ir; print(event_tensor.__version__)"], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == __import__("event_tensor").__version__


def test_import_does_not_load_mlir(tmp_path):
    code = "import sys, event_tensor; print(any(m.startswith('event_tensor._mlir_libs') for m in sys.modules))"
    out = run([sys.executable, "-c", code], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_session_does_not_load_mlir(tmp_path):
    """The runtime side of the model frontend (DecodeSession) runs where the
    artifact was copied to, without MLIR."""
    code = ("import sys, event_tensor.model.session, event_tensor.runtime; "
            "print(any(m.startswith('event_tensor._mlir_libs') for m in sys.modules))")
    out = run([sys.executable, "-c", code], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_never_imports_upstream_mlir(tmp_path):
    code = (
        "import sys; from event_tensor.dialects import et, func, arith, scf, gpu, llvm, nvvm, memref, vector; "
        "print('mlir' in sys.modules)"
    )
    out = run([sys.executable, "-c", code], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_et_opt_installed(tmp_path):
    et_opt = BIN / "et-opt"
    assert et_opt.exists()
    src = tmp_path / "in.mlir"
    src.write_text("et.kernel @f(%n: index) {\n  %e = et.event.create(%n) : !et.event<?x2>\n}\n")
    out = run([str(et_opt), str(src)], cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "et.event.create(%arg0) : !et.event<?x2>" in out.stdout


def test_et_opt_registers_lowering_passes():
    out = run([str(BIN / "et-opt"), "--help"])
    assert out.returncode == 0
    for flag in ("--convert-gpu-to-nvvm", "--gpu-module-to-binary", "--convert-scf-to-cf", "--nvvm-attach-target",
                 "--reconcile-unrealized-casts", "--gpu-lower-to-nvvm-pipeline"):
        assert flag in out.stdout, flag


def test_console_script_help():
    exe = BIN / "event-tensor"
    assert exe.exists()
    out = run([str(exe), "--help"])
    assert out.returncode == 0
    assert "usage: event-tensor" in out.stdout
    out = run([str(exe), "opt", "--help"])
    assert out.returncode == 0 and "--pass-pipeline" in out.stdout


def test_cli_opt_runs_pipeline(tmp_path):
    src = tmp_path / "in.mlir"
    src.write_text("func.func @f() -> index {\n  %a = arith.constant 1 : index\n  %b = arith.addi %a, %a : index\n  return %b : index\n}\n")
    out = run([str(BIN / "event-tensor"), "opt", str(src), "--pass-pipeline", "builtin.module(canonicalize)"])
    assert out.returncode == 0, out.stderr
    assert "arith.constant 2 : index" in out.stdout
    assert "arith.addi" not in out.stdout


def test_cli_opt_reports_verifier_error(tmp_path):
    src = tmp_path / "bad.mlir"
    src.write_text("et.kernel @f(%n: index) {\n  %e = et.event.create(%n) : !et.event<4>\n}\n")
    out = run([str(BIN / "event-tensor"), "opt", str(src)])
    assert out.returncode == 1
    assert "expected 0 dynamic size operands for '!et.event<4>', got 1" in out.stderr


def test_cli_opt_missing_file(tmp_path):
    out = run([str(BIN / "event-tensor"), "opt", str(tmp_path / "nope.mlir")])
    assert out.returncode == 2
    assert "cannot read" in out.stderr


def test_installed_package_has_every_source_file():
    """Every .py and .json file of the source package (the shipped tuning
    tables among them) is in the installed package, which is what the
    build assembles and the wheel installs."""
    import event_tensor

    src = Path(__file__).resolve().parents[2] / "python" / "event_tensor"
    installed = Path(event_tensor.__file__).parent
    files = [p.relative_to(src) for pattern in ("*.py", "*.json") for p in src.rglob(pattern)
             if "__pycache__" not in p.parts and p.parts[len(src.parts)] != "dialects"]
    assert len([f for f in files if f.parts[0] == "tables"]) >= 4
    missing = [str(f) for f in files if not (installed / f).is_file()]
    assert not missing, f"not in the installed package: {missing}"
