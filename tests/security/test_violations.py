"""The violations feed, end to end: every kind of refusal triggered for real
through ``safebox exec``, in both layer modes, with the ``denied`` event's
fields asserted exactly, and controls in which nothing is refused and no
event appears.

Also the feed's own security claims: observation never weakens enforcement
(a denied call stays denied when the supervisor is killed; the command
cannot take the supervisor's place with a listener of its own), and a host
where observation is impossible says so once.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest

from sbx import BOTH, HELPER_ONLY, SAFEBOX, FakeHome, host, supervisor_of, token, wait_for

# The syscall numbers below are x86_64's. Elsewhere this file must fail loudly,
# never skip: a skipped security test is a failure.
if os.uname().machine != "x86_64":
    raise RuntimeError("tests/security: syscall numbers here are x86_64's; add this architecture's")

MODES = [BOTH, HELPER_ONLY]
# The errno a refused write gets: the read-only mount (bwrap) or Landlock alone.
WRITE_ERRNO = {BOTH: "EROFS", HELPER_ONLY: "EACCES"}
PY = "/usr/bin/python3"


def events(log: Path, kind: str = "denied") -> list[dict[str, Any]]:
    """The audit log's events of ``kind``, each without its time and run id
    (checked: the run's, as written in its ``start`` event)."""
    out = []
    run = None
    for line in log.read_text().splitlines():
        ev = json.loads(line)
        if ev["event"] == "start":
            run = ev["run"]
        if ev["event"] == kind:
            ev.pop("time")
            assert ev.pop("run") == run, ev
            out.append(ev)
    return out


def run_logged(home: FakeHome, command: list[str], *, mode: str, opts: tuple[str, ...] = (),
               **kw: Any) -> tuple[subprocess.CompletedProcess[str], list[dict[str, Any]]]:
    """``safebox exec --audit-log LOG`` in ``mode``; returns the run and its denied events."""
    log = home.root / f"audit-{token()}.jsonl"
    r = home.run(command, mode=mode, opts=("--audit-log", str(log), *opts), **kw)
    return r, events(log)


def safebox_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("safebox:")]


def one_event(evs: list[dict[str, Any]]) -> dict[str, Any]:
    assert len(evs) == 1, evs
    ev = dict(evs[0])
    assert isinstance(ev.pop("pid"), int) and evs[0]["pid"] > 0
    return ev


# ------------------------------------------------------------------ controls


@pytest.mark.parametrize("mode", MODES)
def test_a_run_that_is_refused_nothing_records_no_event_and_prints_no_summary(
        shared_home: FakeHome, mode: str) -> None:
    name = f"ok-{token()}.txt"
    # (Nothing that looks up a user name: glibc's nscd probe is a refused
    # socket(AF_UNIX), an event of its own; see the unix-socket test.)
    r, evs = run_logged(shared_home, ["sh", "-c", f"echo ok > {name}; cat README.md; mkdir d-{name}; "
                                      f"mv {name} d-{name}/; rm -r d-{name}; ls / >/dev/null; "
                                      f"echo x > /dev/null; touch \"${{TMPDIR:-/tmp}}/t-{name}\""], mode=mode)
    assert r.returncode == 0, r.stderr
    assert evs == []
    assert safebox_lines(r.stderr) == []


# ------------------------------------------------------------------ writes


@pytest.mark.parametrize("mode", MODES)
def test_a_write_outside_the_write_roots_is_one_event_naming_allow_write(shared_home: FakeHome, mode: str) -> None:
    cache = shared_home.root / f"cache-{token()}"
    cache.mkdir()
    target = cache / "new"
    r, evs = run_logged(shared_home, ["sh", "-c", f"echo x > {target}"], mode=mode)
    assert r.returncode == 2
    assert one_event(evs) == {"event": "denied", "v": 1, "kind": "write", "path": str(target),
                              "syscall": "openat", "errno": WRITE_ERRNO[mode], "rule": "filesystem.allowWrite",
                              "comm": "sh", "fix": f"--allow-write ~/{cache.name}"}
    assert not target.exists()
    lines = safebox_lines(r.stderr)
    assert lines == [f"safebox: refused 1 operation: 1 write (~/{cache.name}/new)",
                     "safebox: to allow the commonest (1 write refused by filesystem.allowWrite): "
                     f"--allow-write ~/{cache.name}"]
    assert r.stderr.rstrip().endswith(lines[-1])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("where", ["/etc", "/usr/lib", "home"])
def test_a_refused_write_in_a_system_directory_or_the_home_itself_suggests_no_allow_write(
        shared_home: FakeHome, mode: str, where: str) -> None:
    # Never "--allow-write /etc" (or ~): the rule is named and why, instead.
    d = str(shared_home.root) if where == "home" else where
    target = f"{d}/safebox-{token()}"
    r, evs = run_logged(shared_home, ["sh", "-c", f"echo x > {target}"], mode=mode)
    assert r.returncode == 2
    assert one_event(evs) == {"event": "denied", "v": 1, "kind": "write", "path": target, "syscall": "openat",
                              "errno": WRITE_ERRNO[mode], "rule": "filesystem.allowWrite", "comm": "sh"}
    why = "~ is the home itself, with its dotfiles" if where == "home" else f"{where} is a system directory"
    assert safebox_lines(r.stderr)[-1] == (
        "safebox: the commonest (1 write refused by filesystem.allowWrite) stays refused: writes outside the "
        f"project are refused by design and {why}; write under $TMPDIR or the work dir instead")
    assert "--allow-write" not in r.stderr


def test_a_write_to_a_protected_file_names_the_protected_list(shared_home: FakeHome) -> None:
    before = (shared_home.work / ".mcp.json").read_text()
    r, evs = run_logged(shared_home, ["sh", "-c", "echo x >> .mcp.json"], mode=BOTH)
    assert r.returncode == 2
    assert one_event(evs) == {"event": "denied", "v": 1, "kind": "write", "path": str(shared_home.work / ".mcp.json"),
                              "syscall": "openat", "errno": "EROFS", "rule": "protected file", "comm": "sh"}
    assert (shared_home.work / ".mcp.json").read_text() == before
    assert "cannot be allowed: changing it could run code outside the sandbox" in r.stderr


def test_renaming_git_config_away_is_ebusy_and_explained(shared_home: FakeHome) -> None:
    config = shared_home.work / ".git" / "config"
    r, evs = run_logged(shared_home, ["mv", ".git/config", ".git/config.moved"], mode=BOTH)
    assert r.returncode == 1
    assert "Device or resource busy" in r.stderr
    assert one_event(evs) == {"event": "denied", "v": 1, "kind": "write", "path": str(config),
                              "path2": str(config) + ".moved", "syscall": "renameat2", "errno": "EBUSY",
                              "rule": "protected file", "comm": "mv"}
    assert config.is_file()


@pytest.mark.parametrize("mode", MODES)
def test_touch_outside_the_write_roots_is_one_event_not_two(shared_home: FakeHome, mode: str) -> None:
    # touch opens (refused), then falls back to utimensat on the path, which
    # fails with ENOENT because nothing was created: not a second refusal.
    target = f"/etc/safebox-{token()}"
    r, evs = run_logged(shared_home, ["touch", target], mode=mode)
    assert r.returncode == 1
    assert one_event(evs) == {"event": "denied", "v": 1, "kind": "write", "path": target, "syscall": "openat",
                              "errno": WRITE_ERRNO[mode], "rule": "filesystem.allowWrite", "comm": "touch"}


@pytest.mark.parametrize("mode", MODES)
def test_a_call_that_fails_for_its_own_reason_is_no_event(shared_home: FakeHome, mode: str) -> None:
    # Control for the prediction: a missing parent is ENOENT with or without
    # the sandbox, and an existing file with O_EXCL is EEXIST.
    r, evs = run_logged(shared_home, [PY, "-c", "import os\n"
                                      "for p, f in (('/etc/no-such-dir/x', os.O_CREAT | os.O_WRONLY),\n"
                                      "             ('/etc/hostname', os.O_CREAT | os.O_EXCL | os.O_WRONLY)):\n"
                                      "    try: os.open(p, f)\n"
                                      "    except OSError as e: print(e.errno)\n"], mode=mode)
    assert r.stdout.split() == ["2", "17"], r.stderr
    assert evs == []


# ------------------------------------------------------------------ reads and exec


@pytest.mark.parametrize("mode", MODES)
def test_reading_a_credential_is_one_read_event_with_audit_log(shared_home: FakeHome, mode: str) -> None:
    key = shared_home.root / ".ssh" / "id_rsa"
    r, evs = run_logged(shared_home, ["cat", str(key)], mode=mode)
    assert r.returncode == 1 and shared_home.secret not in r.stdout
    assert one_event(evs) == {"event": "denied", "v": 1, "kind": "read", "path": str(key), "syscall": "openat",
                              "errno": "ENOENT" if mode == BOTH else "EACCES",
                              "rule": "filesystem.denyRead (built-in credential list)", "comm": "cat",
                              "fix": "--allow-read ~/.ssh/id_rsa (or filesystem.allowRead)"}
    assert "1 read (~/.ssh/id_rsa)" in r.stderr


def test_reads_are_not_observed_by_default_without_audit_log(shared_home: FakeHome) -> None:
    r = shared_home.run(["cat", str(shared_home.root / ".ssh" / "id_rsa")])
    assert r.returncode == 1
    assert safebox_lines(r.stderr) == []
    r = shared_home.run(["cat", str(shared_home.root / ".ssh" / "id_rsa")], opts=("--observe", "all"))
    assert "safebox: refused 1 operation: 1 read (~/.ssh/id_rsa)" in r.stderr


@pytest.mark.parametrize("verbose", [False, True], ids=["default", "control: -v lists them"])
def test_a_run_refused_only_glibcs_name_service_probes_never_loads_the_feed(shared_home: FakeHome,
                                                                             verbose: bool) -> None:
    # `id` looks the user up: glibc tries nscd's socket, a refused
    # socket(AF_UNIX) the summary leaves out. Explaining it anyway imported
    # the feed and pyseccomp's syscall table, 50 ms added to every such run
    # (docs/violations.md, "Records": the supervisor names socket()).
    # The launcher ignores PYTHON* variables: -X importtime needs the
    # interpreter by hand, isolated (-I) as the launcher is (safebox refuses
    # a work dir on its own import path).
    argv = [str(SAFEBOX.parent / "python"), "-I", "-X", "importtime", "-m", "safebox",
            *shared_home.argv(["id", "-un"], opts=("-v",) if verbose else ())[1:]]
    r = subprocess.run(argv, cwd=shared_home.work, env=shared_home.env(), capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    loaded = any(line.rstrip().endswith("safebox.violations.feed") for line in r.stderr.splitlines())
    assert loaded is verbose
    denied = [ln for ln in safebox_lines(r.stderr) if "denied unix-socket socket(AF_UNIX)" in ln]
    assert bool(denied) is verbose  # control: the probe was refused, and -v says so


@pytest.mark.parametrize("mode", MODES)
def test_with_observe_calls_file_writes_are_not_watched_and_still_refused(
        shared_home: FakeHome, mode: str) -> None:
    # --observe calls (the fast mode) watches no file call: a watched call
    # costs a round trip to the supervisor (docs/violations.md, "Cost and the
    # default"). The write is refused all the same; a denied system call is
    # still explained.
    target = f"/etc/safebox-{token()}"
    script = f"echo x > {target}; unshare -U true"
    r = shared_home.run(["sh", "-c", script], mode=mode, opts=("--observe", "calls"))
    assert "Read-only file system" in r.stderr if mode == BOTH else "Permission denied" in r.stderr
    assert not os.path.exists(target)
    assert safebox_lines(r.stderr) == ["safebox: refused 1 operation: 1 system call (unshare)",
                                       "safebox: the commonest (1 system call refused by seccomp: CLONE_NEWUSER: a "
                                       "new namespace (user ns: full caps inside it)) cannot be allowed: denied in "
                                       "every sandbox (docs/seccomp.md)"]
    # Control: the default (--observe writes, without --audit-log) names the write too.
    r = shared_home.run(["sh", "-c", script], mode=mode)
    assert f"safebox: refused 2 operations: 1 write ({target}), 1 system call (unshare)" in r.stderr


@pytest.mark.parametrize("observe", ["all", "calls"])  # all: --audit-log's default; calls: the fast mode, without
@pytest.mark.parametrize("mode", MODES)
def test_running_a_program_from_a_masked_directory_is_an_exec_event(fresh_home: FakeHome, mode: str,
                                                                    observe: str) -> None:
    tool = fresh_home.root / ".ssh" / "tool"
    tool.write_text("#!/bin/sh\necho ran\n")
    tool.chmod(0o755)
    assert host([str(tool)]).stdout == "ran\n"  # control: it runs on the host
    r, evs = run_logged(fresh_home, [PY, "-c", f"import os\ntry: os.execv({str(tool)!r}, ['t'])\n"
                                     "except OSError as e: print(e.errno)"], mode=mode, opts=("--observe", observe))
    want = "ENOENT" if mode == BOTH else "EACCES"
    assert r.stdout.strip() == ("2" if mode == BOTH else "13")
    assert one_event(evs) == {"event": "denied", "v": 1, "kind": "exec", "path": str(tool), "syscall": "execve",
                              "errno": want, "rule": "filesystem.denyRead (built-in credential list)",
                              "comm": "python3"}


# ------------------------------------------------------------------ system calls and sockets


@pytest.mark.parametrize("mode", MODES)
def test_a_denied_system_call_is_one_event_naming_the_seccomp_rule(shared_home: FakeHome, mode: str) -> None:
    r, evs = run_logged(shared_home, ["unshare", "-U", "true"], mode=mode)
    assert r.returncode == 1 and "Operation not permitted" in r.stderr
    assert one_event(evs) == {"event": "denied", "v": 1, "kind": "syscall", "syscall": "unshare", "errno": "EPERM",
                              "rule": "seccomp: CLONE_NEWUSER: a new namespace (user ns: full caps inside it)",
                              "comm": "unshare"}
    assert "1 system call (unshare)" in r.stderr


@pytest.mark.parametrize("mode", MODES)
def test_a_refused_unix_socket_is_an_event_but_not_in_the_summary(shared_home: FakeHome, mode: str) -> None:
    r, evs = run_logged(shared_home, [PY, "-c", "import socket\ntry: socket.socket(socket.AF_UNIX)\n"
                                      "except OSError as e: print(e.errno)"], mode=mode)
    assert r.stdout.strip() == "1"
    assert one_event(evs) == {"event": "denied", "v": 1, "kind": "unix-socket", "syscall": "socket",
                              "errno": "EPERM", "rule": "network.allowUnixSockets", "comm": "python3",
                              "fix": "list the socket's path in network.allowUnixSockets "
                                     "(or allowAllUnixSockets = true)"}
    # glibc's name-service lookups make this refusal in nearly every run.
    assert safebox_lines(r.stderr) == []
    r = shared_home.run([PY, "-c", "import socket\ntry: socket.socket(socket.AF_UNIX)\nexcept OSError: pass"],
                        opts=("-v",))
    assert "safebox: denied unix-socket socket(AF_UNIX) by python3" in r.stderr


def test_a_connect_to_a_host_socket_the_policy_hides_is_a_unix_socket_event(fresh_home: FakeHome) -> None:
    # allowUnixSockets lists one socket: every other listening host socket
    # is hidden (a /dev/null bound over it), and connecting to it is refused.
    allowed, hidden = fresh_home.root / "allowed.sock", fresh_home.root / "hidden.sock"
    servers = []
    for path in (allowed, hidden):
        srv = socket.socket(socket.AF_UNIX)
        srv.bind(str(path))
        srv.listen()
        servers.append(srv)
    policy = fresh_home.root / "policy.json"
    policy.write_text(json.dumps({"network": {"allowUnixSockets": [str(allowed)]}}))
    code = ("import socket, sys\n"
            "for p in sys.argv[1:]:\n"
            "    s = socket.socket(socket.AF_UNIX)\n"
            "    try: s.connect(p); print(0)\n"
            "    except OSError as e: print(e.errno)\n")
    try:
        assert host([PY, "-c", code, str(allowed), str(hidden)]).stdout.split() == ["0", "0"]  # control
        r, evs = run_logged(fresh_home, [PY, "-c", code, str(allowed), str(hidden)], mode=BOTH,
                            opts=("-p", str(policy)))
    finally:
        for srv in servers:
            srv.close()
    assert r.stdout.split() == ["0", "111"], r.stderr
    assert one_event(evs) == {"event": "denied", "v": 1, "kind": "unix-socket", "path": str(hidden),
                              "syscall": "connect", "errno": "ECONNREFUSED", "rule": "network.allowUnixSockets",
                              "comm": "python3", "fix": "add ~/hidden.sock to network.allowUnixSockets"}
    assert "1 unix socket (~/hidden.sock)" in r.stderr


@pytest.mark.needs_landlock(4)
def test_a_direct_connection_from_an_empty_network_namespace_is_a_network_event(shared_home: FakeHome) -> None:
    # 192.0.2.1 (TEST-NET-1) inside the sandbox's own empty namespace:
    # Landlock's TCP rules refuse it before the missing route would.
    r, evs = run_logged(shared_home, [PY, "-c", "import socket\ns = socket.socket()\n"
                                      "try: s.connect(('192.0.2.1', 443))\nexcept OSError as e: print(e.errno)"],
                        mode=BOTH)
    assert r.stdout.strip() == "13"
    assert one_event(evs) == {"event": "denied", "v": 1, "kind": "network", "host": "192.0.2.1", "port": 443,
                              "syscall": "connect", "errno": "EACCES", "rule": "network.allowedDomains",
                              "comm": "python3",
                              "fix": "--allow-domain NAME for the host behind 192.0.2.1 (then through the proxy)"}


@pytest.mark.needs_landlock(4)
def test_a_refused_name_lookup_names_the_fix_for_the_host_not_the_resolver(shared_home: FakeHome) -> None:
    # A DNS query over TCP to a resolver address (what curl's lookup becomes
    # in an empty namespace): the fix names the host, not 192.0.2.53.
    code = ("import socket\ns = socket.socket()\n"
            "try: s.connect(('192.0.2.53', 53))\nexcept OSError as e: print(e.errno)")
    r, evs = run_logged(shared_home, [PY, "-c", code], mode=BOTH)
    assert r.stdout.strip() == "13"
    assert one_event(evs)["fix"] == ("--allow-domain HOST for the host the command looked up (the proxy "
                                     "resolves it; the sandbox has no DNS of its own)")
    assert "1 connection (DNS lookup via 192.0.2.53)" in r.stderr
    # Control: another port keeps the address form.
    r, evs = run_logged(shared_home, [PY, "-c", code.replace("53))", "443))")], mode=BOTH)
    assert one_event(evs)["fix"] == "--allow-domain NAME for the host behind 192.0.2.53 (then through the proxy)"


@pytest.mark.needs_landlock(4)
@pytest.mark.parametrize("mode", MODES)
def test_a_tcp_connect_around_the_proxy_is_a_network_event(shared_home: FakeHome, mode: str) -> None:
    # Loopback only: Landlock refuses every port but the proxy's before any
    # packet (on a helper-only run the listener below is the host's own).
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = srv.getsockname()[1]
        code = ("import socket\ns = socket.socket()\n"
                f"try: s.connect(('127.0.0.1', {port}))\nexcept OSError as e: print(e.errno)\nelse: print(0)")
        assert host([PY, "-c", code]).stdout.strip() == "0"  # control
        r, evs = run_logged(shared_home, [PY, "-c", code], mode=mode, opts=("--allow-domain", "allowed.invalid"))
    assert r.stdout.strip() == "13", r.stderr
    [ev] = [e for e in evs if e["kind"] == "network"]
    if mode == BOTH:
        # Captured (docs/network.md, "Capture"): the proxy's filter refused
        # the address, and its event says so in the proxy's shape.
        assert ev == {"event": "denied", "v": 1, "kind": "network", "host": "127.0.0.1", "port": port,
                      "protocol": "capture", "errno": None, "rule": "network.allowedAddresses",
                      "reason": f"a direct connection to 127.0.0.1 port {port} needs an entry in "
                                "network.allowedAddresses (names go through the sandbox's DNS)",
                      "pid": None, "comm": None,
                      "fix": f"add 127.0.0.1/32:{port} to network.allowedAddresses in a policy file"}
        return
    assert one_event([ev]) == {
        "event": "denied", "v": 1, "kind": "network", "host": "127.0.0.1", "port": port, "syscall": "connect",
        "errno": "EACCES", "rule": "network.allowedDomains", "comm": "python3",
        "fix": "connect through the proxy (HTTPS_PROXY/ALL_PROXY are set in the sandbox)"}


@pytest.mark.parametrize("mode", MODES)
def test_a_host_the_proxy_refuses_is_a_network_event_in_the_same_shape(fresh_home: FakeHome, mode: str) -> None:
    log = fresh_home.root / "audit.jsonl"
    r = fresh_home.run(["sh", "-c", "curl -sS -o /dev/null https://refused.invalid/ 2>/dev/null; echo $?"],
                       mode=mode, opts=("--allow-domain", "allowed.invalid", "--audit-log", str(log)))
    assert r.stdout.strip() != "0"
    evs = [e for e in events(log) if e["kind"] == "network"]  # curl's nscd probe is a unix-socket event
    assert evs == [{"event": "denied", "v": 1, "kind": "network", "host": "refused.invalid", "port": 443,
                    "protocol": "connect", "errno": None, "rule": "network.allowedDomains",
                    "reason": evs[0]["reason"], "pid": None, "comm": None,
                    "fix": "--allow-domain refused.invalid (network.allowedDomains in a policy file)"}]
    assert "refused.invalid" in evs[0]["reason"]
    # Explained once: the proxy's line names the host, the rule and the fix;
    # no end-of-run summary repeats it.
    lines = [ln for ln in safebox_lines(r.stderr) if "without bubblewrap" not in ln]  # helper-only's warning
    assert lines == [
        "safebox: refused CONNECT to refused.invalid:443 (refused.invalid is not in network.allowedDomains); "
        "fix: --allow-domain refused.invalid (network.allowedDomains in a policy file)"]


# ------------------------------------------------------------------ the acceptance command


@pytest.mark.parametrize("mode", MODES)
def test_the_four_refusals_of_the_issue_are_four_events_and_a_summary(shared_home: FakeHome, mode: str) -> None:
    r, evs = run_logged(shared_home, ["sh", "-c", "echo x >> ~/.bashrc; touch /etc/x; cat ~/.ssh/id_rsa; "
                                      "unshare -U true"], mode=mode)
    got = [(e["kind"], e.get("path") or e.get("syscall"), e["errno"], e["rule"], e["comm"]) for e in evs]
    assert got == [
        ("write", str(shared_home.root / ".bashrc"), WRITE_ERRNO[mode], "protected file", "sh"),
        ("write", "/etc/x", WRITE_ERRNO[mode], "filesystem.allowWrite", "touch"),
        ("read", str(shared_home.root / ".ssh" / "id_rsa"), "ENOENT" if mode == BOTH else "EACCES",
         "filesystem.denyRead (built-in credential list)", "cat"),
        ("syscall", "unshare", "EPERM", "seccomp: CLONE_NEWUSER: a new namespace (user ns: full caps inside it)",
         "unshare"),
    ]
    tail = r.stderr.rstrip().splitlines()[-2:]
    assert tail == ["safebox: refused 4 operations: 2 writes (~/.bashrc, /etc/x), 1 read (~/.ssh/id_rsa), "
                    "1 system call (unshare)",
                    # The one that can be allowed is named (never "--allow-write /etc"): the
                    # credential list is a default that filesystem.allowRead re-allows.
                    "safebox: to allow the commonest (1 read refused by filesystem.denyRead (built-in credential "
                    "list)): --allow-read ~/.ssh/id_rsa (or filesystem.allowRead)"]


# ------------------------------------------------------------------ enforcement never depends on the feed


def _exited(pid: int) -> bool:
    """Gone, or a zombie (its descriptors, the listener among them, are closed)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


@pytest.mark.parametrize("kill", [True, False], ids=["supervisor killed", "control"])
@pytest.mark.parametrize("mode", MODES)
def test_a_denied_call_stays_denied_when_the_supervisor_is_killed(fresh_home: FakeHome, mode: str,
                                                                  kill: bool) -> None:
    # No exec, open or connect after the kill: with the listener gone the
    # kernel answers every notified call ENOSYS, watched ones included (the
    # command can no longer write or run programs: it fails closed, and
    # safebox ends the run).
    flag = fresh_home.work / f"go-{token()}"
    ready = fresh_home.work / f"ready-{token()}"
    code = ("import ctypes, os, time\n"
            f"open({str(ready)!r}, 'w').close()\n"
            f"while not os.path.exists({str(flag)!r}): time.sleep(0.02)\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "print(ctypes.get_errno() if libc.unshare(0x10000000) < 0 else 0, flush=True)\n")
    proc = fresh_home.popen([PY, "-c", code], mode=mode)
    try:
        assert wait_for(ready.exists)  # the command runs: nothing it does from here is exec, open or connect
        sup = supervisor_of(proc.pid)
        assert sup is not None
        if kill:
            os.kill(sup, signal.SIGKILL)
            assert wait_for(lambda: _exited(sup))
        flag.touch()
        out, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.communicate(timeout=60)  # reaps it and closes the pipes
    # EPERM (1) from the supervisor. Killed: safebox ends the run at once
    # (tests/security/test_supervisor_death.py), and a call that slipped in
    # before gets ENOSYS (38) from the kernel: never allowed either way.
    if kill:
        assert out.strip() in ("", "38") and proc.returncode == 125
    else:
        assert out.strip() == "1"


def test_the_command_cannot_install_a_listener_of_its_own(shared_home: FakeHome) -> None:
    # A newer filter's notification would take precedence over the
    # supervisor's (seccomp_unotify(2)); the kernel allows one listener per
    # filter chain, so the command gets EBUSY.
    code = (
        "import ctypes, struct, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.prctl(38, 1, 0, 0, 0)\n"
        "prog = struct.pack('HBBI', 6, 0, 0, 0x7fff0000)\n"  # BPF_RET|BPF_K ALLOW
        "buf = ctypes.create_string_buffer(prog)\n"
        "fprog = struct.pack('HxxxxxxQ', 1, ctypes.addressof(buf))\n"
        "fb = ctypes.create_string_buffer(fprog)\n"
        "r = libc.syscall(317, 1, 8, fb)\n"  # seccomp(SET_MODE_FILTER, NEW_LISTENER)
        "print('fd' if r >= 0 else ctypes.get_errno())\n")
    assert host([PY, "-c", code]).stdout.strip() == "fd"  # control: allowed outside
    for mode in MODES:
        r = shared_home.run([PY, "-c", code], mode=mode)
        assert r.stdout.strip() == "16", (mode, r.stderr)  # EBUSY


def test_a_host_that_cannot_observe_says_so_once_and_still_enforces(shared_home: FakeHome) -> None:
    # safebox started under a process that already holds a listener (as an
    # enclosing sandbox's would): the helper's own listener is refused
    # (EBUSY), it installs the plain program, and safebox says so once.
    code = (
        "import ctypes, os, struct, subprocess, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.prctl(38, 1, 0, 0, 0)\n"
        "buf = ctypes.create_string_buffer(struct.pack('HBBI', 6, 0, 0, 0x7fff0000))\n"
        "fb = ctypes.create_string_buffer(struct.pack('HxxxxxxQ', 1, ctypes.addressof(buf)))\n"
        "assert libc.syscall(317, 1, 8, fb) >= 0\n"  # the listener stays open in this process
        "sys.exit(subprocess.run(sys.argv[1:]).returncode)\n")
    argv = [PY, "-c", code, str(SAFEBOX), "exec", "--without", "bwrap", "--", "unshare", "-U", "true"]
    r = subprocess.run(argv, cwd=shared_home.work, env=shared_home.env(), capture_output=True, text=True,
                       timeout=60, stdin=subprocess.DEVNULL)
    assert r.returncode == 1 and "unshare failed: Operation not permitted" in r.stderr
    lines = safebox_lines(r.stderr)
    assert lines == ["safebox: refusals are not observed in this run: an enclosing sandbox already observes this "
                     "process (one seccomp listener per process; nested safebox?) (the sandbox is enforced as "
                     "usual; `safebox doctor` checks this host)"]


def test_the_feed_costs_the_command_nothing_it_can_see(shared_home: FakeHome) -> None:
    # The supervisor is not in the sandbox: no process of it is visible
    # inside, and the command holds neither the listener nor the handoff.
    r = shared_home.run(["sh", "-c", "ls /proc | grep -c '^[0-9]'; ls -l /proc/self/fd | grep -c seccomp"])
    count, listeners = r.stdout.split()
    assert listeners == "0"
    assert int(count) <= 4, r.stdout  # bwrap's init, sh, ls, grep

