"""Which held changes would run code on the host (safebox.review.layer.runs_code):
the normal run's protected and quarantined names, at any depth."""

from __future__ import annotations

import pytest

from safebox.review.layer import runs_code


@pytest.mark.parametrize("rel", [".bashrc", "sub/.envrc", ".git/hooks/pre-commit", ".vscode/tasks.json",
                                 "pkg/.git/config", ".git/info/attributes", ".config/git/config", ".husky/pre-push",
                                 ".mcp.json", ".devcontainer/devcontainer.json", "vendor/x/.git"])
def test_a_code_running_name_is_held_back(rel: str) -> None:
    assert runs_code(rel)


@pytest.mark.parametrize("rel", ["README.md", "src/main.c", ".git/objects/ab/cdef", ".git/refs/heads/main",
                                 "docs/bashrc.md", "git/hooks.txt", ".gitignore"])
def test_an_ordinary_name_is_not(rel: str) -> None:
    assert not runs_code(rel)


def test_a_git_directory_is_ordinary_and_a_gitdir_file_is_not() -> None:
    assert not runs_code("vendor/x/.git", "dir")
    assert runs_code("vendor/x/.git", "file")
