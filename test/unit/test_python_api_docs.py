"""docs/generated/python-api.md is generated from the package's docstrings;
this fails when it is stale (run `make docs`)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_python_api_reference_is_current():
    r = subprocess.run([sys.executable, str(ROOT / "utils" / "python_api_docs.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
