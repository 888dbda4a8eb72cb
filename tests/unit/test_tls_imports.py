"""What srt's network and credential keys cost a run that does not use them:
nothing. The modules behind ``tlsTerminate``, ``credentials`` and
``parentProxy`` (and ``cryptography``) are not imported by a networked
``safebox exec`` without those keys; with ``tlsTerminate`` they are (the
control)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sbx import SAFEBOX, FakeHome, token

# "_ssl", not "ssl": the proxy package imports asyncio with ssl hidden, and
# -X importtime lists those refused attempts as "ssl" too.
HEAVY = ("cryptography", "_ssl", "safebox.proxy.tls", "safebox.proxy.tlsbase", "safebox.proxy.intercept",
         "safebox.proxy.forward", "safebox.proxy.streams", "safebox.proxy.inject", "safebox.proxy.parent",
         "safebox.run.credentials", "safebox.run.netsetup")


def _imported(home: FakeHome, policy: dict[str, object], env: dict[str, str] | None = None) -> set[str]:
    """Modules the safebox process imported for one run (``-X importtime``)."""
    path = home.root / f"policy-{token()}.json"
    path.write_text(json.dumps(policy))
    # The launcher, run by its own interpreter with the same flags (-IS).
    argv = [sys.executable, "-IS", "-X", "importtime", str(SAFEBOX), "exec", "-p", str(path), "--", "true"]
    r = subprocess.run(argv, cwd=home.work, env=home.env(env), capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-2000:]
    mods = set()
    for line in r.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            mods.add(line.rsplit("|", 1)[1].strip())
    return mods


@pytest.mark.needs_bwrap
def test_a_networked_run_without_the_keys_imports_none_of_their_code(shared_home: FakeHome) -> None:
    mods = _imported(shared_home, {"network": {"allowedDomains": ["example.com"]}})
    assert "safebox.proxy.deferred" in mods  # it is a networked run
    assert not [m for m in HEAVY if m in mods or any(x.startswith(m + ".") for x in mods)]


@pytest.mark.needs_bwrap
def test_control_with_tls_terminate_the_run_imports_cryptography(shared_home: FakeHome) -> None:
    mods = _imported(shared_home, {"network": {"allowedDomains": ["example.com"], "tlsTerminate": {}}})
    assert {"cryptography", "_ssl", "safebox.proxy.tls", "safebox.run.netsetup"} <= mods


def test_starting_the_proxy_without_them_imports_nothing_of_theirs() -> None:
    script = (
        "import sys, tempfile\n"
        "from safebox.proxy import ProxyConfig, ProxyServer\n"
        "p = ProxyServer(ProxyConfig(('example.com',)), run_dir=tempfile.mkdtemp(), tcp=True, unix=False)\n"
        "p.start(); p.stop()\n"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_without_cryptography_tls_terminate_is_refused_saying_how_to_install_it(tmp_path: Path) -> None:
    """A fake absence (a module that fails to import), through the real code path."""
    (tmp_path / "cryptography").mkdir()
    (tmp_path / "cryptography" / "__init__.py").write_text("raise ImportError('no cryptography here')\n")
    script = (
        "from safebox.proxy.tls import Mitm, TlsSetupError\n"
        "try:\n"
        "    Mitm(ca_cert_path=None, ca_key_path=None, extra_ca_cert_paths=(), exclude_domains=())\n"
        "except TlsSetupError as e:\n"
        "    print(e.key, '|', e)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *(p for p in sys.path if p)])}
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ("network.tlsTerminate | needs the cryptography package, which is not installed: "
                                  "pip install 'safebox-sandbox[tls]' (or pip install cryptography)")
