"""allowUnixSockets is per path: listed sockets connect, unlisted host sockets do not."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SAFEBOX = str(ROOT / ".venv" / "bin" / "safebox")
CONNECT = """
import socket, sys
for p in sys.argv[1:]:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(p)
        print(p, "connected")
    except OSError as e:
        print(p, e.errno)
"""


@pytest.fixture
def listeners():
    # Outside /tmp on purpose: /tmp is private inside the sandbox, which would
    # hide the unlisted socket for a reason other than the one under test.
    d = Path(tempfile.mkdtemp(prefix="safebox-sock-", dir="/var/tmp"))
    socks = []
    paths = [d / "allowed.sock", d / "other.sock"]
    for p in paths:
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(p))
        s.listen(8)
        socks.append(s)
    yield [str(p) for p in paths]
    for s in socks:
        s.close()
    for p in paths:
        p.unlink()
    d.rmdir()


def run(tmp_path: Path, policy: dict | None, *paths: str) -> dict[str, str]:
    cmd = [SAFEBOX, "exec"]
    if policy is not None:
        pf = tmp_path / "policy.json"
        pf.write_text(json.dumps(policy))
        cmd += ["-p", str(pf)]
    r = subprocess.run([*cmd, "--", "python3", "-c", CONNECT, *paths], cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    return dict(line.rsplit(" ", 1) for line in r.stdout.splitlines()) | {"rc": str(r.returncode),
                                                                          "stderr": r.stderr}


def test_without_the_sandbox_both_sockets_connect(listeners) -> None:
    r = subprocess.run(["python3", "-c", CONNECT, *listeners], capture_output=True, text=True)
    assert r.stdout.split("\n")[:2] == [f"{listeners[0]} connected", f"{listeners[1]} connected"]


def test_by_default_no_unix_socket_can_even_be_created(listeners, tmp_path) -> None:
    out = run(tmp_path, None, listeners[0])
    assert out["rc"] == "1" and "PermissionError: [Errno 1] Operation not permitted" in out["stderr"]


def test_a_listed_socket_connects_and_an_unlisted_one_is_refused(listeners, tmp_path) -> None:
    out = run(tmp_path, {"network": {"allowUnixSockets": [listeners[0]]}}, *listeners)
    assert out[listeners[0]] == "connected"
    assert out[listeners[1]] == "111"  # ECONNREFUSED: /dev/null is bound over it


def test_allow_all_unix_sockets_makes_every_socket_connectable(listeners, tmp_path) -> None:
    out = run(tmp_path, {"network": {"allowAllUnixSockets": True}}, *listeners)
    assert out[listeners[0]] == out[listeners[1]] == "connected"


def test_a_listed_socket_under_tmp_is_bound_into_the_private_tmp(tmp_path) -> None:
    d = tempfile.mkdtemp(prefix="safebox-sock-", dir="/tmp")
    path = os.path.join(d, "s.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.listen(1)
    try:
        out = run(tmp_path, {"network": {"allowUnixSockets": [path]}}, path)
        assert out[path] == "connected"
    finally:
        s.close()
        os.unlink(path)
        os.rmdir(d)
