"""Big policies: 10,000 deny entries, every one still enforced, by every layer
that claims it; thousands of write roots without running out of anything.

Above ``builder/bulk.BULK_MIN`` entries most mounts are made by safebox's
mounter inside the sandbox instead of by bubblewrap (docs/layers.md, "Big
policies"), so these runs exercise that path; the small-policy tests elsewhere
exercise bubblewrap's. Each run probes a deterministic sample of the entries
with real reads, writes and renames (exact errnos), and controls in the same
run (a neighbour that is not listed) and without the policy.

No timing is asserted (that is benchmarks/bench_policy_size.py); the
subprocess timeout is a hang guard. Before the fix 2,000 entries took 8.5 s,
10,000 were refused by bubblewrap ("Exceeded maximum number of arguments
9000"), 1,000 write roots failed in select() and 2,000 in the helper (EMFILE).
"""

from __future__ import annotations

import json
import os
import random
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from safebox.builder.bulk import BULK_MIN
from sbx import BOTH, BWRAP_ONLY, EACCES, EBUSY, ENOENT, EROFS, HELPER_ONLY, PATH, FakeHome, host, missing

N = 10_000
SAMPLE = 25
HANG_GUARD = 120  # seconds; a run takes about one here
ALL_MODES = [BOTH, BWRAP_ONLY, HELPER_ONLY]
MOUNT_MODES = [BOTH, BWRAP_ONLY]

# Runs inside the sandbox: one operation per entry of argv[1] (JSON), its
# errno (0: it worked) printed as a JSON list.
OPS = r"""
import json, os, sys
out = []
for op, *args in json.loads(sys.argv[1]):
    try:
        if op == "read":
            with open(args[0], "rb") as f:
                f.read()
        elif op == "create":
            os.close(os.open(args[0], os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
            os.unlink(args[0])
        elif op == "rename":
            os.rename(args[0], args[1])
            os.rename(args[1], args[0])
        out.append(0)
    except OSError as e:
        out.append(e.errno)
print(json.dumps(out))
"""


def _tree(top: Path, n: int, *, files: bool, filled: set[int] = frozenset()) -> list[Path]:  # type: ignore[assignment]
    """``n`` entries as top/pNNN/eNN (100 a directory) and beside them, in
    every pNNN, an unlisted file ``open``; directory entries numbered in
    ``filled`` hold a file ``f`` (only the sampled ones need it)."""
    out = []
    for i in range(n):
        d = top / f"p{i // 100:03d}"
        if i % 100 == 0:
            d.mkdir(parents=True)
            (d / "open").write_text("not listed\n")
        p = d / f"e{i % 100:02d}"
        if files:
            p.write_text("secret\n")
        else:
            p.mkdir()
            if i in filled:
                (p / "f").write_text("secret\n")
        out.append(p)
    return out


class Big:
    """A tree of entries, a policy listing them, and the sample to probe."""

    def __init__(self, top: Path, entries: list[Path], sample: list[Path], doc: dict[str, dict[str, list[str]]]):
        self.top, self.entries, self.sample = top, entries, sample
        self.policy = top / "policy.json"
        self.policy.write_text(json.dumps(doc))


# The trees are made once per module and shared by the modes (10,000
# directories are slow to make and remove on a busy CI disk); the tests
# leave them as they found them.
@pytest.fixture(scope="module")
def read_tree(scratch: Path) -> Big:
    top = Path(tempfile.mkdtemp(prefix="big-read-", dir=scratch))
    top.chmod(0o755)
    picks = random.Random(17).sample(range(N // 2), SAMPLE)
    dirs = _tree(top / "dirs", N // 2, files=False, filled=set(picks))
    files = _tree(top / "files", N // 2, files=True)
    sample = [dirs[i] / "f" for i in picks] + random.Random(18).sample(files, SAMPLE)
    return Big(top, dirs + files, sample, {"filesystem": {"denyRead": [str(p) for p in dirs + files]}})


@pytest.fixture(scope="module")
def write_tree(scratch: Path) -> Big:
    top = Path(tempfile.mkdtemp(prefix="big-write-", dir=scratch))
    top.chmod(0o755)
    dirs = _tree(top / "generated", N, files=False)
    # Its own write root: the shared home's work tree stays small for the other tests.
    return Big(top, dirs, random.Random(23).sample(dirs, SAMPLE),
               {"filesystem": {"allowWrite": [str(top)], "denyWrite": [str(p) for p in dirs]}})


@pytest.fixture(scope="module")
def write_roots(scratch: Path) -> Big:
    top = Path(tempfile.mkdtemp(prefix="big-roots-", dir=scratch))
    top.chmod(0o755)
    roots = _tree(top / "outputs", 2000, files=False)
    return Big(top, roots, random.Random(5).sample(roots, 10),
               {"filesystem": {"allowWrite": [str(p) for p in roots]}})


def _policy_file(home: FakeHome, doc: dict[str, dict[str, list[str]]]) -> str:
    pol = home.root / "big-policy.json"
    pol.write_text(json.dumps(doc))
    return str(pol)


def _ops(home: FakeHome, ops: list[list[str]], *, mode: str, opts: list[str], **kw: object) -> list[int]:
    r = home.run([sys.executable, "-I", "-c", OPS, json.dumps(ops)], mode=mode, opts=opts, timeout=HANG_GUARD,
                 **kw)  # type: ignore[arg-type]
    # Exit 0: the sandbox started; with 10,000 entries neither safebox,
    # bubblewrap nor the helper met E2BIG or any other limit.
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.mark.parametrize("mode", ALL_MODES)
def test_ten_thousand_denied_dirs_and_files_are_each_unreadable_inside(shared_home: FakeHome, read_tree: Big,
                                                                      mode: str) -> None:
    sample = read_tree.sample
    neighbours = sorted({p.parent.parent / "open" for p in sample[:SAMPLE]} | {p.parent / "open" for p in sample[SAMPLE:]})
    ops = [["read", str(p)] for p in sample + neighbours]
    # Control: every sampled path is readable without the policy.
    assert _ops(shared_home, ops, mode=mode, opts=[]) == [0] * len(ops)

    got = _ops(shared_home, ops, mode=mode, opts=["-p", str(read_tree.policy)])
    # An empty tmpfs over a directory (its file is absent), /dev/null (nodev)
    # over a file; Landlock refuses both when it is the only layer.
    want_dir, want_file = (EACCES, EACCES) if mode == HELPER_ONLY else (ENOENT, EACCES)
    assert got[:SAMPLE] == [want_dir] * SAMPLE
    assert got[SAMPLE:2 * SAMPLE] == [want_file] * SAMPLE
    assert got[2 * SAMPLE:] == [0] * len(neighbours)  # the unlisted neighbours stay readable


# Helper-only is not claimed for denyWrite: Landlock cannot subtract a path
# beneath a granted write root (docs/threat-model.md).
@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_ten_thousand_deny_write_dirs_are_each_read_only_inside(shared_home: FakeHome, write_tree: Big,
                                                                mode: str) -> None:
    sample = write_tree.sample
    ops = ([["create", str(d / "new")] for d in sample]
           + [["rename", str(d), str(d) + "-moved"] for d in sample]
           + [["create", str(d.parent / "new-beside")] for d in sample])
    # Control: each of them can be written and renamed without the denyWrite list.
    assert _ops(shared_home, ops, mode=mode, opts=["--allow-write", str(write_tree.top)]) == [0] * len(ops)

    got = _ops(shared_home, ops, mode=mode, opts=["-p", str(write_tree.policy)])
    assert got[:SAMPLE] == [EROFS] * SAMPLE  # inside a denied directory
    assert got[SAMPLE:2 * SAMPLE] == [EBUSY] * SAMPLE  # a mount point cannot be renamed away
    assert got[2 * SAMPLE:] == [0] * SAMPLE  # its parent stays writable: only the listed entries are not
    assert all(not (d / "new").exists() and d.is_dir() for d in sample)


@pytest.mark.parametrize("mode", ALL_MODES)
def test_two_thousand_write_roots_work_with_a_descriptor_limit_of_1024(shared_home: FakeHome, write_roots: Big,
                                                                        mode: str) -> None:
    # Once a ripgrep and a find per root (select() failed past descriptor
    # 1023) and a Landlock rule descriptor held open per root (EMFILE).
    sample = write_roots.sample
    ops = [["create", str(d / "out")] for d in sample] + [["create", str(d.parent / "beside")] for d in sample]
    assert 0 not in _ops(shared_home, ops, mode=mode, opts=[])  # control: not writable without the policy

    def low_limit() -> None:
        _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))

    argv = shared_home.argv([sys.executable, "-I", "-c", OPS, json.dumps(ops)], mode=mode,
                            opts=["-p", str(write_roots.policy)])
    r = subprocess.run(argv, cwd=shared_home.work, env=shared_home.env(), capture_output=True, text=True,
                       timeout=HANG_GUARD, check=False, stdin=subprocess.DEVNULL, preexec_fn=low_limit)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    assert got[:10] == [0] * 10  # every sampled root is writable
    assert set(got[10:]) <= {EACCES, EROFS} and 0 not in got[10:]  # what lies between them is not


def test_nothing_of_the_mounter_is_left_on_the_host(shared_home: FakeHome, write_tree: Big) -> None:
    # The mounter works inside the sandbox's namespace, on copies: once the
    # run is over the host has the same mounts and the tree the same entries.
    before = host(["findmnt", "-rn", "-o", "TARGET"]).stdout
    listing = sorted(os.listdir(write_tree.entries[0].parent))
    r = shared_home.run(["true"], opts=["-p", str(write_tree.policy)], timeout=HANG_GUARD)
    assert r.returncode == 0, r.stderr
    assert host(["findmnt", "-rn", "-o", "TARGET"]).stdout == before
    assert sorted(os.listdir(write_tree.entries[0].parent)) == listing


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_mount_the_mounter_cannot_make_stops_the_run_before_the_command(fresh_home: FakeHome, mode: str) -> None:
    real = shutil.which("bwrap", path=PATH)
    if real is None:
        missing("bubblewrap is not installed")
    dirs = _tree(fresh_home.work / "generated", 2 * BULK_MIN, files=False)
    pol = _policy_file(fresh_home, {"filesystem": {"denyWrite": [str(p) for p in dirs]}})
    victim = dirs[-1]
    # A bwrap that lets a denied directory vanish after safebox looked at it
    # and before the mounter binds it (outside every write root, as safebox
    # takes no tool from one); only the run that builds the sandbox (--args),
    # not a probe of bwrap before it.
    bindir = fresh_home.root.parent / f"bin-{fresh_home.root.name}"
    bindir.mkdir()
    for name, extra in (("control", ""), ("vanish", f'case " $* " in *" --args "*) rmdir {victim};; esac\n')):
        (bindir / name).mkdir()
        (bindir / name / "bwrap").write_text(f"#!/bin/sh\n{extra}exec {real} \"$@\"\n")
        (bindir / name / "bwrap").chmod(0o755)
    ran = fresh_home.work / "ran"

    control = fresh_home.run(["touch", str(ran)], mode=mode, opts=["-p", pol], timeout=HANG_GUARD,
                             env={"PATH": f"{bindir / 'control'}:{PATH}"})
    assert control.returncode == 0, control.stderr
    assert ran.exists()
    ran.unlink()

    r = fresh_home.run(["touch", str(ran)], mode=mode, opts=["-p", pol], timeout=HANG_GUARD,
                       env={"PATH": f"{bindir / 'vanish'}:{PATH}"})
    assert r.returncode == 125
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("safebox:")]
    assert len(lines) == 1 and f"{victim}: No such file or directory" in lines[0], r.stderr
    assert not ran.exists()  # the command never started
    shutil.rmtree(bindir)


@pytest.mark.parametrize("mode", ALL_MODES)
def test_a_carve_out_inside_one_of_many_denied_dirs_stays_readable(fresh_home: FakeHome, mode: str) -> None:
    # More masks than BULK_MIN, so most are made by the mounter after
    # bubblewrap's mounts; the one holding an allowRead carve-out must stay
    # with bubblewrap, which binds the carve-out back over it (a mask made
    # later by the mounter would hide the carve-out again).
    n = 2 * BULK_MIN
    dirs = _tree(fresh_home.root / "deny", n, files=False, filled=set(range(n)))
    for d in dirs:
        (d / "g").write_text("secret\n")
    carve, beside, other = dirs[7] / "f", dirs[7] / "g", dirs[8] / "f"
    pol = _policy_file(fresh_home, {"filesystem": {"denyRead": [str(d) for d in dirs],
                                                   "allowRead": [str(carve)]}})
    ops = [["read", str(carve)], ["read", str(beside)], ["read", str(other)]]
    assert _ops(fresh_home, ops, mode=mode, opts=[]) == [0, 0, 0]  # control: all readable without the policy

    got = _ops(fresh_home, ops, mode=mode, opts=["-p", pol])
    want = EACCES if mode == HELPER_ONLY else ENOENT
    assert got == [0, want, want]


def _holders(ns: str) -> list[int]:
    """The processes with a descriptor open on the namespace ``ns`` (``mnt:[N]``)."""
    out = []
    for pid in (p for p in os.listdir("/proc") if p.isdigit()):
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
            if any(os.readlink(f"/proc/{pid}/fd/{fd}") == ns for fd in fds):
                out.append(int(pid))
        except OSError:
            pass  # gone, or not ours to look at
    return out


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_the_mounts_go_down_in_a_holder_that_has_nothing_else_once_safebox_is_done(shared_home: FakeHome,
                                                                                    write_tree: Big,
                                                                                    mode: str) -> None:
    # The sandbox's last process would otherwise take 10,000 mounts down in
    # its exit, and safebox would wait for it (mounter.hold). The holder is
    # outside the sandbox's namespaces, keeps only the namespace and its
    # pipe, and is gone once safebox is.
    argv = shared_home.argv(["sh", "-c", "readlink /proc/self/ns/mnt; read line"], mode=mode,
                            opts=["-p", str(write_tree.policy)])
    with subprocess.Popen(argv, cwd=shared_home.work, env=shared_home.env(), stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as p:
        assert p.stdout is not None and p.stdin is not None and p.stderr is not None
        try:
            ns = p.stdout.readline().strip()
            assert ns.startswith("mnt:["), p.stderr.read()
            assert ns != os.readlink("/proc/self/ns/mnt")  # control: the command's namespace is the sandbox's
            holders = _holders(ns)
            assert len(holders) == 1, holders
            h = holders[0]
            assert sorted(os.readlink(f"/proc/{h}/fd/{fd}")[:5] for fd in os.listdir(f"/proc/{h}/fd")) == \
                ["mnt:[", "pipe:"]
            for kind in ("mnt", "user", "pid"):  # a descriptor of the namespace, not a place in it
                assert os.readlink(f"/proc/{h}/ns/{kind}") == os.readlink(f"/proc/self/ns/{kind}")
            p.stdin.write("\n")
            p.stdin.close()
            assert p.wait(timeout=HANG_GUARD) == 0, p.stderr.read()
        finally:
            p.kill()
    deadline = time.monotonic() + 10
    while (_holders(ns) or os.path.exists(f"/proc/{h}")) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _holders(ns) == []
    assert not os.path.exists(f"/proc/{h}")  # exited and reaped (by init: nobody's zombie)
