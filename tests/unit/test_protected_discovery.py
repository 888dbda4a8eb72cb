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
                    ("/h/.config/systemd", False), ("/h/.config/environment.d", False)]),
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


def test_unreadable_or_vanished_entries_are_not_walk_failures(tmp_path: Path) -> None:
    fake = tmp_path / "find"
    fake.write_text("#!/bin/sh\necho \"find: '/x/a': Permission denied\" >&2\n"
                    "echo \"find: '/x/b': No such file or directory\" >&2\nexit 1\n")
    fake.chmod(0o755)
    root = str(tmp_path)
    prot = protected_paths({root: RootScan(rg="/usr/bin/rg", find=str(fake), root=root, depth=6)}, [root], root)
    assert prot.links == []


def test_find_missing_is_a_clear_error() -> None:
    from safebox.errors import BuildError

    with pytest.raises(BuildError, match="find not found"):
        RootScan(rg="/usr/bin/rg", find=None, root=os.getcwd(), depth=6)
