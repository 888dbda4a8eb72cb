"""``credentials`` (srt) through the real ``safebox exec``: a masked value is
a per-run sentinel inside and the proxy puts the real value into requests
to the entry's ``injectHosts`` only. Origins on 127.0.0.1 (HTTPS with a test
CA given as ``extraCaCertPaths``, and plain HTTP) record what reached them.

Two names reach the same origin: ``localhost`` and the literal
``127.0.0.1``; ``injectHosts`` names one of them, so the other is "a host
outside injectHosts". Every masked or hidden claim has its control: without
the entry, the real value is visible inside / sent as it is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from netservers import LocalCA, OriginServer, make_test_ca, serving
from sbx import BOTH, HELPER_ONLY, FakeHome, token

pytestmark = pytest.mark.needs_bwrap

SENTINEL = re.compile(r"fake_value_[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}[a-z0-9_-]*")
VAR = "SBXTEST_CRED"  # matches no env.deny pattern: visible inside unless masked (the control)


@pytest.fixture(scope="module")
def ca(scratch: Path) -> LocalCA:
    return make_test_ca(scratch / f"cred-ca-{token()}")


@pytest.fixture(scope="module")
def https(ca: LocalCA) -> Iterator[OriginServer]:
    with serving(tls=ca.server_context(["localhost", "127.0.0.1"])) as srv:
        yield srv


@pytest.fixture(scope="module")
def plain() -> Iterator[OriginServer]:
    with serving() as srv:
        yield srv


def _opts(home: FakeHome, ca: LocalCA, credentials: dict[str, object], *, allowed: list[str] | None = None,
          tls: bool = True) -> list[str]:
    net: dict[str, object] = {"allowedDomains": allowed or ["localhost", "127.0.0.1"], "allowLocalDestinations": True}
    if tls:
        net["tlsTerminate"] = {"extraCaCertPaths": [str(ca.cert_path)]}
    path = home.root / f"policy-{token()}.json"
    path.write_text(json.dumps({"network": net, "credentials": credentials}))
    return ["-p", str(path)]


def _secret() -> str:
    return f"real-{token()}{token()}"


def _curl(url: str, *extra: str) -> str:
    return f'curl -sS --max-time 20 -H "Authorization: Bearer ${VAR}" {" ".join(extra)} {url}'


# ----------------------------------------------------------------- variables


def test_a_masked_variable_is_a_sentinel_inside(shared_home: FakeHome, ca: LocalCA) -> None:
    real = _secret()
    opts = _opts(shared_home, ca, {"envVars": [{"name": VAR, "mode": "mask"}]})
    environ = (f"import os; print(os.environ[{VAR!r}]); "
               "print([e.decode() for e in open('/proc/self/environ', 'rb').read().split(b'\\0') "
               f"if e.startswith(b'{VAR}=')][0])")
    r = shared_home.run(["python3", "-c", environ], opts=opts, env={VAR: real})
    lines = r.stdout.splitlines()
    assert SENTINEL.fullmatch(lines[0]) and lines[1] == f"{VAR}={lines[0]}", (r.stdout, r.stderr)
    assert real not in r.stdout
    # A sentinel per run: the next run gets another one.
    again = shared_home.run(["printenv", VAR], opts=opts, env={VAR: real}).stdout.strip()
    assert SENTINEL.fullmatch(again) and again != lines[0]


def test_control_without_the_entry_the_real_value_is_visible_inside(shared_home: FakeHome, ca: LocalCA) -> None:
    real = _secret()
    r = shared_home.run(["printenv", VAR], opts=_opts(shared_home, ca, {}), env={VAR: real})
    assert r.stdout.strip() == real


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_the_real_value_appears_nowhere_inside(fresh_home: FakeHome, ca: LocalCA, mode: str) -> None:
    """Not in the environment, /proc/self/environ, any process's environ or
    command line the sandbox can read, the run dir, the trust bundle, the
    masked file, /tmp. Control: the same search finds the sentinel."""
    real = _secret()
    token_file = fresh_home.root / "api-token"
    token_file.write_text(f"{real}-file\n")
    opts = _opts(fresh_home, ca, {"envVars": [{"name": VAR, "mode": "mask"}],
                                  "files": [{"path": str(token_file), "mode": "mask"}]})
    places = (f"/proc/*/environ /proc/*/cmdline {token_file} \"$(dirname \"$SSL_CERT_FILE\")\" /tmp "
              f"{fresh_home.root}/.cache")
    script = (f"env; cat {token_file}; grep -rasl -- '{real}' {places} 2>/dev/null; "
              f"echo found-sentinel: $(grep -rasl -- \"${VAR}\" /proc/self/environ)")
    r = fresh_home.run(["sh", "-c", script], opts=opts, env={VAR: real}, mode=mode)
    assert real not in r.stdout, r.stdout
    assert "found-sentinel: /proc/self/environ" in r.stdout, r.stdout
    if mode == BOTH:
        assert SENTINEL.search(r.stdout.split(f"{VAR}=")[1])


def test_the_real_value_reaches_a_host_in_inject_hosts_and_the_sentinel_any_other(
        shared_home: FakeHome, ca: LocalCA, https: OriginServer) -> None:
    port, real = https.port, _secret()
    opts = _opts(shared_home, ca, {"envVars": [{"name": VAR, "mode": "mask", "injectHosts": ["localhost"]}]})
    script = f'{_curl(f"https://localhost:{port}/in")}; echo; {_curl(f"https://127.0.0.1:{port}/out")}'
    r = shared_home.run(["sh", "-c", script], opts=opts, env={VAR: real})
    assert r.stdout.splitlines() == [f"origin-{port} GET /in", f"origin-{port} GET /out"], r.stderr
    seen = {s.path: s.headers["authorization"] for s in https.seen[-2:]}
    assert seen["/in"] == f"Bearer {real}"
    assert SENTINEL.fullmatch(seen["/out"].removeprefix("Bearer ")), seen
    assert real not in seen["/out"]


def test_control_without_masking_the_real_value_goes_to_every_host(shared_home: FakeHome, ca: LocalCA,
                                                                   https: OriginServer) -> None:
    port, real = https.port, _secret()
    r = shared_home.run(["sh", "-c", _curl(f"https://127.0.0.1:{port}/unmasked")], opts=_opts(shared_home, ca, {}),
                        env={VAR: real})
    assert r.returncode == 0, r.stderr
    assert https.seen[-1].headers["authorization"] == f"Bearer {real}"


def test_without_inject_hosts_a_credential_goes_to_every_allowed_domain(shared_home: FakeHome, ca: LocalCA,
                                                                        https: OriginServer) -> None:
    """srt: injectHosts defaults to network.allowedDomains (a trade-off made
    explicit: narrow it when one host should get the value)."""
    port, real = https.port, _secret()
    opts = _opts(shared_home, ca, {"envVars": [{"name": VAR, "mode": "mask"}]})
    script = f'{_curl(f"https://localhost:{port}/a")}; {_curl(f"https://127.0.0.1:{port}/b")}'
    shared_home.run(["sh", "-c", script], opts=opts, env={VAR: real})
    assert [s.headers["authorization"] for s in https.seen[-2:]] == [f"Bearer {real}"] * 2


def test_one_credentials_sentinel_is_not_substituted_at_another_credentials_host(
        shared_home: FakeHome, ca: LocalCA, https: OriginServer) -> None:
    """srt's anti-laundering: A's sentinel sent to B's host stays a sentinel."""
    port, real_a, real_b = https.port, _secret(), _secret()
    opts = _opts(shared_home, ca, {"envVars": [
        {"name": "SBXTEST_A", "mode": "mask", "injectHosts": ["localhost"]},
        {"name": "SBXTEST_B", "mode": "mask", "injectHosts": ["127.0.0.1"]}]})
    script = (f'curl -sS -H "X-A: $SBXTEST_A" -H "X-B: $SBXTEST_B" https://localhost:{port}/a; '
              f'curl -sS -H "X-A: $SBXTEST_A" -H "X-B: $SBXTEST_B" https://127.0.0.1:{port}/b')
    shared_home.run(["sh", "-c", script], opts=opts, env={"SBXTEST_A": real_a, "SBXTEST_B": real_b})
    at_a, at_b = https.seen[-2:]
    assert at_a.headers["x-a"] == real_a and SENTINEL.fullmatch(at_a.headers["x-b"])
    assert at_b.headers["x-b"] == real_b and SENTINEL.fullmatch(at_b.headers["x-a"])


def test_a_masked_value_in_a_request_body_is_substituted(shared_home: FakeHome, ca: LocalCA, https: OriginServer) -> None:
    port, real = https.port, _secret()
    opts = _opts(shared_home, ca, {"envVars": [{"name": VAR, "mode": "mask"}]})
    script = (f'printf \'{{"token": "%s"}}\' "${VAR}" > /tmp/body.json; '
              f"curl -sS --data-binary @/tmp/body.json https://localhost:{port}/json; "
              f'curl -sS -H "Transfer-Encoding: chunked" --data-binary @/tmp/body.json https://localhost:{port}/chunked; '
              f'curl -sS -H "Content-Encoding: gzip" --data-binary @/tmp/body.json https://localhost:{port}/encoded')
    r = shared_home.run(["sh", "-c", script], opts=opts, env={VAR: real})
    assert r.returncode == 0, r.stderr
    by_path = {s.path: s for s in https.seen[-3:]}
    assert by_path["/json"].body == f'{{"token": "{real}"}}'.encode()
    assert by_path["/json"].headers["content-length"] == str(len(by_path["/json"].body))
    assert by_path["/chunked"].body == f'{{"token": "{real}"}}'.encode()
    # A body the proxy cannot read (Content-Encoding) keeps the sentinel: fail safe.
    assert SENTINEL.search(by_path["/encoded"].body.decode()) and real.encode() not in by_path["/encoded"].body


def test_plain_http_gets_the_sentinel_unless_allow_plaintext_inject(shared_home: FakeHome, ca: LocalCA,
                                                                    plain: OriginServer) -> None:
    port, real = plain.port, _secret()
    entry = {"name": VAR, "mode": "mask"}
    r = shared_home.run(["sh", "-c", _curl(f"http://localhost:{port}/plain")],
                        opts=_opts(shared_home, ca, {"envVars": [entry]}), env={VAR: real})
    assert r.returncode == 0, r.stderr
    assert SENTINEL.fullmatch(plain.seen[-1].headers["authorization"].removeprefix("Bearer "))
    r = shared_home.run(["sh", "-c", _curl(f"http://localhost:{port}/plain-allowed")],
                        opts=_opts(shared_home, ca, {"envVars": [entry], "allowPlaintextInject": True}),
                        env={VAR: real})
    assert r.stdout == f"origin-{port} GET /plain-allowed", r.stderr
    assert plain.seen[-1].headers["authorization"] == f"Bearer {real}"


def test_without_tls_termination_https_requests_carry_the_sentinel_and_safebox_says_so(
        shared_home: FakeHome, ca: LocalCA, https: OriginServer) -> None:
    port, real = https.port, _secret()
    opts = _opts(shared_home, ca, {"envVars": [{"name": VAR, "mode": "mask"}]}, tls=False)
    r = shared_home.run(["sh", "-c", _curl(f"https://localhost:{port}/notls", "--cacert", str(ca.cert_path))],
                        opts=opts, env={VAR: real})
    assert r.returncode == 0, r.stderr
    assert "network.tlsTerminate is not set: requests carry the sentinel" in r.stderr
    assert SENTINEL.fullmatch(https.seen[-1].headers["authorization"].removeprefix("Bearer "))


def test_socks5_connections_are_not_terminated_and_carry_the_sentinel(shared_home: FakeHome, ca: LocalCA,
                                                                      https: OriginServer) -> None:
    port, real = https.port, _secret()
    opts = _opts(shared_home, ca, {"envVars": [{"name": VAR, "mode": "mask"}]})
    r = shared_home.run(["sh", "-c", _curl(f"https://localhost:{port}/socks", "-x", "socks5h://127.0.0.1:1080")],
                        opts=opts, env={VAR: real})
    assert r.returncode == 0, r.stderr
    assert real not in https.seen[-1].headers["authorization"]


def test_a_denied_variable_is_absent_even_when_env_allow_lets_it_through(shared_home: FakeHome) -> None:
    path = shared_home.root / f"p-{token()}.json"
    path.write_text(json.dumps({"env": {"allow": [VAR]}, "credentials": {"envVars": [{"name": VAR, "mode": "deny"}]}}))
    r = shared_home.run(["sh", "-c", f'echo "[${{{VAR}-unset}}]"'], opts=["-p", str(path)], env={VAR: _secret()})
    assert r.stdout.strip() == "[unset]"


def test_a_masked_variable_that_env_deny_would_remove_is_masked_not_removed(shared_home: FakeHome,
                                                                            ca: LocalCA) -> None:
    r = shared_home.run(["printenv", "GH_TOKEN"], opts=_opts(shared_home, ca, {"envVars": [
        {"name": "GH_TOKEN", "mode": "mask"}]}), env={"GH_TOKEN": _secret()})
    assert SENTINEL.fullmatch(r.stdout.strip()), r.stderr
    # Control: by default GH_TOKEN is removed (env.deny).
    assert shared_home.run(["printenv", "GH_TOKEN"], env={"GH_TOKEN": "x"}).returncode == 1


# ----------------------------------------------------------------- files


def test_a_masked_file_reads_as_the_sentinel_and_its_value_reaches_the_inject_host(
        fresh_home: FakeHome, ca: LocalCA, https: OriginServer) -> None:
    port, real = https.port, _secret()
    cfg = fresh_home.root / ".config" / "tool"
    cfg.mkdir(parents=True)
    (cfg / "token").write_text(real + "\n")
    link = fresh_home.root / "token-link"
    link.symlink_to(cfg / "token")
    opts = _opts(fresh_home, ca, {"files": [{"path": "~/.config/tool/token", "mode": "mask"}]})
    script = (f"cat ~/.config/tool/token; cat {link}; "
              f'curl -sS -H "Authorization: Bearer $(cat ~/.config/tool/token)" https://localhost:{port}/file; '
              "echo x >> ~/.config/tool/token")
    r = fresh_home.run(["sh", "-c", script], opts=opts)
    lines = r.stdout.splitlines()
    assert SENTINEL.fullmatch(lines[0]) and lines[1] == lines[0], r.stdout  # the symlink reads the copy too
    assert real not in r.stdout
    assert https.seen[-1].headers["authorization"] == f"Bearer {real}"
    assert "Read-only file system" in r.stderr or "Permission denied" in r.stderr  # the copy cannot be changed
    assert (cfg / "token").read_text() == real + "\n"  # the real file is untouched
    # Control: without the entry the file holds the real value inside.
    r = fresh_home.run(["cat", str(cfg / "token")], opts=_opts(fresh_home, ca, {}))
    assert r.stdout == real + "\n"


def test_without_bubblewrap_a_masked_file_is_denied_instead_and_safebox_says_so(fresh_home: FakeHome,
                                                                                ca: LocalCA) -> None:
    real = _secret()
    f = fresh_home.root / "tok"
    f.write_text(real)
    opts = _opts(fresh_home, ca, {"files": [{"path": str(f), "mode": "mask"}]})
    r = fresh_home.run(["cat", str(f)], opts=opts, mode=HELPER_ONLY)
    assert r.returncode != 0 and "Permission denied" in r.stderr and real not in r.stdout
    assert (f"safebox: credentials.files {f}: without bubblewrap a masked copy cannot be shown; the file is "
            'unreadable instead (mode "deny")') in r.stderr


def test_a_denied_file_is_unreadable(fresh_home: FakeHome, ca: LocalCA) -> None:
    real = _secret()
    f = fresh_home.root / "deny-me"
    f.write_text(real)
    r = fresh_home.run(["cat", str(f)], opts=_opts(fresh_home, ca, {"files": [{"path": str(f), "mode": "deny"}]}))
    assert real not in r.stdout
    r = fresh_home.run(["cat", str(f)], opts=_opts(fresh_home, ca, {}))  # control
    assert r.stdout == real


def test_a_directory_cannot_be_masked(fresh_home: FakeHome, ca: LocalCA) -> None:
    d = fresh_home.root / "creds-dir"
    d.mkdir()
    r = fresh_home.run(["true"], opts=_opts(fresh_home, ca, {"files": [{"path": str(d), "mode": "mask"}]}))
    assert r.returncode == 125
    assert f"credentials.files {d}: a directory cannot be masked" in r.stderr and 'use mode "deny"' in r.stderr


def test_a_project_file_may_not_mask_a_credential(fresh_home: FakeHome) -> None:
    (fresh_home.work / ".safebox.json").write_text(json.dumps(
        {"credentials": {"envVars": [{"name": "GH_TOKEN", "mode": "mask", "injectHosts": ["gist.github.com"]}]}}))
    r = fresh_home.run(["true"])
    assert r.returncode == 125
    assert "credentials.envVars: a project file may not mask a credential" in r.stderr
    # Denying narrows: allowed from a project file.
    (fresh_home.work / ".safebox.json").write_text(json.dumps(
        {"credentials": {"envVars": [{"name": VAR, "mode": "deny"}]}}))
    assert fresh_home.run(["true"]).returncode == 0
