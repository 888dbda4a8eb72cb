"""``links_on_the_way``: every symlink resolving a path follows, with its
directory already resolved (what refuse_planted_links judges), and the
memory of earlier runs' write roots."""

from __future__ import annotations

import os
from pathlib import Path

from safebox.builder import resolve
from safebox.builder.resolve import links_on_the_way, read_write_roots, remember_write_roots


def test_a_chain_of_relative_and_absolute_links_is_listed_in_order(tmp_path: Path) -> None:
    (tmp_path / "real" / "sub").mkdir(parents=True)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a").symlink_to("b")
    (tmp_path / "ws" / "b").symlink_to(tmp_path / "mid")
    (tmp_path / "mid").symlink_to("real/../real")
    target = tmp_path / "ws" / "a" / "sub"
    assert links_on_the_way(str(target)) == [
        (str(tmp_path / "ws" / "a"), "b"),
        (str(tmp_path / "ws" / "b"), str(tmp_path / "mid")),
        (str(tmp_path / "mid"), "real/../real"),
    ]
    assert os.path.realpath(target) == str(tmp_path / "real" / "sub")


def test_a_link_is_reported_with_the_directory_it_really_lies_in(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to("real")
    (tmp_path / "real" / "build").symlink_to("/nonexistent-x")
    got = links_on_the_way(str(tmp_path / "alias" / "build" / "deeper"))
    assert got == [(str(tmp_path / "alias"), "real"), (str(tmp_path / "real" / "build"), "/nonexistent-x")]


def test_a_path_without_links_has_none(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    assert links_on_the_way(str(tmp_path / "d" / "missing" / "x")) == []


def test_a_loop_ends_the_walk_instead_of_hanging(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    got = links_on_the_way(str(tmp_path / "a" / "x"))
    assert 0 < len(got) <= 41 and got[0] == (str(tmp_path / "a"), "b")


def test_write_roots_keep_the_time_they_were_first_granted(tmp_path: Path) -> None:
    mem = str(tmp_path / "write-roots")
    r1, r2 = tmp_path / "r1", tmp_path / "r2"
    r1.mkdir()
    r2.mkdir()
    remember_write_roots(mem, read_write_roots(mem), (str(r1),), 100.0)
    remember_write_roots(mem, read_write_roots(mem), (str(r1), str(r2)), 200.0)
    assert read_write_roots(mem) == {str(r2): 200.0, str(r1): 100.0}
    assert (os.stat(mem).st_mode & 0o777) == 0o600
    before = os.stat(mem).st_mtime_ns
    remember_write_roots(mem, read_write_roots(mem), (str(r2), str(r1)), 300.0)
    assert os.stat(mem).st_mtime_ns == before  # nothing new: not rewritten


def test_the_write_roots_memory_stays_bounded(tmp_path: Path) -> None:
    mem = str(tmp_path / "write-roots")
    roots = []
    for i in range(resolve._KNOWN_MAX + 10):
        r = tmp_path / f"r{i}"
        r.mkdir()
        roots.append(str(r))
    for i in range(0, len(roots), 500):
        remember_write_roots(mem, read_write_roots(mem), tuple(roots[i:i + 500]), float(i))
    got = read_write_roots(mem)
    assert len(got) <= resolve._KNOWN_MAX
    assert os.path.getsize(mem) <= resolve._KNOWN_MAX_BYTES
    assert roots[-1] in got and roots[0] not in got  # the least recently added are forgotten
    # A cut-short last line is ignored, not read as a shorter path.
    with open(mem, "ab") as f:
        f.write(b"1.0 " + os.fsencode(roots[-1]).hex()[:-4].encode())
    assert os.fsdecode(bytes.fromhex(os.fsencode(roots[-1]).hex()[:-4])) not in read_write_roots(mem)


def test_the_write_roots_memory_bound_in_the_guide_is_the_codes() -> None:
    guide = (Path(__file__).resolve().parents[2] / "docs" / "index.md").read_text()
    row = (f"| remembered write roots (`write-roots`) | {resolve._KNOWN_MAX} entries and "
           f"{resolve._KNOWN_MAX_BYTES >> 20} MiB |")
    assert row in guide
