"""An allowed unix socket is the socket bound at that path, by identity
(issue 22, item 10).

``network.allowUnixSockets`` lists paths; bubblewrap hides every other
socket of the host's ``/proc/net/unix`` (docs/policy-reference.md, "Unix
sockets"). A listed path that is another name of a socket bound elsewhere (a
hard link to its file, its file renamed after the bind, a bind to a relative
name) used to be allowed by name: whichever socket it stood for was
reachable, and an earlier run, or anyone who could write that directory,
chose which. safebox now asks the kernel (sock_diag) which socket the file
is, and refuses a listed path that is not the name its socket was bound at.
"""

from __future__ import annotations

import json
import os
import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from sbx import BOTH, FakeHome, host, token

# serial: these tests make host sockets with a second name (a hard link), a
# new name (renamed) or a relative one, and what safebox says and refuses
# covers every host socket of the network namespace, not only the test's:
# while one of them exists, every --strict run with allowUnixSockets refuses
# (125) and every other run warns or notes it, so this file's other cases,
# or any test that reads safebox's stderr, would see them on another worker.
# (Not the race between the socket listing and bwrap's mounts, which these
# tests were serial for until safebox's mounter skipped a socket gone.)
pytestmark = pytest.mark.serial

PY = "/usr/bin/python3"
CONNECT = ("import socket, sys\n"
           "s = socket.socket(socket.AF_UNIX)\n"
           "try: s.connect(sys.argv[1]); print(s.recv(16).decode())\n"
           "except OSError as e: print(e.errno)\n")


@contextmanager
def server(path: str, cwd: Path | None = None) -> Iterator[socket.socket]:
    """A listener at ``path`` (relative to ``cwd`` when given) that greets once."""
    srv = socket.socket(socket.AF_UNIX)
    old = os.getcwd()
    try:
        if cwd is not None:
            os.chdir(cwd)  # the only way to bind a relative name
        srv.bind(path)
    finally:
        os.chdir(old)
    srv.listen()
    srv.settimeout(30)
    try:
        yield srv
    finally:
        try:
            srv.shutdown(socket.SHUT_RDWR)  # wakes a greeter blocked in accept(), which holds the socket
        except OSError:
            pass
        srv.close()


def greet(srv: socket.socket) -> None:
    import threading

    def run() -> None:
        try:
            conn, _ = srv.accept()
            conn.sendall(b"hello")
            conn.close()
        except OSError:
            pass

    threading.Thread(target=run, daemon=True).start()


def hard_link(home: FakeHome) -> tuple[Callable[[], object], str]:
    real, alias = home.root / f"real-{token()}.sock", home.root / f"alias-{token()}.sock"

    @contextmanager
    def setup() -> Iterator[socket.socket]:
        with server(str(real)) as srv:
            os.link(real, alias)
            yield srv

    return setup, str(alias)


def renamed(home: FakeHome) -> tuple[Callable[[], object], str]:
    first, now = home.root / f"first-{token()}.sock", home.root / f"renamed-{token()}.sock"

    @contextmanager
    def setup() -> Iterator[socket.socket]:
        with server(str(first)) as srv:
            os.rename(first, now)
            yield srv

    return setup, str(now)


def relative(home: FakeHome) -> tuple[Callable[[], object], str]:
    name = f"rel-{token()}.sock"

    @contextmanager
    def setup() -> Iterator[socket.socket]:
        with server(name, cwd=home.root) as srv:
            yield srv

    return setup, str(home.root / name)


WAYS = {"hard link": hard_link, "rename": renamed, "relative bind": relative}


@pytest.mark.parametrize("way", WAYS)
def test_an_allowed_socket_reached_under_another_name_is_refused(fresh_home: FakeHome, way: str) -> None:
    setup, path = WAYS[way](fresh_home)
    policy = fresh_home.root / "policy.json"
    policy.write_text(json.dumps({"network": {"allowUnixSockets": [path]}}))
    with setup() as srv:  # type: ignore[attr-defined]
        greet(srv)
        assert host([PY, "-c", CONNECT, path]).stdout.strip() == "hello"  # control: the name reaches it
        greet(srv)
        r = fresh_home.run([PY, "-c", CONNECT, path], mode=BOTH, opts=("-p", str(policy)))
    assert r.returncode == 125, (r.stdout, r.stderr)
    assert r.stdout == ""
    line = [ln for ln in r.stderr.splitlines() if ln.startswith("safebox:")][0]
    assert line.startswith(f"safebox: network.allowUnixSockets: {path} is not its socket's own name (the socket was "), \
        r.stderr
    assert line.endswith("safebox allows a socket by the path it was bound at"), r.stderr


def test_control_a_socket_allowed_by_the_name_it_was_bound_at_is_reached(fresh_home: FakeHome) -> None:
    path = str(fresh_home.root / f"own-{token()}.sock")
    policy = fresh_home.root / "policy.json"
    policy.write_text(json.dumps({"network": {"allowUnixSockets": [path]}}))
    with server(path) as srv:
        greet(srv)
        r = fresh_home.run([PY, "-c", CONNECT, path], mode=BOTH, opts=("-p", str(policy)))
    assert (r.returncode, r.stdout.strip()) == (0, "hello"), r.stderr


# ------------------------------------------------------------------ the other side: sockets safebox hides


def test_a_host_socket_with_a_second_name_is_named_and_refused_under_strict(fresh_home: FakeHome) -> None:
    # Every bound host socket not listed gets a mask over its name. A socket
    # with a second name (a hard link) keeps a name safebox does not know,
    # which no mask covers: the run says so, naming the socket, and --strict
    # refuses to run. (The limit itself, and the renamed or relatively
    # bound sockets that are only named with -v: docs/policy-reference.md,
    # "Unix sockets".)
    allowed = str(fresh_home.root / f"allowed-{token()}.sock")
    bound = fresh_home.root / f"bound-{token()}.sock"
    other = fresh_home.root / f"other-{token()}.sock"
    policy = fresh_home.root / "policy.json"
    policy.write_text(json.dumps({"network": {"allowUnixSockets": [allowed]}}))
    with server(allowed), server(str(bound)) as srv:
        os.link(bound, other)
        greet(srv)
        r = fresh_home.run([PY, "-c", CONNECT, str(other)], mode=BOTH, opts=("-p", str(policy)))
        strict = fresh_home.run([PY, "-c", CONNECT, str(other)], mode=BOTH, opts=("-p", str(policy), "--strict"))
    ours = [ln for ln in r.stderr.splitlines() if str(bound) in ln]
    assert ours and ours[0].startswith("safebox: network.allowUnixSockets: "), r.stderr
    assert f"{bound} (with 1 more hard link)" in ours[0]
    assert ours[0].endswith("a command that finds another name can connect to it (--strict refuses to run so; "
                            "docs/policy-reference.md, \"Unix sockets\")")
    assert r.stdout.strip() == "hello"  # the stated limit: its other name still reaches it
    assert strict.returncode == 125 and strict.stdout == "", strict.stderr
    assert [ln for ln in strict.stderr.splitlines() if str(bound) in ln][0].startswith(
        "safebox: --strict: network.allowUnixSockets: ")


def test_a_host_socket_renamed_after_its_bind_is_named_with_v(fresh_home: FakeHome) -> None:
    # Renamed or removed: the kernel does not tell which, and the host's
    # every user counts, so it is a note (-v), not a warning or a refusal;
    # the renamed socket stays reachable (docs/policy-reference.md, "Unix
    # sockets").
    allowed = str(fresh_home.root / f"allowed-{token()}.sock")
    bound = fresh_home.root / f"bound-{token()}.sock"
    other = fresh_home.root / f"other-{token()}.sock"
    policy = fresh_home.root / "policy.json"
    policy.write_text(json.dumps({"network": {"allowUnixSockets": [allowed]}}))
    with server(allowed), server(str(bound)) as srv:
        os.rename(bound, other)
        greet(srv)
        r = fresh_home.run([PY, "-c", CONNECT, str(other)], mode=BOTH, opts=("-p", str(policy), "-v"))
        quiet = fresh_home.run(["true"], mode=BOTH, opts=("-p", str(policy), "--strict"))
    ours = [ln for ln in r.stderr.splitlines() if str(bound) in ln]
    assert len(ours) == 1 and ours[0].startswith("safebox: network.allowUnixSockets: host unix sockets whose current "
                                                 "name safebox may not know"), r.stderr
    assert f"{bound} (renamed or removed since its bind)" in ours[0]
    assert r.stdout.strip() == "hello"
    assert quiet.returncode == 0 and str(bound) not in quiet.stderr, quiet.stderr


def test_control_a_host_socket_under_its_own_name_is_hidden_without_a_word(fresh_home: FakeHome) -> None:
    allowed = str(fresh_home.root / f"allowed-{token()}.sock")
    hidden = str(fresh_home.root / f"hidden-{token()}.sock")
    policy = fresh_home.root / "policy.json"
    policy.write_text(json.dumps({"network": {"allowUnixSockets": [allowed]}}))
    with server(allowed), server(hidden):
        r = fresh_home.run([PY, "-c", CONNECT, hidden], mode=BOTH, opts=("-p", str(policy), "--strict"))
    assert (r.returncode, r.stdout.strip()) == (0, "111"), r.stderr  # ECONNREFUSED: the mask
    assert hidden not in r.stderr and allowed not in r.stderr
