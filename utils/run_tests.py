#!/usr/bin/env python3
"""Runs every test suite of the project and prints one summary line.

1. rebuilds what the lit suite needs (et-opt, the build-tree Python package);
2. lit on test/ (IR tests through et-opt + FileCheck, Python lit tests);
3. pytest on test/unit against the package installed in .venv.

Counts come from each runner's JUnit XML. Exits non-zero when anything failed
or when a runner ran no test at all.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def junit_counts(path: Path) -> dict[str, int]:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    if not path.exists():
        return counts
    for case in ET.parse(path).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            counts["failed"] += 1
        elif case.find("skipped") is not None:
            counts["skipped"] += 1
        else:
            counts["passed"] += 1
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build-dir", type=Path, default=ROOT / "build")
    ap.add_argument("--venv", type=Path, default=ROOT / ".venv")
    ap.add_argument("--lit-args", default="-sv", help="extra arguments for lit")
    args = ap.parse_args()

    build = args.build_dir
    vbin = args.venv / "bin"
    env = dict(os.environ)
    env["PATH"] = f"{vbin}{os.pathsep}{env.get('PATH', '')}"

    rc = subprocess.call(
        ["cmake", "--build", str(build), "--target", "et-opt", "EventTensorPythonModules"], env=env
    )
    if rc != 0:
        print("error: build failed", file=sys.stderr)
        return rc

    lit_xml = build / "test-results" / "lit.xml"
    py_xml = build / "test-results" / "pytest.xml"
    lit_xml.parent.mkdir(parents=True, exist_ok=True)
    for p in (lit_xml, py_xml):
        p.unlink(missing_ok=True)

    lit_rc = subprocess.call(
        [str(vbin / "lit"), *args.lit_args.split(), f"--xunit-xml-output={lit_xml}", str(build / "test")],
        env=env,
    )
    py_rc = subprocess.call(
        [str(vbin / "python"), "-m", "pytest", "-q", "-ra", f"--junitxml={py_xml}", str(ROOT / "test" / "unit")],
        env=env,
        cwd=str(ROOT),
    )

    lit = junit_counts(lit_xml)
    py = junit_counts(py_xml)
    total = {k: lit[k] + py[k] for k in lit}
    print()
    print(
        f"lit: {lit['passed']} passed, {lit['failed']} failed, {lit['skipped']} skipped (unsupported); "
        f"pytest: {py['passed']} passed, {py['failed']} failed, {py['skipped']} skipped"
    )
    print(f"total: {total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")

    ok = lit_rc == 0 and py_rc == 0 and total["failed"] == 0
    if lit["passed"] == 0 or py["passed"] == 0:
        print("error: a test runner ran no test", file=sys.stderr)
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
