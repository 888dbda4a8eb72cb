"""examples/agent_harness.py: ten agents, each in its own Sandbox, at once;
their isolation, and one killed mid-run leaving nothing behind."""

from __future__ import annotations

import subprocess

import pytest

from sbx import REPO, FakeHome

pytestmark = pytest.mark.needs_bwrap


def test_the_agent_harness_example_runs_ten_isolated_agents_and_kills_one(fresh_home: FakeHome) -> None:
    base = fresh_home.root / "agents"
    base.mkdir()
    r = subprocess.run([str(REPO / ".venv" / "bin" / "python"), str(REPO / "examples" / "agent_harness.py"),
                        str(base)], cwd=fresh_home.root, env=fresh_home.env(), capture_output=True, text=True,
                       timeout=300, check=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "10 agents and one killed mid-run" in r.stdout and "all checks held" in r.stdout
    assert not list(base.glob("agent-*/planted.txt"))
    assert all((base / f"agent-{i}" / "out.txt").read_text() == f"from-{i}\n" for i in range(10))
