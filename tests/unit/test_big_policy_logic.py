"""The logic that keeps big policies linear: collapsing entries covered by
another, deciding which mounts safebox's mounter makes (``builder/bulk.py``),
and the proxy's indexed domain rules. Pure functions, plus ``resolve`` on a
real tree; the enforcement itself is tested in tests/security/test_big_policies.py."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safebox.builder.bulk import BULK_MIN, BulkOp, BulkPlan, split, split_sockets
from safebox.builder.paths import Nearest, by_depth, collapse
from safebox.builder.regions import Regions
from safebox.builder.resolve import HostFacts, pin_ancestors, resolve
from safebox.builder.resolved import Layers, ResolvedPolicy
from safebox.policy.effective import EffectivePolicy
from safebox.proxy.rules import HostError, NetworkRules, _matches, validate_pattern, validate_patterns
from safebox.run.mounter import encode


def test_an_entry_beneath_another_is_dropped_and_siblings_are_kept() -> None:
    paths = ["/a/b", "/a", "/a/b/c", "/ab", "/a b", "/a-b/c", "/x/y", "/x/z", "/x/y"]
    # "/ab", "/a b" and "/a-b" begin with "/a" but are not beneath it.
    assert collapse(paths) == ["/a", "/a b", "/a-b/c", "/ab", "/x/y", "/x/z"]


def test_the_nearest_member_at_or_above_a_path_is_found_by_walking_up() -> None:
    near = Nearest(["/a", "/a/b/c", "/"])
    assert near.at_or_above("/a/b/c/d") == "/a/b/c"
    assert near.above("/a/b/c") == "/a"
    assert near.at_or_above("/a/bc") == "/a"
    assert near.above("/a") == "/"
    assert Nearest(["/a"]).at_or_above("/ab") is None


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    for d in ("w/keep/x/inner", "w/keep/y/out", "w/keep/z", "secret/sub", "w/.git/hooks", "w/.git/objects",
              "w/.git/refs"):
        (tmp_path / d).mkdir(parents=True)
    for f in ("secret/f", "w/note", "w/.git/config", "w/.git/HEAD"):
        (tmp_path / f).write_text("x\n")
    return tmp_path


def _resolve(tree: Path, **kw: tuple[str, ...]) -> ResolvedPolicy:
    rg = shutil.which("rg")
    if rg is None:
        pytest.fail("ripgrep is a dependency (run `python3 build.py setup --tests`)")
    w = str(tree / "w")
    state = str(tree / "state")
    host = HostFacts(helper_path="/nonexistent/helper", self_paths=(), state_dir=state,
                     run_dir=state + "/run/1", policy_path=state + "/run/1/policy", rg_path=rg)
    policy = EffectivePolicy(allow_write=(w, *kw.pop("allow_write", ())), **kw)
    return resolve(policy, layers=Layers.BOTH, cwd=w, home=str(tree), host=host)


def test_resolve_collapses_each_kind_and_keeps_a_deny_beneath_an_allow(tree: Path) -> None:
    w = tree / "w"
    rp = _resolve(tree, deny_write=(str(w / "keep/x"), str(w / "keep/x/inner"), str(w / "keep/z")),
                  deny_read=(str(tree / "secret"), str(tree / "secret/sub"), str(tree / "secret/f"),
                             str(w / "note")))
    # A denyWrite beneath a write root is kept (it is what makes it read-only);
    # one beneath another denyWrite adds nothing.
    assert str(w / "keep/x") in rp.read_only and str(w / "keep/z") in rp.read_only
    assert str(w / "keep/x/inner") not in rp.read_only
    # A mask covers what lies beneath it: one dir, not its sub dir nor its file.
    assert rp.mask_dirs == (str(tree / "secret"),)
    assert rp.mask_files == (str(w / "note"),)  # a denyRead file inside the write root
    # The parent of the read-only entries is pinned (cannot be renamed away);
    # nothing inside a read-only entry is.
    assert str(w / "keep") in rp.pinned_dirs
    assert not any(p.startswith(str(w / "keep/x") + "/") for p in rp.pinned_dirs)


def test_a_write_root_inside_a_deny_write_dir_stays_read_only(tree: Path) -> None:
    w = tree / "w"
    inner = str(w / "keep/y/out")
    rp = _resolve(tree, deny_write=(str(w / "keep/y"),), allow_write=(inner,))
    many = rp.replace(read_only=rp.read_only + tuple(f"{w}/many/e{i}" for i in range(BULK_MIN)))
    left, plan = split(many)
    # The nested root is not bound at all: the outer root's bind carries it,
    # and the read-only bind of keep/y (bubblewrap's order: after the roots)
    # makes it read-only as before.
    assert inner not in left.write_roots and (BulkOp.WRITE, inner) not in plan.ops
    assert (BulkOp.READ_ONLY, str(w / "keep/y")) in plan.ops


def _big(**kw: object) -> ResolvedPolicy:
    base: dict[str, object] = dict(
        layers=Layers.BOTH, cwd="/home/u/proj", write_roots=("/home/u/proj", "/srv/out"), read_only=(),
        sealed_dirs=(), run_dir="/home/u/.cache/safebox/run/1", helper_path="/opt/sb/helper",
        policy_path="/home/u/.cache/safebox/run/1/policy")
    base.update(kw)
    return ResolvedPolicy(**base)  # type: ignore[arg-type]


ENTRIES = tuple(f"/home/u/proj/gen/p{i // 100}/e{i % 100}" for i in range(200))


# Paths over a small alphabet, so that nesting, shared parents, look-alike
# prefixes ("/a" and "/ab", "/a b") and "/" itself come up often.
PATH = st.lists(st.sampled_from(["a", "b", "ab", "a b"]), max_size=4).map(lambda parts: "/" + "/".join(parts))


def _slow_above(paths: list[str], p: str) -> str | None:
    """The deepest of ``paths`` strictly above ``p``, by testing every one."""
    above = [q for q in set(paths) if q != p and (q == "/" or p.startswith(q + "/"))]
    return max(above, key=len) if above else None


@settings(max_examples=400, deadline=None)
@given(st.lists(PATH, max_size=10), st.lists(PATH, max_size=10))
def test_the_questions_asked_once_per_parent_answer_as_asking_each_path_does(members: list[str],
                                                                               queries: list[str]) -> None:
    # builder/paths.py answers for a path from its parent, cached per parent
    # (10,000 entries share a hundred parents); the answer must be the one
    # asking each path alone gives.
    near = Nearest(members)
    assert near.covered(queries) == [q for q in queries if q in members or _slow_above(members, q) is not None]
    assert sorted(near.below_none()) == sorted({m for m in members if _slow_above(members, m) is None})
    assert collapse(members) == sorted({m for m in members if _slow_above(members, m) is None})
    assert collapse(members, shallow_first=True) == sorted(collapse(members), key=lambda p: (p.count("/"), p))
    assert by_depth(queries) == sorted(queries, key=lambda p: (p.count("/"), p))


@settings(max_examples=400, deadline=None)
@given(st.lists(PATH, max_size=8), st.lists(PATH, max_size=5), st.lists(PATH, max_size=10))
def test_read_regions_asked_once_per_parent_answer_as_the_nearest_entry_decides(deny: list[str], allow: list[str],
                                                                                queries: list[str]) -> None:
    def slow_readable(p: str) -> bool:
        # The nearest entry at or above p decides; allowRead beats denyRead at one path.
        entries = {**{d: False for d in deny}, **{a: True for a in allow}}
        d = p
        while True:
            if d in entries:
                return entries[d]
            if d == "/":
                return True
            d = d.rsplit("/", 1)[0] or "/"

    regions = Regions(deny, allow)
    assert [q for q in queries if regions.readable(q)] == [q for q in queries if slow_readable(q)]
    assert regions.readable_only(queries) == [q for q in queries if slow_readable(q)]
    assert list(regions.denies) == sorted(regions.denies, key=lambda p: (p.count("/"), p))


@settings(max_examples=300, deadline=None)
@given(st.lists(PATH, max_size=10), st.lists(PATH, min_size=1, max_size=4))
def test_pins_asked_once_per_parent_are_every_directory_between_the_outermost_root_and_a_path(
        paths: list[str], roots: list[str]) -> None:
    want: set[str] = set()
    for p in paths:
        outer, a = None, _slow_above(roots, p)
        while a is not None:
            outer, a = a, _slow_above(roots, a)
        if outer is None:
            continue
        d = p.rsplit("/", 1)[0] or "/"
        while d != outer:
            want.add(d)
            d = d.rsplit("/", 1)[0] or "/"
    assert pin_ancestors(paths, roots) == sorted(want, key=lambda p: (p.count("/"), p))


def test_a_small_policy_is_left_entirely_to_bubblewrap() -> None:
    rp = _big(read_only=ENTRIES[:BULK_MIN - 2])  # with /srv/out: one short
    left, plan = split(rp)
    assert left is rp and plan.ops == ()


def test_the_mounter_gets_ancestors_first_and_never_a_path_beneath_a_later_one() -> None:
    rp = _big(read_only=ENTRIES, pinned_dirs=("/home/u/proj/gen", "/home/u/proj/gen/p0", "/home/u/proj/gen/p1"),
              mask_dirs=("/home/u/proj/gen/p0/e5/secret", "/home/u/.ssh"), mask_files=("/etc/shadow",))
    left, plan = split(rp)
    done: list[str] = []
    for _, p in plan.ops:
        # The mounter binds each entry from a copy taken before the first: an
        # earlier entry beneath a later one would be covered by the copy.
        assert not any(d.startswith(p + "/") or d == p for d in done), p
        done.append(p)
    assert [op for op, _ in plan.ops][:2] == [BulkOp.WRITE, BulkOp.PIN]
    assert (BulkOp.WRITE, "/srv/out") in plan.ops
    # Every entry is made exactly once, by one of the two.
    moved = [p for _, p in plan.ops]
    assert len(moved) == len(set(moved))
    for field in ("read_only", "pinned_dirs", "mask_dirs", "mask_files"):
        for p in getattr(rp, field):
            assert (p in getattr(left, field)) != (p in moved), (field, p)


def test_entries_at_or_above_the_working_directory_stay_with_bubblewrap() -> None:
    # bubblewrap chdirs the command before the mounter runs: a mount over its
    # directory would not be seen through it.
    rp = _big(cwd="/home/u/proj/gen/p0", read_only=ENTRIES, pinned_dirs=("/home/u/proj/gen", "/home/u/proj/gen/p0"))
    left, plan = split(rp)
    assert left.write_roots == ("/home/u/proj",) and left.pinned_dirs == ("/home/u/proj/gen", "/home/u/proj/gen/p0")
    assert (BulkOp.READ_ONLY, "/home/u/proj/gen/p0/e1") in plan.ops


def test_a_mask_or_read_only_entry_holding_what_bubblewrap_mounts_last_stays_with_it() -> None:
    rp = _big(read_only=(*ENTRIES, "/home/u/proj/sock-dir"), mask_dirs=("/home/u/.cache",),
              socket_binds=("/home/u/proj/sock-dir/agent.sock",))
    left, plan = split(rp)
    assert left.mask_dirs == ("/home/u/.cache",)  # holds the run dir, bound after the masks
    assert left.read_only == ("/home/u/proj/sock-dir",)  # holds an allowed socket, bound read-write after
    assert len(plan.ops) == len(ENTRIES) + 1  # the rest, and /srv/out


def test_under_the_private_tmp_only_what_a_host_bound_write_root_shows_moves() -> None:
    rp = _big(cwd="/tmp/job/w", write_roots=("/tmp/job/w", "/tmp/other"),
              mask_dirs=tuple(f"/tmp/job/w/s{i}" for i in range(BULK_MIN)) + ("/tmp/loose",),
              mask_files=("/dev/shm/x", "/proc/kallsyms"))
    left, plan = split(rp)
    moved = {p for _, p in plan.ops}
    assert {f"/tmp/job/w/s{i}" for i in range(BULK_MIN)} <= moved  # visible through the bound root
    assert "/tmp/loose" in left.mask_dirs  # absent in the sandbox: bubblewrap's builder decides
    assert set(left.write_roots) == {"/tmp/job/w", "/tmp/other"}  # from the host's view: bubblewrap binds them
    assert set(left.mask_files) == {"/dev/shm/x", "/proc/kallsyms"}  # bubblewrap's own /dev and /proc


def test_a_write_root_holding_a_host_mount_point_stays_with_bubblewrap() -> None:
    rp = _big(read_only=ENTRIES, write_roots=("/home/u/proj", "/srv/out", "/srv/data"))
    left, plan = split(rp, host_mounts=frozenset({"/", "/srv/data/disk"}))
    assert "/srv/data" in left.write_roots and (BulkOp.WRITE, "/srv/out") in plan.ops


STATE = "/home/u/.cache/safebox"


def test_a_write_root_at_a_read_only_bind_bubblewrap_keeps_stays_with_bubblewrap() -> None:
    """Issue 22's review: the state dir holds the run dir, so bubblewrap
    keeps its read-only bind; the mounter's write bind of the same path,
    made after it, made the state dir writable."""
    rp = _big(read_only=(*ENTRIES, STATE), write_roots=("/home/u/proj", "/srv/out", STATE))
    left, plan = split(rp)
    assert STATE in left.read_only and STATE in left.write_roots
    assert (BulkOp.WRITE, STATE) not in plan.ops and (BulkOp.WRITE, "/srv/out") in plan.ops


def test_a_write_root_above_the_run_dir_stays_with_bubblewrap() -> None:
    """The mounter's scratch is the run dir: a write root bound above it
    would hide it, and the copy could not be found there to detach."""
    rp = _big(read_only=ENTRIES, write_roots=("/home/u/proj", "/srv/out", "/home/u/.cache"))
    left, plan = split(rp)
    assert "/home/u/.cache" in left.write_roots
    assert not any(op is BulkOp.WRITE and (plan.scratch + "/").startswith(p + "/") for op, p in plan.ops)


def test_a_moved_write_root_holds_nothing_bubblewrap_mounts_so_read_only_comes_after_it() -> None:
    # Whatever bubblewrap keeps (a read-only entry above the working dir,
    # a sealed .git, a preset cache, an overlay) pins the root above it to
    # bubblewrap, which binds roots first.
    keep = {"read_only": ("/srv/a/ro",), "sealed_dirs": (("/srv/b/.git", ("/srv/b/.git/objects",)),),
            "cache_dirs": ("/srv/c/cache",), "overlays": (("/run/copy", "/srv/d/.git/config"),)}
    roots = ("/home/u/proj", "/srv/a", "/srv/b", "/srv/c", "/srv/d", "/srv/out")
    rp = _big(cwd="/srv/a/ro/x", read_only=(*ENTRIES, "/srv/a/ro"), write_roots=roots,
              **{k: v for k, v in keep.items() if k != "read_only"})
    left, plan = split(rp)
    assert {"/srv/a", "/srv/b", "/srv/c", "/srv/d"} <= set(left.write_roots)
    assert (BulkOp.WRITE, "/srv/out") in plan.ops
    kept = [*left.read_only, *left.mask_dirs, *left.mask_files, *left.pinned_dirs]
    for op, w in plan.ops:
        if op is BulkOp.WRITE:
            assert not any(k == w or k.startswith(w + "/") for k in kept), (w, kept)


def test_the_mounter_masks_a_file_with_the_empty_file_of_the_policy() -> None:
    rp = _big(read_only=ENTRIES, mask_files=("/etc/shadow",), empty_file="/home/u/.cache/safebox/run/1/empty")
    _, plan = split(rp)
    assert plan.empty == "/home/u/.cache/safebox/run/1/empty" and (BulkOp.MASK_FILE, "/etc/shadow") in plan.ops
    assert encode(plan).startswith(b"S\0/home/u/.cache/safebox/run/1\0E\0/home/u/.cache/safebox/run/1/empty\0")


RUN = "/home/u/.cache/safebox/run/1"
SOCKETS = ("/run/docker.sock", "/var/tmp/other-run/daemon.sock", f"{RUN}/http-proxy.sock", "/tmp/x.sock",
           "/home/u/proj/tmp/agent.sock")


def test_the_host_sockets_masks_go_to_the_mounter_however_small_the_policy() -> None:
    # Listed before the sandbox exists: one gone by its mount must not fail
    # the start (the mounter skips it), so none is bubblewrap's, even in a
    # policy too small for the mounter's other mounts.
    rp = _big(mask_files=("/etc/shadow", *SOCKETS), socket_masks=SOCKETS, empty_file=f"{RUN}/empty",
              private_tmp=("/tmp",))
    left, ops = split_sockets(rp)
    assert ops == ((BulkOp.MASK_SOCKET, "/run/docker.sock"), (BulkOp.MASK_SOCKET, "/var/tmp/other-run/daemon.sock"),
                   (BulkOp.MASK_SOCKET, "/home/u/proj/tmp/agent.sock"))
    # This run's own proxy sockets lie beneath its run dir, which bubblewrap
    # binds after the masks (it covered their masks: the --without helper
    # bridges connect there); under the private /tmp a host socket is absent.
    # Neither gets a mask from either; every other mask stays bubblewrap's.
    assert left.mask_files == ("/etc/shadow",)
    assert left.replace(mask_files=rp.mask_files) == rp


def test_without_host_sockets_to_hide_or_without_bubblewrap_no_socket_mask_moves() -> None:
    rp = _big(mask_files=("/etc/shadow",))
    assert split_sockets(rp) == (rp, ())
    rp = _big(layers=Layers.HELPER_ONLY, mask_files=SOCKETS, socket_masks=SOCKETS)
    assert split_sockets(rp) == (rp, ())


def test_the_mounters_plan_marks_a_socket_mask_apart_from_a_file_mask() -> None:
    rp = _big(mask_files=SOCKETS[:1], socket_masks=SOCKETS[:1], empty_file=f"{RUN}/empty")
    _, ops = split_sockets(rp)
    assert encode(BulkPlan(ops=ops, scratch=RUN, empty=rp.empty_file)) == (
        f"S\0{RUN}\0E\0{RUN}/empty\0U\0/run/docker.sock\0".encode())


def test_without_bubblewrap_nothing_moves() -> None:
    rp = _big(layers=Layers.HELPER_ONLY, read_only=ENTRIES)
    assert split(rp)[1].ops == ()


# Domains: a list that is already canonical is checked in one pass; it must
# say exactly what the entry-by-entry check says.
LABEL = st.text(alphabet="abcxyz019-_", min_size=1, max_size=6)
PATTERN = st.builds(lambda wild, labels, tld: ("*." if wild else "") + ".".join([*labels, tld]),
                    st.booleans(), st.lists(LABEL, max_size=3),
                    st.sampled_from(["com", "org", "x9", "9x", "0x1f", "123", "xn--p1ai", "Com", "c-", "_t"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(PATTERN, st.text(max_size=12)), max_size=8))
def test_the_one_pass_check_of_a_domain_list_agrees_with_the_entry_by_entry_one(patterns: list[str]) -> None:
    try:
        want: tuple[str, ...] | type[Exception] = tuple(validate_pattern(p) for p in patterns)
    except HostError:
        want = HostError
    try:
        got: tuple[str, ...] | type[Exception] = validate_patterns(patterns)
    except HostError:
        got = HostError
    assert got == want


@settings(max_examples=300, deadline=None)
@given(st.lists(PATTERN, max_size=10), st.lists(PATTERN, max_size=5),
       st.lists(st.one_of(PATTERN, LABEL), min_size=1, max_size=6))
def test_the_indexed_domain_rules_decide_as_the_list_scan_did(allowed: list[str], denied: list[str],
                                                              hosts: list[str]) -> None:
    try:
        rules = NetworkRules.from_policy(allowed, denied)
    except HostError:
        return
    for host in hosts:
        host = host.removeprefix("*.")
        try:
            name = validate_pattern(host)
        except HostError:
            continue
        if name[-1:].isdigit():
            continue  # an address literal: decided by the address rules
        first_denied = next((p for p in rules.denied if _matches(name, p)), None)
        first_allowed = next((p for p in rules.allowed if _matches(name, p)), None)
        d = rules.check_host(host)
        if first_denied is not None:
            assert not d.allowed and repr(first_denied) in d.reason
        elif first_allowed is not None:
            assert d.allowed and repr(first_allowed) in d.reason
        else:
            assert not d.allowed and "is not in" in d.reason


def test_ten_thousand_domains_are_canonicalised_in_one_pass() -> None:
    names = [f"h{i}.example{i % 97}.com" for i in range(10_000)]
    rules = NetworkRules.from_policy(names, [f"*.d{i}.example.org" for i in range(10_000)])
    assert rules.allowed == tuple(names)
    assert rules.check_host(f"h9999.example{9999 % 97}.com").allowed
    assert not rules.check_host("h9999.example9.com").allowed
    assert not rules.check_host("a.d5.example.org").allowed


def test_absent_top_names_are_watched_per_root_and_expanded_only_where_created(tmp_path: Path) -> None:
    from safebox.builder.resolve import top_candidates

    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / ".envrc").write_text("planted\n")  # created during the run
    (a / ".config").mkdir()  # created during the run: its protected entries are candidates
    (b / ".envrc").write_text("was there\n")  # present before: not in b's absent names
    got = top_candidates([(str(a), (".envrc", ".config", ".vscode")), (str(b), (".vscode",)),
                          (str(tmp_path / "gone"), (".envrc",))])
    assert str(a / ".envrc") in got and str(a / ".config/git") in got and str(a / ".config/fish") in got
    assert not any(p.startswith(str(b)) for p in got)
    assert str(a / ".vscode") not in got  # still absent
