"""apply's room check (safebox.review.apply._check_space): what it counts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from safebox.errors import RunError
from safebox.review import apply
from safebox.review.layer import Change
from safebox.review.store import Held


def _held(tmp_path: Path, **meta: object) -> tuple[Held, list[Change]]:
    root = tmp_path / "root"
    root.mkdir()
    h = Held(id="20260101-000000-abcdef", dir=str(tmp_path / "held"), meta={"roots": [str(root)], **meta})
    os.makedirs(h.upper(0))
    return h, [Change(root=str(root), layer=0, rel="big", kind="added", type="file", size=1 << 20)]


class _Full:
    f_bavail, f_frsize = 0, 4096


def test_a_layer_on_its_roots_file_system_needs_no_room_once_its_run_ended(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h, cs = _held(tmp_path, exit=0)
    monkeypatch.setattr(os, "statvfs", lambda _p: _Full())
    apply._check_space(h, cs)  # moved: no bytes written


def test_a_run_still_going_is_copied_so_its_files_need_room(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    h, cs = _held(tmp_path, exit=None)
    monkeypatch.setattr(os, "statvfs", lambda _p: _Full())
    with pytest.raises(RunError, match="the changes need 1048576 bytes under"):
        apply._check_space(h, cs)
