"""A host socket gone between safebox's listing and the sandbox's mounts does
not fail the start; every host socket still there stays hidden.

Under bubblewrap, ``network.allowUnixSockets`` (and ``--allow-gpu``) hide
every socket listed in ``/proc/net/unix`` but the allowed ones behind
safebox's empty file. The list is read on the host before the sandbox
exists. A socket removed with its directory before bubblewrap's mount made
the start fail ("bwrap: Can't mkdir parents for ...: Read-only file
system", exit 125): a run failed because an unrelated process ended (two
test workers in CI; any two runs of one user). The masks are now made by
``safebox-helper --mount`` after bubblewrap, and a socket path that no
longer exists there is skipped: nothing can connect to a path that is gone.

The window is held open with ``SAFEBOX_TEST_PAUSE=mounts`` (safebox stops
itself after resolving, just before bubblewrap is spawned), so the race is
the same on every run.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import time
from pathlib import Path

import pytest

from sbx import BOTH, BWRAP_ONLY, FakeHome, host, token

pytestmark = pytest.mark.needs_bwrap

PY = "/usr/bin/python3"
CONNECT = ("import socket, sys\n"
           "for p in sys.argv[1:]:\n"
           "    s = socket.socket(socket.AF_UNIX)\n"
           "    try: s.connect(p); print(p, 'connected')\n"
           "    except OSError as e: print(p, e.errno)\n")


def listen(path: Path) -> socket.socket:
    srv = socket.socket(socket.AF_UNIX)
    srv.bind(str(path))
    srv.listen(8)
    return srv


def wait_stopped(pid: int, timeout: float = 60) -> int:
    """The wait status once ``pid`` stopped or ended."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got, status = os.waitpid(pid, os.WNOHANG | os.WUNTRACED)
        if got:
            return status
        time.sleep(0.005)
    raise AssertionError(f"safebox ({pid}) never reached its stop point")


def connects(lines: str) -> dict[str, str]:
    return dict(line.rsplit(" ", 1) for line in lines.splitlines() if line.startswith("/"))


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
@pytest.mark.parametrize("gone", ["the socket", "the socket and its directory"])
def test_a_host_socket_removed_between_the_listing_and_the_mounts_does_not_fail_the_start(
        fresh_home: FakeHome, mode: str, gone: str) -> None:
    # A daemon of another run (its socket in a directory of its own), an
    # allowed socket, and one the policy hides that stays for the whole run.
    daemon_dir = fresh_home.root / f"daemon-{token()}"
    daemon_dir.mkdir()
    daemon, allowed, stays = daemon_dir / "daemon.sock", fresh_home.root / "allowed.sock", fresh_home.root / "stays.sock"
    servers = {p: listen(p) for p in (daemon, allowed, stays)}
    policy = fresh_home.root / "policy.json"
    policy.write_text(json.dumps({"network": {"allowUnixSockets": [str(allowed)]}}))
    # Control: on the host all three connect.
    r = host([PY, "-c", CONNECT, str(allowed), str(stays), str(daemon)])
    assert connects(r.stdout) == {str(allowed): "connected", str(stays): "connected", str(daemon): "connected"}
    p = fresh_home.popen([PY, "-c", CONNECT, str(allowed), str(stays), str(daemon)], mode=mode,
                         opts=("-p", str(policy)), env={"SAFEBOX_TEST_PAUSE": "mounts"})
    try:
        # Stopped with every host socket listed and none masked yet: the
        # daemon's run ends now, taking its socket (and directory) with it.
        status = wait_stopped(p.pid)
        assert os.WIFSTOPPED(status), f"safebox ended before the mounts: {os.waitstatus_to_exitcode(status)}"
        servers.pop(daemon).close()
        daemon.unlink()
        if gone == "the socket and its directory":
            daemon_dir.rmdir()
        os.kill(p.pid, signal.SIGCONT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.returncode is None:
            p.kill()
            p.communicate()
        for srv in servers.values():
            srv.close()
    assert p.returncode == 0, err
    # The allowed socket connects; the one still there stays hidden behind
    # the empty file (ECONNREFUSED); the one gone is gone (ENOENT), as on
    # the host, and is no refusal.
    assert connects(out) == {str(allowed): "connected", str(stays): "111", str(daemon): "2"}
    # The helper's report (both layers; none without it) names the hidden one only.
    assert err.splitlines()[:1] == (["safebox: refused 1 operation: 1 unix socket (~/stays.sock)"] if mode == BOTH
                                    else [])
    assert "daemon" not in err


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
def test_a_host_socket_removed_from_a_write_root_before_the_mounts_leaves_nothing_in_its_place(
        fresh_home: FakeHome, mode: str) -> None:
    # Found by a stress run of concurrent starts: beneath a write root the
    # mount point could be made, and bubblewrap made it on the host, an
    # empty read-only regular file (and its directory) where the daemon's
    # socket had been, left behind after the run (a restarted daemon then
    # found a file at its socket's path; its own clean-up, rmdir, failed).
    daemon_dir = fresh_home.work / f"daemon-{token()}"
    daemon_dir.mkdir()
    daemon = daemon_dir / "daemon.sock"
    srv = listen(daemon)
    policy = fresh_home.root / "policy.json"
    policy.write_text(json.dumps({"network": {"allowUnixSockets": [str(fresh_home.root / "none.sock")]}}))
    p = fresh_home.popen([PY, "-c", CONNECT, str(daemon)], mode=mode, opts=("-p", str(policy)),
                         env={"SAFEBOX_TEST_PAUSE": "mounts"})
    try:
        status = wait_stopped(p.pid)
        assert os.WIFSTOPPED(status), f"safebox ended before the mounts: {os.waitstatus_to_exitcode(status)}"
        srv.close()
        daemon.unlink()
        daemon_dir.rmdir()
        os.kill(p.pid, signal.SIGCONT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.returncode is None:
            p.kill()
            p.communicate()
        srv.close()
    assert p.returncode == 0, err
    assert connects(out) == {str(daemon): "2"}  # ENOENT, as on the host
    assert not os.path.lexists(daemon_dir)


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
def test_a_host_socket_made_again_at_a_listed_path_before_the_mounts_is_hidden(fresh_home: FakeHome,
                                                                               mode: str) -> None:
    # A restarted daemon: the socket listed at the start is replaced by a new
    # one at the same path before the sandbox's mounts. The mask covers the
    # path, so the new socket is hidden as the old one was.
    daemon = fresh_home.root / "daemon.sock"
    first = listen(daemon)
    policy = fresh_home.root / "policy.json"
    policy.write_text(json.dumps({"network": {"allowUnixSockets": [str(fresh_home.root / "none.sock")]}}))
    p = fresh_home.popen([PY, "-c", CONNECT, str(daemon)], mode=mode, opts=("-p", str(policy)),
                         env={"SAFEBOX_TEST_PAUSE": "mounts"})
    again = None
    try:
        status = wait_stopped(p.pid)
        assert os.WIFSTOPPED(status), f"safebox ended before the mounts: {os.waitstatus_to_exitcode(status)}"
        first.close()
        daemon.unlink()
        again = listen(daemon)
        # Control: the new socket connects on the host.
        assert connects(host([PY, "-c", CONNECT, str(daemon)]).stdout) == {str(daemon): "connected"}
        os.kill(p.pid, signal.SIGCONT)
        out, err = p.communicate(timeout=60)
    finally:
        if p.returncode is None:
            p.kill()
            p.communicate()
        first.close()
        if again is not None:
            again.close()
    assert p.returncode == 0, err
    assert connects(out) == {str(daemon): "111"}


def test_the_masks_of_host_sockets_are_made_after_bubblewrap_not_in_its_argv(fresh_home: FakeHome) -> None:
    # --dry-run: bubblewrap's argv holds no mask over the hidden socket; the
    # mounter's plan does.
    hidden = fresh_home.root / "hidden.sock"
    srv = listen(hidden)
    policy = fresh_home.root / "policy.json"
    policy.write_text(json.dumps({"network": {"allowUnixSockets": [str(fresh_home.root / "none.sock")]}}))
    try:
        r = fresh_home.run(["true"], opts=("-p", str(policy), "--dry-run"))
    finally:
        srv.close()
    assert r.returncode == 0, r.stderr
    bwrap_part, _, mounter_part = r.stdout.partition("# then made by safebox inside the sandbox")
    assert str(hidden) not in bwrap_part
    assert f"mask-socket {hidden}\n" in mounter_part


def test_a_big_policy_with_a_proxy_and_unix_sockets_starts_without_the_helper(fresh_home: FakeHome) -> None:
    # Found with this fix: under --without helper the proxy's sockets in the
    # run dir are host sockets like any other, and a big policy sent their
    # masks to the mounter, which refuses anything beneath the run dir (its
    # scratch): "mount plan: record 1: at or beneath the scratch dir", 125.
    # The run dir is bound after the masks, so they never hid anything.
    hidden = fresh_home.root / "hidden.sock"
    denied = fresh_home.root / "denied"
    denied.mkdir()
    for i in range(80):  # over BULK_MIN (builder/bulk.py): the mounter makes these
        (denied / f"f{i}").write_text("secret\n")
    policy = fresh_home.root / "policy.json"
    policy.write_text(json.dumps({"network": {"allowUnixSockets": [str(fresh_home.root / "none.sock")]},
                                  "filesystem": {"denyRead": [str(denied / f"f{i}") for i in range(80)]}}))
    srv = listen(hidden)
    try:
        r = fresh_home.run([PY, "-c", CONNECT, str(hidden)], mode=BWRAP_ONLY,
                           opts=("-p", str(policy), "--allow-domain", "example.com"))
    finally:
        srv.close()
    assert r.returncode == 0, r.stderr
    assert connects(r.stdout) == {str(hidden): "111"}


STAT_CONNECT = ("import os, socket, stat, sys\n"
                "for p in sys.argv[1:]:\n"
                "    m = os.lstat(p).st_mode\n"
                "    kind = 'socket' if stat.S_ISSOCK(m) else 'file' if stat.S_ISREG(m) else oct(m)\n"
                "    s = socket.socket(socket.AF_UNIX)\n"
                "    try: s.connect(p); print(p, kind + ':connected')\n"
                "    except OSError as e: print(p, kind + ':' + str(e.errno))\n")


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
def test_under_review_a_host_socket_in_the_work_tree_stays_behind_its_mask_on_top_of_the_overlay(
        fresh_home: FakeHome, mode: str) -> None:
    # --review puts an overlay over each write root at the mounter's
    # handshake and puts back what was mounted beneath it from the sandbox's
    # mount table. The socket masks are the mounter's now, made at the same
    # handshake: they must exist before that table is read, or the overlay
    # would cover them and show the host's socket from its lower layer. The
    # connect() alone cannot tell (through overlayfs a lower layer's socket
    # refuses too, ECONNREFUSED); what the path is can: the mask is an
    # empty regular file, the overlay shows a socket.
    daemon = fresh_home.work / f"daemon-{token()}.sock"
    srv = listen(daemon)
    hide = fresh_home.root / "hide.json"
    hide.write_text(json.dumps({"network": {"allowUnixSockets": [str(fresh_home.root / "none.sock")]}}))
    every = fresh_home.root / "every.json"
    every.write_text(json.dumps({"network": {"allowAllUnixSockets": True}}))
    try:
        # Control: on the host it is a socket, and it connects.
        assert connects(host([PY, "-c", STAT_CONNECT, str(daemon)]).stdout) == {str(daemon): "socket:connected"}
        normal = fresh_home.run([PY, "-c", STAT_CONNECT, str(daemon)], mode=mode, opts=("-p", str(hide)))
        review = fresh_home.run([PY, "-c", STAT_CONNECT, str(daemon)], mode=mode,
                                opts=("-p", str(hide), "--review"))
        # Control: with no mask the overlay shows the socket itself (so the
        # probe tells a mask from the overlay's lower layer).
        bare = fresh_home.run([PY, "-c", STAT_CONNECT, str(daemon)], mode=mode,
                              opts=("-p", str(every), "--review"))
    finally:
        srv.close()
    assert normal.returncode == 0, normal.stderr
    assert connects(normal.stdout) == {str(daemon): "file:111"}
    assert review.returncode == 0, review.stderr
    assert connects(review.stdout) == {str(daemon): "file:111"}  # exactly as without --review
    assert bare.returncode == 0, bare.stderr
    assert connects(bare.stdout)[str(daemon)].startswith("socket:")


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
@pytest.mark.parametrize("allow", ["allowUnixSockets", "allowAllUnixSockets"])
def test_under_review_an_allowed_socket_in_the_work_tree_connects_as_without_it(fresh_home: FakeHome,
                                                                                 mode: str, allow: str) -> None:
    # The overlay over a held write root shows a socket from its lower
    # layer, and a connect() to that refuses (ECONNREFUSED: the listener is
    # bound to the host's inode, not the overlay's), so an allowed socket in
    # the work tree stopped working under --review, where docs/review.md
    # says sockets keep their rule. It is bound onto itself, a mount beneath
    # the root that the mounter puts back on top. allowAllUnixSockets names
    # none: the host's bound sockets are listed then.
    daemon = fresh_home.work / f"daemon-{token()}.sock"
    hidden = fresh_home.work / "private" / f"hidden-{token()}.sock"
    hidden.parent.mkdir()
    servers = [listen(daemon), listen(hidden)]
    rule = [str(daemon)] if allow == "allowUnixSockets" else True
    policy = fresh_home.root / "allow.json"
    policy.write_text(json.dumps({"network": {allow: rule}}))
    opts = ("-p", str(policy), "--deny-read", str(hidden.parent))
    try:
        # Controls: on the host both connect; in the sandbox without --review the allowed one does.
        assert connects(host([PY, "-c", CONNECT, str(daemon), str(hidden)]).stdout) == {
            str(daemon): "connected", str(hidden): "connected"}
        normal = fresh_home.run([PY, "-c", STAT_CONNECT, str(daemon)], mode=mode, opts=opts)
        review = fresh_home.run([PY, "-c", STAT_CONNECT, str(daemon)], mode=mode, opts=(*opts, "--review"))
        hid = fresh_home.run([PY, "-c", CONNECT, str(hidden)], mode=mode, opts=(*opts, "--review"))
    finally:
        for srv in servers:
            srv.close()
    assert normal.returncode == 0, normal.stderr
    assert connects(normal.stdout) == {str(daemon): "socket:connected"}
    assert review.returncode == 0, review.stderr
    assert connects(review.stdout) == {str(daemon): "socket:connected"}, review.stderr
    assert "the run changed nothing in its write roots" in review.stderr  # the bind is no change
    # A socket in a denyRead directory stays hidden (the mask's empty
    # directory: ENOENT), never bound back in.
    assert hid.returncode == 0, hid.stderr
    assert connects(hid.stdout) == {str(hidden): "2"}, hid.stderr


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
def test_a_host_socket_bound_at_an_unnormalised_name_is_hidden_and_fails_no_run(fresh_home: FakeHome,
                                                                               mode: str) -> None:
    # The kernel keeps the name bind() was given, and any process of any
    # user can bind one like these in a directory it can write (/var/tmp):
    # listed as they are, they went into the mounter's plan, which takes
    # only normalised paths, and every allowUnixSockets (and --allow-gpu)
    # run on the host failed, 125 ("mount plan: record 1: not a normalised
    # absolute path"; with the helper, its table refused them first).
    t = token()
    (fresh_home.root / "sub").mkdir()
    names = {f"{fresh_home.root}//slashes-{t}.sock": fresh_home.root / f"slashes-{t}.sock",
             f"{fresh_home.root}/./dot-{t}.sock": fresh_home.root / f"dot-{t}.sock",
             f"{fresh_home.root}/sub/../dots-{t}.sock": fresh_home.root / f"dots-{t}.sock",
             f"{fresh_home.root}//allowed-{t}.sock": fresh_home.root / f"allowed-{t}.sock"}
    servers = []
    for bound in names:
        srv = socket.socket(socket.AF_UNIX)
        srv.bind(bound)
        srv.listen(8)
        servers.append(srv)
    paths = [str(p) for p in names.values()]
    allowed = paths[-1]
    policy = fresh_home.root / "policy.json"
    policy.write_text(json.dumps({"network": {"allowUnixSockets": [allowed]}}))
    try:
        with open("/proc/net/unix", encoding="utf-8", errors="replace") as f:
            listed = f.read()
        assert all(bound in listed for bound in names)  # the names as bound, unnormalised
        # Control: on the host each connects by its normalised name.
        assert connects(host([PY, "-c", CONNECT, *paths]).stdout) == dict.fromkeys(paths, "connected")
        r = fresh_home.run([PY, "-c", CONNECT, *paths], mode=mode, opts=("-p", str(policy)))
    finally:
        for srv in servers:
            srv.close()
    assert r.returncode == 0, r.stderr
    assert connects(r.stdout) == {**dict.fromkeys(paths[:-1], "111"), allowed: "connected"}


@pytest.mark.parametrize("rename", [False, True])
def test_a_command_cannot_take_its_refused_connect_out_of_the_report_by_moving_the_sockets_directory(
        fresh_home: FakeHome, rename: bool) -> None:
    # A connect() to a listed socket gone from the host is no refusal in the
    # report (the mask was skipped, or a host unlink took it: ENOENT, as on
    # the host). Beneath a write root the command itself can make the path
    # gone after the refusal: the mask pins the socket's name (unlink: EBUSY)
    # but not its directory's, which it may rename. The report must still
    # name the refused connect() (control: the same run without the rename).
    sub = fresh_home.work / f"sub-{token()}"
    sub.mkdir()
    daemon = sub / "daemon.sock"
    srv = listen(daemon)
    policy = fresh_home.root / "policy.json"
    policy.write_text(json.dumps({"network": {"allowUnixSockets": [str(fresh_home.root / "none.sock")]}}))
    script = ("import os, socket, sys\n"
              "s = socket.socket(socket.AF_UNIX)\n"
              "try: s.connect(sys.argv[2]); print(sys.argv[2], 'connected')\n"
              "except OSError as e: print(sys.argv[2], e.errno)\n"
              "if sys.argv[1] == 'yes':\n"
              "    d = os.path.dirname(sys.argv[2]); os.rename(d, d + '-moved'); print('moved')\n")
    try:
        assert connects(host([PY, "-c", CONNECT, str(daemon)]).stdout) == {str(daemon): "connected"}  # control
        r = fresh_home.run([PY, "-c", script, "yes" if rename else "no", str(daemon)], mode=BOTH,
                           opts=("-p", str(policy)))
    finally:
        srv.close()
    assert r.returncode == 0, r.stderr
    assert connects(r.stdout)[str(daemon)] == "111"
    assert ("moved" in r.stdout.splitlines()) is rename
    assert os.path.lexists(daemon) is not rename  # the command's rename reached the host
    first = r.stderr.splitlines()[:1]
    assert first and first[0].startswith("safebox: refused 1 operation: 1 unix socket ("), r.stderr
    assert daemon.name in first[0]


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
def test_another_users_socket_in_a_directory_of_its_own_fails_no_run_and_stays_out_of_reach(
        fresh_home: FakeHome, mode: str) -> None:
    # Root lists every socket (/run/user/UID/bus of each logged-in user; the
    # CI's unprivileged runs' proxy sockets beside root's tests): on the host
    # its capabilities reach them, in the sandbox's user namespace they do
    # not cover an unmapped owner's files, and the mask's look-up failed
    # every root run with allowUnixSockets or --allow-gpu (125, "cannot mask
    # ...: Permission denied"; with bubblewrap's masks, "bwrap: Can't create
    # file at ...: Permission denied"). The command has no more reach than
    # the mounter: EACCES. Unprivileged, a directory of one's own with no
    # search right is the same look-up (not even listed: lstat fails).
    private = fresh_home.root / f"private-{token()}"
    private.mkdir(mode=0o700)
    sock = private / "daemon.sock"
    srv = listen(sock)
    policy = fresh_home.root / "policy.json"
    policy.write_text(json.dumps({"network": {"allowUnixSockets": [str(fresh_home.root / "none.sock")]}}))
    root = os.geteuid() == 0
    try:
        # Control: while the directory can be searched, the host connects.
        assert connects(host([PY, "-c", CONNECT, str(sock)]).stdout) == {str(sock): "connected"}
        if root:
            os.chown(private, 65534, 65534)  # another user's (root still connects on the host)
            assert connects(host([PY, "-c", CONNECT, str(sock)]).stdout) == {str(sock): "connected"}
        else:
            private.chmod(0)
        r = fresh_home.run([PY, "-c", CONNECT, str(sock)], mode=mode, opts=("-p", str(policy)))
    finally:
        srv.close()
        if root:
            os.chown(private, os.geteuid(), os.getegid())
        private.chmod(0o700)
    assert r.returncode == 0, r.stderr
    assert connects(r.stdout) == {str(sock): "13"}  # EACCES


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
def test_a_command_that_connects_at_once_never_finds_a_host_socket_unmasked(fresh_home: FakeHome,
                                                                          mode: str) -> None:
    # The masks are made after bubblewrap, by the mounter, while the
    # sandbox's first program waits at the handshake: the command must not
    # exist before the last of them. A command that connects first thing,
    # run after run, is refused every time.
    hidden = fresh_home.root / "hidden.sock"
    srv = listen(hidden)
    policy = fresh_home.root / "policy.json"
    policy.write_text(json.dumps({"network": {"allowUnixSockets": [str(fresh_home.root / "none.sock")]}}))
    first = ("import socket, sys\ns = socket.socket(socket.AF_UNIX)\n"
             "try: s.connect(sys.argv[1]); print('connected')\nexcept OSError as e: print(e.errno)\n")
    try:
        assert host([PY, "-S", "-c", first, str(hidden)]).stdout == "connected\n"  # control
        got = []
        for _ in range(5):
            r = fresh_home.run([PY, "-S", "-c", first, str(hidden)], mode=mode, opts=("-p", str(policy)))
            got.append((r.returncode, r.stdout))
    finally:
        srv.close()
    assert got == [(0, "111\n")] * 5


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
def test_a_host_socket_whose_name_holds_a_newline_is_hidden(fresh_home: FakeHome, mode: str) -> None:
    # /proc/net/unix prints a socket's name raw: one holding a newline was
    # read as two lines there, neither a socket's path, and the socket went
    # unmasked (found in review). The kernel's sock_diag answer names it whole.
    t = token()
    odd = f"{fresh_home.root}/nl-{t}\n.sock"
    plain = f"{fresh_home.root}/plain-{t}.sock"
    servers = [listen(Path(odd)), listen(Path(plain))]
    policy = fresh_home.root / "policy.json"
    policy.write_text(json.dumps({"network": {"allowUnixSockets": [f"{fresh_home.root}/allowed-{t}.sock"]}}))
    script = ("import json, socket, sys\nout = []\nfor p in sys.argv[1:]:\n    s = socket.socket(socket.AF_UNIX)\n"
              "    try: s.connect(p); out.append('connected')\n    except OSError as e: out.append(e.errno)\n"
              "print(json.dumps(out))\n")
    try:
        # Control: on the host both connect.
        assert json.loads(host([PY, "-c", script, odd, plain]).stdout) == ["connected", "connected"]
        r = fresh_home.run([PY, "-c", script, odd, plain], mode=mode, opts=("-p", str(policy)))
    finally:
        for srv in servers:
            srv.close()
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == [111, 111], r.stderr
