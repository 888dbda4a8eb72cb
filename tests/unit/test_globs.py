"""Glob patterns in filesystem entries (builder/globs.py): the grammar safebox
accepts (sandbox-runtime's, refusing what it cannot honour) and the one walk
that expands every pattern of a run, on real trees in ``tmp_path``."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from safebox.builder.globs import Pattern, expand
from safebox.policy.glob_syntax import GLOB_CHARS, check_pattern, is_glob


def _tree(root: Path, files: list[str], dirs: list[str] = ()) -> None:
    for d in dirs:
        (root / d).mkdir(parents=True, exist_ok=True)
    for f in files:
        (root / f).parent.mkdir(parents=True, exist_ok=True)
        (root / f).write_text("x")


def _rel(root: Path, paths: list[str]) -> list[str]:
    return sorted(os.path.relpath(p, root) for p in paths)


def test_the_glob_characters_are_sandbox_runtimes() -> None:
    assert GLOB_CHARS == frozenset("*?[]")
    assert is_glob("**/.env") and is_glob("key[12].pem") and is_glob("a]b")
    assert not is_glob("~/.ssh") and not is_glob("dir with space/f") and not is_glob("a{b}")


@pytest.mark.parametrize(("pattern", "words"), [
    ("/p/a**b", "'**' must be a whole path component"),
    ("/p/**x/y", "'**' must be a whole path component"),
    ("/p/key[12.pem", "an unclosed '['"),
    ("/p/*.{pem,key}", "braces are not expanded"),
    ("/**/.env", "must start below /"),
    ("/*/x", "must start below /"),
])
def test_a_pattern_safebox_cannot_expand_as_srt_would_is_refused_with_the_reason(pattern: str, words: str) -> None:
    with pytest.raises(ValueError, match=words.replace("[", r"\[").replace("*", r"\*").replace("{", r"\{")):
        check_pattern(pattern)


@pytest.mark.parametrize("pattern", ["/p/**/.env", "~/.config/*/credentials", "/p/key[12].pem", "/p/[!a]?",
                                     "/p/**/build/**", "/p/a]b", "/p/x[]]y"])
def test_control_well_formed_patterns_are_accepted(pattern: str) -> None:
    check_pattern(pattern)


def test_a_trailing_double_star_names_the_directories_it_matches() -> None:
    p = Pattern("/p/**/build/**")
    assert p.comps == ("p", "**", "build") and p.dirs_only


def test_double_star_matches_at_every_depth_including_none(tmp_path: Path) -> None:
    _tree(tmp_path, [".env", "a/.env", "a/b/c/.env", "a/b/not.env", "a/.envrc", "env"])
    e = expand([f"{tmp_path}/**/.env"])
    assert _rel(tmp_path, e.matches[f"{tmp_path}/**/.env"]) == [".env", "a/.env", "a/b/c/.env"]


def test_a_single_star_stays_in_its_directory_and_matches_dot_files(tmp_path: Path) -> None:
    _tree(tmp_path, ["k.pem", ".hidden.pem", "sub/k.pem", "k.pem.bak"])
    pat = f"{tmp_path}/*.pem"
    assert _rel(tmp_path, expand([pat]).matches[pat]) == [".hidden.pem", "k.pem"]


def test_a_star_in_the_middle_of_a_path_matches_one_directory(tmp_path: Path) -> None:
    _tree(tmp_path, [".config/gh/credentials", ".config/op/credentials", ".config/gh/other",
                     ".config/a/b/credentials"])
    pat = f"{tmp_path}/.config/*/credentials"
    assert _rel(tmp_path, expand([pat]).matches[pat]) == [".config/gh/credentials", ".config/op/credentials"]


def test_question_marks_and_character_classes(tmp_path: Path) -> None:
    _tree(tmp_path, ["key1.pem", "key2.pem", "key3.pem", "keyA.pem", "key10.pem"])
    cls, neg, q = f"{tmp_path}/key[12].pem", f"{tmp_path}/key[!0-9].pem", f"{tmp_path}/key?.pem"
    e = expand([cls, neg, q])
    assert _rel(tmp_path, e.matches[cls]) == ["key1.pem", "key2.pem"]
    assert _rel(tmp_path, e.matches[neg]) == ["keyA.pem"]
    assert _rel(tmp_path, e.matches[q]) == ["key1.pem", "key2.pem", "key3.pem", "keyA.pem"]


def test_regex_characters_in_a_pattern_are_literal(tmp_path: Path) -> None:
    _tree(tmp_path, ["a+b(c).txt", "aab(c).txt", "a.b", "axb"])
    plus, dot = f"{tmp_path}/a+b(c).*", f"{tmp_path}/a.b*"
    e = expand([plus, dot])
    assert _rel(tmp_path, e.matches[plus]) == ["a+b(c).txt"]
    assert _rel(tmp_path, e.matches[dot]) == ["a.b"]


def test_a_trailing_double_star_matches_directories_only(tmp_path: Path) -> None:
    _tree(tmp_path, ["build/out.o", "src/build/x", "src/build.txt", "docs/build"], dirs=["empty/build"])
    pat = f"{tmp_path}/**/build/**"
    assert _rel(tmp_path, expand([pat]).matches[pat]) == ["build", "empty/build", "src/build"]


def test_a_symlinked_directory_is_matched_by_name_but_not_walked_by_double_star(tmp_path: Path) -> None:
    _tree(tmp_path, ["proj/a/.env", "elsewhere/.env", "elsewhere/deep/.env"])
    os.symlink(tmp_path / "elsewhere", tmp_path / "proj" / "link")
    os.symlink(tmp_path / "proj", tmp_path / "proj" / "a" / "loop")  # a loop: never walked
    env = f"{tmp_path}/proj/**/.env"
    named = f"{tmp_path}/proj/**/link"
    e = expand([env, named])
    assert _rel(tmp_path, e.matches[env]) == ["proj/a/.env"]
    assert _rel(tmp_path, e.matches[named]) == ["proj/link"]


def test_fixed_components_are_followed_through_symlinks_as_the_kernel_would(tmp_path: Path) -> None:
    _tree(tmp_path, ["dotfiles/config/gh/credentials"])
    os.symlink(tmp_path / "dotfiles" / "config", tmp_path / ".config")
    pat = f"{tmp_path}/.config/*/credentials"
    assert _rel(tmp_path, expand([pat]).matches[pat]) == [".config/gh/credentials"]


def test_every_pattern_is_expanded_in_one_walk_listing_each_entry_once(tmp_path: Path) -> None:
    files = [f"d{i}/f{j}" for i in range(20) for j in range(10)] + [f"d{i}/.env" for i in range(0, 20, 3)]
    _tree(tmp_path, files)
    pats = [f"{tmp_path}/**/.env", f"{tmp_path}/**/f1", f"{tmp_path}/**/*.pem", f"{tmp_path}/d1*/f?"]
    e = expand(pats)
    assert e.listed == len(files) + 20  # every file and directory once, for four patterns
    assert len(e.matches[pats[0]]) == 7 and len(e.matches[pats[1]]) == 20 and e.matches[pats[2]] == []
    assert len(e.matches[pats[3]]) == 110  # d1 and d10..d19, ten files each


def test_a_pattern_whose_fixed_part_is_missing_matches_nothing(tmp_path: Path) -> None:
    pat = f"{tmp_path}/nope/**/.env"
    e = expand([pat])
    assert e.matches[pat] == [] and e.listed == 0


def test_a_directory_the_user_cannot_list_is_reported(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # EACCES as an unprivileged user gets it (root lists everything, so the
    # refusal is simulated for one directory).
    _tree(tmp_path, ["locked/.env", "open/.env"])
    real = os.scandir

    def scandir(path: str) -> os.ScandirIterator[str]:  # type: ignore[type-var]
        if path == f"{tmp_path}/locked":
            raise PermissionError(13, "Permission denied", path)
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    pat = f"{tmp_path}/**/.env"
    e = expand([pat])
    assert _rel(tmp_path, e.matches[pat]) == ["open/.env"]
    assert e.unreadable == [(f"{tmp_path}/locked", (pat,))]
