"""The helper's proxy ports (helper/handoff.c), with the helper alone.

The helper listens on 127.0.0.1:PORT before any restriction, sends the
listener to its caller over ``--handoff-fd``, and execs the command only
after the caller answers.  Here the test plays safebox's part with real
sockets; the command's connection must arrive at the listener the test
received, and any break in the exchange must keep the command from running.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import threading
from pathlib import Path

import pytest

from conftest import HELPER, Sandbox
from safebox.builder.helper_policy import FsAccess, HelperPolicy, NetMode, render, write_policy_file

CONNECT = ("import socket, sys\n"
           "s = socket.create_connection(('127.0.0.1', int(sys.argv[1])), 5)\n"
           "s.sendall(b'ping'); print(s.recv(4).decode())\n")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _policy(sandbox: Sandbox, port: int) -> Path:
    pol = HelperPolicy(fs_rules=((FsAccess.READ, "/"), (FsAccess.DEV, "/dev"),
                                 (FsAccess.WRITE, str(sandbox.write_root))),
                       net=NetMode.PROXY, connect_ports=(port,), listens=(port,))
    path = sandbox.tmp / f"policy-handoff-{port}"
    write_policy_file(path, render(pol))
    return path


def _run(policy: Path, argv: list[str], *, handoff: socket.socket | None,
         safebox_side: threading.Thread | None = None) -> tuple[int, str, dict]:
    rfd, wfd = os.pipe()
    cmd = [str(HELPER), "--policy-file", str(policy), "--status-fd", str(wfd)]
    fds: tuple[int, ...] = (wfd,)
    if handoff is not None:
        cmd += ["--handoff-fd", str(handoff.fileno())]
        fds += (handoff.fileno(),)
    try:
        proc = subprocess.Popen([*cmd, "--", *argv], pass_fds=fds, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
    finally:
        os.close(wfd)
        if handoff is not None:
            handoff.close()
    if safebox_side is not None:
        safebox_side.start()
    out, _ = proc.communicate(timeout=60)
    if safebox_side is not None:
        safebox_side.join(30)
    with os.fdopen(rfd) as f:
        line = f.read().strip()
    return proc.returncode, out, json.loads(line) if line else {}


def test_the_command_reaches_the_listener_the_helper_handed_over(sandbox: Sandbox) -> None:
    port = _free_port()
    ours, theirs = socket.socketpair()
    got: dict[str, object] = {}

    def safebox() -> None:
        with ours:
            msg, fds, _, _ = socket.recv_fds(ours, 16, 16)
            listeners = [socket.socket(fileno=fd) for fd in fds]
            got["tag"] = msg
            got["addresses"] = sorted(s.getsockname()[0] for s in listeners)
            ours.sendall(b"k")
        v4 = next(s for s in listeners if s.family == socket.AF_INET)
        v4.settimeout(20)
        conn, _ = v4.accept()
        with conn:
            got["data"] = conn.recv(4)
            conn.sendall(b"pong")
        for s in listeners:
            s.close()

    rc, out, status = _run(_policy(sandbox, port), ["python3", "-I", "-c", CONNECT, str(port)],
                           handoff=theirs, safebox_side=threading.Thread(target=safebox))
    assert (rc, out.strip()) == (0, "pong"), status
    assert got["tag"] == b"L" and got["data"] == b"ping"
    assert got["addresses"][0] == "127.0.0.1"  # and ::1 where this host has it
    assert status["ok"] is True and status["bridges"] == 1


def test_without_a_handoff_descriptor_the_command_does_not_run(sandbox: Sandbox) -> None:
    marker = sandbox.write_root / "ran"
    rc, _, status = _run(_policy(sandbox, _free_port()), ["touch", str(marker)], handoff=None)
    assert rc == 125 and not marker.exists()
    assert "no --handoff-fd was given" in status["error"]


def test_when_safebox_refuses_the_listeners_the_command_does_not_run(sandbox: Sandbox) -> None:
    marker = sandbox.write_root / "ran"
    ours, theirs = socket.socketpair()

    def refuse() -> None:
        with ours:
            socket.recv_fds(ours, 16, 16)  # take them, then close without the answer

    rc, _, status = _run(_policy(sandbox, _free_port()), ["touch", str(marker)], handoff=theirs,
                         safebox_side=threading.Thread(target=refuse))
    assert rc == 125 and not marker.exists()
    assert "handoff: safebox refused the descriptors" in status["error"]


def test_a_proxy_port_already_taken_is_a_refusal_naming_the_port(sandbox: Sandbox) -> None:
    marker = sandbox.write_root / "ran"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        ours, theirs = socket.socketpair()
        with ours:
            rc, _, status = _run(_policy(sandbox, port), ["touch", str(marker)], handoff=theirs)
    assert rc == 125 and not marker.exists()
    assert f"cannot bind 127.0.0.1 port {port}" in status["error"]
    assert "Address already in use" in status["error"]


@pytest.mark.parametrize("value", ["2", "0", "x", "-1"])
def test_a_handoff_descriptor_below_3_or_not_a_number_is_a_usage_error(sandbox: Sandbox, value: str) -> None:
    r = subprocess.run([str(HELPER), "--policy-file", str(_policy(sandbox, 1)), "--handoff-fd", value,
                        "--", "true"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 125
    assert "--handoff-fd: expected a descriptor number >= 3" in r.stderr
