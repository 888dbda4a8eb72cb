"""``safebox-helper --dir-keys`` (``safebox.builder.dirkeys``): the lstats of a big
work tree's directories on the helper's workers give exactly the answer
the same lstats give in Python, and any answer the helper cannot give
falls back to Python, never to "nothing changed".

Real helper, real directories; ``MIN_HELPED`` is lowered so that a small
tree is sent to the helper (the control that it ran: ``_proc``)."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import time
from pathlib import Path

import pytest

from safebox.builder import dirkeys


@pytest.fixture
def dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    assert dirkeys.helper_path() is not None, "the helper is not installed: run `python3 build.py setup`"
    monkeypatch.setattr(dirkeys, "MIN_HELPED", 1)
    out = []
    for i in range(40):
        d = tmp_path / "t" / f"d{i % 5}" / f"e{i}"
        d.mkdir(parents=True)
        out.append(os.fsencode(d))
    return out


def _keys(paths: list[bytes]) -> bytes:
    return dirkeys.pack_keys([(st.st_dev, st.st_ino, st.st_ctime_ns) for st in map(os.lstat, paths)])


def _same(paths: list[bytes], keys: bytes) -> tuple[bool, bool]:
    """(the helper's answer, Python's) for the same request."""
    helped = dirkeys.Same(b"\0".join(paths), keys)
    assert helped._proc is not None  # control: the helper ran
    answer = helped.result()
    saved = dirkeys.helper_path
    try:
        dirkeys.helper_path = lambda: None  # type: ignore[assignment]
        alone = dirkeys.Same(b"\0".join(paths), keys)
        assert alone._proc is None
        return answer, alone.result()
    finally:
        dirkeys.helper_path = saved  # type: ignore[assignment]


def test_an_unchanged_tree_is_the_same_on_the_helper_and_in_python(dirs: list[bytes]) -> None:
    assert _same(dirs, _keys(dirs)) == (True, True)


@pytest.mark.parametrize("change", ["chmod", "rmdir", "replaced", "a file in it"])
def test_every_change_to_a_directory_is_a_difference_on_the_helper_and_in_python(dirs: list[bytes],
                                                                                  change: str) -> None:
    keys = _keys(dirs)
    time.sleep(0.02)  # a tick of the file clock
    d = dirs[23]
    if change == "chmod":
        os.chmod(d, 0o750)
    elif change == "rmdir":
        os.rmdir(d)
    elif change == "replaced":
        os.rename(d, d + b".old")
        os.mkdir(d)
    else:
        (Path(os.fsdecode(d)) / "x").write_text("x\n")
    assert _same(dirs, keys) == (False, False)


def test_the_directories_changed_since_are_those_python_finds(dirs: list[bytes], tmp_path: Path) -> None:
    time.sleep(0.05)  # the tree older than the coarse file clock's ticks
    floor = time.clock_gettime_ns(5)
    time.sleep(0.02)
    (Path(os.fsdecode(dirs[3])) / "new").write_text("x\n")
    os.chmod(dirs[31], 0o700)
    shutil.rmtree(os.fsdecode(dirs[17]))
    (tmp_path / "file").write_text("x\n")
    paths = [*dirs, os.fsencode(tmp_path / "file")]
    os.utime(paths[-1])  # a new ctime, but not a directory
    helped = dirkeys.changed_since(paths, floor)
    alone = [p for p in paths if os.path.isdir(p) and not os.path.islink(p) and os.lstat(p).st_ctime_ns >= floor]
    assert helped == alone == [dirs[3], dirs[31]]


def test_a_request_the_helper_refuses_falls_back_to_python(dirs: list[bytes]) -> None:
    assert dirkeys.changed_since([*dirs, b""], 0) is None  # an empty path: refused, the caller lstats
    assert dirkeys.changed_since([*dirs, b"/a\0b"], 0) is None  # a NUL inside: counted as two, refused
    keys = _keys(dirs)
    s = dirkeys.Same(b"\0".join([*dirs[:-1], b""]), keys)
    assert s.result() is False  # refused by the helper; Python finds no such directory


@pytest.mark.parametrize(("request_bytes", "why"), [
    (b"short", "shorter than its header"),
    (struct.pack("=8sIIq", b"sbdkeys9", 2, 1, 0) + b"/a\0", "not a dir-keys request"),
    (struct.pack("=8sIIq", b"sbdkeys1", 2, 2, 0) + b"/a\0", "fewer paths than its count"),
    (struct.pack("=8sIIq", b"sbdkeys1", 1, 1, 0) + b"/a\0", "shorter than its keys"),
], ids=["short", "magic", "count", "keys"])
def test_the_helper_refuses_a_malformed_request_with_one_line(request_bytes: bytes, why: str) -> None:
    helper = dirkeys.helper_path()
    assert helper is not None
    r = subprocess.run([helper, "--dir-keys"], input=request_bytes, capture_output=True, check=False)
    assert (r.returncode, r.stdout) == (2, b"")
    assert r.stderr.decode() == f"safebox-helper: --dir-keys: bad request: {why}\n"
