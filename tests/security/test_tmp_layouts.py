"""Denied paths stay unreadable whatever the layout: work dir, ``$HOME``, deny
paths and write roots each in or out of ``/tmp``, nested either way.

Inside bubblewrap ``/tmp`` is a private tmpfs, so a host path under ``/tmp``
is absent unless a bind brings it back, as a work dir or ``$HOME`` under
``/tmp`` does (agent harnesses put task worktrees there; CI containers often
set ``HOME=/tmp``). Issue 11 item 1: the masks under ``/tmp`` were skipped as
"already absent" even beneath such a bind, and the denied files were readable.

Unlike the other security tests, these deliberately put trees under the
host's ``/tmp``; every one is removed afterwards. Each read is done by one
probe inside the sandbox that prints the errno of every path it opens, so
one run checks a whole layout, with its controls (a non-denied neighbour of
every denied path, read in the same run, and every denied path read on the
host first).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sbx import BOTH, BWRAP_ONLY, EACCES, ENOENT, EROFS, HELPER_ONLY, MODE_FLAGS, PATH, SAFEBOX, token

ALL_MODES = [BOTH, BWRAP_ONLY, HELPER_ONLY]
MOUNT_MODES = [BOTH, BWRAP_ONLY]

# Reads every path given and prints "errno content" per line (0 on success).
READER = r"""
import sys
for p in sys.argv[1:]:
    try:
        with open(p, "rb") as f:
            print(0, f.read().decode().strip() or "-")
    except OSError as e:
        print(e.errno, "-")
"""


def read_inside(argv_opts: list[str], paths: list[str], *, mode: str, cwd: str, home: str) -> list[tuple[int, str]]:
    """Read ``paths`` in one sandboxed run; (errno, content) for each."""
    env = {"PATH": PATH, "HOME": home, "LC_ALL": "C", "LANG": "C"}
    r = subprocess.run([str(SAFEBOX), "exec", *MODE_FLAGS[mode], *argv_opts, "--",
                        "python3", "-I", "-c", READER, *paths],
                       cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False,
                       stdin=subprocess.DEVNULL)
    assert r.returncode == 0, r.stderr
    out = [(int(a), b) for a, b in (line.split(" ", 1) for line in r.stdout.splitlines())]
    assert len(out) == len(paths), r.stdout + r.stderr
    return out


@pytest.fixture
def tmp_tree() -> Iterator[Path]:
    """A fresh directory under the host's /tmp (removed afterwards)."""
    d = Path(tempfile.mkdtemp(prefix="safebox-layout-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


def write_secret(path: Path) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    secret = f"SECRET-{token()}"
    path.write_text(secret + "\n")
    return secret


# ------------------------------------------------------------------ the reproducers of issue 11


@pytest.mark.parametrize("mode", ALL_MODES)
def test_a_denied_file_in_a_work_dir_under_tmp_is_unreadable(tmp_tree: Path, mode: str) -> None:
    work = tmp_tree / "task"
    secret = write_secret(work / "s")
    neighbour = write_secret(work / "n")
    assert (work / "s").read_text().strip() == secret  # control: readable on the host

    (s, _), (n, content) = read_inside(["--deny-read", "s"], ["s", "n"], mode=mode, cwd=str(work),
                                       home=str(tmp_tree))
    # A denied file is covered by /dev/null bound nodev (EACCES); the helper
    # alone leaves it outside every Landlock grant (EACCES).
    assert s == EACCES
    assert (n, content) == (0, neighbour)  # control: the rest of the work dir is readable


@pytest.mark.parametrize("mode", ALL_MODES)
def test_credentials_in_a_home_under_tmp_are_unreadable_when_the_work_dir_is_home(tmp_tree: Path,
                                                                                  mode: str) -> None:
    home = tmp_tree / "h"
    key = write_secret(home / ".ssh" / "id_ed25519")
    write_secret(home / ".git-credentials")
    plain = write_secret(home / "notes.txt")
    assert (home / ".ssh" / "id_ed25519").read_text().strip() == key

    (k, _), (c, _), (n, content) = read_inside(
        [], [str(home / ".ssh" / "id_ed25519"), str(home / ".git-credentials"), str(home / "notes.txt")],
        mode=mode, cwd=str(home), home=str(home))
    # ~/.ssh is a denied directory: an empty tmpfs under bubblewrap (ENOENT);
    # ~/.git-credentials a denied file (EACCES); Landlock alone: EACCES.
    assert k == (EACCES if mode == HELPER_ONLY else ENOENT)
    assert c == EACCES
    assert (n, content) == (0, plain)


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_bashrc_in_a_home_under_tmp_stays_read_only_when_the_work_dir_is_home(tmp_tree: Path,
                                                                             mode: str) -> None:
    """A guard for the protected names in the same layout (they were kept)."""
    home = tmp_tree / "h"
    home.mkdir()
    (home / ".bashrc").write_text("# rc\n")
    env = {"PATH": PATH, "HOME": str(home)}
    r = subprocess.run([str(SAFEBOX), "exec", *MODE_FLAGS[mode], "--", "python3", "-I", "-c",
                        "def w(p):\n"
                        "    try:\n"
                        "        open(p, 'a').close(); return 0\n"
                        "    except OSError as e:\n"
                        "        return e.errno\n"
                        "print(w('.bashrc'), w('other'))"],
                       cwd=home, env=env, capture_output=True, text=True, timeout=60, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [str(EROFS), "0"]  # control: a new file next to it can be written
    assert (home / ".bashrc").read_text() == "# rc\n"


# ------------------------------------------------------------------ random layouts


@dataclass
class Layout:
    """Where the work dir, HOME, write roots and denied paths lie."""

    mode: str
    work: Path
    home: Path
    extra_roots: list[Path]
    # (path to read, whether it lies in a denied directory)
    denied: list[tuple[Path, bool]] = field(default_factory=list)
    deny_flags: list[str] = field(default_factory=list)
    neighbours: list[Path] = field(default_factory=list)


PLACES = ["tmp", "out"]
HOME_PLACES = ["is_work", "inside_work", "holds_work", "tmp", "out"]
ROOT_PLACES = ["inside_work", "inside_home", "holds_work", "tmp", "out"]
DENY_IN = ["work", "home", "root0", "root1", "plain_tmp", "plain_out"]

layouts = st.fixed_dictionaries({
    "mode": st.sampled_from(ALL_MODES),
    "work": st.sampled_from(PLACES),
    "home": st.sampled_from(HOME_PLACES),
    "roots": st.lists(st.sampled_from(ROOT_PLACES), max_size=2),
    "denies": st.lists(st.tuples(st.sampled_from(DENY_IN), st.booleans(), st.booleans()), min_size=1,
                       max_size=4),
})


def build_layout(spec: dict[str, object], tmp_base: Path, out_base: Path) -> Layout:
    """Create the trees that ``spec`` describes; return where everything is."""
    base = {"tmp": tmp_base, "out": out_base}
    mode = str(spec["mode"])
    home_place = str(spec["home"])
    if home_place == "holds_work":
        home = base[str(spec["work"])] / "home"
        work = home / "work"
    else:
        work = base[str(spec["work"])] / "work"
        home = {"is_work": work, "inside_work": work / "home", "tmp": tmp_base / "home",
                "out": out_base / "home"}[home_place]
    work.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    roots: list[Path] = []
    for i, place in enumerate(spec["roots"]):  # type: ignore[attr-defined]
        r = {"inside_work": work / f"root{i}", "inside_home": home / f"root{i}",
             "holds_work": work.parent, "tmp": tmp_base / f"root{i}", "out": out_base / f"root{i}"}[place]
        r.mkdir(parents=True, exist_ok=True)
        roots.append(r)
    lay = Layout(mode=mode, work=work, home=home, extra_roots=roots)
    containers = {"work": work, "home": home, "plain_tmp": tmp_base / "plain", "plain_out": out_base / "plain"}
    for i, r in enumerate(roots):
        containers[f"root{i}"] = r
    # The default credential list, laid out in HOME: masked without a flag.
    write_secret(home / ".ssh" / "id_ed25519")
    write_secret(home / ".git-credentials")
    write_secret(home / "notes.txt")
    lay.denied += [(home / ".ssh" / "id_ed25519", True), (home / ".git-credentials", False)]
    lay.neighbours.append(home / "notes.txt")
    for i, (where, is_dir, deeper) in enumerate(spec["denies"]):  # type: ignore[attr-defined]
        parent = containers.get(where, work)
        if deeper:
            parent = parent / f"sub{i}"
        name = parent / f"deny{i}"
        if is_dir:
            write_secret(name / "f")
            lay.denied.append((name / "f", True))
        else:
            write_secret(name)
            lay.denied.append((name, False))
        lay.deny_flags += ["--deny-read", str(name)]
        nb = parent / f"n{i}"
        write_secret(nb)
        lay.neighbours.append(nb)
    return lay


def visible_inside(lay: Layout, path: Path) -> bool:
    """Whether a non-denied host path is there inside: outside the private
    /tmp, or beneath a bind that brings it back (a write root)."""
    if lay.mode == HELPER_ONLY or not str(path).startswith("/tmp/"):
        return True
    roots = [lay.work, *lay.extra_roots]
    return any(path == r or r in path.parents for r in roots)


def expected_denied_errno(lay: Layout, path: Path, is_dir_mask: bool) -> int:
    if lay.mode == HELPER_ONLY:
        return EACCES  # outside every Landlock grant
    if not visible_inside(lay, path):
        return ENOENT  # under the private /tmp and not bound back: absent
    return ENOENT if is_dir_mask else EACCES  # empty tmpfs / nodev /dev/null


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(spec=layouts)
def test_every_denied_path_is_unreadable_and_its_neighbour_readable_in_any_layout(scratch: Path,
                                                                                  spec: dict[str, object]) -> None:
    tmp_base = Path(tempfile.mkdtemp(prefix="safebox-layout-", dir="/tmp"))
    out_base = Path(tempfile.mkdtemp(prefix="layout-", dir=scratch))
    try:
        for b in (tmp_base, out_base):
            b.chmod(0o755)
        lay = build_layout(spec, tmp_base, out_base)
        denied = [p for p, _ in lay.denied]
        # Control: every denied path is readable on the host.
        for p in denied:
            assert p.read_text().startswith("SECRET-")
        opts = [*lay.deny_flags]
        for r in lay.extra_roots:
            opts += ["--allow-write", str(r)]
        got = read_inside(opts, [str(p) for p in (*denied, *lay.neighbours)], mode=lay.mode,
                          cwd=str(lay.work), home=str(lay.home))
        for (p, is_dir), (err, content) in zip(lay.denied, got[:len(denied)], strict=True):
            assert content == "-", f"{p} was read inside: {lay}"
            assert err == expected_denied_errno(lay, p, is_dir), (p, err, lay)
        for p, (err, content) in zip(lay.neighbours, got[len(denied):], strict=True):
            if visible_inside(lay, p):
                assert (err, content) == (0, p.read_text().strip()), (p, err, lay)
            else:
                assert err == ENOENT, (p, err, lay)
    finally:
        shutil.rmtree(tmp_base, ignore_errors=True)
        shutil.rmtree(out_base, ignore_errors=True)
