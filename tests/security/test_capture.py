"""Capture and the sandbox's DNS (docs/network.md, "Capture", "DNS"),
through the real ``safebox exec``: bwrap, the helper, the seccomp
supervisor and the proxy.

The origin listens on the host's 127.0.0.1; the sandbox reaches it by the
name ``localhost.`` (with the dot, /etc/hosts does not answer it, so the
lookup goes to the sandbox's DNS), with ``allowLocalDestinations``.
Loopback only: no packet leaves the machine.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from netns import run_in_netns
from netservers import OriginServer, serving
from sbx import FakeHome, token

pytestmark = pytest.mark.needs_bwrap

# Connect from inside and say what happened, as "ok <reply>" or "errno N".
CONNECT = ("import socket, sys\n"
           "host, port = sys.argv[1], int(sys.argv[2])\n"
           "fam = socket.AF_INET6 if ':' in host else socket.AF_INET\n"
           "s = socket.socket(fam, socket.SOCK_STREAM)\n"
           "s.settimeout(10)\n"
           "try:\n"
           "    s.connect((host, port))\n"
           "    s.sendall(b'GET /c HTTP/1.0\\r\\nHost: x\\r\\n\\r\\n')\n"
           "    print('ok', s.recv(100).split(b'\\r\\n')[0].decode())\n"
           "except OSError as e:\n"
           "    print('errno', e.errno)\n")


@pytest.fixture(scope="module")
def served() -> Iterator[OriginServer]:
    """The origin on the host's 127.0.0.1; ``.seen`` is what reached it."""
    with serving(body=b"captured-ok") as srv:
        yield srv


@pytest.fixture(scope="module")
def origin(served: OriginServer) -> int:
    return served.port


def hits(srv: OriginServer) -> list[str]:
    """The paths that reached the origin, in order."""
    return [s.path for s in srv.seen]


def _policy(home: FakeHome, network: dict[str, object]) -> list[str]:
    path = home.root / f"policy-{token()}.json"
    path.write_text(json.dumps({"network": network}))
    return ["-p", str(path)]


LOCAL = {"allowedDomains": ["localhost", "allowed.example"], "allowLocalDestinations": True}


def test_an_allowed_name_resolves_inside_and_a_refused_one_gets_nxdomain_with_a_line_naming_it(
        shared_home: FakeHome) -> None:
    r = shared_home.run(["sh", "-c", "cat /etc/resolv.conf; getent ahosts allowed.example; echo rc=$?; "
                                     "getent ahosts refused.example; echo rc=$?"], opts=_policy(shared_home, LOCAL))
    assert "nameserver 198.18.0.53" in r.stdout, r.stdout
    assert "198.18.1." in r.stdout and "allowed.example" in r.stdout, r.stdout + r.stderr
    assert "rc=0\n" in r.stdout and r.stdout.endswith("rc=2\n"), r.stdout  # getent: 2 is "not found"
    assert ("safebox: refused the DNS lookup of refused.example (refused.example is not in "
            "network.allowedDomains); fix: --allow-domain refused.example") in r.stderr, r.stderr


def test_curl_noproxy_reaches_an_allowed_name_through_the_filter_with_an_audit_record(
        shared_home: FakeHome, served: OriginServer, origin: int) -> None:
    log = shared_home.root / f"audit-{token()}.jsonl"
    before = len(hits(served))
    r = shared_home.run(["curl", "-sS", "--noproxy", "*", "--max-time", "20", f"http://localhost.:{origin}/cap"],
                        opts=[*_policy(shared_home, LOCAL), "--audit-log", str(log)])
    assert (r.returncode, r.stdout) == (0, "captured-ok"), r.stderr
    assert hits(served)[before:] == ["/cap"]
    records = [json.loads(x) for x in log.read_text().splitlines()]
    assert [(e["host"], e["port"], e["protocol"], e["verdict"]) for e in records if e["event"] == "network"] == [
        ("localhost", origin, "capture", "allow")]


def test_without_observation_there_is_no_capture_and_the_connect_still_fails(shared_home: FakeHome,
                                                                             served: OriginServer, origin: int) -> None:
    # Control for the test above: the same curl without the supervisor gets
    # nowhere (no DNS inside, no route): capture is what let it through.
    before = len(hits(served))
    r = shared_home.run(["curl", "-sS", "--noproxy", "*", "--max-time", "20", f"http://localhost.:{origin}/cap"],
                        opts=[*_policy(shared_home, LOCAL), "--observe", "off"])
    assert r.returncode in (6, 7), (r.returncode, r.stderr)
    assert hits(served)[before:] == []


def test_curl_noproxy_to_a_refused_name_fails_at_once_with_the_line(shared_home: FakeHome, served: OriginServer, origin: int) -> None:
    before = len(hits(served))
    r = shared_home.run(["curl", "-sS", "--noproxy", "*", "--max-time", "20", f"http://refused.example:{origin}/"],
                        opts=_policy(shared_home, LOCAL))
    assert r.returncode == 6 and "Could not resolve host: refused.example" in r.stderr, r.stderr
    assert "safebox: refused the DNS lookup of refused.example" in r.stderr
    assert hits(served)[before:] == []


@pytest.mark.parametrize(("host", "why"), [
    ("127.0.0.1", "a direct connection to 127.0.0.1 port {port} needs an entry in network.allowedAddresses"),
    ("::1", "a direct connection to [::1] port {port} needs an entry in network.allowedAddresses"),
    ("::ffff:127.0.0.1", "a direct connection to [::ffff:127.0.0.1] port {port} needs an entry in "
                         "network.allowedAddresses"),
    ("198.18.200.200", "198.18.200.200 stands for no name looked up in this sandbox"),
])
def test_a_direct_connect_to_an_address_no_allowed_name_stands_for_is_refused_with_the_line(
        shared_home: FakeHome, served: OriginServer, origin: int, host: str, why: str) -> None:
    before = len(hits(served))
    r = shared_home.run(["python3", "-c", CONNECT, host, str(origin)], opts=_policy(shared_home, LOCAL))
    assert r.stdout == "errno 13\n", r.stdout + r.stderr  # EACCES, as Landlock's refusal
    shown = f"[{host}]" if ":" in host else host
    assert f"safebox: refused TCP connect to {shown}:{origin}" in r.stderr, r.stderr
    assert why.format(port=origin) in r.stderr, r.stderr
    assert hits(served)[before:] == []


def test_an_address_in_allowed_addresses_is_reached_by_a_direct_connect_and_a_literal_domain_is_not(
        shared_home: FakeHome, served: OriginServer, origin: int) -> None:
    # Control for the refusals above: the same connect with the address allowed.
    before = len(hits(served))
    r = shared_home.run(["python3", "-c", CONNECT, "127.0.0.1", str(origin)],
                        opts=_policy(shared_home, {"allowedAddresses": [f"127.0.0.1/32:{origin}"]}))
    assert r.stdout == "ok HTTP/1.1 200 OK\n", r.stdout + r.stderr
    assert hits(served)[before:] == ["/c"]
    # An IP literal in allowedDomains is for the proxy path: a direct connect
    # is refused, and the fix the line gives works (the run above).
    r = shared_home.run(["python3", "-c", CONNECT, "127.0.0.1", str(origin)],
                        opts=_policy(shared_home, {"allowedDomains": [f"127.0.0.1:{origin}"]}))
    assert r.stdout == "errno 13\n", r.stdout + r.stderr
    assert (f"fix: add 127.0.0.1/32:{origin} to network.allowedAddresses in a policy file") in r.stderr, r.stderr
    assert hits(served)[before:] == ["/c"]


def test_a_dual_stack_socket_reaches_an_allowed_name_by_its_ipv4_mapped_address(shared_home: FakeHome,
                                                                                origin: int) -> None:
    # Java connects AF_INET6 sockets to ::ffff:a.b.c.d: the DNS's answer in that form is the same name.
    code = ("import socket, sys\n"
            "a = socket.getaddrinfo('localhost.', 0, socket.AF_INET)[0][4][0]\n"
            "s = socket.socket(socket.AF_INET6); s.connect(('::ffff:' + a, int(sys.argv[1])))\n"
            "s.sendall(b'GET /mapped HTTP/1.0\\r\\n\\r\\n'); print(s.recv(12).decode())\n")
    r = shared_home.run(["python3", "-c", code, str(origin)], opts=_policy(shared_home, LOCAL))
    assert (r.returncode, r.stdout) == (0, "HTTP/1.1 200\n"), r.stdout + r.stderr


UDP_DNS = ("import socket, struct, sys\n"
           "q = struct.pack('!6H', 7, 0x100, 1, 0, 0, 0) + b''.join(bytes([len(p)]) + p.encode() "
           "for p in sys.argv[1].split('.')) + b'\\0\\0\\1\\0\\1'\n"
           "s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.settimeout(5)\n"
           "s.connect(('198.18.0.53', 53)); s.send(q); a = s.recv(512)\n"
           "print(a[3] & 15, socket.inet_ntoa(a[-4:]) if a[3] & 15 == 0 else '-')\n"
           "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
           "try:\n"
           "    u.sendto(q, ('1.1.1.1', 53)); print('sent')\n"
           "except OSError as e:\n"
           "    print('errno', e.errno)\n")


def test_the_dns_answers_over_udp_and_udp_elsewhere_reaches_nothing(shared_home: FakeHome) -> None:
    r = shared_home.run(["python3", "-c", UDP_DNS, "allowed.example"], opts=_policy(shared_home, LOCAL))
    assert r.stdout.startswith("0 198.18.1.") and r.stdout.endswith("\nerrno 101\n"), r.stdout + r.stderr
    r = shared_home.run(["python3", "-c", UDP_DNS, "udp-refused.example"], opts=_policy(shared_home, LOCAL))
    assert r.stdout == "3 -\nerrno 101\n", r.stdout + r.stderr  # NXDOMAIN; ENETUNREACH: no route out
    assert "safebox: refused the DNS lookup of udp-refused.example" in r.stderr


def test_the_proxy_path_keeps_working_with_capture_on(shared_home: FakeHome, origin: int) -> None:
    r = shared_home.run(["curl", "-sS", "--max-time", "20", f"http://localhost:{origin}/proxied"],
                        opts=_policy(shared_home, LOCAL))
    assert (r.returncode, r.stdout) == (0, "captured-ok"), r.stderr


# -- cloud metadata through the capture front end, in a network namespace of our own --

_METADATA_SCRIPT = textwrap.dedent(
    """
    import json, pathlib, socket, struct, tempfile
    from netservers import start_origin
    from safebox.proxy import ProxyConfig, ProxyServer

    start_origin(body=b"SECRET", host="169.254.169.254", port=80)

    def captured(port, where):
        s = socket.create_connection(("127.0.0.1", port), 5)
        s.sendall(f"capture {where}\\n".encode())
        verdict = s.recv(1)
        if verdict != b"y":
            return verdict.decode()
        if where.endswith(":53"):
            return s
        try:
            s.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
            return "y " + s.recv(100).decode("latin-1")
        except OSError as e:
            return f"y errno {e.errno}"

    def lookup(port, name):
        s = captured(port, "198.18.0.53:53")
        q = struct.pack("!6H", 1, 0x100, 1, 0, 0, 0) + b"".join(
            bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\\0\\0\\1\\0\\1"
        s.sendall(struct.pack("!H", len(q)) + q)
        a = s.recv(200)
        return socket.inet_ntoa(a[-4:])

    out = {}
    def run(key, allowed, addresses, where):
        p = ProxyServer(ProxyConfig(allowed, allow_local_destinations=True, allowed_addresses=addresses, explain=True),
                        run_dir=pathlib.Path(tempfile.mkdtemp()), tcp=True)
        p.start()
        lst = socket.socket(); lst.bind(("127.0.0.1", 0)); lst.listen()
        port = lst.getsockname()[1]
        p.serve_listeners([(lst, "capture")])
        try:
            out[key] = captured(port, where(port))
        finally:
            p.stop()
    names = ("metadata.test", "localhost")
    run("literal", names, ("169.254.0.0/16",), lambda port: "169.254.169.254:80")
    run("mapped", names, (), lambda port: "[::ffff:169.254.169.254]:80")
    run("by_name", names, ("169.254.0.0/16",), lambda port: lookup(port, "metadata.test") + ":80")
    run("listed_literally", ("169.254.169.254",), (), lambda port: "169.254.169.254:80")
    c = socket.create_connection(("169.254.169.254", 80), 5)
    c.sendall(b"GET / HTTP/1.0\\r\\n\\r\\n")
    out["without_safebox"] = c.recv(100).decode("latin-1")
    print(json.dumps(out))
    """
)


def test_cloud_metadata_is_refused_through_capture_inside_a_private_netns(tmp_path: Path) -> None:
    out, stderr = run_in_netns(tmp_path, _METADATA_SCRIPT, hosts="127.0.0.1 localhost\n169.254.169.254 metadata.test\n",
                               addresses=["169.254.169.254"])
    assert out["literal"] == "n", out  # an allowedAddresses entry never covers metadata
    assert out["mapped"] == "n", out
    # The name passes its check (the supervisor is told 'y'), then every
    # address it resolves to is checked and the connection is closed.
    assert out["by_name"] in ("y ", "y errno 104"), out
    assert "cloud metadata address" in stderr
    # Listed literally in allowedDomains: reached through the proxy only, never by a direct connect.
    assert out["listed_literally"] == "n", out
    # Control: the fake metadata server answers a connect made without safebox.
    assert out["without_safebox"].startswith("HTTP/1.1 200"), out


def test_through_the_api_a_refused_lookup_is_a_network_event_naming_the_host(shared_home: FakeHome) -> None:
    import safebox

    with safebox.Sandbox({"network": LOCAL}, cwd=shared_home.work, env=shared_home.env()) as sb:
        r = sb.run(["getent", "ahosts", "nosuch.example"], capture_output=True, text=True)
        ok = sb.run(["getent", "ahosts", "allowed.example"], capture_output=True, text=True)
    assert r.returncode == 2 and r.stderr == "", r.stderr  # quiet under the API: the event says it
    [ev] = [e for e in r.events if e.kind == "network"]
    assert (ev.data["host"], ev.data["protocol"], ev.data["rule"]) == ("nosuch.example", "dns",
                                                                       "network.allowedDomains")
    assert "nosuch.example" in ev.data["message"], ev.data
    assert ok.returncode == 0 and [e for e in ok.events if e.kind == "network"] == []  # control


# -- the proxy's other checks on a captured connection (docs/network.md,
# "The proxy's other checks, on a captured connection") --

@pytest.mark.parametrize(("key", "value", "rule"), [
    ("refuseOpaqueTunnels", True, "network.refuseOpaqueTunnels"),
    ("deniedResolvedAddresses", ["127.0.0.0/8"], "network.deniedResolvedAddresses"),
])
def test_a_captured_connect_is_refused_by_the_srt_keys_that_refuse_it_through_the_proxy(
        shared_home: FakeHome, served: OriginServer, origin: int, key: str, value: object, rule: str) -> None:
    # The control is test_curl_noproxy_reaches_an_allowed_name_through_the_filter_with_an_audit_record:
    # the same curl and policy without the key.
    before = len(hits(served))
    r = shared_home.run(["curl", "-sS", "--noproxy", "*", "--max-time", "20", f"http://localhost.:{origin}/srt"],
                        opts=_policy(shared_home, {**LOCAL, key: value}))
    assert r.returncode in (7, 52, 56), (r.returncode, r.stdout, r.stderr)  # refused, or closed at once
    line = next((x for x in r.stderr.splitlines() if x.startswith("safebox: refused TCP connect to ")), "")
    assert line.startswith(f"safebox: refused TCP connect to localhost:{origin}") and rule in line, r.stderr
    assert hits(served)[before:] == []


CURL_LATE = ["curl", "-sS", "--noproxy", "*", "--max-time", "20"]


def test_a_name_allowed_while_the_sandbox_runs_resolves_inside_and_is_reached_by_a_captured_connect(
        shared_home: FakeHome, served: OriginServer, origin: int) -> None:
    import safebox

    before = len(hits(served))
    policy = {"network": {"allowedDomains": ["allowed.example"], "allowLocalDestinations": True}}
    with safebox.Sandbox(policy, cwd=shared_home.work, env=shared_home.env()) as sb:
        refused = sb.run([*CURL_LATE, f"http://localhost.:{origin}/late"], capture_output=True, text=True)
        sb.allow_domain("localhost")
        late = sb.run([*CURL_LATE, f"http://localhost.:{origin}/late"], capture_output=True, text=True)
    assert refused.returncode == 6, refused.stderr  # the control: not resolved before the change
    assert (late.returncode, late.stdout) == (0, "captured-ok"), late.stderr
    assert hits(served)[before:] == ["/late"]


def test_a_captured_connect_to_a_name_no_entry_allows_is_put_to_on_request_with_its_port(
        shared_home: FakeHome, served: OriginServer, origin: int) -> None:
    import safebox

    asked: list[tuple[str, int, str]] = []
    answers = iter([True, False])

    def on_request(req: object) -> bool:
        asked.append((req.host, req.port, req.protocol))  # type: ignore[attr-defined]
        return next(answers)

    before = len(hits(served))
    policy = {"network": {"allowedDomains": ["allowed.example"], "allowLocalDestinations": True}}
    with safebox.Sandbox(policy, cwd=shared_home.work, env=shared_home.env(), on_request=on_request) as sb:
        yes = sb.run([*CURL_LATE, f"http://localhost.:{origin}/asked"], capture_output=True, text=True)
        no = sb.run([*CURL_LATE, f"http://localhost.:{origin + 1 if origin < 65535 else origin - 1}/no"],
                    capture_output=True, text=True)
    assert (yes.returncode, yes.stdout) == (0, "captured-ok"), yes.stderr
    assert no.returncode in (7, 52, 56), (no.returncode, no.stderr)  # said no: closed at once
    assert [a[::2] for a in asked] == [("localhost", "capture"), ("localhost", "capture")], asked
    assert asked[0][1] == origin
    assert hits(served)[before:] == ["/asked"]


def test_with_strict_allowlist_a_name_no_entry_allows_is_not_asked_about_and_gets_nxdomain(
        shared_home: FakeHome, origin: int) -> None:
    import safebox

    asked: list[object] = []
    policy = {"network": {"allowedDomains": ["allowed.example"], "allowLocalDestinations": True,
                          "strictAllowlist": True}}
    with safebox.Sandbox(policy, cwd=shared_home.work, env=shared_home.env(),
                         on_request=lambda r: asked.append(r) or True) as sb:
        r = sb.run([*CURL_LATE, f"http://localhost.:{origin}/strict"], capture_output=True, text=True)
    assert r.returncode == 6 and asked == [], (r.returncode, r.stderr, asked)


def test_through_the_api_allowed_addresses_hold_while_the_lists_change(shared_home: FakeHome, served: OriginServer, origin: int) -> None:
    # A Sandbox's lists can always change (proxy/live.py): its rules are
    # rebuilt at every change, and allowedAddresses must survive each.
    import safebox

    before = len(hits(served))
    policy = {"network": {"allowedAddresses": [f"127.0.0.1/32:{origin}"]}}
    with safebox.Sandbox(policy, cwd=shared_home.work, env=shared_home.env()) as sb:
        first = sb.run(["python3", "-c", CONNECT, "127.0.0.1", str(origin)], capture_output=True, text=True)
        sb.allow_domain("later.example")
        second = sb.run(["python3", "-c", CONNECT, "127.0.0.1", str(origin)], capture_output=True, text=True)
        other = sb.run(["python3", "-c", CONNECT, "127.0.0.2", str(origin)], capture_output=True, text=True)
    assert first.stdout == second.stdout == "ok HTTP/1.1 200 OK\n", (first.stdout, second.stdout, second.stderr)
    assert other.stdout == "errno 13\n", other.stdout  # the control: an address no entry covers
    assert hits(served)[before:] == ["/c", "/c"]
