"""The import budget of ``safebox exec``: which modules a start may load.

Start-up time is mostly import time, and each trick that keeps a module off
the path (the policy cache keeping pydantic and json away, ``_signal`` instead
of ``signal``, ``_socket`` instead of ``socket``, the proxy loaded at its
first client: ``proxy/deferred.py``) is easy to lose to one innocent import.
These tests run the installed launcher under ``-X importtime`` (its own
interpreter, its own flags) and pin:

* modules no start may import, with or without a network;
* what a network may add to a start whose command connects nowhere: the
  deferred proxy's listeners, and ``threading`` for its watcher; nothing more;
* the control: when the command does connect, the real proxy (asyncio) is
  loaded, so the check above sees modules when they are there, and OpenSSL
  still is not (``proxy/_asyncio.py``).

Figures: docs/benchmarks.md, "Start-up".
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from sbx import FakeHome

pytestmark = pytest.mark.needs_bwrap

#: Never on a start, networked or not (each costs milliseconds, or, for
#: ssl, OpenSSL's memory). A warm policy cache is assumed: a cold one loads
#: pydantic and json on purpose.
FORBIDDEN = frozenset({
    "asyncio", "ssl", "_ssl", "pydantic", "click", "json", "re", "dataclasses", "inspect", "typing", "enum",
    "socket", "selectors", "ipaddress", "logging", "concurrent.futures", "subprocess", "pathlib", "shlex",
    "datetime", "signal", "safebox.proxy.server", "safebox.proxy.rules", "safebox.proxy.http",
    "safebox.proxy.upstream", "safebox.policy.domains", "safebox.audit", "safebox.report",
})

#: What a network may add to the start of a command that makes no connection.
NETWORK_EXTRA = frozenset({
    "safebox.proxy", "safebox.proxy.config", "safebox.proxy.deferred", "safebox.proxy.listeners",
    # Capture's plan (whether it is on, the sandbox's resolv.conf): os only.
    "safebox.run.netcapture",
    # The watcher thread; threading must be imported on the main thread.
    "threading", "functools", "_functools", "types", "_weakrefset",
})


def _imported(home: FakeHome, opts: list[str], command: list[str]) -> set[str]:
    """Modules one ``safebox exec`` imported, as -X importtime lists them."""
    argv = [sys.executable, "-IS", "-X", "importtime", *home.argv(command, opts=opts)]
    home.run(command, opts=opts)  # warm the policy and seccomp caches
    r = subprocess.run(argv, cwd=home.work, env=home.env(), capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr[-3000:]
    return {line.rsplit("|", 1)[1].strip() for line in r.stderr.splitlines()
            if line.startswith("import time:") and "|" in line}


NETWORK = ["--allow-domain", "example.test"]

#: Ceilings on what a plain start loads: every module, and safebox's own.
#: Each import costs 0.1 to 0.5 ms, so a split of a module on the start
#: path, or a module moved onto it, shows here: lower a ceiling when a
#: start loads less; raise it only in the commit that adds the module, with
#: the reason (issue 24's restructuring kept both: 95 and 55).
MAX_MODULES = 95
MAX_SAFEBOX_MODULES = 55


def test_a_start_without_network_imports_none_of_the_forbidden_modules(shared_home: FakeHome) -> None:
    mods = _imported(shared_home, [], ["true"])
    assert "safebox.run.main" in mods  # it did run
    assert sorted(mods & FORBIDDEN) == []
    assert not any(m.startswith("safebox.proxy") for m in mods)


def test_a_start_loads_no_more_modules_than_its_ceilings(shared_home: FakeHome) -> None:
    mods = _imported(shared_home, [], ["true"]) - {"imported package"}  # -X importtime's header
    own = sorted(m for m in mods if m == "safebox" or m.startswith("safebox."))
    assert "safebox.run.main" in own  # it did run
    assert len(own) <= MAX_SAFEBOX_MODULES, own
    assert len(mods) <= MAX_MODULES, sorted(mods)


def test_a_networked_start_adds_only_the_proxys_listeners_and_its_watcher(shared_home: FakeHome) -> None:
    plain = _imported(shared_home, [], ["true"])
    mods = _imported(shared_home, NETWORK, ["true"])
    assert "safebox.proxy.deferred" in mods  # it is a networked run
    assert sorted(mods & FORBIDDEN) == []
    assert sorted(mods - plain - NETWORK_EXTRA) == []


def test_control_a_command_that_connects_loads_the_proxy_but_not_openssl(shared_home: FakeHome) -> None:
    # A refused name: answered 403 by the proxy itself, nothing leaves the host.
    command = ["curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", "http://refused.example.test/"]
    mods = _imported(shared_home, NETWORK, command)
    assert {"asyncio", "safebox.proxy.server", "safebox.proxy.rules", "safebox.proxy.http"} <= mods
    assert "_ssl" not in mods  # "ssl" is listed for asyncio's refused attempt; _ssl would be OpenSSL


#: What --review may add to a start: its own modules and the mounter's handshake.
REVIEW_EXTRA = frozenset({"safebox.review", "safebox.review.run", "safebox.review.store", "safebox.review.mounts",
                          "safebox.run.mounter"})


def test_a_review_start_adds_only_its_own_modules(shared_home: FakeHome) -> None:
    plain = _imported(shared_home, [], ["true"])
    mods = _imported(shared_home, ["--review"], ["true"])
    assert "safebox.review.mounts" in mods  # it is a --review run: its overlays were planned
    assert sorted(mods & FORBIDDEN) == []  # meta.json written without json, the handshake without socket
    assert sorted(mods - plain - REVIEW_EXTRA) == []
