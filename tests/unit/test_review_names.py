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


def test_meta_json_is_written_as_json_dumps_would_write_it_without_importing_json() -> None:
    import json
    import random

    from safebox.review.store import dumps, is_id

    rnd = random.Random(25)
    tricky = ["", "plain", 'q"b\\s', "\n\r\t\b\f\x00\x1f\x7f", "é€😀", "\udcff surrogate-escaped byte", "/w,o:r=k\\"]
    for _ in range(500):
        tricky.append("".join(chr(rnd.choice((rnd.randrange(128), rnd.randrange(128, 0x110000))))
                              for _ in range(rnd.randrange(10))))
    for s in tricky:
        value = {"id": s, "roots": [s, "/x"], "created": 1795736475.824, "exit": None, "ok": True, "no": False,
                 "n": -3, s: {"nested": [[]]}}
        assert dumps(value) == json.dumps(value)
        assert json.loads(dumps(value)) == value
    assert is_id("20261126-234126-4d7b1b") and not is_id("20261126-234126-4d7b1g") and not is_id("../etc/passwd")
