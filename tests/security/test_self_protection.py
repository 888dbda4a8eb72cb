"""safebox's own state (policy and seccomp caches, run dirs) and installation
stay read-only inside, even beneath a write root: a command that could write
them would control the next run."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sbx import BOTH, HELPER_ONLY, SAFEBOX, FakeHome, host

SAFEBOX_BIN = Path(SAFEBOX)

EXPECTED = {BOTH: "Read-only file system", HELPER_ONLY: "Permission denied"}


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_the_state_dir_is_read_only_when_home_is_the_write_root(fresh_home: FakeHome, mode: str) -> None:
    fresh_home.run(["true"], mode=mode, cwd=fresh_home.root)  # creates ~/.cache/safebox and its caches
    cache = fresh_home.root / ".cache" / "safebox" / "cache"
    assert cache.is_dir()
    poison = cache / "planted"
    r = fresh_home.run(["sh", "-c", f"echo x > {poison}"], mode=mode, cwd=fresh_home.root)
    assert r.returncode != 0 and EXPECTED[mode] in r.stderr, r.stderr
    assert not poison.exists()
    # Control: the same write beside it works where the policy grants it. (On a
    # helper-only host ~/.cache itself, an ancestor of the state dir, refuses
    # new entries: Landlock cannot grant a directory without its subtree.
    # Under bubblewrap all of ~/.cache is read-only with the work dir at $HOME,
    # a dot entry of it, unless a write root is named inside: issue 22.)
    beside = fresh_home.root / ".cache" / "other"
    beside.mkdir()
    ok = fresh_home.run(["sh", "-c", f"echo x > {beside}/f"], mode=mode, cwd=fresh_home.root,
                        opts=["--allow-write", str(beside)])
    assert ok.returncode == 0, ok.stderr
    # And without safebox the state dir is writable by its owner.
    assert host(["sh", "-c", f"echo x > {poison}"]).returncode == 0


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_a_cached_policy_cannot_be_replaced_from_inside(fresh_home: FakeHome, mode: str) -> None:
    fresh_home.run(["true"], mode=mode, cwd=fresh_home.root)
    cache = fresh_home.root / ".cache" / "safebox" / "cache"
    entries = sorted(p for p in cache.iterdir() if p.name.startswith("policy-"))
    assert entries
    r = fresh_home.run(["sh", "-c", f"rm -f {entries[0]}"], mode=mode, cwd=fresh_home.root)
    assert entries[0].exists(), r.stderr


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_the_policy_file_given_with_p_is_read_only_inside_the_work_dir(fresh_home: FakeHome, mode: str) -> None:
    """A --policy file inside a write root would otherwise be rewritten for
    the next run (allowWrite "/", a domain to send the credentials to)."""
    pol = fresh_home.work / "mypolicy.json"
    pol.write_text('{"filesystem": {"denyWrite": []}}\n')
    # An existing file: on a helper-only host the work root, which now holds
    # an excluded file, can get no create right (Landlock grants subtrees).
    beside = fresh_home.work / "beside.json"
    beside.write_text("{}\n")
    attack = 'echo \'{"filesystem": {"allowWrite": ["/"]}}\' > "$1"'
    r = fresh_home.run(["sh", "-c", attack, "sh", str(pol)], mode=mode, opts=["-p", str(pol)])
    assert r.returncode != 0 and EXPECTED[mode] in r.stderr, r.stderr
    assert pol.read_text() == '{"filesystem": {"denyWrite": []}}\n'
    # Control: the same write to a file beside it, and to the policy file on the host.
    ok = fresh_home.run(["sh", "-c", attack, "sh", str(beside)], mode=mode, opts=["-p", str(pol)])
    assert ok.returncode == 0, ok.stderr
    assert host(["sh", "-c", attack, "sh", str(pol)]).returncode == 0


def _launcher_with_import_path(where: Path, lib: Path) -> Path:
    """A copy of build.py's launcher that puts ``lib`` first on sys.path, as
    a pip-made script with PYTHONPATH, or a `pip --user` site, would."""
    real = (SAFEBOX_BIN).read_text().splitlines()
    i = real.index("import sys") + 1
    script = where / "safebox-with-path"
    script.write_text("\n".join([*real[:i], f"sys.path.insert(0, {str(lib)!r})", *real[i:]]) + "\n")
    script.chmod(0o755)
    return script


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_the_interpreters_import_path_is_read_only_inside_a_write_root(fresh_home: FakeHome, tmp_path: Path,
                                                                       mode: str) -> None:
    """safebox imports from every sys.path entry: code planted there runs in
    safebox at its next start, outside any sandbox."""
    lib = fresh_home.work / "pylib"
    lib.mkdir()
    planted = lib / "sitecustomize.py"
    launcher = _launcher_with_import_path(tmp_path, lib)
    argv = [str(launcher), "exec", *(["--without", "bwrap"] if mode == HELPER_ONLY else []),
            "--", "sh", "-c", f"echo 'import os' > {planted}"]
    r = subprocess.run(argv, cwd=fresh_home.work, env=fresh_home.env(), capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and EXPECTED[mode] in r.stderr, r.stderr
    assert not planted.exists()
    # Control: without it on the import path, the same directory is writable.
    ok = fresh_home.run(["sh", "-c", f"echo 'import os' > {planted}"], mode=mode)
    assert ok.returncode == 0 and planted.exists(), ok.stderr


def test_an_import_path_that_holds_a_write_root_is_a_refusal(fresh_home: FakeHome, tmp_path: Path) -> None:
    """PYTHONPATH=. in the work tree (or `python -m safebox` from it): the
    command could plant a `safebox` package there for the next start, and
    keeping the work tree read-only would take the write root away. safebox
    refuses, and the command never runs (found in review)."""
    marker = fresh_home.work / "ran"
    launcher = _launcher_with_import_path(tmp_path, fresh_home.work)
    r = subprocess.run([str(launcher), "exec", "--", "touch", str(marker)], cwd=fresh_home.work,
                       env=fresh_home.env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 125 and not marker.exists()
    assert (f"safebox: Python's import path has {fresh_home.work}, which holds the write root "
            f"{fresh_home.work}") in r.stderr, r.stderr


def _launcher_with_prefix(where: Path, prefix: Path) -> Path:
    """A copy of build.py's launcher whose interpreter reports ``prefix`` as
    its base installation, as a Python installed in /usr does for a work dir
    in /usr/src/app (the sandbox itself is real; only the reported prefix is
    set)."""
    real = (SAFEBOX_BIN).read_text().splitlines()
    i = real.index("import sys") + 1
    script = where / "safebox-with-prefix"
    script.write_text("\n".join([*real[:i], f"sys.base_prefix = sys.base_exec_prefix = {str(prefix)!r}",
                                  *real[i:]]) + "\n")
    script.chmod(0o755)
    return script


def test_a_work_dir_beneath_the_interpreters_prefix_runs_and_the_prefix_itself_is_refused(
        fresh_home: FakeHome, tmp_path: Path) -> None:
    """A container's /usr/src/app under a Python installed in /usr: the
    prefix holds the work dir, but nothing of Python lives there (bin/ and
    lib*/ do, and the sys.path entries are checked on their own). Refused
    before: "Python's import path has /usr, which holds the write root"."""
    marker = fresh_home.work / "ran"
    launcher = _launcher_with_prefix(tmp_path, fresh_home.work.parent)
    r = subprocess.run([str(launcher), "exec", "--", "touch", str(marker)], cwd=fresh_home.work,
                       env=fresh_home.env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and marker.exists(), r.stderr
    marker.unlink()
    # The write root is the prefix itself (or its lib/): refused as before.
    launcher = _launcher_with_prefix(tmp_path, fresh_home.work)
    r = subprocess.run([str(launcher), "exec", "--", "touch", str(marker)], cwd=fresh_home.work,
                       env=fresh_home.env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 125 and not marker.exists()
    assert (f"safebox: Python's import path has {fresh_home.work}, which holds the write root "
            f"{fresh_home.work}") in r.stderr, r.stderr


def test_the_launcher_ignores_pythonpath_so_a_planted_safebox_package_never_runs(fresh_home: FakeHome) -> None:
    """build.py's launcher runs Python with -I: a `safebox` package planted
    in the work tree is not imported even with PYTHONPATH pointing there.
    Control: the same interpreter without -I imports the planted one."""
    pkg = fresh_home.work / "safebox"
    pkg.mkdir()
    marker = fresh_home.root / "planted-code-ran"
    (pkg / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    r = fresh_home.run(["true"], env={"PYTHONPATH": str(fresh_home.work)})
    assert r.returncode == 0, r.stderr
    assert not marker.exists()
    control = subprocess.run([str(SAFEBOX_BIN.parent / "python"), "-c", "import safebox"], cwd=fresh_home.root,
                             env={**fresh_home.env(), "PYTHONPATH": str(fresh_home.work)}, timeout=60)
    assert control.returncode == 0 and marker.exists()


@pytest.mark.parametrize("tool", ["rg", "find", "bwrap", "socat"])
def test_a_tool_planted_on_path_inside_the_work_tree_never_runs(fresh_home: FakeHome, tool: str) -> None:
    """An activated project venv puts proj/.venv/bin first on PATH, and the
    work tree is writable inside: a command plants .venv/bin/rg, and safebox
    would run it on the host at the next start (found in review). safebox
    takes its tools only from PATH entries outside the write roots."""
    bindir = fresh_home.work / ".venv" / "bin"
    marker = fresh_home.root / f"planted-{tool}-ran"
    plant = (f"mkdir -p {bindir} && printf '#!/bin/sh\\ntouch {marker}\\nexec /usr/bin/{tool} \"$@\"\\n' "
             f"> {bindir}/{tool} && chmod +x {bindir}/{tool}")
    assert fresh_home.run(["sh", "-c", plant]).returncode == 0
    path = f"{bindir}:{fresh_home.env()['PATH']}"
    policy = fresh_home.root / "net.json"
    policy.write_text('{"network": {"allowedDomains": ["localhost"], "allowLocalBinding": true}}')
    # Control: with that PATH, the planted tool is the one `which` finds, and it runs.
    assert host(["sh", "-c", f"command -v {tool}"], env={"PATH": path}).stdout.strip() == f"{bindir}/{tool}"
    r = fresh_home.run(["true"], env={"PATH": path}, opts=["-p", str(policy), "--publish", "8080"]
                       if tool == "socat" else [])
    assert r.returncode == 0, r.stderr  # with the tools from /usr/bin
    assert not marker.exists(), r.stderr


def test_a_tool_found_only_inside_a_write_root_is_a_refusal(fresh_home: FakeHome) -> None:
    bindir = fresh_home.work / "tools"
    bindir.mkdir()
    for tool in ("bwrap", "rg", "find", "socat", "sh", "true"):
        (bindir / tool).symlink_to(f"/usr/bin/{tool}")
    marker = fresh_home.work / "ran"
    r = fresh_home.run(["touch", str(marker)], env={"PATH": str(bindir)})
    assert r.returncode == 125 and not marker.exists()
    assert f"safebox: bwrap is on PATH only at {bindir}/bwrap, inside a write root" in r.stderr, r.stderr


def test_a_tool_in_the_home_bin_is_fine_when_home_is_not_a_write_root(fresh_home: FakeHome) -> None:
    """Found re-reading the change: ~/.cargo/bin/rg first on PATH and the walk
    begun early with /usr/bin/rg (the early walk avoids $HOME) made safebox
    refuse to run. Only a tool inside a write root is refused (control below)."""
    bindir = fresh_home.root / "bin"
    bindir.mkdir()
    (bindir / "rg").symlink_to("/usr/bin/rg")
    path = f"{bindir}:{fresh_home.env()['PATH']}"
    r = fresh_home.run(["true"], env={"PATH": path})
    assert r.returncode == 0, r.stderr
    # Control: with $HOME a write root, that same PATH entry is not used.
    marker = fresh_home.work / "ran"
    r2 = fresh_home.run(["touch", str(marker)], env={"PATH": path}, opts=["--allow-write", str(fresh_home.root)])
    assert r2.returncode == 0 and marker.exists(), r2.stderr
