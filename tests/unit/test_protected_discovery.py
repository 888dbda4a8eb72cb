"""Which protected paths a symlink or directory found by find(1) stands for
(``link_candidates``, pure), and the walk itself on a real tree."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from safebox.builder.resolve import RootScan, link_candidates, protected_paths


@pytest.mark.parametrize(("found", "expected"), [
    ("/h/.bashrc", [("/h/.bashrc", False)]),
    ("/h/p/.vscode", [("/h/p/.vscode", False)]),
    ("/h/.config", [("/h/.config/fish", False), ("/h/.config/git", False), ("/h/.config/autostart", False),
                    ("/h/.config/systemd", False), ("/h/.config/environment.d", False),
                    ("/h/.config/Claude", False)]),
    ("/h/.config/git", [("/h/.config/git", False)]),
    ("/h/p/.git", [("/h/p/.git/hooks", False), ("/h/p/.git", True)]),
    ("/h/p/.git/hooks", [("/h/p/.git/hooks", False)]),
])
def test_a_name_that_is_part_of_a_protected_path_stands_for_that_path(found: str,
                                                                     expected: list[tuple[str, bool]]) -> None:
    assert sorted(link_candidates(found)) == sorted(expected)


@pytest.mark.parametrize("found", ["/h/src/git", "/h/web/src/hooks", "/h/systemd", "/h/fish", "/h/.git-old",
                                   "/.bashrc-not", "/h/x/config/git"])
def test_a_name_that_only_looks_like_a_part_stands_for_nothing(found: str) -> None:
    assert link_candidates(found) == []


def _scan(root: Path) -> RootScan:
    return RootScan(rg="/usr/bin/rg", find="/usr/bin/find", root=str(root), depth=6)


def test_symlinked_and_empty_protected_names_are_found_and_resolved_to_their_targets(tmp_path: Path) -> None:
    (tmp_path / "dotfiles").mkdir()
    (tmp_path / "dotfiles" / "bashrc").write_text("rc\n")
    (tmp_path / ".bashrc").symlink_to("dotfiles/bashrc")
    (tmp_path / "p" / ".idea").mkdir(parents=True)  # empty: ripgrep lists no file in it
    (tmp_path / "p" / ".envrc").symlink_to("/nonexistent-target-of-a-dangling-link")
    (tmp_path / "p" / "src" / "hooks").mkdir(parents=True)  # not protected: no .git above
    root = str(tmp_path)
    prot = protected_paths({root: _scan(tmp_path)}, [root], root)
    assert f"{root}/dotfiles/bashrc" in prot.existing
    assert f"{root}/p/.idea" in prot.existing
    assert not any(p.endswith("/src/hooks") for p in prot.existing)
    # The dangling link's target lies outside every write root: read-only already.
    assert "/nonexistent-target-of-a-dangling-link" not in prot.missing
    assert prot.links == [(f"{root}/.bashrc", "dotfiles/bashrc"),
                          (f"{root}/p/.envrc", "/nonexistent-target-of-a-dangling-link")]


def test_a_find_error_other_than_a_vanished_or_unreadable_entry_fails_closed(tmp_path: Path) -> None:
    from safebox.errors import BuildError

    fake = tmp_path / "find"
    fake.write_text("#!/bin/sh\necho 'find: /x: Input/output error' >&2\nexit 1\n")
    fake.chmod(0o755)
    root = str(tmp_path)
    scan = RootScan(rg="/usr/bin/rg", find=str(fake), root=root, depth=6)
    with pytest.raises(BuildError, match="find failed under .*Input/output error"):
        protected_paths({root: scan}, [root], root)


def test_a_vanished_entry_is_not_a_walk_failure(tmp_path: Path) -> None:
    fake = tmp_path / "find"
    fake.write_text("#!/bin/sh\necho \"find: '/x/b': No such file or directory\" >&2\nexit 1\n")
    fake.chmod(0o755)
    root = str(tmp_path)
    prot = protected_paths({root: RootScan(rg="/usr/bin/rg", find=str(fake), root=root, depth=6)}, [root], root)
    assert prot.links == []


def test_a_permission_error_find_did_not_report_as_unlistable_fails_closed_with_the_fix(tmp_path: Path) -> None:
    """find reports the directories it cannot list itself (``-readable``) and
    does not enter them: an EACCES on its stderr is one that changed under
    the walk, and what it hides is unknown."""
    from safebox.errors import BuildError

    fake = tmp_path / "find"
    fake.write_text("#!/bin/sh\necho \"find: '/x/a': Permission denied\" >&2\nexit 1\n")
    fake.chmod(0o755)
    root = str(tmp_path)
    with pytest.raises(BuildError, match="find failed under .*Permission denied") as e:
        protected_paths({root: RootScan(rg="/usr/bin/rg", find=str(fake), root=root, depth=6)}, [root], root)
    assert e.value.hint == "make it listable: chmod u+rx /x/a"


@pytest.mark.parametrize(("stderr", "harmless"), [
    ("{w}/a: IO error for operation on {w}/a: Permission denied (os error 13)\n", True),
    ("{w}/a/b: IO error for operation on {w}/a/b: Permission denied (os error 13)\n", True),
    ("rg: {w}/a/b: Permission denied (os error 13)\n", True),
    ("{w}/gone: IO error for operation on {w}/gone: No such file or directory (os error 2)\n", True),
    # Not beneath a directory find reported, and ours: the review's attack hid here.
    ("{w}/other: IO error for operation on {w}/other: Permission denied (os error 13)\n", False),
    ("{w}/ab: IO error for operation on {w}/ab: Permission denied (os error 13)\n", False),
    ("{w}/a: IO error for operation on {w}/a: Input/output error (os error 5)\n", False),
    ("", False),
])
def test_only_permission_errors_beneath_directories_find_reported_are_harmless(tmp_path: Path, stderr: str,
                                                                               harmless: bool) -> None:
    from safebox.builder.resolve import _only_harmless_walk_errors

    for d in ("a", "other", "ab"):
        (tmp_path / d).mkdir()  # there, and ours
    w = str(tmp_path)
    assert _only_harmless_walk_errors(stderr.format(w=w).encode(), frozenset({f"{w}/a"})) is harmless


@pytest.mark.parametrize(("line", "paths"), [
    ("/w/a: IO error for operation on /w/a: Permission denied (os error 13)",
     ["/w/a: IO error for operation on /w/a", "/w/a"]),
    ("/w/a: Permission denied (os error 13)", ["/w/a"]),
    ("/w/x: y: IO error for operation on /w/x: y: Permission denied (os error 13)",
     ["/w/x: y: IO error for operation on /w/x: y", "/w/x: y"]),
    # Not the second form (two paths): taken whole only.
    ("/w/a: IO error for operation on /w/b: Permission denied (os error 13)",
     ["/w/a: IO error for operation on /w/b"]),
    # A path holding the second form's words: read by length, not split at
    # their first occurrence (which read a path that is not there, "gone").
    ("/w/x: IO error for operation on /y: IO error for operation on /w/x: IO error for operation on /y"
     ": Permission denied (os error 13)",
     ["/w/x: IO error for operation on /y: IO error for operation on /w/x: IO error for operation on /y",
      "/w/x: IO error for operation on /y"]),
    ("w/a: Permission denied (os error 13)", []),
    ("/w/a: Input/output error (os error 5)", []),
])
def test_every_reading_of_a_ripgrep_permission_error_names_its_directory(line: str, paths: list[str]) -> None:
    from safebox.builder.walks import _denied_readings

    assert _denied_readings(line) == paths


def test_a_directory_whose_name_holds_ripgreps_words_cannot_pass_for_a_gone_one(tmp_path: Path) -> None:
    # The first occurrence of the words split such a line into a path that
    # is not there: read as gone, it hid nothing, and the walk passed.
    from safebox.builder.walks import _only_harmless_walk_errors

    blind = tmp_path / "x: IO error for operation on " / "y"
    blind.mkdir(parents=True)
    blind.chmod(0o300)
    try:
        line = f"{blind}: IO error for operation on {blind}: Permission denied (os error 13)\n"
        assert _only_harmless_walk_errors(line.encode()) is False
    finally:
        blind.chmod(0o755)


def test_a_directory_whose_name_is_not_utf8_cannot_pass_for_a_gone_one(tmp_path: Path) -> None:
    # ripgrep prints names as bytes; read with "replace", a name holding
    # b"\xff" became U+FFFD, a path that is not there: read as gone, it hid
    # nothing, and the walk passed (found in review).
    from safebox.builder.walks import _only_harmless_walk_errors

    blind = os.path.join(os.fsencode(tmp_path), b"x\xff")
    os.mkdir(blind, 0o300)
    try:
        line = blind + b": IO error for operation on " + blind + b": Permission denied (os error 13)\n"
        assert _only_harmless_walk_errors(line) is False
    finally:
        os.chmod(blind, 0o755)
    # Control: such a directory that is gone now hides nothing.
    os.rmdir(blind)
    assert _only_harmless_walk_errors(blind + b": Permission denied (os error 13)\n") is True


def test_a_directory_ripgrep_was_refused_that_is_gone_now_hides_nothing(tmp_path: Path) -> None:
    # Another user's short-lived directory (pip's, mkdtemp's) made and removed
    # while the walks ran: nothing is there to protect, as with os error 2.
    from safebox.builder.walks import _only_harmless_walk_errors

    gone = tmp_path / "gone"
    assert _only_harmless_walk_errors(f"{gone}: Permission denied (os error 13)\n".encode()) is True
    ours = tmp_path / "ours"
    ours.mkdir()  # Control: one of ours that is there is refused.
    assert _only_harmless_walk_errors(f"{ours}: Permission denied (os error 13)\n".encode()) is False


@pytest.mark.parametrize("name", [
    "x: Permission denied (os error 13)\nprivate",
    "private: Permission denied (os error 13)\nx",
    "a (os error 2)\nb",
    "x\n",
])
def test_a_name_with_a_newline_cannot_make_ripgreps_refusal_of_it_read_as_harmless(tmp_path: Path, name: str) -> None:
    # A command names a directory of its own so that ripgrep's error line
    # about it splits into lines that look like harmless ones. One name holds
    # no "/": every line after its newline is a path-less tail, never a
    # directory of another user's (nor a vanished entry: its last line is
    # the refusal of the directory), so the errors are refused. A newline in
    # an ancestor's name can make the tail a path (found in review): that
    # needs the directory made unlistable between the two walks by a process
    # of ours still running, the accepted limit of docs/threat-model.md.
    from safebox.builder.walks import _only_harmless_walk_errors

    private = tmp_path / "private"  # stands for another user's directory, listed as such by find
    line = f"{tmp_path}/{name}: Permission denied (os error 13)\n".encode()
    assert _only_harmless_walk_errors(line, frozenset({str(private)})) is False


def test_an_unlistable_directory_is_reported_and_its_permission_errors_are_not_failures(tmp_path: Path) -> None:
    if os.geteuid() == 0 and _root_reads_anything():
        # DAC does not stop root: nothing is unlistable, which the walk says too.
        (tmp_path / "blind").mkdir(mode=0o300)
        root = str(tmp_path)
        assert protected_paths({root: _scan(tmp_path)}, [root], root).unlistable == []
        return
    for name, mode in (("blind", 0o300), ("dark", 0o600), ("open", 0o755)):
        (tmp_path / name / ".git" / "hooks").mkdir(parents=True)
        (tmp_path / name / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
        (tmp_path / name).chmod(mode)
    root = str(tmp_path)
    try:
        prot = protected_paths({root: _scan(tmp_path)}, [root], root)
    finally:
        for name in ("blind", "dark"):
            (tmp_path / name).chmod(0o755)
    assert prot.unlistable == [f"{root}/blind", f"{root}/dark"]
    assert f"{root}/open/.git/hooks" in prot.existing  # control: a listable one is searched as before


def _root_reads_anything() -> bool:
    """Whether this root process has CAP_DAC_READ_SEARCH (bit 2) in its effective set."""
    with open("/proc/self/status") as f:
        eff = next(int(ln.split()[1], 16) for ln in f if ln.startswith("CapEff:"))
    return bool(eff & (1 << 2))


def test_find_missing_is_a_clear_error() -> None:
    from safebox.errors import BuildError

    with pytest.raises(BuildError, match="find not found"):
        RootScan(rg="/usr/bin/rg", find=None, root=os.getcwd(), depth=6)


def test_a_remembered_git_dir_made_unlistable_is_read_only_whole(tmp_path: Path) -> None:
    if os.geteuid() == 0 and _root_reads_anything():
        return  # root lists it anyway: nothing to decide (the walk test above says so too)
    git = tmp_path / "lib.git"
    for d in ("hooks", "objects", "refs"):
        (git / d).mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    git.chmod(0o300)
    root = str(tmp_path)
    try:
        # Deeper than this walk looks (depth 0: find tests nothing): the memory alone names it.
        scan = RootScan(rg="/usr/bin/rg", find="/usr/bin/find", root=root, depth=-3)
        prot = protected_paths({root: scan}, [root], root, known=(("git", str(git)),))
    finally:
        git.chmod(0o755)
    assert prot.unlistable == [str(git)]  # read-only whole for the run, said with the fix
