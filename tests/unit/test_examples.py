"""Every program in examples/ is run by a test: an example that no test runs stops working unnoticed."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_every_example_is_run_by_a_test() -> None:
    tests = "\n".join(p.read_text() for p in (REPO / "tests").rglob("test_*.py") if p.name != "test_examples.py")
    unrun = [p.name for p in sorted((REPO / "examples").glob("*.py"))
             if f'"examples" / "{p.name}"' not in tests and f"examples/{p.name}" not in tests]
    assert not unrun, f"examples no test runs: {unrun}"
