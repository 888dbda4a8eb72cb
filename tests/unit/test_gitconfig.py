"""The git config reader (``builder/gitconfig.py``) against git itself: for
every text git accepts, the same keys and values in the same order; and the
include walk that finds ``core.hooksPath`` and included files."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from safebox.builder.gitconfig import MAX_INCLUDE_DEPTH, config_refs, entries

# git is a test dependency (build.py setup installs it): missing, these tests fail, never skip.
GIT = shutil.which("git") or "git"


def git_list(path: Path) -> list[tuple[str, str | None]] | None:
    """``git config --list`` of one file, without includes; None if git refuses it."""
    assert GIT is not None
    r = subprocess.run([GIT, "config", "--no-includes", "--file", str(path), "--null", "--list"],
                       capture_output=True, check=False, env={"PATH": "/usr/bin:/bin", "HOME": str(path.parent)})
    if r.returncode != 0:
        return None
    out: list[tuple[str, str | None]] = []
    for item in r.stdout.decode("utf-8", "surrogateescape").split("\0")[:-1]:
        name, nl, value = item.partition("\n")
        out.append((name, value if nl else None))
    return out


TABLE = [
    "[core]\n\thooksPath = .githooks\n",
    "[core] hooksPath = hooks\n",  # a key on the header's line
    '[core]\n\tHOOKSPATH = "a b" # comment\n',
    "[core]\nhookspath = a\\\nb\n",  # continuation
    '[includeIf "gitdir:~/Work/"]\n\tpath = ~/.work.inc\n',
    '[include]\npath = "x\\"y"\n\tpath\n',  # escaped quote; a key without value
    "[core.x]\n\thookspath = not-core\n",
    '[core "x"]\n\thookspath = not-core\n',
    "; c\n# c\n[core]\r\n\thookspath = crlf\r\n",
    "\ufeff[core]\n\thookspath = bom\n",
    "[core]\n\thookspath =   lead  and   inner  \n",
    "[core]\n\thookspath = a;b\n",
    "[core]\n\thookspath = x\\",  # backslash at the end of the file
]


@pytest.mark.parametrize("text", TABLE)
def test_entries_are_what_git_lists(tmp_path: Path, text: str) -> None:
    f = tmp_path / "config"
    f.write_bytes(text.encode())
    expected = git_list(f)
    assert expected is not None, "git refuses this table row; it must be valid"
    assert entries(text) == expected


_HEADERS = st.sampled_from(["[core]", "[include]", '[includeIf "gitdir:x/"]', "[core.sub]", '[core "s"]',
                            '[includeIf "a\\"b"]', "[Core]", "[core] ", "[bad", "[]"])
_KEYS = st.sampled_from(["hooksPath", "path", "HooksPath", "key", "k-1", "9bad"])
_VALUE = st.lists(st.sampled_from(["a", "b c", "~/x", '"', "\\", "\\n", "\\t", "\\\n", "\\q", " ", "\t",
                                   "#c", ";c", "="]), max_size=6).map("".join)


@st.composite
def _lines(draw: st.DrawFn) -> str:
    """Config texts most of which git accepts: headers and key lines, with
    the syntax that can hide a key (quotes, escapes, continuations, comments)."""
    out = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            out.append(draw(_HEADERS))
        elif kind == 3:
            out.append(draw(st.sampled_from(["# c", "; c", "", "  ", "\r"])))
        else:
            key = draw(_KEYS)
            out.append(key if kind == 2 and draw(st.booleans()) else
                       f"{draw(st.sampled_from(['', '  ', chr(9)]))}{key}{draw(st.sampled_from(['=', ' = ', chr(9) + '=']))}"
                       f"{draw(_VALUE)}")
    return draw(st.sampled_from(["\n", "\r\n"])).join(out) + draw(st.sampled_from(["", "\n"]))


@given(_lines())
@example("[core]\nhooksPath\n")
@settings(max_examples=150, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_for_every_text_git_accepts_the_entries_are_the_same(tmp_path: Path, text: str) -> None:
    f = tmp_path / "config"
    f.write_bytes(text.encode())
    expected = git_list(f)
    got = entries(text)
    if expected is None:
        return  # git refuses the whole file and runs no hook; what we read of it cannot matter
    assert got == expected, text


def test_hooks_paths_and_includes_are_found_through_nested_includes(tmp_path: Path) -> None:
    home = str(tmp_path)
    (tmp_path / ".gitconfig").write_text("[include]\n\tpath = ~/.gitconfig.local\n"
                                         '[includeIf "gitdir:~/w/"]\n\tpath = inc/work.inc\n')
    (tmp_path / ".gitconfig.local").write_text("[core]\n\thooksPath = ~/hooks\n")
    (tmp_path / "inc").mkdir()
    (tmp_path / "inc" / "work.inc").write_text("[include]\n\tpath = deeper.inc\n[core] hooksPath = .githooks\n")
    refs = config_refs([str(tmp_path / ".gitconfig")], home=home)
    assert refs.hooks == [f"{home}/hooks", ".githooks"]
    assert refs.includes == [f"{home}/.gitconfig.local", f"{home}/inc/work.inc", f"{home}/inc/deeper.inc"]


def test_an_include_cycle_ends_and_the_depth_is_bounded_as_git_bounds_it(tmp_path: Path) -> None:
    for i in range(MAX_INCLUDE_DEPTH + 3):
        (tmp_path / f"c{i}").write_text(f"[include]\n\tpath = c{i + 1}\n[include]\n\tpath = c0\n")
    refs = config_refs([str(tmp_path / "c0")], home=str(tmp_path))
    assert len(refs.read) == MAX_INCLUDE_DEPTH + 1


def test_a_config_that_mentions_neither_key_is_not_parsed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import safebox.builder.gitconfig as gc

    (tmp_path / "config").write_text("[core]\n\trepositoryformatversion = 0\n\tbare = false\n")
    monkeypatch.setattr(gc, "entries", lambda _text: pytest.fail("parsed"))
    assert gc.config_refs([str(tmp_path / "config"), str(tmp_path / "missing")], home="/h").read == [
        str(tmp_path / "config")]
