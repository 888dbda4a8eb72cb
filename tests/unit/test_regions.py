"""srt's deny-then-allow reads as regions (builder/regions.py): which entries
change anything, which paths are readable, and what a grant leaves out."""

from __future__ import annotations

import pytest

from safebox.builder.regions import Regions

H = "/home/u"


def test_allow_read_beats_the_deny_read_region_it_lies_in() -> None:
    r = Regions([H], [f"{H}/proj"])
    assert r.denies == (H,) and r.allows == (f"{H}/proj",)
    assert not r.readable(H) and not r.readable(f"{H}/other/x")
    assert r.readable(f"{H}/proj") and r.readable(f"{H}/proj/src/a.c")
    assert r.readable("/usr/bin") and r.readable("/home")


def test_a_deny_more_specific_than_the_allow_region_still_wins() -> None:
    r = Regions([H, f"{H}/proj/secrets"], [f"{H}/proj"])
    assert r.denies == (H, f"{H}/proj/secrets")
    assert not r.readable(f"{H}/proj/secrets/k") and r.readable(f"{H}/proj/src")


def test_an_entry_in_both_lists_is_readable() -> None:
    r = Regions([f"{H}/.ssh"], [f"{H}/.ssh"])
    assert r.denies == () and r.allows == () and r.readable(f"{H}/.ssh/id_rsa")


def test_entries_that_change_nothing_are_dropped() -> None:
    # A deny inside a deny; an allow where reading is allowed already.
    r = Regions([H, f"{H}/.ssh", "/etc/shadow"], ["/usr", f"{H}/proj", f"{H}/proj/src"])
    assert r.denies == ("/etc/shadow", H) or r.denies == (H, "/etc/shadow")
    assert set(r.denies) == {H, "/etc/shadow"} and r.allows == (f"{H}/proj",)


def test_regions_alternate_down_a_branch() -> None:
    r = Regions([H, f"{H}/p/vendor", f"{H}/p/vendor/x/secret"], [f"{H}/p", f"{H}/p/vendor/x"])
    assert r.denies == (H, f"{H}/p/vendor", f"{H}/p/vendor/x/secret")
    assert r.allows == (f"{H}/p", f"{H}/p/vendor/x")
    assert [r.readable(p) for p in (H, f"{H}/p", f"{H}/p/vendor", f"{H}/p/vendor/x", f"{H}/p/vendor/x/secret")] \
        == [False, True, False, True, False]
    assert r.deny_over(f"{H}/p/vendor/y") == f"{H}/p/vendor" and r.deny_over(f"{H}/p/a") is None
    assert r.carve_out_over(f"{H}/p/vendor/y") == f"{H}/p" and r.carve_out_over("/usr") is None


@pytest.mark.parametrize(("top", "denies", "allows"), [
    ("/", [H], [f"{H}/p", f"{H}/p/vendor/x"]),
    (f"{H}/p", [f"{H}/p/vendor"], [f"{H}/p/vendor/x"]),
    (f"{H}/p/vendor/x", [f"{H}/p/vendor/x/secret"], []),
    (f"{H}/p/src", [], []),
])
def test_a_grant_leaves_out_only_the_denies_directly_inside_it(top: str, denies: list[str],
                                                               allows: list[str]) -> None:
    r = Regions([H, f"{H}/p/vendor", f"{H}/p/vendor/x/secret"], [f"{H}/p", f"{H}/p/vendor/x"])
    assert r.denies_in(top) == denies
    assert r.allows_in(top) == allows


def test_a_write_root_between_entries_leaves_out_the_denies_of_its_region() -> None:
    # A write root (not an entry) inside the carve-out: the deny below it is its own to leave out.
    r = Regions([H, f"{H}/p/build/cache"], [f"{H}/p"])
    assert r.denies_in(f"{H}/p/build") == [f"{H}/p/build/cache"]
