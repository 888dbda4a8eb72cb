"""The resolved-address check's newer classes and the SSH form of
``deniedDomainReasons``, against the proxy itself with real curl and ssh.

The addresses of this host's own interfaces and Azure's WireServer
(168.63.129.16) are assigned inside a network namespace the test creates
(``unshare -n``), with a private /etc/hosts mapping a name to each: nothing
leaves it, and a refused address is refused before any connect (the
server counts what reached it)."""

from __future__ import annotations

import pathlib
import subprocess
import sys
import textwrap

from netns import run_in_netns
from safebox.policy.effective import NetKeys
from safebox.proxy import ProxyConfig, ProxyServer

_NETNS_SCRIPT = textwrap.dedent(
    """
    import json, pathlib, subprocess, tempfile, time
    from netservers import start_origin
    from safebox.proxy import ProxyConfig, ProxyServer

    srv = start_origin(body=b"SECRET", host="0.0.0.0")  # as a careless service binds
    port, hits = srv.port, srv.seen
    out = {}
    def proxy(allowed):
        p = ProxyServer(ProxyConfig(allowed), run_dir=pathlib.Path(tempfile.mkdtemp()), tcp=True)
        p.start()
        return p
    def curl(p, key, url, *args):
        before = len(hits)
        r = subprocess.run(["curl", "-sS", "-m", "10", *args, "-x", f"http://127.0.0.1:{p.http_port}", url],
                           capture_output=True, text=True)
        out[key] = [r.returncode, r.stdout, r.stderr, len(hits) - before]
    names = ("self.test", "wire.test", "later.test")
    p = proxy(names)
    curl(p, "own", f"http://self.test:{port}/")
    curl(p, "own_connect", f"http://self.test:{port}/", "-p")
    curl(p, "wire", f"http://wire.test:{port}/")
    curl(p, "later_before", f"http://later.test:{port}/")
    # An address added while the proxy runs is known within OWN_REFRESH.
    subprocess.run(["ip", "addr", "add", "11.22.33.55/32", "dev", "lo"], check=True)
    time.sleep(2.5)
    curl(p, "later_after", f"http://later.test:{port}/")
    p.stop()
    # Controls: the same server answers on each address listed literally.
    p = proxy((f"11.22.33.44:{port}", "168.63.129.16"))
    curl(p, "own_literal", f"http://11.22.33.44:{port}/")
    curl(p, "wire_literal", f"http://168.63.129.16:{port}/")
    p.stop()
    print(json.dumps(out))
    """
)


def test_this_hosts_own_addresses_and_the_wireserver_are_refused_by_name_inside_a_private_netns(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # 11.22.33.44 is a global address (no class refuses it): only being this
    # host's own does. Both live on the namespace's loopback only.
    out, _ = run_in_netns(tmp_path, _NETNS_SCRIPT, addresses=["11.22.33.44", "168.63.129.16"],
                          hosts="127.0.0.1 localhost\n11.22.33.44 self.test\n168.63.129.16 wire.test\n"
                                "11.22.33.55 later.test\n")
    code, body, _, reached = out["own"]
    assert (code, reached) == (0, 0) and body.startswith("safebox refused self.test:"), out["own"]
    assert ("self.test resolves to 11.22.33.44, an address of this host's own interfaces; local destinations "
            "need network.allowLocalDestinations") in body
    assert out["own_connect"][0] == 56 and "403" in out["own_connect"][2] and out["own_connect"][3] == 0
    code, body, _, reached = out["wire"]
    assert (code, reached) == (0, 0) and "168.63.129.16, a cloud metadata address" in body, out["wire"]
    # Not yet assigned: the check passes and the connect finds no route;
    # assigned, it is refused.
    assert "connecting to 11.22.33.55 port" in out["later_before"][1], out["later_before"]
    assert "11.22.33.55, an address of this host's own interfaces" in out["later_after"][1], out["later_after"]
    # Controls: the server answers on both addresses when they are granted.
    assert out["own_literal"][:2] == [0, "SECRET"], out["own_literal"]
    assert out["wire_literal"][:2] == [0, "SECRET"], out["wire_literal"]


_SOCKS_PROXY_COMMAND = textwrap.dedent(
    """
    import os, socket, struct, sys, threading
    s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
    host, port = sys.argv[2].encode(), int(sys.argv[3])
    s.sendall(b"\\x05\\x01\\x00")
    assert s.recv(2) == b"\\x05\\x00"
    s.sendall(b"\\x05\\x01\\x00\\x03" + bytes([len(host)]) + host + struct.pack("!H", port))
    rep = s.recv(10)
    if rep[1] != 0:
        sys.stderr.write(f"socks reply {rep[1]}\\n"); sys.exit(1)
    def up():
        while data := os.read(0, 65536):
            s.sendall(data)
    threading.Thread(target=up, daemon=True).start()
    while data := s.recv(65536):
        os.write(1, data)
    """
)


def _ssh_through(tmp_path: pathlib.Path, keys: NetKeys | None) -> subprocess.CompletedProcess[str]:
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700, exist_ok=True)
    helper = tmp_path / "socks.py"
    helper.write_text(_SOCKS_PROXY_COMMAND)
    cfg = ProxyConfig(("localhost",), ("localhost:22",), allow_local_destinations=True, keys=keys)
    with ProxyServer(cfg, run_dir=run_dir, tcp=True) as p:
        return subprocess.run(
            ["ssh", "-F", "/dev/null", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=no",
             "-o", f"UserKnownHostsFile={tmp_path}/known", "-o",
             f"ProxyCommand={sys.executable} {helper} {p.socks_port} %h %p", "-p", "22", "git@localhost", "true"],
            capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)


def test_ssh_through_socks5_prints_the_reason_of_the_denied_entry(tmp_path: pathlib.Path) -> None:
    reason = "SSH pushes are blocked here; use the https:// remote"
    r = _ssh_through(tmp_path, NetKeys(reasons=(("localhost:22", reason),)))
    assert r.returncode == 255
    assert f"Received disconnect from UNKNOWN port 65535:1: {reason}" in r.stderr, r.stderr
    # Control: without a reason the refusal is SOCKS's "not allowed" (2) and
    # ssh shows no text of ours.
    r = _ssh_through(tmp_path, None)
    assert r.returncode == 255 and "socks reply 2" in r.stderr and "Received disconnect" not in r.stderr, r.stderr
