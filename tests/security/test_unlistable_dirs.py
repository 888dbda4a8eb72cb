"""A directory the scan cannot list is never treated as harmless (issue 22,
review finding 2).

The review's attack, as an unprivileged user: run 1 does ``chmod 0300 .``;
in run 2 ripgrep could not list the work tree, safebox took the EACCES as
harmless, found no protected file, and the command did ``chmod 755 .`` and
wrote ``.git/hooks/pre-commit``, which the host's next ``git commit`` runs.
The same with a subdirectory (a nested repository).

Now a write root that cannot be listed is refused with the fix (exit 125),
and an unlistable directory inside one is read-only for the whole run: under
bubblewrap a read-only bind, so even ``chmod`` fails with EROFS; on a
helper-only host it is out of Landlock's write grant.

Root with ``CAP_DAC_READ_SEARCH`` lists any directory, so the scan sees
through the mode and the protection holds as before (that is asserted too);
a root without it (a container that drops the DAC capabilities) is what an
unprivileged user is, and is run here through ``setpriv``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from sbx import (
    BOTH,
    BWRAP_ONLY,
    FOREIGN_NL_PRIVATE,
    FOREIGN_PARENT,
    FOREIGN_UID,
    HELPER_ONLY,
    FakeHome,
    foreign_private_dir,
    missing,
)

NO_DAC = "root-without-dac"


def _dac_bypassed() -> bool:
    """Whether this process lists any directory whatever its mode (CAP_DAC_READ_SEARCH, bit 2)."""
    with open("/proc/self/status") as f:
        eff = next(int(ln.split()[1], 16) for ln in f if ln.startswith("CapEff:"))
    return bool(eff & (1 << 2))


def _whos() -> list[str]:
    """As ourselves; as root also without the DAC capabilities."""
    return ["self", NO_DAC] if os.geteuid() == 0 else ["self"]


def _run(home: FakeHome, script: str, *, who: str, mode: str = BOTH) -> subprocess.CompletedProcess[str]:
    argv: Sequence[str] = home.argv(["sh", "-c", script], mode=mode)
    if who == NO_DAC:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            missing("setpriv (util-linux) to run safebox as a root without the DAC capabilities")
        drop = "-dac_override,-dac_read_search"
        argv = [setpriv, f"--inh-caps={drop}", f"--bounding-set={drop}", *argv]
    return subprocess.run(list(argv), cwd=home.work, env=home.env(), capture_output=True, text=True, timeout=60,
                          check=False, stdin=subprocess.DEVNULL)


def _blind(who: str) -> bool:
    """Whether safebox, run as ``who``, cannot list a 0300 directory."""
    return who == NO_DAC or not _dac_bypassed()


def _nested_repo(home: FakeHome) -> Path:
    sub = home.work / "sub"
    for d in ("hooks", "objects", "refs"):
        (sub / ".git" / d).mkdir(parents=True)
    (sub / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    return sub


@pytest.mark.needs_bwrap
@pytest.mark.parametrize("who", _whos())
def test_a_work_dir_made_unlistable_in_one_run_is_refused_in_the_next_with_the_fix(fresh_home: FakeHome,
                                                                                  who: str) -> None:
    work, hook = fresh_home.work, fresh_home.work / ".git" / "hooks" / "pre-commit"
    try:
        first = _run(fresh_home, "chmod 0300 .", who=who)
        assert first.returncode == 0, first.stderr
        second = _run(fresh_home, "chmod 755 . && echo evil > .git/hooks/pre-commit", who=who)
        assert not hook.exists(), second.stderr
        if _blind(who):
            assert second.returncode == 125, second.stderr
            assert second.stderr.splitlines() == [
                f"safebox: write root {work} cannot be listed (mode 0300): safebox cannot find the protected files "
                "in it (.git/hooks, .bashrc, ...), and a command could make it listable again and write them",
                f"hint: chmod u+rx {work}"], second.stderr
        else:  # root lists it anyway: the hooks were found and are read-only
            assert ".git/hooks/pre-commit: Read-only file system" in second.stderr, second.stderr
    finally:
        work.chmod(0o755)
    # Control: the fix the refusal names works, and the hooks are protected as before.
    work.chmod(0o300)
    subprocess.run(["chmod", "u+rx", str(work)], check=True)
    third = _run(fresh_home, "echo ok > notes.txt; echo evil > .git/hooks/pre-commit", who=who)
    assert (work / "notes.txt").read_text() == "ok\n", third.stderr
    assert ".git/hooks/pre-commit: Read-only file system" in third.stderr, third.stderr
    assert not hook.exists()


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
@pytest.mark.parametrize("who", _whos())
def test_a_subdirectory_made_unlistable_stays_read_only_so_it_cannot_be_reopened_and_written(
        fresh_home: FakeHome, mode: str, who: str) -> None:
    sub = _nested_repo(fresh_home)
    hook = sub / ".git" / "hooks" / "pre-commit"
    try:
        first = _run(fresh_home, "chmod 0300 sub", who=who, mode=mode)
        assert first.returncode == 0, first.stderr
        second = _run(fresh_home, "echo ok > notes.txt; chmod 755 sub; echo evil > sub/.git/hooks/pre-commit",
                      who=who, mode=mode)
        assert (fresh_home.work / "notes.txt").read_text() == "ok\n", second.stderr  # control: the run goes on
        assert not hook.exists(), second.stderr
        assert "sub/.git/hooks/pre-commit: Read-only file system" in second.stderr, second.stderr
        if _blind(who):
            assert "chmod: changing permissions of 'sub': Read-only file system" in second.stderr, second.stderr
            assert (f"safebox: {sub} cannot be listed (mode 0300): safebox cannot find the protected files in it "
                    "(.git/hooks, .bashrc, ...), and a command could make it listable again and write them: it is "
                    f"read-only inside for this run; to write there: chmod u+rx {sub}") in second.stderr.splitlines()
            assert sub.stat().st_mode & 0o777 == 0o300
        else:  # root lists it: the chmod works, the hooks are found and read-only as ever
            assert "cannot be listed" not in second.stderr, second.stderr
    finally:
        sub.chmod(0o755)
    # Control: once listable (the fix named), the directory is writable again; its hooks are not.
    third = _run(fresh_home, "echo ok > sub/notes.txt; echo evil > sub/.git/hooks/pre-commit", who=who, mode=mode)
    assert (sub / "notes.txt").read_text() == "ok\n", third.stderr
    assert "cannot be listed" not in third.stderr
    assert not hook.exists()


@pytest.mark.needs_landlock(1)
@pytest.mark.parametrize("who", _whos())
def test_without_bubblewrap_an_unlistable_subdirectory_is_out_of_landlocks_write_grant(fresh_home: FakeHome,
                                                                                       who: str) -> None:
    sub = fresh_home.work / "sub"
    sub.mkdir()
    sub.chmod(0o300)
    try:
        r = _run(fresh_home, "echo ok > src/notes.txt; chmod 755 sub; echo evil > sub/planted", who=who,
                 mode=HELPER_ONLY)
        assert (fresh_home.work / "src" / "notes.txt").read_text() == "ok\n", r.stderr  # control
        if _blind(who):
            # Landlock has no right for chmod; the write beneath is what it refuses.
            assert "sh: 1: cannot create sub/planted: Permission denied" in r.stderr, r.stderr
            assert not (sub / "planted").exists()
        else:
            assert (sub / "planted").read_text() == "evil\n"  # root lists it: an ordinary directory
    finally:
        sub.chmod(0o755)


def test_a_big_policys_mounter_keeps_an_unlistable_subdirectory_read_only_too(fresh_home: FakeHome) -> None:
    """Past the big-policy threshold the read-only binds are the mounter's
    (builder/bulk.py): the unlistable directory is one of them."""
    sub = _nested_repo(fresh_home)
    opts: list[str] = []
    for i in range(70):
        (fresh_home.work / "frozen" / f"d{i}").mkdir(parents=True)
        opts += ["--deny-write", f"frozen/d{i}"]
    sub.chmod(0o300)
    try:
        plan = fresh_home.run(["true"], opts=[*opts, "--dry-run"])
        assert "before the command starts" in plan.stdout, plan.stdout  # the mounter makes them
        r = fresh_home.run(["sh", "-c", "chmod 755 sub; echo evil > sub/.git/hooks/pre-commit; echo ok > notes.txt"],
                           opts=opts)
        assert (fresh_home.work / "notes.txt").read_text() == "ok\n", r.stderr  # control
        assert not (sub / ".git" / "hooks" / "pre-commit").exists(), r.stderr
        if _blind("self"):
            assert f"read-only {sub}\n" in plan.stdout, plan.stdout
            assert "chmod: changing permissions of 'sub': Read-only file system" in r.stderr, r.stderr
    finally:
        sub.chmod(0o755)


_WALK_ERRORS = """
import json, subprocess, sys
from safebox.builder.prescan import rg_argv
from safebox.builder.walks import _only_harmless_walk_errors
out = {}
for name, root in zip(("foreign", "ours"), sys.argv[1:]):
    r = subprocess.run(rg_argv("rg", root, 6), capture_output=True)
    out[name] = [r.returncode, r.stderr.decode(), _only_harmless_walk_errors(r.stderr, frozenset())]
print(json.dumps(out))
"""


@pytest.mark.parametrize("who", [w for w in _whos() if _blind(w)])
def test_another_users_directory_ripgrep_cannot_list_is_harmless_even_when_find_never_saw_it(tmp_path: Path,
                                                                                            who: str) -> None:
    """ciB of turn 7: a helper-only run as the test user, /tmp a write root,
    failed (125, "ripgrep failed under /tmp ... Permission denied") because
    root's tests made private directories in /tmp between find's walk (which
    skips another user's directory it cannot list) and ripgrep's. Such a
    directory is checked when ripgrep names it; one of ours is still refused
    (the review's attack: a command reopens a directory it owns)."""
    private = foreign_private_dir()
    ours = tmp_path / "ours"
    (ours / "blind").mkdir(parents=True)
    (ours / "blind").chmod(0o300)
    argv = [sys.executable, "-c", _WALK_ERRORS, str(FOREIGN_PARENT), str(ours)]
    if who == NO_DAC:
        drop = "-dac_override,-dac_read_search"
        argv = [shutil.which("setpriv") or "setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}", *argv]
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    finally:
        (ours / "blind").chmod(0o755)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    rc, stderr, harmless = out["foreign"]
    assert (rc, f"{private}: Permission denied (os error 13)" in stderr, harmless) == (2, True, True), out
    # Control: a directory of ours that ripgrep cannot list, unknown to find, is refused as before.
    rc, stderr, harmless = out["ours"]
    assert (rc, f"{ours / 'blind'}: Permission denied (os error 13)" in stderr, harmless) == (2, True, False), out


_WALK_AGAIN = """
import json, os, shutil, sys
from safebox._record import Spawned
from safebox.builder import walks
from safebox.builder.prescan import rg_argv
from safebox.errors import BuildError
root, d, mode = sys.argv[1], sys.argv[2], int(sys.argv[3], 8)
out = []
for again in (walks._AGAIN_MAX, 0):
    walks._AGAIN_MAX = again
    os.chmod(d, mode)
    p = Spawned(rg_argv(shutil.which("rg"), root, 6))
    rc, _, err = p.collect()
    os.chmod(d, 0o755)  # listable now: what mkdtemp, then chmod 755, does in a shared /tmp
    try:
        got = walks._rg_finish(p, root, frozenset(), roots=(root,), depth=6)
    except BuildError as e:
        got = str(e)
    out.append([rc, err.decode(), got])
print(json.dumps(out))
"""


@pytest.mark.parametrize("who", [w for w in _whos() if _blind(w)])
def test_a_directory_ripgrep_was_refused_that_can_be_listed_now_is_walked_again(tmp_path: Path, who: str) -> None:
    """ciI of turn 7: a helper-only run as the test user, /tmp a write root,
    failed (125, "ripgrep failed under /tmp ... Permission denied") on a
    directory root's test had just made with mkdtemp (0700) and then opened
    (chmod 755): refused by ripgrep, listable when looked at. Such a
    directory is walked again as it is now, and a repository in it is found;
    past the bound on walks again, the start is refused with the line.

    As root without the DAC capabilities the directory is another user's
    (the case of ciI; CAP_FOWNER opens it); as the test user it is ours."""
    theirs = tmp_path / "theirs"
    for sub in ("hooks", "objects", "refs"):
        (theirs / ".git" / sub).mkdir(parents=True)
    (theirs / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    mode = "0300"
    if who == NO_DAC:
        for dirpath, _, files in os.walk(theirs):
            for name in [dirpath, *(os.path.join(dirpath, f) for f in files)]:
                os.chown(name, FOREIGN_UID, FOREIGN_UID)
        mode = "0700"
    argv = [sys.executable, "-c", _WALK_AGAIN, str(tmp_path), str(theirs), mode]
    if who == NO_DAC:
        drop = "-dac_override,-dac_read_search"
        argv = [shutil.which("setpriv") or "setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}", *argv]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    (rc, stderr, found), (rc0, _, refused) = json.loads(r.stdout)
    # Control: ripgrep, as this user, was refused the directory.
    assert (rc, f"{theirs}: Permission denied (os error 13)" in stderr) == (2, True), stderr
    assert found == [str(theirs / ".git")], found
    assert (rc0, refused) == (2, f"ripgrep failed under {tmp_path} (exit 2): {theirs}: IO error for operation on "
                                   f"{theirs}: Permission denied (os error 13)"), refused


_WALK_ROOT = """
import json, sys
from safebox.builder.protected import protected_paths
from safebox.builder.walks import RootScan
from safebox.errors import BuildError
root = sys.argv[1]
try:
    prot = protected_paths({root: RootScan(rg="/usr/bin/rg", find="/usr/bin/find", root=root, depth=6)}, [root], root)
    print(json.dumps(["ok", prot.unlistable]))
except BuildError as e:
    print(json.dumps(["refused", str(e)]))
"""


@pytest.mark.parametrize("who", [w for w in _whos() if _blind(w)])
def test_another_users_private_directory_whose_name_holds_a_newline_fails_no_start(who: str) -> None:
    """ripgrep prints names raw: its refusal of "pri\\nvate" is two lines,
    neither of them the directory find named (NUL-ended) as another user's,
    and every start whose write root held it failed (125, "ripgrep failed").
    Its refusal is now taken out whole by the exact name find gave."""
    private = foreign_private_dir(FOREIGN_NL_PRIVATE)
    parent = str(private.parent)
    as_who: list[str] = []
    if who == NO_DAC:
        drop = "-dac_override,-dac_read_search"
        as_who = [shutil.which("setpriv") or "setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}"]
    r = subprocess.run([*as_who, sys.executable, "-c", _WALK_ROOT, parent], capture_output=True, text=True,
                       timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == ["ok", []], r.stdout
    # Control: ripgrep, as this user, is refused it, in two lines.
    rg = subprocess.run([*as_who, "/usr/bin/rg", "--files", parent], capture_output=True, timeout=60, check=False)
    assert (rg.returncode, rg.stderr) == (2, f"{private}: Permission denied (os error 13)\n".encode()), rg


@pytest.mark.parametrize("who", [w for w in _whos() if _blind(w)])
def test_a_readable_unsearchable_directory_whose_name_holds_a_newline_fails_no_start(tmp_path: Path,
                                                                                   who: str) -> None:
    """A directory find reports as unlistable that can be read but not
    searched (another user's 0744 in a shared /tmp, or ours 0644): ripgrep
    reads its names and is refused each directory in it, by a path that
    holds the newline of its name. Those refusals were cut into lines none
    of which is beneath the directory find named, and every start whose
    write root held it failed (125, "ripgrep failed under ROOT (exit 2):
    ROOT/pri", a path that is not there): 78b807d took out the refusal of
    the directory itself only (found in review)."""
    private = tmp_path / "pri\nvate"
    (private / "child").mkdir(parents=True)
    mode = 0o644  # ours: find reports it (!), and it is read-only for the run
    if who == NO_DAC:
        for p in (private / "child", private):
            os.chown(p, FOREIGN_UID, FOREIGN_UID)
        mode = 0o744  # another user's (?), skipped
    private.chmod(mode)
    as_who: list[str] = []
    if who == NO_DAC:
        drop = "-dac_override,-dac_read_search"
        as_who = [shutil.which("setpriv") or "setpriv", f"--inh-caps={drop}", f"--bounding-set={drop}"]
    try:
        r = subprocess.run([*as_who, sys.executable, "-c", _WALK_ROOT, str(tmp_path)], capture_output=True,
                           text=True, timeout=60, check=False)
        # Control: ripgrep, as this user, is refused the directory in it.
        rg = subprocess.run([*as_who, "/usr/bin/rg", "--files", "-j1", str(tmp_path)], capture_output=True,
                            timeout=60, check=False)
    finally:
        private.chmod(0o755)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == ["ok", [] if who == NO_DAC else [str(private)]], r.stdout
    assert (rg.returncode, os.fsencode(private / "child") + b": IO error for operation on " in rg.stderr) == (2, True), rg
