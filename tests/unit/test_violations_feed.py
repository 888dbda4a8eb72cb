"""The violations feed's pure parts: the supervisor's table, the observing
program, the record decoder (fuzzed with hypothesis: its input is written
from what a sandboxed command passed to the kernel), the summary."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safebox.builder import bpf_compile, seccomp
from safebox.builder.resolved import Layers, ResolvedPolicy
from safebox.policy.effective import EffectivePolicy
from safebox.violations import feed, table

REPO = Path(__file__).resolve().parents[2]


def _rp(layers: Layers = Layers.BOTH) -> ResolvedPolicy:
    return ResolvedPolicy(
        layers=layers, cwd="/h/proj", write_roots=("/h/proj",), read_only=("/h/proj/.mcp.json",),
        sealed_dirs=(("/h/proj/.git", ("/h/proj/.git/objects",)),), pinned_dirs=("/h/proj/.git",),
        mask_dirs=("/h/.ssh",), mask_files=("/h/.netrc",), run_dir="/h/.cache/safebox/run/1",
        landlock_rules=(("read", "/"), ("dev", "/dev"), ("write", "/h/proj"), ("write", "/tmp"))
        if layers is Layers.BOTH else
        (("readdir", "/"), ("read", "/usr"), ("readdir", "/h"), ("write", "/h/proj"), ("dev", "/dev/null")))


def _flags(t: table.Table, path: str) -> str:
    entry = t.lookup(path)
    assert entry is not None
    return "".join(letter for bit, letter in ((table.W, "w"), (table.C, "c"), (table.M, "m"), (table.B, "b"))
                   if entry[1] & bit)


# ------------------------------------------------------------------ table


@pytest.mark.parametrize(("path", "entry", "want"), [
    ("/etc/x", "/", "b"),  # the read-only root: nothing writable
    ("/h/proj/src/a.c", "/h/proj", "wcb"),
    ("/h/proj/.mcp.json", "/h/proj/.mcp.json", "b"),  # protected: a read-only bind
    ("/h/proj/.git/HEAD", "/h/proj/.git", "b"),  # sealed: read-only (it replaces the pin)
    ("/h/proj/.git/objects/x", "/h/proj/.git/objects", "wcb"),  # a kept child, bound back
    ("/h/.ssh/id_rsa", "/h/.ssh", "mb"),
    ("/h/.netrc", "/h/.netrc", "mb"),
    ("/dev/null", "/dev", "wb"),  # Landlock's dev class: write files, create nothing
    ("/tmp/x", "/tmp", "wcb"),
    ("/proc/self/attr/current", "/proc", "b"),  # bwrap's procfs is writable, Landlock's read grant is not
])
def test_the_table_folds_both_layers_into_one_deepest_match(path: str, entry: str, want: str) -> None:
    t = table.build(_rp(), reads=True)
    found = t.lookup(path)
    assert found is not None and found[0] == entry
    assert _flags(t, path) == want


def test_the_table_remembers_which_layer_refuses_for_the_errno() -> None:
    t = table.build(_rp(), reads=False)
    root = t.lookup("/etc/x")
    proc = t.lookup("/proc/1/x")
    dev = t.lookup("/dev/x")
    assert root and not root[1] & table.MOUNT_C  # read-only mount: EROFS
    assert dev and dev[1] & table.MOUNT_C and not dev[1] & table.C  # mount allows, Landlock refuses: EACCES
    assert proc and not proc[1] & table.MOUNT_W


def test_a_helper_only_table_is_landlock_alone() -> None:
    t = table.build(_rp(Layers.HELPER_ONLY), reads=True)
    assert _flags(t, "/h/proj/x") == "wc"
    assert _flags(t, "/etc/x") == ""
    assert _flags(t, "/dev/null") == "w"
    assert _flags(t, "/h/.ssh/id_rsa") == "m"
    assert all(bits & table.MOUNT_W and bits & table.MOUNT_C for _, bits in t.entries)  # EACCES, never EROFS


def test_the_table_file_is_what_the_supervisor_parses() -> None:
    text = table.build(_rp(), reads=True, ports=(3128, 1080)).render().decode()
    lines = text.splitlines()
    assert lines[:2] == ["safebox-observe 1", "reads 1"] and lines[-3:] == ["port 3128", "port 1080", "end"]
    for line in lines[2:-3]:
        key, flags, hexpath = line.split(" ")
        assert key == "entry" and re.fullmatch(r"w?c?m?b?|-", flags) and bytes.fromhex(hexpath).startswith(b"/")


# ------------------------------------------------------------------ the observing program


def test_no_watched_call_is_on_the_denylist_the_supervisor_continues_every_watched_call() -> None:
    watched = {w.syscall for w in seccomp.WATCH}
    denied = {r.syscall for r in seccomp.RULES}
    assert not watched & denied


def test_the_supervisor_knows_exactly_the_watched_calls() -> None:
    src = (REPO / "helper" / "supervise.c").read_text()
    c_names = set(re.findall(r'\{ __NR_\w+, "(\w+)", W_', src))
    assert c_names == {w.syscall for w in seccomp.WATCH}


def test_the_calls_program_watches_no_file_call() -> None:
    # --observe calls, the fast mode: denied calls, exec, connect and chdir
    # notify; no file call does (each would cost a round trip to the
    # supervisor: docs/violations.md, "Cost and the default").
    import pyseccomp  # noqa: F401  (a runtime dependency: missing is a failure, not a skip)
    from test_seccomp_rules import RET_ALLOW, nr_of, run_bpf

    notify = 0x7FC00000
    calls = bpf_compile.compile_program(allow_unix_sockets=False, allow_inet=seccomp.InetMode.ANY,
                                        observe=seccomp.Observe.CALLS)
    writes = bpf_compile.compile_program(allow_unix_sockets=False, allow_inet=seccomp.InetMode.ANY,
                                         observe=seccomp.Observe.WRITES)
    assert {w.syscall for w in seccomp.watched(seccomp.Observe.CALLS)} == {"execve", "execveat", "connect", "chdir",
                                                                            "fchdir"}
    assert run_bpf(calls, nr=nr_of("unshare"), args=(0x1000_0000,)) == notify
    for name in ("execve", "connect", "chdir"):
        assert run_bpf(calls, nr=nr_of(name)) == notify
    o_creat_wronly = 0o101
    assert run_bpf(calls, nr=nr_of("openat"), args=(0, 0, o_creat_wronly)) == RET_ALLOW
    assert run_bpf(writes, nr=nr_of("openat"), args=(0, 0, o_creat_wronly)) == notify  # control
    for name in ("mkdir", "mkdirat", "unlinkat", "renameat2", "symlinkat", "linkat", "truncate", "creat"):
        assert run_bpf(calls, nr=nr_of(name)) == RET_ALLOW, name
        assert run_bpf(writes, nr=nr_of(name)) == notify, name


def test_only_eperm_rules_notify_clone3_stays_in_the_kernel() -> None:
    for rule in seccomp.RULES:
        assert seccomp.notified(rule, seccomp.Observe.WRITES) is (rule.action is seccomp.Action.EPERM)
        assert seccomp.notified(rule, seccomp.Observe.CALLS) is (rule.action is seccomp.Action.EPERM)
        assert not seccomp.notified(rule, seccomp.Observe.OFF)


def test_the_observing_program_notifies_where_the_plain_one_says_eperm() -> None:
    import pyseccomp  # noqa: F401  (a runtime dependency: missing is a failure, not a skip)
    from test_seccomp_rules import RET_ALLOW, nr_of, run_bpf  # the BPF interpreter of the rule tests

    notify = 0x7FC00000
    plain = bpf_compile.compile_program(allow_unix_sockets=False, allow_inet=seccomp.InetMode.ANY)
    obs = bpf_compile.compile_program(allow_unix_sockets=False, allow_inet=seccomp.InetMode.ANY,
                                      observe=seccomp.Observe.WRITES)
    full = bpf_compile.compile_program(allow_unix_sockets=False, allow_inet=seccomp.InetMode.ANY,
                                       observe=seccomp.Observe.ALL)
    unshare = nr_of("unshare")
    assert run_bpf(plain, nr=unshare, args=(0x1000_0000,)) == 0x0005_0001
    assert run_bpf(obs, nr=unshare, args=(0x1000_0000,)) == notify
    assert run_bpf(obs, nr=nr_of("clone3")) == 0x0005_0026  # ENOSYS, in the kernel
    openat = nr_of("openat")
    assert run_bpf(obs, nr=openat, args=(0, 0, 0)) == RET_ALLOW  # O_RDONLY: not watched by default
    assert run_bpf(full, nr=openat, args=(0, 0, 0)) == notify
    for flag in (0o1, 0o2, 0o100, 0o1000):
        assert run_bpf(obs, nr=openat, args=(0, 0, flag | 0o2000000)) == notify
    assert run_bpf(obs, nr=nr_of("utimensat"), args=(0, 1)) == RET_ALLOW  # metadata: --observe all only
    assert run_bpf(full, nr=nr_of("utimensat"), args=(0, 1)) == notify
    assert run_bpf(full, nr=nr_of("utimensat"), args=(0, 0)) == RET_ALLOW  # by descriptor
    assert run_bpf(obs, nr=nr_of("read")) == RET_ALLOW


# ------------------------------------------------------------------ records


REC = (b"ev w openat 257 P 0 0 12 1700000000.000001 ffffff9c,7ffd0000,241,1b6,0,0 "
       + b"sh".hex().encode() + b" " + b"/etc/x".hex().encode() + b" -")


def test_a_record_decodes_field_by_field() -> None:
    r = feed.parse_record(REC)
    assert r == feed.Record(kind="w", name="openat", nr=257, why="P", idx=0, err=0, pid=12, time=1700000000.000001,
                            args=(0xFFFFFF9C, 0x7FFD0000, 0x241, 0x1B6, 0, 0), comm="sh", path="/etc/x", path2=None)


@pytest.mark.parametrize("bad", [b"", b"ev", REC + b" x", REC.replace(b"ev w", b"ev q"),
                                 REC.replace(b" P ", b" PP "), REC.replace(b"241", b"zz"),
                                 REC.replace(b"0,0 ", b"0 "), REC.replace(b"openat", b"op;en")])
def test_a_malformed_record_is_none(bad: bytes) -> None:
    assert feed.parse_record(bad) is None


@settings(max_examples=2000, deadline=None)
@given(st.binary(max_size=400))
def test_parse_record_never_raises_on_any_bytes(data: bytes) -> None:
    feed.parse_record(data)


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from([b"ev", b"w", b"r", b"s", b"openat", b"-", b"0", b"-1", b"12", b"1.5", b"ff",
                                 b"0,0,0,0,0,0", b"6162", b"2f6574632f78", b"P", b"M", b"zz", b"\xff"]),
                min_size=10, max_size=14))
def test_records_near_the_format_decode_or_are_none(fields: list[bytes]) -> None:
    r = feed.parse_record(b" ".join(fields))
    if r is not None:
        assert r.kind in "wrxsun" and len(r.args) == 6


def _feed(lines: list[bytes], layers: Layers = Layers.BOTH) -> feed.Feed:
    rp = _rp(layers)
    f = feed.Feed(rp, policy=EffectivePolicy(), home="/h", table=table.build(rp, reads=True))
    f.add_records(lines)
    return f


def _at(path: str) -> bytes:
    """REC, a refused openat, on ``path``."""
    return REC.replace(b"/etc/x".hex().encode(), path.encode().hex().encode())


def test_the_summary_counts_by_kind_and_names_the_fix_for_the_commonest() -> None:
    f = _feed([_at("/h/.tool/x"), _at("/h/.bashrc"), _at("/h/.tool/y")])
    assert [e.fields["errno"] for e in f.events] == ["EROFS"] * 3
    assert [e.rule for e in f.events] == ["filesystem.allowWrite", "protected file", "filesystem.allowWrite"]
    assert f.summary(verbose=False) == [
        "refused 3 operations: 3 writes (~/.tool/x, ~/.bashrc, ~/.tool/y)",
        "to allow the commonest (2 writes refused by filesystem.allowWrite): --allow-write ~/.tool"]


@pytest.mark.parametrize(("path", "why"), [
    ("/etc/x", "/etc is a system directory"),
    ("/etc/ssh/sshd_config.d/x", "/etc/ssh/sshd_config.d is a system directory"),
    ("/usr/lib/node_modules/x/index.js", "/usr/lib/node_modules/x is a system directory"),
    ("/bin/x", "/bin is a system directory"), ("/sbin/x", "/sbin is a system directory"),
    ("/lib64/x", "/lib64 is a system directory"), ("/libx32/x", "/libx32 is a system directory"),
    ("/boot/x", "/boot is a system directory"), ("/var/lib/dpkg/x", "/var/lib/dpkg is a system directory"),
    ("/proc/sys/x", "/proc/sys is a system directory"), ("/sys/x", "/sys is a system directory"),
    ("/dev/x", "/dev is a system directory"), ("/opt/tool/x", "/opt/tool is a system directory"),
    ("/x", "/ is the whole system"), ("/h/new-file", "~ is the home itself, with its dotfiles"),
])
def test_a_refused_write_in_a_system_directory_never_suggests_making_it_writable(path: str, why: str) -> None:
    f = _feed([_at(path)])
    ev = f.events[0]
    assert (ev.rule, ev.fix) == ("filesystem.allowWrite", None)
    lines = f.summary(verbose=False)
    assert "--allow-write" not in "\n".join(lines)
    assert lines[1] == (f"the commonest (1 write refused by filesystem.allowWrite) stays refused: writes outside the "
                        f"project are refused by design and {why}; write under $TMPDIR or the work dir instead")


def test_a_directory_above_the_home_is_never_suggested_either() -> None:
    rp = _rp()
    f = feed.Feed(rp, policy=EffectivePolicy(), home="/home/u", table=table.build(rp, reads=True))
    f.add_records([_at("/home/other")])
    assert f.events[0].fix is None
    assert "/home holds the home;" in f.summary(verbose=False)[1]


@pytest.mark.parametrize(("path", "fix"), [("/h/.tool/cache/x", "--allow-write ~/.tool"),
                                           ("/var/cache/apt/x", "--allow-write /var/cache/apt"),
                                           ("/var/tmp/x", "--allow-write /var/tmp"),
                                           ("/data/out/x", "--allow-write /data/out")])
def test_a_refused_write_outside_system_directories_still_names_allow_write(path: str, fix: str) -> None:
    # Control for the test above: the same refusal elsewhere gets its fix.
    assert _feed([_at(path)]).events[0].fix == fix


def _refused_host(f: feed.Feed, host: str, *, explained: bool) -> None:
    from safebox.proxy.rules import Decision

    f.add_network([(host, 443, "connect", Decision(False, "network.allowedDomains",
                                                   f"{host} is not in network.allowedDomains"))],
                  explained=explained)


def test_a_host_the_proxy_explained_on_its_own_line_adds_no_summary() -> None:
    f = _feed([])
    _refused_host(f, "pypi.org", explained=True)
    assert f.summary(verbose=False) == []
    # -v still lists it, once
    assert f.summary(verbose=True) == ["denied network pypi.org: refused (network.allowedDomains)"]


def test_a_host_explained_above_is_counted_but_its_fix_is_not_repeated() -> None:
    f = _feed([_at("/h/.tool/x")])
    _refused_host(f, "pypi.org", explained=True)
    _refused_host(f, "files.pythonhosted.org", explained=True)
    assert f.summary(verbose=False) == [
        "refused 3 operations: 1 write (~/.tool/x), 2 connections (pypi.org, files.pythonhosted.org; explained above)",
        "to allow the commonest (1 write refused by filesystem.allowWrite): --allow-write ~/.tool"]


@pytest.mark.parametrize(("path", "preset", "host"), [
    ("/h/.npm/_cacache/x", "npm", "~/.npm"), ("/h/.cache/pip/http/x", "pip", "~/.cache/pip"),
    ("/h/.cargo/registry/index/x", "cargo", "~/.cargo/registry"), ("/h/go/pkg/mod/x", "go", "~/go/pkg/mod"),
    ("/h/.m2/repository/x", "maven", "~/.m2/repository")])
def test_a_refused_write_into_a_tools_host_cache_names_its_preset(path: str, preset: str, host: str) -> None:
    # Not --allow-write ~/.cache (the top dir under the home): the preset
    # gives the tool a cache of its own (tests/security/test_feed_truthful.py
    # applies it to `npm test`).
    assert _feed([_at(path)]).events[0].fix == (
        f"--preset {preset} (its tools then cache in a directory of the sandbox's own; --allow-write {host} "
        "would share the host's cache instead)")


def test_a_host_not_explained_on_its_own_line_gets_its_fix_in_the_summary() -> None:
    # Control: with --quiet -v the proxy printed nothing, so the summary explains it.
    f = _feed([])
    _refused_host(f, "pypi.org", explained=False)
    assert f.summary(verbose=False) == [
        "refused 1 operation: 1 connection (pypi.org)",
        "to allow the commonest (1 connection refused by network.allowedDomains): "
        "--allow-domain pypi.org or --preset pip (network.allowedDomains in a policy file)"]


def _denied(name: bytes, nr: int, arg0: int) -> bytes:
    """A record of a denied call, as the supervisor writes it."""
    return (b"ev s " + name + b" %d - -1 1 12 1700000000.000001 %x,0,0,0,0,0 " % (nr, arg0)
            + b"id".hex().encode() + b" - -")


@pytest.mark.parametrize(("lines", "quiet"), [
    ([], True),
    ([_denied(b"socket", 41, 1)] * 3, True),
    ([_denied(b"socket", 41, 0xFFFF_FFFF_0000_0001)], True),  # the kernel reads an int: the low 32 bits
    ([_denied(b"socket", 41, 1), _denied(b"socket", 41, 2)], False),  # AF_INET: a network refusal
    ([_denied(b"-", 41, 1)], False),  # unnamed (an older supervisor): the feed decides
    ([_denied(b"socket", 41, 1), REC], False),
    ([_denied(b"socket", 41, 1), b"dropped 3"], False),
    ([b"ev s socket 41 - -1 1 12 1.0 zz,0,0,0,0,0 6964 - -"], False),
])
def test_only_glibcs_name_service_probes_are_quiet_without_the_feed(lines: list[bytes], quiet: bool) -> None:
    from safebox.violations.quick import only_quiet

    assert only_quiet(lines) is quiet
    if quiet and lines:  # the feed agrees: nothing for the summary
        f = _feed(lines)
        assert f.events and all(e.quiet for e in f.events) and f.summary(verbose=False) == []


def test_a_denied_call_the_supervisor_names_is_explained_by_that_name() -> None:
    # nr 0 is read on x86_64: the name in the record wins (no syscall table loaded).
    ev = _feed([_denied(b"socket", 0, 1)]).events[0]
    assert (ev.kind, ev.fields["syscall"], ev.rule) == ("unix-socket", "socket", "network.allowUnixSockets")


def test_nothing_refused_is_no_summary() -> None:
    assert _feed([]).summary(verbose=True) == []


def test_a_path_with_escape_sequences_reaches_the_terminal_as_question_marks() -> None:
    evil = REC.replace(b"/etc/x".hex().encode(), b"/etc/\x1b[2Jx".hex().encode())
    lines = _feed([evil]).summary(verbose=True)
    assert all("\x1b" not in line for line in lines)
    assert "/etc/?[2Jx" in lines[0]


def test_the_memoised_landlock_lookup_answers_as_the_walk_to_the_root_does() -> None:
    # violations/table.py memoises (writable, creatable) per directory so a
    # 10,000-entry policy costs a lookup per entry; the answer must be the
    # walk's: a write grant at or above gives both, a dev grant files only.
    import random

    from safebox.violations import table

    def walk(grants: dict[str, set[str]], path: str) -> tuple[bool, bool]:
        w = False
        for a in table._ancestors(path):
            if "write" in grants.get(a, ()):
                return True, True
            w = w or "dev" in grants.get(a, ())
        return w, False

    rnd = random.Random(1)
    names = ["/", "/a", "/a/b", "/a/b/c", "/a/d", "/e", "/e/f", "/a/b/c/g"]
    for _ in range(300):
        grants = {n: set(rnd.sample(["read", "write", "dev", "readdir"], rnd.randint(1, 2)))
                  for n in rnd.sample(names, rnd.randint(0, 5))}
        granted = table._Granted(grants)
        queries = [*names, "/a/b/c/g/h", "/x/y"]
        rnd.shuffle(queries)
        for q in queries:
            assert granted(q) == walk(grants, q), (grants, q)
