"""Per-sandbox limits, the pure parts: value syntax, layering, the choice of
mechanism per host, the bwrap argv and the helper policy lines. The limits
themselves are tested for real in tests/security/test_limits.py."""

from __future__ import annotations

import json
import os

import pytest

from safebox.builder.bwrap import mount_args
from safebox.builder.helper_policy import FsAccess, HelperPolicy, NetMode, render
from safebox.builder.resolved import Layers, ResolvedPolicy
from safebox.errors import BuildError, PolicyError
from safebox.policy import limit_values
from safebox.policy.limit_values import GiB, KiB, MiB
from safebox.policy.load import Context, Flags, Layer, load, policy_document, validate_layer
from safebox.run import cgroups, limits
from safebox.run.cgroups import CgroupSite
from safebox.run.limits import HostFacts, LimitError

# ------------------------------------------------------------------ value syntax


@pytest.mark.parametrize("text, expected", [
    ("2GiB", 2 * GiB), ("2G", 2 * GiB), ("2g", 2 * GiB), ("512MiB", 512 * MiB), ("512 MiB", 512 * MiB),
    ("1.5GiB", 3 * GiB // 2), ("64k", 64 * KiB), ("1TiB", 1 << 40), ("2GB", 2_000_000_000), ("1000kB", 1_000_000),
    ("4096", 4096), ("4096b", 4096), (4096, 4096), ("unlimited", 0), (" Unlimited ", 0),
])
def test_sizes_are_read_in_binary_and_decimal_units(text: object, expected: int) -> None:
    assert limit_values.parse_size(text) == expected


@pytest.mark.parametrize("text, message", [
    ("2XB", "not a size: give bytes, or a number with a unit"),
    ("", "not a size"), ("GiB", "not a size"), ("1..5G", "not a size"), (".5G", "not a size"),
    ("-1", "not a size"), ("2 G B", "not a size"),
    (0, 'must be more than 0 (no limit is "unlimited")'),
    (True, "must be a size, not true/false"), ([1], "must be a size, not a list"),
    (1.5, "must be a size, not a float"), (1 << 63, "too large"),
])
def test_a_bad_size_says_what_a_size_looks_like(text: object, message: str) -> None:
    with pytest.raises(ValueError) as e:
        limit_values.parse_size(text)
    assert message in str(e.value)


@pytest.mark.parametrize("text, expected", [
    ("90s", 90), ("30m", 1800), ("2h", 7200), ("1h30m", 5400), ("1d", 86400), ("1.5h", 5400), ("45", 45),
    (45, 45), (0.5, 0.5), ("2m30s", 150), ("unlimited", 0),
])
def test_durations_are_seconds_or_units_largest_first(text: object, expected: float) -> None:
    assert limit_values.parse_duration(text) == expected


@pytest.mark.parametrize("text, message", [
    ("30m1h", "not a duration"), ("1h30", "not a duration"), ("m", "not a duration"), ("1w", "not a duration"),
    ("1h1h", "not a duration"), (0, "must be more than 0 seconds"), (-5, "must be more than 0 seconds"),
    ("366d", "too long"), (None, "must be a duration, not a NoneType"), (False, "not true/false"),
])
def test_a_bad_duration_says_what_a_duration_looks_like(text: object, message: str) -> None:
    with pytest.raises(ValueError) as e:
        limit_values.parse_duration(text)
    assert message in str(e.value)


def test_process_counts_are_bounded_by_what_can_start_and_pid_max() -> None:
    assert limit_values.parse_count(64) == limit_values.parse_count("64") == 64
    assert limit_values.parse_count("unlimited") == 0
    for bad in (7, 4_194_305, "64k", 1.0, True):
        with pytest.raises(ValueError):
            limit_values.parse_count(bad)


def test_memory_and_tmp_size_have_floors_below_which_nothing_starts() -> None:
    with pytest.raises(ValueError, match="too small: at least 16 MiB"):
        limit_values.check_value("memory", "8MiB")
    with pytest.raises(ValueError, match="too small: at least 1 MiB"):
        limit_values.check_value("tmpSize", 4096)
    limit_values.check_value("memory", "unlimited")


@pytest.mark.parametrize("key, value, shown", [
    ("memory", 2 * GiB, "2 GiB"), ("memory", 3 * GiB // 2, "1.5 GiB"), ("tmpSize", 1000, "1000 bytes"),
    ("wallTime", 5400, "1h30m"), ("wallTime", 90, "1m30s"), ("wallTime", 1.5, "1.5s"), ("processes", 64, "64"),
    ("memory", 0, "unlimited"),
])
def test_values_are_shown_as_a_policy_would_spell_them(key: str, value: float, shown: str) -> None:
    assert limit_values.human(key, value) == shown


def test_the_default_tmp_size_is_a_quarter_of_the_ram_at_most_4_gib(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(limit_values, "ram_bytes", lambda: 8 * GiB)
    assert limit_values.default("tmpSize") == 2 * GiB
    monkeypatch.setattr(limit_values, "ram_bytes", lambda: 64 * GiB)
    assert limit_values.default("tmpSize") == 4 * GiB
    assert limit_values.default("processes") == 4096
    assert limit_values.default("memory") == limit_values.default("wallTime") == 0


# ------------------------------------------------------------------ policy layers


def _ctx(tmp_path, monkeypatch, user: dict | None = None, project: dict | None = None) -> Context:
    home, cwd = tmp_path / "home", tmp_path / "proj"
    home.mkdir()
    cwd.mkdir()
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    if user is not None:
        (home / ".config" / "safebox").mkdir(parents=True)
        (home / ".config" / "safebox" / "policy.json").write_text(json.dumps(user))
    if project is not None:
        (cwd / ".safebox.json").write_text(json.dumps(project))
    return Context(cwd=str(cwd), home=str(home))


def test_limits_from_a_file_are_normalised_and_flags_win(tmp_path, monkeypatch) -> None:
    ctx = _ctx(tmp_path, monkeypatch, user={"limits": {"processes": 256, "memory": "2GiB", "tmpSize": "512M",
                                                       "wallTime": "1h"}})
    p = load(ctx, policy_files=(), flags=Flags())
    assert (p.limit_processes, p.limit_memory, p.limit_tmp_size, p.limit_wall_time) == (256, 2 * GiB, 512 * MiB, 3600)
    p = load(ctx, policy_files=(), flags=Flags(limit_memory="unlimited", timeout="90s", limit_processes="64",
                                                limit_tmp_size="1GiB"))
    assert (p.limit_processes, p.limit_memory, p.limit_tmp_size, p.limit_wall_time) == (64, 0, GiB, 90)
    assert ("limits.memory", "unlimited", "command line") in p.sources


def test_unset_limits_stay_unset_so_the_host_default_applies(tmp_path, monkeypatch) -> None:
    p = load(_ctx(tmp_path, monkeypatch), policy_files=(), flags=Flags())
    assert (p.limit_processes, p.limit_memory, p.limit_tmp_size, p.limit_wall_time) == (None, None, None, None)
    assert "limits" not in policy_document(p)


def test_the_effective_document_with_limits_passes_policy_check(tmp_path, monkeypatch) -> None:
    ctx = _ctx(tmp_path, monkeypatch, user={"limits": {"memory": "unlimited", "wallTime": 1.5, "tmpSize": "1G"}})
    doc = policy_document(load(ctx, policy_files=(), flags=Flags()))
    assert doc["limits"] == {"memory": "unlimited", "tmpSize": GiB, "wallTime": 1.5}
    validate_layer(Layer(name="saved.json", data=doc))


@pytest.mark.parametrize("flag, value, message", [
    ("limit_memory", "2XB", "--limit-memory 2XB: not a size"),
    ("limit_processes", "lots", "--limit-processes lots: not a number of processes"),
    ("limit_tmp_size", "0", "--limit-tmp 0: must be more than 0"),
    ("timeout", "1h30", "--timeout 1h30: not a duration"),
])
def test_a_bad_flag_value_names_the_flag_as_typed(tmp_path, monkeypatch, flag: str, value: str,
                                                  message: str) -> None:
    with pytest.raises(PolicyError) as e:
        load(_ctx(tmp_path, monkeypatch), policy_files=(), flags=Flags(**{flag: value}))
    assert e.value.message.startswith(message)


@pytest.mark.parametrize("project", [
    {"limits": {"processes": 8192}}, {"limits": {"processes": "unlimited"}}, {"limits": {"tmpSize": "unlimited"}},
])
def test_a_project_file_cannot_raise_a_limit_over_the_default(tmp_path, monkeypatch, project: dict) -> None:
    ctx = _ctx(tmp_path, monkeypatch, project=project)
    with pytest.raises(PolicyError, match="a project file may not raise a limit") as e:
        load(ctx, policy_files=(), flags=Flags())
    assert e.value.hint and "trustProjectFiles" in e.value.hint


def test_a_project_file_cannot_raise_the_users_limit_but_may_lower_it(tmp_path, monkeypatch) -> None:
    ctx = _ctx(tmp_path, monkeypatch, user={"limits": {"wallTime": "10m"}}, project={"limits": {"wallTime": "1h"}})
    with pytest.raises(PolicyError, match=r"limits.wallTime: a project file may not raise a limit \(to 1h, over 10m\)"):
        load(ctx, policy_files=(), flags=Flags())
    (tmp_path / "proj" / ".safebox.json").write_text(json.dumps({"limits": {"wallTime": "5m", "processes": 64,
                                                                           "memory": "1GiB"}}))
    p = load(ctx, policy_files=(), flags=Flags())
    assert (p.limit_wall_time, p.limit_processes, p.limit_memory) == (300, 64, GiB)  # lowering (or setting) is fine


def test_a_trusted_project_file_may_raise_a_limit(tmp_path, monkeypatch) -> None:
    ctx = _ctx(tmp_path, monkeypatch, user={"trustProjectFiles": True}, project={"limits": {"processes": 8192}})
    assert load(ctx, policy_files=(), flags=Flags()).limit_processes == 8192


# ------------------------------------------------------------------ the mechanism of each limit

VALUES = {"processes": (64.0, True), "memory": (256.0 * MiB, True), "tmpSize": (32.0 * MiB, True),
          "wallTime": (30.0, True)}
DEFAULTS = {"processes": (4096.0, False), "memory": (0.0, False), "tmpSize": (GiB * 1.0, False),
            "wallTime": (0.0, False)}
V1 = CgroupSite(version=1, parent="/sys/fs/cgroup/pids")
V2 = CgroupSite(version=2, parent="/sys/fs/cgroup/delegated")


def facts(*, uid: int = 1000, pids: CgroupSite | None = None, memory: CgroupSite | None = None,
          size: bool = True) -> HostFacts:
    return HostFacts(uid=uid, bwrap_size=size, cgroups=(("pids", pids, "" if pids else "no pids here"),
                                                       ("memory", memory, "" if memory else "no memory here")))


def test_a_cgroup_enforces_processes_and_memory_for_the_whole_sandbox() -> None:
    p = limits.plan(VALUES, facts(uid=0, pids=V2, memory=V2), bwrap=True, helper=True, strict=True)
    assert (p.cgroup_pids, p.cgroup_memory, p.rlimit_nproc, p.rlimit_data) == (64, 256 * MiB, 0, 0)
    assert dict(p.cgroup_sites) == {"pids": V2, "memory": V2}
    assert p.get("processes").scope == p.get("memory").scope == "sandbox"
    assert p.warnings == ()
    cg = p.cgroup()
    assert cg is not None and cg.procs_files() == [f"/sys/fs/cgroup/delegated/{cg.name}/cgroup.procs"]


def test_without_a_cgroup_an_unprivileged_sandbox_counts_its_processes_in_its_user_namespace() -> None:
    p = limits.plan({**DEFAULTS, "processes": (64.0, True)}, facts(), bwrap=True, helper=True, strict=True)
    assert p.rlimit_nproc == 64 and p.cgroup_sites == ()
    assert p.get("processes").scope == "sandbox"
    assert "user namespace" in p.get("processes").how


def test_root_without_a_cgroup_refuses_a_process_limit_it_was_asked_for() -> None:
    with pytest.raises(LimitError) as e:
        limits.plan(VALUES, facts(uid=0), bwrap=True, helper=True, strict=False)
    assert isinstance(e.value, BuildError) and e.value.exit_code == 125
    assert e.value.message.startswith("limits.processes = 64 cannot be enforced here: RLIMIT_NPROC does not apply "
                                      "to root, and no cgroup: no pids here")
    assert e.value.hint and "--limit-processes" in e.value.hint


def test_root_without_a_cgroup_runs_with_the_default_process_limit_unenforced_and_says_so() -> None:
    p = limits.plan(DEFAULTS, facts(uid=0), bwrap=True, helper=True, strict=True)
    assert p.rlimit_nproc == 0 and p.cgroup_sites == ()
    assert "processes 4096: NOT enforced (RLIMIT_NPROC does not apply to root" in p.summary()


def test_without_bwrap_the_default_process_limit_is_not_set_as_it_would_count_all_the_users_processes() -> None:
    p = limits.plan(DEFAULTS, facts(), bwrap=False, helper=True, strict=False)
    assert p.rlimit_nproc == 0 and p.warnings == ()


def test_without_bwrap_a_process_limit_asked_for_counts_per_user_says_so_and_strict_refuses() -> None:
    p = limits.plan({**DEFAULTS, "processes": (64.0, True)}, facts(), bwrap=False, helper=True, strict=False)
    assert p.rlimit_nproc == 64 and p.get("processes").scope == "user"
    assert p.warnings == ("limits.processes is enforced per user, not for the sandbox as a whole: without "
                          "bubblewrap RLIMIT_NPROC counts all of your processes on the host",)
    with pytest.raises(LimitError, match="--strict asks for the whole sandbox"):
        limits.plan({**DEFAULTS, "processes": (64.0, True)}, facts(), bwrap=False, helper=True, strict=True)


def test_without_a_cgroup_memory_is_limited_per_process_with_a_warning_and_strict_refuses() -> None:
    p = limits.plan({**DEFAULTS, "memory": (GiB * 1.0, True)}, facts(), bwrap=True, helper=True, strict=False)
    assert p.rlimit_data == GiB and p.get("memory").scope == "process"
    assert p.warnings[0].startswith("limits.memory is enforced per process, not for the sandbox as a whole: "
                                    "RLIMIT_DATA; no cgroup: no memory here")
    with pytest.raises(LimitError, match="limits.memory = 1 GiB cannot be enforced here: only per process"):
        limits.plan({**DEFAULTS, "memory": (GiB * 1.0, True)}, facts(), bwrap=True, helper=True, strict=True)


def test_without_the_helper_rlimits_are_not_available_so_a_limit_needs_a_cgroup() -> None:
    with pytest.raises(LimitError, match="limits.memory = 256 MiB cannot be enforced here: --without helper"):
        limits.plan({**DEFAULTS, "memory": VALUES["memory"]}, facts(), bwrap=True, helper=False, strict=False)
    with pytest.raises(LimitError, match="limits.processes = 64 cannot be enforced here: --without helper"):
        limits.plan({**DEFAULTS, "processes": VALUES["processes"]}, facts(), bwrap=True, helper=False, strict=False)
    p = limits.plan({**DEFAULTS, **VALUES}, facts(pids=V1, memory=V1), bwrap=True, helper=False, strict=False)
    assert (p.cgroup_pids, p.cgroup_memory) == (64, 256 * MiB)


def test_the_tmp_size_needs_bwraps_private_tmp_and_its_size_option() -> None:
    p = limits.plan({**DEFAULTS, "tmpSize": VALUES["tmpSize"]}, facts(), bwrap=True, helper=True, strict=True)
    assert p.tmp_size == 32 * MiB
    with pytest.raises(LimitError, match="without bubblewrap there is no private /tmp"):
        limits.plan({**DEFAULTS, "tmpSize": VALUES["tmpSize"]}, facts(), bwrap=False, helper=True, strict=False)
    with pytest.raises(LimitError, match="this bubblewrap has no --size option") as e:
        limits.plan({**DEFAULTS, "tmpSize": VALUES["tmpSize"]}, facts(size=False), bwrap=True, helper=True,
                    strict=False)
    assert "upgrade bubblewrap" in (e.value.hint or "")
    # The default is not an error where it cannot hold; -v and doctor say so.
    p = limits.plan(DEFAULTS, facts(size=False), bwrap=True, helper=True, strict=True)
    assert p.tmp_size == 0 and "tmpSize 1 GiB: NOT enforced (this bubblewrap has no --size" in p.summary()


def test_wall_time_is_enforced_by_safebox_on_every_host() -> None:
    for bwrap, helper in ((True, True), (False, True), (True, False)):
        p = limits.plan({**DEFAULTS, "wallTime": (30.0, True)}, facts(uid=0), bwrap=bwrap, helper=helper,
                        strict=True)
        assert p.wall_time == 30 and p.get("wallTime").scope == "sandbox"


def test_unlimited_needs_no_mechanism_at_all() -> None:
    none = {k: (0.0, True) for k in VALUES}
    p = limits.plan(none, facts(uid=0, size=False), bwrap=False, helper=False, strict=True)
    assert p.summary() == "limits: processes unlimited; memory unlimited; tmpSize unlimited; wallTime unlimited"
    assert p.cgroup() is None


# ------------------------------------------------------------------ what the plan turns into


def _rp(**kw) -> ResolvedPolicy:
    base = dict(layers=Layers.BOTH, cwd="/w", write_roots=("/w",), read_only=(), sealed_dirs=())
    base.update(kw)
    return ResolvedPolicy(**base)


def test_a_tmp_size_sizes_the_private_tmp_and_gives_dev_shm_its_own_sized_tmpfs() -> None:
    assert mount_args(_rp(tmp_size=32 * MiB))[:17] == [
        "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/proc/1",
        "--size", "33554432", "--tmpfs", "/tmp",
        "--size", "33554432", "--tmpfs", "/dev/shm",
    ]
    assert "--size" not in mount_args(_rp()) and "/dev/shm" not in mount_args(_rp())


def test_rlimits_reach_the_helper_policy_as_rlimit_lines() -> None:
    hp = HelperPolicy(fs_rules=((FsAccess.READ, "/"),), net=NetMode.OFF, rlimit_nproc=64, rlimit_data=GiB)
    assert b"rlimit nproc 64\nrlimit data 1073741824\nend\n" in render(hp)
    assert b"rlimit" not in render(HelperPolicy(fs_rules=(), net=NetMode.OFF))


def test_the_cgroup_trampoline_enters_every_cgroup_then_execs_the_sandbox() -> None:
    cg = cgroups.Cgroup({"pids": V1, "memory": CgroupSite(version=1, parent="/sys/fs/cgroup/memory/x")},
                       pids=64, memory=GiB)
    path, argv = cg.wrap("/usr/bin/bwrap", ["bwrap", "--args", "5", "--", "cmd"])
    assert path == "/bin/sh"
    # v1: the shell moves itself (one thread) through `tasks`, which skips
    # the thread-group lock and its RCU wait (cgroups.procs_files).
    assert argv[3:] == ["safebox-cgroup", "2", f"/sys/fs/cgroup/pids/{cg.name}/tasks",
                        f"/sys/fs/cgroup/memory/x/{cg.name}/tasks", "/usr/bin/bwrap", "--args", "5", "--", "cmd"]
    assert cg.name.startswith(f"safebox-{os.getpid()}-")


def test_on_cgroup_v2_the_trampoline_writes_cgroup_procs() -> None:
    cg = cgroups.Cgroup({"pids": CgroupSite(version=2, parent="/sys/fs/cgroup/d"),
                         "memory": CgroupSite(version=2, parent="/sys/fs/cgroup/d")}, pids=64, memory=GiB)
    assert cg.procs_files() == [f"/sys/fs/cgroup/d/{cg.name}/cgroup.procs"]  # one unified dir, once


# ------------------------------------------------------------------ finding a cgroup (fake /proc and /sys)


def _fake_host(tmp_path, monkeypatch, *, own: dict[str, str], mounts: dict[str, tuple[str, str]],
               subtree: dict[str, str], systemd: bool = False) -> None:
    for rel, controllers in subtree.items():
        d = tmp_path / rel.lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        (d / "cgroup.subtree_control").write_text(controllers + "\n")
        (d / "cgroup.procs").write_text("")
    monkeypatch.setattr(cgroups, "_own_cgroups", lambda: own)
    monkeypatch.setattr(cgroups, "_cgroup_mounts",
                        lambda: {k: (str(tmp_path / p.lstrip("/")), root) for k, (p, root) in mounts.items()})
    monkeypatch.setattr(cgroups, "_systemd_manages", lambda: systemd)


def test_cgroup_v2_uses_the_parent_that_passes_the_controller_on_not_the_cgroup_safebox_is_in(
        tmp_path, monkeypatch) -> None:
    _fake_host(tmp_path, monkeypatch, own={"": "/job/main"}, mounts={"": ("/cg", "/")},
               subtree={"/cg/job": "cpu pids memory", "/cg/job/main": ""})
    site, why = cgroups.find_cgroup("pids")
    assert site == CgroupSite(version=2, parent=str(tmp_path / "cg" / "job")) and why == ""


def test_cgroup_v2_without_the_controller_enabled_for_children_is_not_used_and_says_why(tmp_path, monkeypatch) -> None:
    _fake_host(tmp_path, monkeypatch, own={"": "/job/main"}, mounts={"": ("/cg", "/")},
               subtree={"/cg/job": "cpu", "/cg/job/main": ""})
    site, why = cgroups.find_cgroup("memory")
    assert site is None
    assert why == f"cgroup v2: memory is not enabled for children of {tmp_path}/cg/job/main or its parent"


def test_under_systemd_a_cgroup_that_was_not_delegated_is_left_alone(tmp_path, monkeypatch) -> None:
    _fake_host(tmp_path, monkeypatch, own={"": "/user.slice/s.scope"}, mounts={"": ("/cg", "/")},
               subtree={"/cg/user.slice": "pids memory", "/cg/user.slice/s.scope": ""}, systemd=True)
    monkeypatch.setattr(cgroups, "_delegated", lambda _path: False)
    site, why = cgroups.find_cgroup("pids")
    assert site is None and "belongs to systemd (not delegated)" in why
    monkeypatch.setattr(cgroups, "_delegated", lambda _path: True)
    assert cgroups.find_cgroup("pids")[0] == CgroupSite(version=2, parent=str(tmp_path / "cg" / "user.slice"))


def test_cgroup_v1_uses_the_callers_own_cgroup_of_that_controller(tmp_path, monkeypatch) -> None:
    _fake_host(tmp_path, monkeypatch, own={"pids": "/", "memory": "/api/7", "": "/"},
               mounts={"pids": ("/cg/pids", "/"), "memory": ("/cg/memory", "/"), "": ("/cg/unified", "/")},
               subtree={"/cg/pids": "", "/cg/memory/api/7": "", "/cg/unified": "hugetlb"})
    assert cgroups.find_cgroup("pids")[0] == CgroupSite(version=1, parent=str(tmp_path / "cg" / "pids"))
    assert cgroups.find_cgroup("memory")[0] == CgroupSite(version=1, parent=str(tmp_path / "cg/memory/api/7"))


def test_a_cgroup_outside_the_mounted_subtree_is_not_used(tmp_path, monkeypatch) -> None:
    # A cgroup namespace's mount shows only its own subtree.
    _fake_host(tmp_path, monkeypatch, own={"pids": "/other/x"}, mounts={"pids": ("/cg/pids", "/mine")},
               subtree={"/cg/pids": ""})
    assert cgroups.find_cgroup("pids") == (None, "no cgroup hierarchy with the pids controller")


def test_the_host_dir_of_a_cgroup_follows_the_mounts_root() -> None:
    assert cgroups._host_dir(("/sys/fs/cgroup", "/"), "/a/b") == "/sys/fs/cgroup/a/b"
    assert cgroups._host_dir(("/sys/fs/cgroup", "/a"), "/a/b") == "/sys/fs/cgroup/b"
    assert cgroups._host_dir(("/sys/fs/cgroup", "/a"), "/ab") is None
    assert cgroups._host_dir(("/sys/fs/cgroup", "/"), "/") == "/sys/fs/cgroup"


# ------------------------------------------------------------------ explanations


class _FakeCgroup:
    def __init__(self, refused: int, oom: int) -> None:
        self._events = (refused, oom)

    def events(self) -> tuple[int, int]:
        return self._events


def test_every_limit_reached_is_explained_with_how_to_raise_it() -> None:
    p = limits.plan({**VALUES}, facts(uid=0, pids=V2, memory=V2), bwrap=True, helper=True, strict=False)
    msgs = dict(limits.explain(p, timed_out=True, cgroup=_FakeCgroup(3, 1), full=["/tmp"]))  # type: ignore[arg-type]
    assert msgs == {
        "wallTime": "the command ran longer than limits.wallTime (30s): the sandbox was stopped (SIGTERM, then "
                    "SIGKILL after 5 s); exit status 124; raise it with --timeout or limits.wallTime",
        "processes": "the sandbox reached limits.processes (64 processes and threads): 3 fork/clone calls failed "
                     "with EAGAIN; raise it with --limit-processes or limits.processes",
        "memory": "the kernel killed 1 process of the sandbox for exceeding limits.memory (256 MiB); raise it with "
                  "--limit-memory or limits.memory",
        "tmpSize": "the sandbox's /tmp filled up limits.tmpSize (32 MiB; writes there failed with ENOSPC); raise it "
                   "with --limit-tmp or limits.tmpSize, or write large files under the working directory",
    }
    assert limits.explain(p, timed_out=False, cgroup=_FakeCgroup(0, 0), full=[]) == []  # type: ignore[arg-type]


# ------------------------------------------------------------------ waiting with a deadline (real children)


@pytest.mark.parametrize("pidfd", [True, False], ids=["pidfd", "polled (Linux < 5.3)"])
def test_waiting_until_a_deadline_returns_none_at_it_and_the_status_before_it(monkeypatch, pidfd: bool) -> None:
    import time

    if not pidfd:
        def no_pidfd(_pid: int) -> int:
            raise OSError(38, "Function not implemented")
        monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    pid = os.posix_spawn("/bin/sleep", ["sleep", "30"], os.environ)
    try:
        start = time.monotonic()
        assert limits.wait_until(pid, start + 0.3) is None
        assert 0.3 <= time.monotonic() - start < 5
    finally:
        os.kill(pid, 9)
    status = limits.wait_until(pid, time.monotonic() + 10)
    assert status is not None and os.waitstatus_to_exitcode(status) == -9
    quick = os.posix_spawn("/bin/sh", ["sh", "-c", "exit 7"], os.environ)
    status = limits.wait_until(quick, time.monotonic() + 10)
    assert status is not None and os.waitstatus_to_exitcode(status) == 7
