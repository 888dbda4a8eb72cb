"""A Python script run in a network namespace of the test's own, for the
tests that need addresses no host may route to (cloud metadata, a host's
own global addresses): they live on that namespace's loopback, so nothing
the script does leaves it.

The script runs under this interpreter (safebox importable) with tests/ on
its path (``from netservers import start_origin``), and prints one JSON
value: what the test asserts on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

TESTS_DIR = Path(__file__).resolve().parent


def run_in_netns(tmp: Path, script: str, *, hosts: str, addresses: Sequence[str] = ()) -> tuple[Any, str]:
    """Run ``script`` in new network and mount namespaces: ``lo`` up and
    holding each of ``addresses`` (/32) besides 127.0.0.1, ``/etc/hosts``
    replaced by ``hosts``. Returns the JSON it printed and its stderr; a namespace that
    cannot be made fails the test (it would show nothing)."""
    hosts_file = tmp / "hosts"
    hosts_file.write_text(hosts)
    path = tmp / "netns-script.py"
    path.write_text(script)
    assign = "".join(f"ip addr add {a}/32 dev lo && " for a in addresses)
    cmd = f"mount --bind {hosts_file} /etc/hosts && ip link set lo up && {assign}exec {sys.executable} {path}"
    # Unprivileged, a user namespace (-r) gives the capabilities for the new
    # net and mount namespaces; as root they are not needed.
    userns = [] if os.geteuid() == 0 else ["-r"]
    r = subprocess.run(["unshare", *userns, "-n", "-m", "sh", "-c", cmd], capture_output=True, text=True,
                       timeout=120, env={**os.environ, "PYTHONPATH": str(TESTS_DIR)})
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout), r.stderr
