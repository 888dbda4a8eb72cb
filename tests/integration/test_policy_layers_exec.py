"""Layered policies through the real ``safebox``: ``-p base.json -p more.json``,
learn → enforce with the printed command pasted as it is, ``policy show``
naming each value's layer, ``policy diff``. (Learn's output file never
replaces a device, a link or another's file: tests/security/test_host_side_handling.py.)

Against the real kernel, bwrap, helper and proxy; the server listens on
127.0.0.1 only. Runs as root and as an unprivileged user.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from netservers import serving
from sbx import SAFEBOX, FakeHome, host

pytestmark = pytest.mark.needs_bwrap


@pytest.fixture(scope="module")
def server() -> Iterator[int]:
    with serving(body=b"ok") as srv:
        yield srv.port


def _get(port: int) -> str:
    return f"curl -sS -o /dev/null -w '%{{http_code}}\\n' --max-time 20 http://localhost:{port}/"


def _base(home: FakeHome) -> Path:
    """A reviewed base policy whose settings matter here: local destinations
    allowed (the server is on loopback), the work tree's secret unreadable."""
    (home.work / "secret.txt").write_text(f"{home.secret}\n")
    base = home.root / "base.json"
    base.write_text(json.dumps({"network": {"allowLocalDestinations": True},
                                "filesystem": {"denyRead": ["secret.txt"]}}))
    return base


def _safebox(home: FakeHome, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SAFEBOX), *args], cwd=home.work, env=home.env(), capture_output=True, text=True,
                          timeout=60, check=False, stdin=subprocess.DEVNULL)


# ------------------------------------------------------------------ -p, repeated

def test_policy_files_given_twice_both_apply_in_order(fresh_home: FakeHome, server: int) -> None:
    base = _base(fresh_home)
    more = fresh_home.root / "more.toml"
    more.write_text('[network]\nallowedDomains = ["localhost"]\n')
    script = f"{_get(server)}; cat secret.txt"
    log = fresh_home.root / "audit.jsonl"
    r = fresh_home.run(["sh", "-c", script], opts=["-p", str(base), "-p", str(more), "--audit-log", str(log)])
    assert r.stdout.splitlines()[0] == "200", r.stderr
    assert fresh_home.secret not in r.stdout
    assert "secret.txt: Permission denied" in r.stderr, r.stderr
    # The run's record names every file, in layer order.
    (start,) = [e for e in map(json.loads, log.read_text().splitlines()) if e["event"] == "start"]
    assert (start["policies"], start["policy"]) == ([str(base), str(more)], str(more))
    report = _safebox(fresh_home, "report", str(log))
    assert f"  policy {base} + {more}; presets -" in report.stdout.splitlines(), report.stdout
    # Controls: the second file alone reads the secret and cannot reach the
    # loopback server; the same script on the host does both.
    alone = fresh_home.run(["sh", "-c", script], opts=["-p", str(more)])
    assert alone.stdout.splitlines() == ["403", fresh_home.secret], alone.stderr
    c = host(["sh", "-c", script], cwd=fresh_home.work, env=fresh_home.env())
    assert c.stdout.splitlines() == ["200", fresh_home.secret]


def test_policy_show_names_the_layer_of_each_value_and_what_a_later_layer_replaced(fresh_home: FakeHome) -> None:
    a = fresh_home.root / "a.json"
    a.write_text('{"strict": true, "network": {"allowedDomains": ["a.example.com"]}}')
    b = fresh_home.root / "b.toml"
    b.write_text('strict = false\n[network]\nallowedDomains = ["b.example.com"]\n')
    r = _safebox(fresh_home, "policy", "show", "-p", str(a), "-p", str(b))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    i = lines.index("network.allowedDomains:")
    assert lines[i + 1:i + 3] == [f"  a.example.com  <- {a}", f"  b.example.com  <- {b}"]
    assert lines[lines.index("strict:") + 1] == f"  false  <- {b} (replaces true from {a})"
    assert (f"layers, first to last (a later one adds list entries and replaces other values): "
            f"defaults < {a} < {b}") in lines
    js = json.loads(_safebox(fresh_home, "policy", "show", "-p", str(a), "-p", str(b), "--json").stdout)
    assert js["layers"] == ["defaults", str(a), str(b)]
    assert js["replaced"] == [{"key": "strict", "value": True, "source": str(a), "by": str(b)}]


# ------------------------------------------------------------------ learn, then enforce

def test_the_printed_enforce_line_pasted_as_it_is_works_and_keeps_the_base_policy(fresh_home: FakeHome,
                                                                                  server: int) -> None:
    base = _base(fresh_home)
    out = fresh_home.root / "learned.json"
    script = f"{_get(server)}; cat secret.txt 2>&1 || true"
    r = fresh_home.run(["sh", "-c", script], opts=["-p", str(base), "--learn", str(out)])
    assert (r.returncode, r.stdout.splitlines()[0]) == (0, "200"), r.stderr
    assert fresh_home.secret not in r.stdout
    assert json.loads(out.read_text()) == {"network": {"allowLocalDestinations": True,
                                                       "allowedDomains": ["localhost"]},
                                           "filesystem": {"denyRead": ["secret.txt"]}}
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("safebox: enforce it with: ")]
    argv = shlex.split(line.removeprefix("safebox: enforce it with: "))
    assert argv[1:] == ["exec", "-p", str(out), "--", "sh", "-c", script]
    # Pasted verbatim: it passes, and the base's deny still holds.
    ok = subprocess.run(argv, cwd=fresh_home.work, env=fresh_home.env(), capture_output=True, text=True,
                        timeout=60, check=False, stdin=subprocess.DEVNULL)
    assert ok.returncode == 0, ok.stderr
    assert ok.stdout.splitlines()[0] == "200"
    assert "secret.txt: Permission denied" in ok.stdout and fresh_home.secret not in ok.stdout
    # Control: what the learned file used to hold (the hosts only) loses the
    # base's settings: the loopback server is refused and the secret is read.
    hosts_only = fresh_home.root / "hosts-only.json"
    hosts_only.write_text('{"network": {"allowedDomains": ["localhost"]}}')
    lost = fresh_home.run(["sh", "-c", script], opts=["-p", str(hosts_only)])
    assert lost.stdout.splitlines() == ["403", fresh_home.secret], lost.stderr


# ------------------------------------------------------------------ policy diff

def test_policy_diff_exits_like_diff_and_prints_json_too(fresh_home: FakeHome) -> None:
    old = fresh_home.root / "old.json"
    old.write_text('{"network": {"allowedDomains": ["a.example.com", "b.example.com"]}}')
    same = fresh_home.root / "same.toml"
    same.write_text('[network]\nallowedDomains = ["b.example.com", "a.example.com"]\n')
    new = fresh_home.root / "new.json"
    new.write_text('{"network": {"allowedDomains": ["a.example.com", "c.example.com"]}, "strict": true}')
    eq = _safebox(fresh_home, "policy", "diff", str(old), str(same))
    assert (eq.returncode, eq.stdout) == (0, f"{old} and {same}: the same policy\n")
    d = _safebox(fresh_home, "policy", "diff", str(old), str(new))
    assert d.returncode == 1, d.stderr
    assert d.stdout == (f"--- {old}\n+++ {new}\nnetwork.allowedDomains:  (widens)\n  + c.example.com\n"
                        "  - b.example.com\nstrict: (not set) -> true\n2 keys changed, 1 of them widens the sandbox\n")
    js = _safebox(fresh_home, "policy", "diff", "--json", str(old), str(new))
    assert js.returncode == 1
    assert json.loads(js.stdout)["changes"] == [
        {"key": "network.allowedDomains", "added": ["c.example.com"], "removed": ["b.example.com"], "widens": True},
        {"key": "strict", "old": None, "new": True, "widens": False}]
    bad = fresh_home.root / "bad.json"
    bad.write_text('{"network": {"allowedDomain": []}}')
    e = _safebox(fresh_home, "policy", "diff", str(old), str(bad))
    assert (e.returncode, e.stdout) == (125, "")
    assert e.stderr.splitlines() == [f"safebox: {bad}: network.allowedDomain: unknown key "
                                     "(did you mean `network.allowedDomains`?)"]
