"""The network proxy end to end, through the real ``safebox exec``.

A small HTTP server listens on 127.0.0.1 in this test process; sandboxed curl
reaches it by the name ``localhost`` (resolved by the proxy on the host) with
``network.allowLocalDestinations``. Nothing is sent to any address other than
loopback: refused names are refused by the proxy before any lookup, and the
no-network cases run in an empty network namespace.

Paths: plain HTTP through ``HTTP_PROXY``, CONNECT (``curl -p``) and SOCKS5
(``curl -x socks5h://127.0.0.1:1080``). Refusals are asserted exactly: the 403
body of docs/network.md, curl's exit 56 for a refused CONNECT and exit 97 for
the SOCKS5 reply 0x02.

"The proxy dies mid-run" cannot be injected into the safebox process from a
test, so it is simulated from outside: the test removes the proxy's unix
sockets while the command runs, which is what a bridge sees when the proxy is
gone (its connect fails). The command's next request must fail at once, not
hang.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from netservers import Seen, start_origin, stop_origin
from sbx import BOTH, EACCES, ECONNREFUSED, EPERM, HELPER_ONLY, SAFEBOX, FakeHome, host, token, wait_for

pytestmark = pytest.mark.needs_bwrap

SOCKS = ["-x", "socks5h://127.0.0.1:1080"]
PATHS = {"http": [], "connect": ["-p"], "socks5": SOCKS}


#: What the module's origin received (netservers.Seen), for the tests that
#: check nothing reached it.
_SEEN: list[Seen] = []


def _hits() -> list[str]:
    return [s.path for s in _SEEN]


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[int, str]]:
    """(port, body) of an HTTP server on 127.0.0.1."""
    body = f"hello-{token()}"
    srv = start_origin(body=body.encode())
    srv.seen = _SEEN
    yield srv.server_address[1], body
    stop_origin(srv)


def policy(home: FakeHome, network: dict[str, object]) -> list[str]:
    """Write a policy file into the fake home; the ``-p`` option for it."""
    path = home.root / f"policy-{token()}.json"
    path.write_text(json.dumps({"network": network}))
    return ["-p", str(path)]


LOCAL = {"allowedDomains": ["localhost"], "allowLocalDestinations": True}


def curl(home: FakeHome, args: list[str], url: str, *, opts: list[str], mode: str = BOTH
         ) -> subprocess.CompletedProcess[str]:
    return home.run(["curl", "-sS", "--max-time", "20", *args, url], opts=opts, mode=mode)


FIXES = {"network.allowedDomains": "add {host} to network.allowedDomains",
         "network.deniedDomains": "none unless the matching network.deniedDomains entry is removed "
                                  "({host} is denied on purpose)",
         "network.allowLocalDestinations": "set network.allowLocalDestinations to true "
                                           "(the name resolves to a local address)"}


def refusal(host_: str, port: int, rule: str, reason: str) -> str:
    """The 403's body (docs/network.md): one line a model can read."""
    return (f"safebox refused {host_}:{port} by {rule}: {reason}. Fix, for whoever runs the sandbox: "
            f"{FIXES[rule].format(host=host_)}. Retrying, or another route to the host, is refused the same way.\n")


@pytest.mark.parametrize("path", list(PATHS))
def test_an_allowed_name_reaches_the_local_server(shared_home: FakeHome, server: tuple[int, str], path: str) -> None:
    port, body = server
    r = curl(shared_home, PATHS[path], f"http://localhost:{port}/{path}", opts=policy(shared_home, LOCAL))
    assert (r.returncode, r.stdout) == (0, body), r.stderr


def test_the_proxy_variables_point_at_the_bridges_and_no_proxy_is_empty(shared_home: FakeHome) -> None:
    r = shared_home.run(["env"], opts=policy(shared_home, LOCAL))
    env = dict(line.split("=", 1) for line in r.stdout.splitlines() if "=" in line)
    assert env["HTTP_PROXY"] == env["http_proxy"] == "http://127.0.0.1:3128"
    assert env["HTTPS_PROXY"] == env["https_proxy"] == "http://127.0.0.1:3128"
    assert env["ALL_PROXY"] == env["all_proxy"] == "socks5h://127.0.0.1:1080"
    assert env["NO_PROXY"] == env["no_proxy"] == ""


def test_a_name_not_allowed_is_refused_with_the_documented_body(shared_home: FakeHome,
                                                                  server: tuple[int, str]) -> None:
    port, _ = server
    opts = policy(shared_home, LOCAL)
    r = curl(shared_home, ["-D", "/dev/stderr"], f"http://example.org:{port}/", opts=opts)
    assert r.returncode == 0
    assert "403 Forbidden" in r.stderr and "X-Safebox-Rule: network.allowedDomains" in r.stderr
    assert r.stdout == refusal("example.org", port, "network.allowedDomains",
                               "example.org is not in network.allowedDomains")
    r = curl(shared_home, ["-p"], f"http://example.org:{port}/", opts=opts)
    assert r.returncode == 56 and "CONNECT tunnel failed, response 403" in r.stderr
    r = curl(shared_home, SOCKS, f"http://example.org:{port}/", opts=opts)
    assert r.returncode == 97 and "SOCKS5" in r.stderr and "(2)" in r.stderr


def test_a_denied_domain_wins_over_an_allowed_one(shared_home: FakeHome, server: tuple[int, str]) -> None:
    port, _ = server
    opts = policy(shared_home, {**LOCAL, "deniedDomains": ["localhost"]})
    r = curl(shared_home, [], f"http://localhost:{port}/", opts=opts)
    assert "network.deniedDomains" in r.stdout and r.stdout.startswith("safebox refused localhost:")
    assert _hits().count("/") == 0


@pytest.mark.parametrize("path", list(PATHS))
def test_a_star_in_denied_domains_refuses_every_host_with_the_documented_reason(
        shared_home: FakeHome, server: tuple[int, str], path: str) -> None:
    # Issue 11 item 7: `policy check` accepted deniedDomains ["*"] and every
    # exec then failed with "invalid network domain pattern".
    port, body = server
    network = {**LOCAL, "allowedDomains": ["localhost", "127.0.0.1"]}
    control = curl(shared_home, PATHS[path], f"http://localhost:{port}/{path}", opts=policy(shared_home, network))
    assert (control.returncode, control.stdout) == (0, body), control.stderr  # without the deny it gets through

    opts = policy(shared_home, {**network, "deniedDomains": ["*"]})
    checked = subprocess.run([str(SAFEBOX), "policy", "check", opts[1]], capture_output=True, text=True, check=False)
    assert (checked.returncode, checked.stdout) == (0, f"{opts[1]}: ok\n"), checked.stderr
    before = len(_hits())
    for host_ in ("localhost", "127.0.0.1"):  # a name and a listed IP literal alike
        r = curl(shared_home, PATHS[path] if path != "http" else ["-D", "/dev/stderr"],
                 f"http://{host_}:{port}/{path}", opts=opts)
        assert "invalid network domain pattern" not in r.stderr, r.stderr
        if path == "http":
            assert r.returncode == 0, r.stderr
            assert "403 Forbidden" in r.stderr and "X-Safebox-Rule: network.deniedDomains" in r.stderr
            assert r.stdout == refusal(host_, port, "network.deniedDomains",
                                       f"{host_} matches '*' in network.deniedDomains")
        elif path == "connect":
            assert r.returncode == 56 and "CONNECT tunnel failed, response 403" in r.stderr, r.stderr
        else:
            assert r.returncode == 97 and "SOCKS5" in r.stderr and "(2)" in r.stderr, r.stderr
    assert len(_hits()) == before


def test_a_star_in_allowed_domains_is_refused_alike_by_policy_check_and_exec(shared_home: FakeHome) -> None:
    opts = policy(shared_home, {"allowedDomains": ["*"]})
    reason = f"safebox: {opts[1]}: network.allowedDomains[0] = \"*\": '*' alone would let every host through"
    checked = subprocess.run([str(SAFEBOX), "policy", "check", opts[1]], capture_output=True, text=True, check=False)
    assert checked.returncode == 125 and reason in checked.stderr, checked.stderr
    r = shared_home.run(["true"], opts=opts)
    assert r.returncode == 125 and reason in r.stderr, r.stderr


def test_an_ip_literal_is_refused_unless_listed(shared_home: FakeHome, server: tuple[int, str]) -> None:
    port, _ = server
    r = curl(shared_home, [], f"http://127.0.0.1:{port}/", opts=policy(shared_home, LOCAL))
    assert r.stdout == refusal("127.0.0.1", port, "network.allowedDomains",
                               "IP address 127.0.0.1 is not listed literally in network.allowedDomains")


@pytest.mark.parametrize("path", list(PATHS))
def test_an_allowed_name_resolving_to_loopback_needs_allow_local_destinations(
        shared_home: FakeHome, server: tuple[int, str], path: str) -> None:
    port, _ = server
    opts = policy(shared_home, {"allowedDomains": ["localhost"]})
    before = len(_hits())
    r = curl(shared_home, PATHS[path], f"http://localhost:{port}/{path}", opts=opts)
    if path == "http":
        assert r.returncode == 0
        assert r.stdout == refusal(
            "localhost", port, "network.allowLocalDestinations",
            "localhost resolves to 127.0.0.1, a loopback address; local destinations need "
            "network.allowLocalDestinations")
    elif path == "connect":
        assert r.returncode == 56 and "response 403" in r.stderr
    else:
        assert r.returncode == 97
    assert len(_hits()) == before


def test_without_an_allowed_domain_nothing_reaches_the_network(shared_home: FakeHome,
                                                                server: tuple[int, str]) -> None:
    port, body = server
    control = host(["curl", "-sS", "--noproxy", "*", f"http://127.0.0.1:{port}/"])
    assert (control.returncode, control.stdout) == (0, body)
    r = shared_home.run(["curl", "-sS", "--max-time", "10", f"http://127.0.0.1:{port}/"])
    assert r.returncode == 7, r.stderr
    r = shared_home.run(["getent", "hosts", "example.org"])
    assert r.returncode == 2
    script = (f"import socket\ns = socket.socket()\ntry:\n    s.connect(('127.0.0.1', {port}))\n"
              "except OSError as e:\n    raise SystemExit(e.errno)\n")
    assert shared_home.run(["python3", "-c", script]).returncode == EACCES


def test_helper_only_mode_allows_the_proxy_ports_and_nothing_else(shared_home: FakeHome,
                                                                  server: tuple[int, str]) -> None:
    port, body = server
    opts = policy(shared_home, LOCAL)
    script = (
        "import errno, os, socket, subprocess\n"
        f"out = subprocess.run(['curl', '-sS', 'http://localhost:{port}/'], capture_output=True, text=True)\n"
        "print('proxied', out.returncode, out.stdout)\n"
        f"out = subprocess.run(['curl', '-sS', '--noproxy', '*', 'http://127.0.0.1:{port}/'], capture_output=True)\n"
        "print('direct', out.returncode)\n"
        "s = socket.socket()\n"
        f"try:\n    s.connect(('127.0.0.1', {port}))\nexcept OSError as e:\n    print('connect', e.errno)\n"
        "try:\n    socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nexcept OSError as e:\n    print('udp', e.errno)\n"
        "print('vars', os.environ['HTTP_PROXY'] != 'http://127.0.0.1:3128')\n"
    )
    r = shared_home.run(["python3", "-c", script], opts=opts, mode=HELPER_ONLY)
    assert r.stdout.splitlines() == [f"proxied 0 {body}", "direct 7", f"connect {EACCES}", f"udp {EPERM}",
                                     "vars True"], r.stderr


def test_helper_only_mode_states_that_the_proxy_ports_are_open_on_every_address(
        shared_home: FakeHome, server: tuple[int, str]) -> None:
    """The limit, shown and stated: Landlock's TCP rules name a port, not an
    address, so the proxy's port number is reachable on any host (here
    127.0.0.2, where nothing listens: ECONNREFUSED, not EACCES). Another
    port on the same address is refused by Landlock (the control)."""
    port, _ = server
    script = ("import os, socket\n"
              "proxy = int(os.environ['HTTP_PROXY'].rsplit(':', 1)[1])\n"
              f"for p in (proxy, {port}):\n"
              "    s = socket.socket()\n"
              "    try:\n        s.connect(('127.0.0.2', p))\n    except OSError as e:\n        print(e.errno)\n")
    r = shared_home.run(["python3", "-c", script], opts=policy(shared_home, LOCAL), mode=HELPER_ONLY)
    assert r.stdout.split() == [str(ECONNREFUSED), str(EACCES)], r.stderr
    assert ("safebox: without bubblewrap the command shares the host's network: Landlock limits its TCP "
            "connections to ports ") in r.stderr
    assert "but on any address (Landlock port rules carry no address)" in r.stderr


def test_audit_log_has_one_json_line_per_decision(fresh_home: FakeHome, server: tuple[int, str]) -> None:
    port, _ = server
    log = fresh_home.root / "audit.jsonl"
    script = (f"curl -sS -o /dev/null http://localhost:{port}/a; "
              f"curl -sS -o /dev/null http://example.org:{port}/b; "
              f"curl -sS -o /dev/null -x socks5h://127.0.0.1:1080 http://localhost:{port}/c; true")
    r = fresh_home.run(["sh", "-c", script], opts=[*policy(fresh_home, LOCAL), "--audit-log", str(log)])
    assert r.returncode == 0, r.stderr
    events = [json.loads(line) for line in log.read_text().splitlines()]
    net = [(e["host"], e["port"], e["protocol"], e["verdict"], e["rule"]) for e in events if e["event"] == "network"]
    # An allowed loopback destination names the key that let it through.
    assert net == [("localhost", port, "http", "allow", "network.allowLocalDestinations"),
                   ("example.org", port, "http", "deny", "network.allowedDomains"),
                   ("localhost", port, "socks5", "allow", "network.allowLocalDestinations")]


def _socats_for(home: FakeHome) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv and argv[0].endswith(b"socat") and any(str(home.root).encode() in a for a in argv):
                pids.append(int(entry.name))
    return pids


def test_nothing_runs_inside_a_networked_sandbox_outside_the_filter(fresh_home: FakeHome,
                                                                     server: tuple[int, str]) -> None:
    """The proxy ports are listeners the helper handed to the host proxy, not
    bridge processes: every process inside but bwrap's pid 1 is the command's,
    under seccomp (mode 2) with no_new_privs."""
    port, body = server
    lister = ("import os\n"
              "for d in sorted(x for x in os.listdir('/proc') if x.isdigit() and x != '1'):\n"
              "    try:\n"
              "        st = open(f'/proc/{d}/status').read(); argv0 = open(f'/proc/{d}/cmdline', 'rb').read()\n"
              "    except OSError:\n"
              "        continue\n"
              "    sec = [ln.split()[1] for ln in st.splitlines() if ln.startswith('Seccomp:')]\n"
              "    print(d, sec[0], argv0.split(b'\\0')[0].decode())\n")
    # The lister waits for the background child to have become sleep (a
    # forked sh until its exec; seen under load). By its comm, set at exec:
    # its cmdline before the exec is the parent sh's, whose script says
    # "sleep" too (ciD of turn 7).
    script = (f'curl -sS http://localhost:{port}/; sleep 30 & '
              'until grep -qx sleep /proc/$!/comm 2>/dev/null; do :; done; python3 -c "$1"; kill $!')
    r = fresh_home.run(["sh", "-c", script, "sh", lister], opts=policy(fresh_home, LOCAL))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(body), r.stdout
    rows = [line.split() for line in r.stdout[len(body):].strip().splitlines()]
    names = sorted(row[2] for row in rows)
    assert names == ["python3", "sh", "sleep"], r.stdout  # the command's processes, and nothing else
    assert all(row[1] == "2" for row in rows), r.stdout  # each under the seccomp filter


def test_no_socat_is_started_and_no_run_dir_is_left_behind(fresh_home: FakeHome, server: tuple[int, str]) -> None:
    port, body = server
    proc = fresh_home.popen(["sh", "-c", f"curl -sS http://localhost:{port}/ && sleep 1"],
                            opts=policy(fresh_home, LOCAL))
    # The proxy ports need no socat; none is started for the run at any time.
    seen: list[int] = []
    assert not wait_for(lambda: bool(seen.extend(_socats_for(fresh_home)) or seen), 1)
    out, _ = proc.communicate(timeout=60)
    assert out == body
    assert not _socats_for(fresh_home)
    assert not fresh_home.run_base.exists() or list(fresh_home.run_base.iterdir()) == []
