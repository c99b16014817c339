"""The fault suite (benchmarks/faults.py) in the slow tier: every row it prints must hold."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_every_fault_of_the_fault_suite_holds() -> None:
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "faults.py")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1100,
    )
    lines = proc.stdout.strip().splitlines()
    assert lines and lines[-1].startswith("{"), f"no verdict line (exit {proc.returncode}):\n{proc.stderr[-3000:]}"
    verdict = json.loads(lines[-1])
    failed = [
        f"{r['name']}: expected {r['expected']}; observed {r['observed']}" for r in verdict["rows"] if not r["holds"]
    ]
    assert not failed, "\n".join(["rows that did not hold:", *failed, "", proc.stdout, proc.stderr[-3000:]])
    assert verdict["held"] == verdict["faults"] > 0 and proc.returncode == 0, proc.stdout
