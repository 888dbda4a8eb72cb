"""The stand-ins of ``safebox._record`` behave as the stdlib they replace.

``_record`` re-implements dataclasses, ``enum.StrEnum``, ``shutil.which``,
``shutil.rmtree``, ``fnmatch.fnmatchcase`` and ``hashlib.sha256`` to keep
their imports off the ``safebox exec`` path. Type checkers are told they are
the real thing (``dataclass_transform`` on Frozen, ``enum.StrEnum`` itself
under TYPE_CHECKING), so each is held here to the stdlib's behaviour on
representative inputs, and every subclass in the package to the subset
both agree on.
"""

from __future__ import annotations

import dataclasses
import enum
import fnmatch
import hashlib
import importlib
import os
import pkgutil
import shutil
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import safebox
from safebox._record import Frozen, StrEnum, glob_match, rmtree, sha256_hex, which

# ------------------------------------------------------------------ helpers


def _all_subclasses(base: type) -> list[type]:
    """Every subclass of ``base`` defined anywhere in the safebox package."""
    for mod in pkgutil.walk_packages(safebox.__path__, "safebox."):
        if mod.name.endswith("__main__"):
            continue
        importlib.import_module(mod.name)
    out, todo = [], [base]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub.__module__.startswith("safebox.") and sub not in out:
                out.append(sub)
                todo.append(sub)
    return out


# ------------------------------------------------------------------ Frozen


class Point(Frozen):
    x: int
    y: int = 2
    tags: tuple[str, ...] = ()


class Point3(Point):
    z: int = 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class DPoint:
    x: int
    y: int = 2
    tags: tuple[str, ...] = ()


def test_a_frozen_record_takes_keyword_fields_with_defaults_as_a_frozen_kw_only_dataclass_does() -> None:
    assert _record_view(Point(x=1)) == _dc_view(DPoint(x=1))
    assert _record_view(Point(x=1, y=5, tags=("a",))) == _dc_view(DPoint(x=1, y=5, tags=("a",)))
    assert repr(Point(x=1)) == repr(DPoint(x=1)).replace("DPoint", "Point")


def test_a_frozen_record_refuses_missing_and_unknown_fields_and_positional_arguments_as_a_dataclass_does() -> None:
    for make in (Point, DPoint):
        with pytest.raises(TypeError):
            make()  # type: ignore[call-arg]  # the missing field is the point
        with pytest.raises(TypeError):
            make(x=1, w=2)  # type: ignore[call-arg]  # the unknown field is the point
        with pytest.raises(TypeError):
            make(1)  # type: ignore[misc]  # the positional argument is the point


def test_a_frozen_record_cannot_be_changed_or_have_a_field_deleted_as_a_frozen_dataclass_cannot() -> None:
    for rec in (Point(x=1), DPoint(x=1)):
        with pytest.raises(AttributeError):
            rec.x = 3  # type: ignore[misc]  # assigning to a frozen field is the point
        with pytest.raises(AttributeError):
            del rec.x  # type: ignore[misc]  # deleting a frozen field is the point


def test_frozen_records_compare_and_hash_by_type_and_values_as_frozen_dataclasses_do() -> None:
    assert Point(x=1) == Point(x=1) and hash(Point(x=1)) == hash(Point(x=1))
    assert DPoint(x=1) == DPoint(x=1) and hash(DPoint(x=1)) == hash(DPoint(x=1))
    assert Point(x=1) != Point(x=2) and DPoint(x=1) != DPoint(x=2)
    # Another class with the same values is not equal (dataclasses compare the class too).
    assert Point3(x=1, y=2, tags=(), z=0) != Point(x=1)
    assert {Point(x=1), Point(x=1)} == {Point(x=1)}


def test_replace_and_asdict_of_a_frozen_record_match_dataclasses_replace_and_asdict() -> None:
    rec, dc = Point(x=1, tags=("t",)), DPoint(x=1, tags=("t",))
    assert _record_view(rec.replace(y=9)) == _dc_view(dataclasses.replace(dc, y=9))
    assert rec.asdict() == dataclasses.asdict(dc)
    assert type(rec.replace(y=9)) is Point
    with pytest.raises(TypeError):
        rec.replace(w=1)
    with pytest.raises(TypeError):
        dataclasses.replace(dc, w=1)  # type: ignore[call-arg]  # the unknown field is the point


def test_a_subclass_of_a_frozen_record_adds_its_fields_after_the_inherited_ones_as_a_dataclass_does() -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class DPoint3(DPoint):
        z: int = 0

    assert Point3.__fields__ == tuple(f.name for f in dataclasses.fields(DPoint3))
    assert Point3(x=1, z=4).asdict() == dataclasses.asdict(DPoint3(x=1, z=4))


def test_every_frozen_record_in_the_package_has_the_fields_a_type_checker_sees() -> None:
    """A type checker takes every annotated attribute as a field, ClassVar
    aside; the run-time record skips names starting with ``_``. So no record
    in the package may have either kind."""
    records = _all_subclasses(Frozen)
    assert len(records) > 20
    for cls in records:
        annotated = [n for k in reversed(cls.__mro__) for n, a in k.__dict__.get("__annotations__", {}).items()
                     if "ClassVar" not in str(a)]
        assert list(cls.__fields__) == list(dict.fromkeys(annotated)), cls
        assert not any(n.startswith("_") for n in cls.__fields__), cls


def _record_view(rec: Frozen) -> tuple[object, ...]:
    return tuple(getattr(rec, n) for n in type(rec).__fields__)


def _dc_view(dc: object) -> tuple[object, ...]:
    return tuple(getattr(dc, f.name) for f in dataclasses.fields(dc))  # type: ignore[arg-type]


# ------------------------------------------------------------------ StrEnum


def _stdlib_twin(cls: type[StrEnum]) -> type[enum.StrEnum]:
    members = {m.name: m.value for m in cls}
    return enum.StrEnum(cls.__name__, members)  # type: ignore[return-value]  # the functional API is untyped here


def test_every_str_enum_in_the_package_behaves_as_enum_str_enum_with_the_same_members() -> None:
    enums = _all_subclasses(StrEnum)
    assert len(enums) >= 5
    for cls in enums:
        twin = _stdlib_twin(cls)
        assert [m.name for m in cls] == [m.name for m in twin], cls
        assert [m.value for m in cls] == [m.value for m in twin], cls
        for mine, theirs in zip(cls, twin, strict=True):
            assert cls(mine.value) is mine and cls(mine) is mine
            assert getattr(cls, mine.name) is mine
            assert isinstance(mine, str) and isinstance(mine, cls)
            assert mine == theirs == theirs.value and hash(mine) == hash(theirs)
            assert str(mine) == str(theirs) and f"{mine}" == f"{theirs}" and mine.upper() == theirs.upper()
            assert repr(mine) == repr(theirs)
        with pytest.raises(ValueError, match="is not a valid"):
            cls("no such member")
        with pytest.raises(ValueError, match="is not a valid"):
            twin("no such member")


def test_a_str_enum_s_methods_and_lower_case_attributes_are_not_members() -> None:
    class Colour(StrEnum):
        RED = "red"
        GREEN = "green"

        def shout(self) -> str:
            return self.value.upper()

    assert [c.value for c in Colour] == ["red", "green"]
    assert Colour.RED.shout() == "RED" and Colour("green") is Colour.GREEN


# ------------------------------------------------------------------ which


@pytest.fixture
def bin_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """a/ holds tool (executable) and plain (not), b/ another tool; c/tool is a directory; cwd holds tool too."""
    for d in ("a", "b", "c/tool", "cwd"):
        (tmp_path / d).mkdir(parents=True)
    for f, mode in (("a/tool", 0o755), ("a/plain", 0o644), ("b/tool", 0o755), ("b/plain", 0o755),
                    ("cwd/tool", 0o755)):
        (tmp_path / f).write_text("#!/bin/sh\n")
        (tmp_path / f).chmod(mode)
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path


@pytest.mark.parametrize("path", [
    "{t}/a:{t}/b", "{t}/b:{t}/a", "{t}/c:{t}/b", "{t}/a:{t}/a", "{t}/missing:{t}/b", "{t}/c", "/nonexistent",
])
@pytest.mark.parametrize("name", ["tool", "plain", "absent", "{t}/a/tool", "{t}/a/plain", "{t}/c/tool", "./tool"])
def test_which_finds_what_shutil_which_finds_on_the_same_path(bin_dirs: Path, path: str, name: str) -> None:
    p, n = path.format(t=bin_dirs), name.format(t=bin_dirs)
    assert which(n, p) == shutil.which(n, path=p)


@pytest.mark.usefixtures("bin_dirs")
def test_which_with_an_empty_path_finds_nothing_not_the_working_directory() -> None:
    # path_outside() returns "" when every $PATH entry lies in a write root; the
    # working directory (a write root itself) must not stand in for it.
    assert shutil.which("tool", path="") is None
    assert which("tool", "") is None


def test_which_treats_an_empty_entry_inside_path_as_the_working_directory_as_shutil_which_does(bin_dirs: Path) -> None:
    p = f"{bin_dirs}/c::{bin_dirs}/b"
    mine, theirs = which("tool", p), shutil.which("tool", path=p)
    # Same file; the stand-in spells it ./tool so that running it does not search $PATH again.
    assert mine == "./tool" and theirs == "tool"


def test_which_without_a_path_reads_path_from_the_environment_as_shutil_which_does(
        bin_dirs: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", f"{bin_dirs}/b:{bin_dirs}/a")
    assert which("tool") == shutil.which("tool") == f"{bin_dirs}/b/tool"
    monkeypatch.delenv("PATH")
    assert which("sh") == shutil.which("sh")


# ------------------------------------------------------------------ rmtree


def _tree(root: Path, outside: Path) -> None:
    (root / "d" / "e").mkdir(parents=True)
    (root / "f").write_text("f")
    (root / "d" / "g").write_text("g")
    (root / "d" / "e" / "h").write_text("h")
    (root / "link-dir").symlink_to(outside)
    (root / "d" / "link-file").symlink_to(outside / "keep")
    (root / "dangling").symlink_to(root / "nothing")
    os.mkfifo(root / "fifo")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    (out / "sub").mkdir(parents=True)
    (out / "keep").write_text("keep")
    (out / "sub" / "keep2").write_text("keep2")
    return out


def _listing(p: Path) -> list[str]:
    return sorted(str(x.relative_to(p)) for x in p.rglob("*"))


def test_rmtree_removes_a_tree_and_never_follows_a_symlink_in_it_as_shutil_rmtree(tmp_path: Path, outside: Path) -> None:
    before = _listing(outside)
    for remove, name in ((rmtree, "mine"), (shutil.rmtree, "theirs")):
        _tree(tmp_path / name, outside)
        remove(str(tmp_path / name))
        assert not os.path.lexists(tmp_path / name)
        assert _listing(outside) == before


def test_rmtree_of_a_symlink_to_a_directory_leaves_the_directory_s_contents_alone(tmp_path: Path, outside: Path) -> None:
    before = _listing(outside)
    (tmp_path / "link").symlink_to(outside)
    with pytest.raises(OSError, match="symbolic link"):
        shutil.rmtree(tmp_path / "link")
    rmtree(str(tmp_path / "link"))  # the stand-in ignores errors; it removes the link itself
    assert _listing(outside) == before
    assert not os.path.lexists(tmp_path / "link")


def test_rmtree_of_a_missing_path_or_a_file_does_not_raise(tmp_path: Path) -> None:
    rmtree(str(tmp_path / "missing"))
    (tmp_path / "file").write_text("x")
    rmtree(str(tmp_path / "file"))
    assert not (tmp_path / "file").exists()


def test_rmtree_of_a_tree_with_an_unreadable_directory_removes_the_rest_and_does_not_raise(tmp_path: Path) -> None:
    (tmp_path / "t" / "locked").mkdir(parents=True)
    (tmp_path / "t" / "locked" / "x").write_text("x")
    (tmp_path / "t" / "y").write_text("y")
    (tmp_path / "t" / "locked").chmod(0)
    try:
        rmtree(str(tmp_path / "t"))
        if os.geteuid() == 0:
            assert not (tmp_path / "t").exists()
        else:
            assert not (tmp_path / "t" / "y").exists() and (tmp_path / "t" / "locked").exists()
    finally:
        if (tmp_path / "t" / "locked").exists():
            (tmp_path / "t" / "locked").chmod(0o700)


# ------------------------------------------------------------------ glob_match

_PATTERN_CHARS = st.text(alphabet="ab_*?", max_size=8)
_NAME_CHARS = st.text(alphabet="ab_", max_size=10)


@given(name=_NAME_CHARS, pattern=_PATTERN_CHARS)
def test_glob_match_agrees_with_fnmatchcase_on_star_and_question_mark_patterns(name: str, pattern: str) -> None:
    assert glob_match(name, pattern) == fnmatch.fnmatchcase(name, pattern)


@pytest.mark.parametrize(("name", "pattern"), [
    ("GITHUB_TOKEN", "*_TOKEN"), ("TOKEN", "*_TOKEN"), ("MY_SECRET_KEY", "*_SECRET_*"), ("AWS_SECRET", "AWS_*"),
    ("AWS", "AWS_*"), ("HOME", "HOME"), ("home", "HOME"), ("A", "?"), ("", "*"), ("", "?"), ("ABAB", "*AB*AB"),
    ("AB", "*AB*AB"), ("XAYB", "*A?B"), ("NPM_CONFIG__AUTH", "NPM_CONFIG_*AUTH*"), ("a.b", "a.b"), ("a+b", "a+b"),
])
def test_glob_match_agrees_with_fnmatchcase_on_the_variable_patterns_policies_use(name: str, pattern: str) -> None:
    assert glob_match(name, pattern) == fnmatch.fnmatchcase(name, pattern)


def test_glob_match_takes_a_bracket_literally_where_fnmatch_reads_a_class() -> None:
    # The one documented difference: env patterns have * and ? only.
    assert glob_match("A[B]", "A[B]") and not fnmatch.fnmatchcase("A[B]", "A[B]")


# ------------------------------------------------------------------ sha256


@pytest.mark.parametrize("data", [b"", b"abc", bytes(range(256)) * 100])
def test_sha256_hex_is_hashlib_sha256(data: bytes) -> None:
    assert sha256_hex(data) == hashlib.sha256(data).hexdigest()

