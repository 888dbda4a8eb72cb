"""safebox's state is never writable inside, whatever the policy, and masks
do not depend on the host's /dev/null (issue 22, items 12 and 9).

The state dir (``~/.cache/safebox``: the policy, limits and seccomp caches,
the run dirs) decides the next run's sandbox. The review's reproduction: a
write root at the state dir plus 80 ``denyRead`` directories (enough for
safebox's mounter, builder/bulk.py, to make the mounts) left the state dir
writable; every ``cache/bpf-*.bin`` was rewritten as an allow-all program with
a valid digest, and a later, unrelated small-policy run could ``unshare -U``.
A write root inside the state dir was writable with a small policy too.

Now a write root at or inside the state dir is refused (exit 125, one line)
before anything runs; one above it leaves the state dir and the run dir
read-only and the caches masked, in both mount paths (bubblewrap's, and the
mounter's with a big policy). Each test runs a small and a big policy, and
has a control that the same action works on a path beside the state.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from conftest import HELPER
from safebox.builder.bulk import BULK_MIN
from sbx import BOTH, BWRAP_ONLY, EACCES, EROFS, HELPER_ONLY, PATH, FakeHome, host

ALL_MODES = [BOTH, BWRAP_ONLY, HELPER_ONLY]
MOUNT_MODES = [BOTH, BWRAP_ONLY]
BIG = 80  # denyRead directories, as in the review: above BULK_MIN, so the mounter makes them
SIZES = ["small", "big"]
REFUSED = "lies at or inside safebox's state dir"

# Runs inside the sandbox: one operation per entry of argv[1] (JSON), its
# errno (0: it worked) printed as a JSON list; "list" prints the names.
OPS = r"""
import json, os, sys
out = []
for op, path in json.loads(sys.argv[1]):
    try:
        if op == "create":
            with open(path, "wb") as f:
                f.write(b"x")
        elif op == "list":
            out.append(sorted(os.listdir(path)))
            continue
        elif op == "read":
            with open(path, "rb") as f:
                out.append(f.read().decode(errors="replace"))
            continue
        out.append(0)
    except OSError as e:
        out.append(e.errno)
print(json.dumps(out))
"""


def _state(home: FakeHome) -> Path:
    return home.root / ".cache" / "safebox"


def _policy(home: FakeHome, size: str) -> list[str]:
    """The options of a small policy (none) or a big one: BIG denyRead dirs."""
    if size == "small":
        return []
    assert BIG > BULK_MIN
    opts = []
    for i in range(BIG):
        d = home.root / "denied" / f"d{i:02d}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "f").write_text("denied\n")
        opts += ["--deny-read", str(d)]
    return opts


def _ops(home: FakeHome, ops: list[list[str]], *, mode: str, opts: list[str], **kw: object) -> list[object]:
    r = home.run([sys.executable, "-I", "-c", OPS, json.dumps(ops)], mode=mode, opts=opts, timeout=120,
                 **kw)  # type: ignore[arg-type]
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)  # type: ignore[no-any-return]


def _started(home: FakeHome) -> Path:
    """A first run makes the state dir and its caches (seccomp, policy)."""
    r = home.run(["true"])
    assert r.returncode == 0, r.stderr
    state = _state(home)
    assert list((state / "cache").glob("bpf-*.bin")), sorted((state / "cache").iterdir())
    return state


def _digests(d: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.iterdir()) if p.is_file()}


def _unchanged(d: Path, before: dict[str, str]) -> bool:
    """Every entry of ``before`` is still there, as it was (safebox itself
    may add entries for the new policy)."""
    after = _digests(d)
    return {k: after.get(k) for k in before} == before


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("mode", ALL_MODES)
@pytest.mark.parametrize("where", ["", "cache", "run"])
def test_a_write_root_at_or_inside_the_state_dir_is_refused_before_the_command_runs(
        fresh_home: FakeHome, mode: str, size: str, where: str) -> None:
    state = _started(fresh_home)
    target = state / where if where else state
    marker = fresh_home.work / "ran"
    attack = f"touch {marker}; echo x > {target}/planted"
    big = _policy(fresh_home, size)
    # Control: the same policy with a write root beside the state dir runs,
    # and the command writes there.
    beside = fresh_home.root / ".cache" / "other"
    beside.mkdir()
    ok = fresh_home.run(["sh", "-c", f"touch {marker}; echo x > {beside}/planted"], mode=mode,
                        opts=["--allow-write", str(beside), *big])
    assert ok.returncode == 0 and marker.exists() and (beside / "planted").exists(), ok.stderr
    marker.unlink()

    r = fresh_home.run(["sh", "-c", attack], mode=mode, opts=["--allow-write", str(target), *big])
    assert r.returncode == 125, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.startswith("safebox:")]
    assert len(lines) == 1 and REFUSED in lines[0] and str(target) in lines[0], r.stderr
    assert "hint: a write root above the state dir is fine" in r.stderr
    assert not marker.exists() and not (target / "planted").exists()


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_write_root_above_the_state_dir_leaves_the_state_and_run_dir_read_only_and_the_caches_masked(
        fresh_home: FakeHome, mode: str, size: str) -> None:
    state = _started(fresh_home)
    before = _digests(state / "cache")
    beside = fresh_home.root / ".cache" / "other"
    beside.mkdir()
    script = OPS.replace('for op, path in json.loads(sys.argv[1]):',
                         'ops = json.loads(sys.argv[1])\n'
                         f'ops += [["create", os.path.join({str(state / "run")!r}, r, "x")] '
                         f'for r in os.listdir({str(state / "run")!r})]\n'
                         'for op, path in ops:')
    assert script != OPS  # and the script tries every run dir, this run's too
    ops = [["create", str(state / "planted")],
           ["create", str(state / "cache" / "planted")],
           ["list", str(state / "cache")],
           ["create", str(beside / "f")]]  # control, in the same run
    r = fresh_home.run([sys.executable, "-I", "-c", script, json.dumps(ops)], mode=mode,
                       opts=["--allow-write", str(fresh_home.root / ".cache"), *_policy(fresh_home, size)],
                       timeout=120)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    # The state dir and the run dir: read-only. The caches: an empty
    # read-only tmpfs (nothing to read, nothing to write).
    assert got[:4] == [EROFS, EROFS, [], 0], got
    assert got[4:] and set(got[4:]) == {EROFS}, got
    assert _unchanged(state / "cache", before)
    assert not (state / "planted").exists()
    # Control: without safebox the state dir is writable by its owner.
    assert host(["sh", "-c", f"echo x > {state}/planted"]).returncode == 0


# The review's forgery: every cached seccomp program replaced by one
# instruction, "return ALLOW", with a digest that matches.
FORGE = r"""
import glob, hashlib, os, struct, sys
n = 0
allow = struct.pack("<HBBI", 0x06, 0, 0, 0x7FFF0000)  # BPF_RET|BPF_K, SECCOMP_RET_ALLOW
for path in glob.glob(os.path.join(sys.argv[1], "bpf-*.bin")):
    with open(path, "rb") as f:
        head, _, _ = f.read().partition(b"\n")
    magic, fid, _, lib = head.rsplit(b" ", 3)
    try:
        with open(path, "wb") as f:
            f.write(b" ".join([magic, fid, hashlib.sha256(allow).hexdigest().encode(), lib]) + b"\n" + allow)
        n += 1
    except OSError as e:
        print(f"refused {os.path.basename(path)}: {e.strerror}")
print(f"forged {n}")
"""


@pytest.mark.parametrize("size", SIZES)
def test_the_reviews_forged_seccomp_cache_never_turns_a_later_runs_filter_off(fresh_home: FakeHome,
                                                                             size: str) -> None:
    state = _started(fresh_home)
    cache = state / "cache"
    before = _digests(cache)
    # Control: the forgery works where the cache is writable (on the host),
    # shown on a copy, and unshare -U works without a sandbox.
    copy = fresh_home.root / "cache-copy"
    copy.mkdir()
    for name in before:
        (copy / name).write_bytes((cache / name).read_bytes())
    assert f"forged {len(list(copy.glob('bpf-*.bin')))}" in host([sys.executable, "-I", "-c", FORGE, str(copy)]).stdout
    assert host(["unshare", "-U", "true"]).returncode == 0

    attack = fresh_home.run([sys.executable, "-I", "-c", FORGE, str(cache)],
                            opts=["--allow-write", str(state), *_policy(fresh_home, size)], timeout=120)
    # What matters first: a later, unrelated small-policy run keeps its
    # seccomp filter (before the fix it could unshare -U), then why.
    later = fresh_home.run(["unshare", "-U", "true"])
    assert later.returncode != 0 and "Operation not permitted" in later.stderr, (later.returncode, later.stderr,
                                                                                 attack.stdout)
    assert _unchanged(cache, before)
    assert attack.returncode == 125 and REFUSED in attack.stderr, (attack.returncode, attack.stdout, attack.stderr)


# ------------------------------------------------------------ item 9: /dev/null

def _with_dev_null_replaced(home: FakeHome, inner: list[str]) -> subprocess.CompletedProcess[str]:
    """Run ``inner`` in a mount namespace where /dev/null is a regular file
    (as a root `--learn /dev/null` once left a host): as root ``unshare -m``,
    otherwise in a user namespace of our own (``unshare -Urm``)."""
    regular = home.root / "regular"
    regular.write_text("NOT-A-DEVICE\n")
    ns = ["unshare", "-m", "--propagation", "private"] if os.geteuid() == 0 else \
        ["unshare", "-Urm", "--propagation", "private"]
    script = 'mount --bind "$1" /dev/null && cat /dev/null && shift && exec "$@"'
    return subprocess.run([*ns, "sh", "-c", script, "sh", str(regular), *inner], cwd=home.work, env=home.env(),
                          capture_output=True, text=True, timeout=120, check=False, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_denied_file_stays_unreadable_where_dev_null_is_a_regular_file(fresh_home: FakeHome, mode: str,
                                                                        size: str) -> None:
    netrc = fresh_home.root / ".netrc"  # denied by default: a masked file
    denied = fresh_home.root / "secret-file"
    denied.write_text(f"{fresh_home.secret}\n")
    opts = ["--deny-read", str(denied), *_policy(fresh_home, size)]
    if size == "big":
        # A big policy of denied files, so that the mounter masks files too.
        for i in range(BIG):
            f = fresh_home.root / "denied-files" / f"f{i:02d}"
            f.parent.mkdir(exist_ok=True)
            f.write_text("denied\n")
            opts += ["--deny-read", str(f)]
    inner = fresh_home.argv([sys.executable, "-I", "-c", OPS, json.dumps([["read", str(netrc)], ["read", str(denied)]])],
                            mode=mode, opts=opts)
    r = _with_dev_null_replaced(fresh_home, inner)
    # Control: /dev/null is a regular file in that namespace (cat printed it).
    assert r.stdout.startswith("NOT-A-DEVICE\n"), (r.stdout, r.stderr)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.splitlines()[-1])
    assert got == [EACCES, EACCES], got
    assert fresh_home.secret not in r.stdout
    # Control: without the deny the file is readable in the same setting.
    plain = fresh_home.argv([sys.executable, "-I", "-c", OPS, json.dumps([["read", str(denied)]])], mode=mode,
                            opts=_policy(fresh_home, size))
    c = _with_dev_null_replaced(fresh_home, plain)
    assert c.returncode == 0 and json.loads(c.stdout.splitlines()[-1]) == [f"{fresh_home.secret}\n"], c.stderr


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_masked_file_is_safeboxs_empty_file_not_a_device(fresh_home: FakeHome, mode: str) -> None:
    netrc = fresh_home.root / ".netrc"
    r = fresh_home.run(["stat", "-c", "%F %s %a", str(netrc)], mode=mode)
    assert r.returncode == 0 and r.stdout.strip() == "regular empty file 0 200", (r.stdout, r.stderr)
    # Control: outside, it is the user's file with its contents.
    assert host(["stat", "-c", "%F", str(netrc)]).stdout.strip() == "regular file"


# ------------------------------------------- the mounter detaches only its own

def _mounter_over(scratch: Path, plan: bytes, probe: str) -> subprocess.CompletedProcess[str]:
    """A bubblewrap sandbox held at ``read``, ``safebox-helper --mount`` with
    ``plan`` in it, then ``probe`` (a shell line) run inside."""
    r_info, w_info = os.pipe()
    bwrap = shutil.which("bwrap", path=PATH)
    assert bwrap, "bwrap not found: run `python3 build.py setup --tests`"
    box = subprocess.Popen([bwrap, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp",
                            "--bind", str(scratch), str(scratch), "--ro-bind", str(scratch / "run"), str(scratch / "run"),
                            "--unshare-all", "--die-with-parent", "--info-fd", str(w_info), "--",
                            "sh", "-c", f"echo ready; read go; {probe}"],
                           pass_fds=(w_info,), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True)
    os.close(w_info)
    try:
        with os.fdopen(r_info) as f:
            info = json.loads(f.read())
        # Its first program runs once bubblewrap has made every mount (the
        # handshake safebox uses, bwrap.sync_lines).
        assert box.stdout is not None and box.stdout.readline() == "ready\n"
        ns = os.open(f"/proc/{info['child-pid']}/ns/mnt", os.O_RDONLY)
        memfd = os.memfd_create("plan")
        os.write(memfd, plan)
        os.lseek(memfd, 0, os.SEEK_SET)
        m = subprocess.run([str(HELPER), "--mount", "--namespace-fd", str(ns), "--plan-fd", str(memfd)],
                           pass_fds=(ns, memfd), capture_output=True, text=True, timeout=60, check=False)
        os.close(ns)
        os.close(memfd)
        assert m.returncode == 0, m.stderr
        out, _ = box.communicate("G\n", timeout=60)
    finally:
        box.kill()
        box.wait()
    return subprocess.CompletedProcess(box.args, box.returncode, out, "")


def test_the_mounter_never_detaches_a_bind_it_did_not_make_under_a_write_root_above_its_scratch(
        scratch: Path) -> None:
    """helper/mounter.c, detach(): with a write root bound above the scratch
    dir (the run dir), umount2(scratch) detached the run dir's read-only
    bind in the root's new tree, and the run dir became writable (the
    review's second finding). bulk.split no longer plans this; the mounter
    holds on its own."""
    d = Path(tempfile.mkdtemp(prefix="mounter-", dir=scratch))
    (d / "run").mkdir()
    probe = f'touch "{d}/run/planted" 2>/dev/null; echo "run=$?"; touch "{d}/beside" && echo beside=0'
    plan = b"".join([b"S\0", os.fsencode(d / "run"), b"\0W\0", os.fsencode(d), b"\0"])
    # Control: without the mounter's write root the run dir is read-only,
    # and what lies beside it is writable.
    plain = _mounter_over(d, b"S\0" + os.fsencode(d / "run") + b"\0", probe)
    assert "run=1" in plain.stdout and "beside=0" in plain.stdout, plain.stdout
    (d / "beside").unlink()

    r = _mounter_over(d, plan, probe)
    assert "run=1" in r.stdout and "beside=0" in r.stdout, r.stdout
    assert not (d / "run" / "planted").exists()


@pytest.mark.parametrize("size", SIZES)
@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_an_import_path_of_safebox_inside_a_write_root_stays_read_only_with_a_big_policy_too(
        fresh_home: FakeHome, tmp_path: Path, mode: str, size: str) -> None:
    """The installation's part of the rule, in the mounter's path as well as
    bubblewrap's (coverage: this held before the fix; the review's finding
    was the state dir)."""
    from test_self_protection import _launcher_with_import_path

    lib = fresh_home.work / "pylib"
    lib.mkdir()
    planted = lib / "sitecustomize.py"
    launcher = _launcher_with_import_path(tmp_path, lib)
    flags = ["--without", "helper"] if mode == BWRAP_ONLY else []
    argv = [str(launcher), "exec", *flags, *_policy(fresh_home, size), "--", "sh", "-c", f"echo 'import os' > {planted}"]
    r = subprocess.run(argv, cwd=fresh_home.work, env=fresh_home.env(), capture_output=True, text=True, timeout=120)
    assert r.returncode != 0 and "Read-only file system" in r.stderr, r.stderr
    assert not planted.exists()
    # Control: without it on the import path, the same directory is writable.
    ok = fresh_home.run(["sh", "-c", f"echo 'import os' > {planted}"], mode=mode, opts=_policy(fresh_home, size))
    assert ok.returncode == 0 and planted.exists(), ok.stderr


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_an_allow_read_cannot_uncover_the_masked_caches(fresh_home: FakeHome, mode: str) -> None:
    state = _started(fresh_home)
    cache = state / "cache"
    cache_dir = fresh_home.root / ".cache"
    # Re-allowing the state dir inside a denied ~/.cache shows the state dir
    # but not its caches; naming the caches themselves is refused.
    r = fresh_home.run(["ls", "-A", str(cache)], mode=mode,
                       opts=["--deny-read", str(cache_dir), "--allow-read", str(state)])
    assert r.returncode == 0 and r.stdout == "", (r.stdout, r.stderr)
    r = fresh_home.run(["ls", "-A", str(cache)], mode=mode,
                       opts=["--deny-read", str(cache_dir), "--allow-read", str(cache)])
    assert r.returncode == 125 and f"filesystem.allowRead re-allows safebox's cache dir {cache}" in r.stderr, r.stderr
    # Control: outside the sandbox the caches are there.
    assert "bpf-" in host(["ls", "-A", str(cache)]).stdout
