"""The violations feed tells the truth (issue 26, "a truthful feed").

- No refusal is reported for an operation that worked: a write into every
  preset's cache, in every layer mode, is no event and no summary line,
  while a write the sandbox did refuse, in the same run, is.
- Every fix line the summary gives is applied and the command re-run: the
  fix works, or the line says the refusal stays.
- A PATH lookup of a file that does not exist (an exec failing with ENOENT
  inside a hidden directory that holds no such file on the host either) is
  no refused exec; one of a program that does exist there is.

Everything runs through the real ``safebox exec`` (bwrap, helper,
supervisor); the controls run the same command where nothing refuses it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from safebox.policy.presets import PRESETS
from sbx import BOTH, BWRAP_ONLY, HELPER_ONLY, FakeHome, host, token

PY = "/usr/bin/python3"
ALL_MODES = [BOTH, HELPER_ONLY, BWRAP_ONLY]
#: The modes that observe (nothing is observed with --without helper).
OBSERVED = [BOTH, HELPER_ONLY]
WRITE_ERRNO = {BOTH: "EROFS", HELPER_ONLY: "EACCES", BWRAP_ONLY: "EROFS"}

#: Every cache variable of every preset, as (preset, variable).
CACHE_VARS = [(p.name, v.name) for p in PRESETS.values() for c in p.caches for v in c.env]


def denied(log: Path) -> list[dict[str, Any]]:
    return [ev for ev in map(json.loads, log.read_text().splitlines()) if ev["event"] == "denied"]


def refusal_lines(stderr: str) -> list[str]:
    """safebox's lines about refusals (the summary and the -v list)."""
    return [line for line in stderr.splitlines()
            if line.startswith(("safebox: refused", "safebox: denied", "safebox: to allow",
                                "safebox: the commonest"))]


def run(home: FakeHome, command: list[str], *, mode: str = BOTH, opts: tuple[str, ...] = (),
        env: dict[str, str] | None = None, cwd: Path | None = None) -> tuple[subprocess.CompletedProcess[str],
                                                                          list[dict[str, Any]]]:
    """``safebox exec --audit-log LOG -v``; the run and its denied events."""
    log = home.root / f"audit-{token()}.jsonl"
    r = home.run(command, mode=mode, opts=("--audit-log", str(log), "-v", *opts), env=env, cwd=cwd)
    return r, denied(log) if log.exists() else []


# --------------------------------------------------------------- caches

# Inside the sandbox: the cache dir a variable names (MAVEN_OPTS carries it
# as -Dmaven.repo.local=DIR), then the write-intent calls a package manager
# makes there (create, mkdir, rename, link, unlink, chmod), then the
# control: a write to the home, which is read-only.
CACHE_WRITES = r"""
import os, sys
var, control = sys.argv[1], sys.argv[2]
value = os.environ[var]
d = value
for word in value.split():
    if word.startswith("-Dmaven.repo.local="):
        d = word.split("=", 1)[1]
os.makedirs(os.path.join(d, "sub", "deeper"), exist_ok=True)
with open(os.path.join(d, "sub", "f.tmp"), "w") as f:
    f.write("x")
os.rename(os.path.join(d, "sub", "f.tmp"), os.path.join(d, "sub", "f"))
os.symlink("f", os.path.join(d, "sub", "l"))
os.chmod(os.path.join(d, "sub", "f"), 0o644)
os.unlink(os.path.join(d, "sub", "l"))
print("cache ok", d)
try:
    open(control, "a").close()
except OSError as e:
    print("control", e.errno)
"""


def test_go_build_into_a_fresh_preset_cache_reports_no_refusal(fresh_home: FakeHome) -> None:
    # A real tool: go build fills GOCACHE with hundreds of files (435
    # "writes refused by self-protection" before the fix, for a hello world).
    (fresh_home.work / "go.mod").write_text("module x\n\ngo 1.20\n")
    (fresh_home.work / "main.go").write_text('package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("hi") }\n')
    env = {"GOTOOLCHAIN": "local", "GOFLAGS": "-mod=mod"}
    r, evs = run(fresh_home, ["go", "build", "-o", "hello", "."], opts=("--preset", "go"), env=env)
    assert r.returncode == 0 and (fresh_home.work / "hello").exists(), r.stderr
    assert evs == [] and refusal_lines(r.stderr) == [], r.stderr
    caches = list((fresh_home.root / ".cache" / "safebox" / "sandbox-caches").glob("*/go/gocache/*"))
    assert len(caches) > 10  # it did write there


def test_every_preset_with_a_cache_is_covered() -> None:
    # The parametrisation below comes from PRESETS: a new preset's cache is
    # tested without editing this file. This pins that it is not empty.
    assert {p for p, _ in CACHE_VARS} == {"npm", "pip", "cargo", "go", "maven"}
    assert len(CACHE_VARS) == 10


@pytest.mark.parametrize("mode", ALL_MODES)
@pytest.mark.parametrize(("preset", "var"), CACHE_VARS)
def test_writes_into_a_preset_cache_are_no_refusal_while_a_refused_write_is_reported(
        shared_home: FakeHome, preset: str, var: str, mode: str) -> None:
    control = shared_home.root / "outside.txt"
    r, evs = run(shared_home, [PY, "-c", CACHE_WRITES, var, str(control)], mode=mode, opts=("--preset", preset))
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0].startswith("cache ok /"), r.stdout
    cache = out[0].split(" ", 2)[2]
    # The control: the same run's write to the home was refused...
    assert out[1] == f"control {13 if mode == HELPER_ONLY else 30}", r.stdout
    if mode == BWRAP_ONLY:
        # ...and nothing is observed without the helper: no line at all.
        assert refusal_lines(r.stderr) == [], r.stderr
        assert evs == []
        return
    # ...and reported, alone: the cache's writes are not.
    assert [(ev["kind"], ev["path"], ev["errno"]) for ev in evs] == [("write", str(control), WRITE_ERRNO[mode])], evs
    assert "sandbox-caches" in cache and "sandbox-caches" not in r.stderr, r.stderr
    assert "safebox: refused 1 operation: 1 write (~/outside.txt)" in r.stderr, r.stderr


# ------------------------------------------------------------ fix lines


def commonest(stderr: str) -> str:
    """The summary's last line, without ``safebox: ``."""
    lines = [line for line in stderr.splitlines() if line.startswith(("safebox: to allow", "safebox: the commonest"))]
    assert len(lines) == 1, stderr
    return lines[0].removeprefix("safebox: ")


def applied(line: str, home: FakeHome) -> tuple[str, ...]:
    """The flags a "to allow the commonest (...): FIX" line names, ``~``
    expanded as the shell would: what a user pastes."""
    assert line.startswith("to allow the commonest ("), line
    fix = line.split("): ", 1)[1].split(" (", 1)[0]
    words = fix.split()
    assert words[0].startswith("--") and len(words) in (1, 2), fix
    return tuple(w.replace("~", str(home.root), 1) if w.startswith("~") else w for w in words)


def test_a_refused_read_of_a_credential_names_allow_read_and_applying_it_works(fresh_home: FakeHome) -> None:
    npmrc = fresh_home.root / ".npmrc"
    npmrc.write_text(f"//registry.npmjs.org/:_authToken={fresh_home.secret}\n")
    assert fresh_home.secret in host(["cat", str(npmrc)]).stdout  # control: readable on the host
    r, evs = run(fresh_home, ["cat", str(npmrc)])
    assert fresh_home.secret not in r.stdout
    assert [(ev["kind"], ev["path"], ev["rule"], ev["fix"]) for ev in evs] == [
        ("read", str(npmrc), "filesystem.denyRead (built-in credential list)",
         "--allow-read ~/.npmrc (or filesystem.allowRead)")]
    line = commonest(r.stderr)
    assert line == ("to allow the commonest (1 read refused by filesystem.denyRead (built-in credential list)): "
                    "--allow-read ~/.npmrc (or filesystem.allowRead)")
    # Applied, the same command reads the file and nothing is refused.
    r2, evs2 = run(fresh_home, ["cat", str(npmrc)], opts=applied(line, fresh_home))
    assert r2.returncode == 0 and fresh_home.secret in r2.stdout, r2.stderr
    assert evs2 == [] and refusal_lines(r2.stderr) == [], r2.stderr


def test_a_refused_write_to_a_credential_says_it_stays_refused(fresh_home: FakeHome) -> None:
    npmrc = fresh_home.root / ".npmrc"
    npmrc.write_text("registry=https://registry.npmjs.org/\n")
    r, evs = run(fresh_home, ["sh", "-c", f"echo x >> {npmrc}"])
    assert r.returncode == 2, r.stderr  # the shell's, not safebox's 125: the command ran
    assert [(ev["kind"], ev["rule"], "fix" in ev) for ev in evs] == [
        ("write", "filesystem.denyRead (built-in credential list)", False)]
    assert commonest(r.stderr).startswith(
        "the commonest (1 write refused by filesystem.denyRead (built-in credential list)) stays refused: "), r.stderr


@pytest.mark.parametrize("mode", OBSERVED)
def test_a_refused_write_under_the_home_names_allow_write_and_applying_it_works(fresh_home: FakeHome,
                                                                                mode: str) -> None:
    tool = fresh_home.root / ".tool"
    tool.mkdir()
    r, evs = run(fresh_home, ["touch", str(tool / "state")], mode=mode)
    assert r.returncode == 1, r.stderr  # touch's, not safebox's 125: the command ran
    assert [ev["fix"] for ev in evs] == ["--allow-write ~/.tool"], evs
    line = commonest(r.stderr)
    assert line == "to allow the commonest (1 write refused by filesystem.allowWrite): --allow-write ~/.tool"
    r2, evs2 = run(fresh_home, ["touch", str(tool / "state")], mode=mode, opts=applied(line, fresh_home))
    assert r2.returncode == 0 and (tool / "state").exists(), r2.stderr
    assert evs2 == [] and refusal_lines(r2.stderr) == [], r2.stderr


NPM_ENV = {"npm_config_update_notifier": "false", "npm_config_fund": "false", "npm_config_audit": "false"}


def test_npm_test_without_a_preset_is_told_to_use_the_preset_and_applying_it_works(fresh_home: FakeHome) -> None:
    work = fresh_home.work
    (work / "package.json").write_text('{"name": "t", "version": "1.0.0", "scripts": {"test": "echo tested"}}\n')
    r, evs = run(fresh_home, ["npm", "test"], env=NPM_ENV)
    assert "tested" in r.stdout, r.stderr
    assert evs and all(ev["kind"] == "write" and ev["path"].startswith(f"{fresh_home.root}/.npm") for ev in evs), evs
    line = commonest(r.stderr)
    assert line.startswith("to allow the commonest ("), line
    assert line.endswith("): --preset npm (its tools then cache in a directory of the sandbox's own; "
                         "--allow-write ~/.npm would share the host's cache instead)"), line
    r2, evs2 = run(fresh_home, ["npm", "test"], env=NPM_ENV, opts=applied(line, fresh_home))
    assert r2.returncode == 0 and "tested" in r2.stdout, r2.stderr
    assert evs2 == [] and refusal_lines(r2.stderr) == [], r2.stderr
    # The other way the line names works too.
    (fresh_home.root / ".npm").mkdir(exist_ok=True)
    r3, evs3 = run(fresh_home, ["npm", "test"], env=NPM_ENV, opts=("--allow-write", str(fresh_home.root / ".npm")))
    assert r3.returncode == 0 and evs3 == [] and refusal_lines(r3.stderr) == [], r3.stderr


def test_a_write_into_the_hosts_cache_under_its_preset_says_it_stays_refused(fresh_home: FakeHome) -> None:
    (fresh_home.root / ".npm").mkdir()
    r, evs = run(fresh_home, ["touch", str(fresh_home.root / ".npm" / "x")], opts=("--preset", "npm"))
    assert r.returncode == 1, r.stderr  # touch's, not safebox's 125: the command ran
    assert [(ev["rule"], "fix" in ev) for ev in evs] == [("preset cache", False)], evs
    assert commonest(r.stderr) == (
        "the commonest (1 write refused by preset cache) stays refused: the host's own cache ~/.npm stays "
        "read-only while the npm preset is on; the tools write the sandbox's cache instead ($npm_config_cache "
        "names it)")


# -------------------------------------------------------- PATH lookups


@pytest.mark.parametrize("mode", OBSERVED)
def test_a_path_lookup_of_a_missing_file_in_a_hidden_dir_is_no_refused_exec(fresh_home: FakeHome,
                                                                            mode: str) -> None:
    hidden = fresh_home.root / "hidden-bin"
    hidden.mkdir()
    tool = hidden / "realtool"
    tool.write_text("#!/bin/sh\necho hi\n")
    tool.chmod(0o755)
    path = f"{hidden}:/usr/bin:/bin"
    # env's execvp tries hidden-bin/sh first: there is none on the host.
    assert host(["env", f"PATH={path}", "sh", "-c", "echo ok"]).stdout == "ok\n"  # control
    r, evs = run(fresh_home, ["env", f"PATH={path}", "sh", "-c", "echo ok"], mode=mode,
                 opts=("--deny-read", str(hidden)))
    assert r.returncode == 0 and r.stdout == "ok\n", r.stderr
    assert evs == [] and refusal_lines(r.stderr) == [], r.stderr
    # Control: the lookup of a program that is there on the host, hidden,
    # is a refused exec.
    r, evs = run(fresh_home, ["env", f"PATH={path}", "realtool"], mode=mode, opts=("--deny-read", str(hidden)))
    # env's own status for the exec's errno (126: found, cannot be run;
    # 127: not found), never safebox's 125: a run that failed to start
    # refused nothing, and its missing event is no lost refusal.
    assert r.returncode == (127 if mode == BOTH else 126), r.stderr
    assert [(ev["kind"], ev["path"], ev["errno"]) for ev in evs] == [
        ("exec", str(tool), "ENOENT" if mode == BOTH else "EACCES")], evs
    assert "1 exec (~/hidden-bin/realtool)" in r.stderr


def test_a_work_dir_in_pythons_installation_is_not_blamed_on_pythonpath(fresh_home: FakeHome) -> None:
    # /usr/lib as the work dir: a write root inside the interpreter's
    # installation. PYTHONPATH is unset and has nothing to do with it (the
    # safebox script runs Python with -I), so the hint must not name it.
    prefix = os.path.realpath(sys.base_prefix)
    inside = Path(prefix) / "lib"
    assert "PYTHONPATH" not in fresh_home.env()
    r = fresh_home.run(["true"], cwd=inside)
    assert r.returncode == 125 and "PYTHONPATH" not in r.stderr, r.stderr
    assert (f"hint: {prefix} is Python's own installation: run safebox from a directory outside it (the work dir "
            f"is a write root), or take {inside} off filesystem.allowWrite") in r.stderr.splitlines(), r.stderr
    # Applied: from a directory outside it, the same command runs.
    r = fresh_home.run(["true"], cwd=fresh_home.work)
    assert r.returncode == 0 and r.stderr == "", r.stderr


# ------------------------------------------------------- connects by protocol

CONNECTS = r"""
import socket, sys
for kind, host, port in (("udp", "127.0.0.1", 9), ("udp", "127.0.0.53", 53), ("udp", "192.0.2.53", 53),
                         ("tcp", "192.0.2.53", 53)):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM if kind == "udp" else socket.SOCK_STREAM)
    try:
        s.connect((host, port))
        print(kind, host, port, 0)
    except OSError as e:
        print(kind, host, port, e.errno)
"""


@pytest.mark.needs_landlock(4)
def test_a_udp_connect_is_reported_with_the_errno_it_got_and_not_at_all_when_it_worked(
        shared_home: FakeHome) -> None:
    # Landlock's network rules cover TCP only: a UDP connect is refused by
    # the empty network namespace alone (ENETUNREACH), and one to the
    # sandbox's own loopback works. Before, each was "refused" with EACCES.
    r, evs = run(shared_home, [PY, "-c", CONNECTS])
    assert r.stdout.splitlines() == ["udp 127.0.0.1 9 0", "udp 127.0.0.53 53 0", "udp 192.0.2.53 53 101",
                                     "tcp 192.0.2.53 53 13"], r.stderr
    got = [(ev["host"], ev["port"], ev["errno"]) for ev in evs]
    # 127.0.0.1:9 connected: no event. 127.0.0.53:53 connected too, but the
    # name lookup it starts has no resolver to answer it inside: explained,
    # with no errno. The control: TCP is refused by Landlock (EACCES).
    assert got == [("127.0.0.53", 53, None), ("192.0.2.53", 53, "ENETUNREACH"), ("192.0.2.53", 53, "EACCES")], evs
    assert "3 connections (DNS lookup via 127.0.0.53, DNS lookup via 192.0.2.53)" in r.stderr, r.stderr
