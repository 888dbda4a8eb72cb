"""``safebox exec --review`` (docs/review.md): the run's writes are held in an
overlayfs layer, the host tree is untouched until ``safebox changes apply``,
and the layer opens nothing a normal run does not. ``apply`` reads what the
command wrote (hostile input): it never follows a link on the host, refuses
conflicts and code-running names, and can be run again.

Each claim has its control: the same command without ``--review`` changes
the host (or is refused the same way), the same apply without the planted
link or the conflict goes through.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from sbx import BOTH, BWRAP_ONLY, HELPER_ONLY, SAFEBOX, FakeHome, tree_listing, wait_for

#: Every kind of write: content, create, delete, rename, chmod, symlink,
#: mkdir, a directory removed and made again (opaque in the layer).
SCRIPT = ("echo more >> README.md && echo new > new.txt && rm src/main.c && mv new.txt moved.txt && "
          "chmod 0750 moved.txt && ln -s README.md link && mkdir -p a/b && echo deep > a/b/c && "
          "rm -r src && mkdir src && echo fresh > src/new.c && mkdir gone && echo x > gone/y")


def changes(home: FakeHome, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SAFEBOX), "changes", *args], cwd=home.work, env=home.env(), capture_output=True,
                          text=True, timeout=60, check=False, stdin=subprocess.DEVNULL)


def held_id(home: FakeHome) -> str:
    r = changes(home, "list", "--json")
    assert r.returncode == 0, r.stderr
    rows = json.loads(r.stdout)
    return str(rows[-1]["id"])


def held_dirs(base: Path) -> list[Path]:
    """The held runs' directories (not the spare an empty run leaves for the next)."""
    return [p for p in base.iterdir() if p.name != ".spare"]


def listing(home: FakeHome) -> dict[str, tuple[int, int, str]]:
    return tree_listing(home.work)


def test_a_review_run_changes_nothing_on_the_host_and_apply_gives_what_a_normal_run_would_have(
        fresh_home: FakeHome, scratch: Path) -> None:
    before = listing(fresh_home)
    control = FakeHome(root=Path(shutil.copytree(fresh_home.root, scratch / f"ctl-{fresh_home.root.name}",
                                                 symlinks=True)), secret=fresh_home.secret)
    c = control.run(["sh", "-c", SCRIPT])
    assert c.returncode == 0, c.stderr
    assert listing(control) != before  # control: the normal run changes the host

    r = fresh_home.run(["sh", "-c", SCRIPT + " && cat README.md && ls"], opts=["--review"])
    assert r.returncode == 0, r.stderr
    assert "hello\nmore\n" in r.stdout and "moved.txt" in r.stdout  # inside, the command saw its writes
    assert listing(fresh_home) == before  # ...and the host saw none of them
    assert "added" in r.stderr and "nothing reached the host" in r.stderr, r.stderr
    rid = held_id(fresh_home)
    shown = json.loads(changes(fresh_home, "show", rid, "--json").stdout)
    kinds = {os.path.relpath(c["path"], fresh_home.work): c["kind"] for c in shown["changes"]}
    assert kinds == {"README.md": "modified", "moved.txt": "added", "link": "added", "a": "added",
                     "a/b": "added", "a/b/c": "added", "src/main.c": "deleted", "src/new.c": "added", "gone": "added",
                     "gone/y": "added"}  # src: removed and made again, an opaque directory
    d = changes(fresh_home, "diff", rid)
    assert "+more" in d.stdout and "added symlink" in d.stdout and f"{fresh_home.work}/link -> README.md" in d.stdout

    a = changes(fresh_home, "apply", rid)
    assert a.returncode == 0, a.stderr
    assert listing(fresh_home) == listing(control)  # modes, links, deletions: as the normal run left them
    again = changes(fresh_home, "apply", rid)  # idempotent: an interrupted apply is finished by another
    assert again.returncode == 0 and again.stdout == "", again.stdout + again.stderr
    assert listing(fresh_home) == listing(control)


#: Probes of what a normal run refuses; each prints its result.
PROBES = [
    "echo x >> .git/hooks/pre-commit.sample",  # protected directory
    "echo x > .git/config",  # protected in a git dir
    "echo x >> .mcp.json",  # protected file
    "echo x > $HOME/outside.txt",  # outside every write root
    "cat $HOME/.ssh/id_rsa",  # masked
    "echo x > /etc/safebox-review-probe",  # the read-only root
    "mount -t tmpfs none src",  # no mounting
    "umount -l .",  # nor unmounting (under --review: the overlay, to reach the host's tree)
    "cat src/main.c",  # denyRead inside the write root (opts below)
    "echo x >> src/main.c",
]
#: A mask inside the write root, in both runs.
MASK = ["--deny-read", "src/main.c"]


def _probe_script() -> str:
    return "; ".join(f"( {p} ) >/dev/null 2>/tmp/e && echo 'ok {i}' || echo \"no {i}: $(cat /tmp/e)\""
                     for i, p in enumerate(PROBES))


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
def test_review_opens_nothing_a_normal_run_does_not(fresh_home: FakeHome, mode: str) -> None:
    before = listing(fresh_home)
    normal = fresh_home.run(["sh", "-c", _probe_script()], mode=mode, opts=MASK)
    assert listing(fresh_home) == before, "a probe landed on the host in the normal run"
    review = fresh_home.run(["sh", "-c", _probe_script()], mode=mode, opts=["--review", *MASK])
    assert normal.returncode == 0 and review.returncode == 0, normal.stderr + review.stderr
    # The same refusal, word for word, for every probe.
    assert review.stdout.replace("--review ", "") == normal.stdout, (normal.stdout, review.stdout)
    lines = normal.stdout.splitlines()
    assert "ok " not in normal.stdout and all(f"no {i}: " in normal.stdout for i in range(len(PROBES)))
    assert "Read-only file system" in lines[0] and "Read-only file system" in lines[1], normal.stdout
    # Control: the same write to an unprotected file is held in the layer.
    ok = fresh_home.run(["sh", "-c", "echo x >> README.md"], mode=mode, opts=["--review"])
    assert ok.returncode == 0 and "1 modified" in ok.stderr, ok.stderr
    assert listing(fresh_home) == before


def test_review_is_refused_where_overlayfs_cannot_be_had(fresh_home: FakeHome) -> None:
    r = fresh_home.run(["sh", "-c", "echo x > new.txt"], mode=HELPER_ONLY, opts=["--review"])
    assert r.returncode == 125
    assert ("safebox: --review needs bubblewrap's mount namespace for its overlays, and this run has none "
            "(helper-only mode)\nhint: run without --review") in r.stderr, r.stderr
    assert not (fresh_home.work / "new.txt").exists()
    # Control: without --review the same mode runs, and the write lands.
    c = fresh_home.run(["sh", "-c", "echo x > new.txt"], mode=HELPER_ONLY)
    assert c.returncode == 0, c.stderr
    assert (fresh_home.work / "new.txt").read_text() == "x\n"


def test_apply_refuses_a_conflict_and_code_running_names_until_named(fresh_home: FakeHome) -> None:
    r = fresh_home.run(["sh", "-c", "echo agent >> README.md && echo 'export X=1' > .envrc && "
                        "mkdir -p .vscode && echo '{}' > .vscode/tasks.json && echo ok > plain.txt"],
                       opts=["--review"])
    assert r.returncode == 0, r.stderr
    assert "3 that would run code on the host" in r.stderr, r.stderr  # .envrc, .vscode/, .vscode/tasks.json
    rid = held_id(fresh_home)
    (fresh_home.work / "README.md").write_text("hello\nuser edit\n")  # the host changed since the run started
    a = changes(fresh_home, "apply", rid)
    assert a.returncode == 1
    assert f"safebox: conflict: {fresh_home.work}/README.md: changed on the host since the run started" in a.stderr
    assert (fresh_home.work / "README.md").read_text() == "hello\nuser edit\n"
    assert (fresh_home.work / "plain.txt").read_text() == "ok\n"  # control: the rest was applied
    assert not (fresh_home.work / ".envrc").exists() and not (fresh_home.work / ".vscode").exists()
    assert f"  {fresh_home.work}/.envrc\n" in a.stderr and f"  {fresh_home.work}/.vscode/tasks.json\n" in a.stderr
    named = changes(fresh_home, "apply", rid, ".envrc")
    assert named.returncode == 0, named.stderr
    assert (fresh_home.work / ".envrc").read_text() == "export X=1\n"
    assert not (fresh_home.work / ".vscode").exists()  # still not named
    forced = changes(fresh_home, "apply", rid, "--force", "README.md")
    assert forced.returncode == 0, forced.stderr
    assert (fresh_home.work / "README.md").read_text() == "hello\nagent\n"


def test_apply_never_follows_a_symlink_on_the_host(fresh_home: FakeHome) -> None:
    r = fresh_home.run(["sh", "-c", "echo planted > src/evil"], opts=["--review"])
    assert r.returncode == 0, r.stderr
    rid = held_id(fresh_home)
    elsewhere = fresh_home.root / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(fresh_home.work / "src")
    (fresh_home.work / "src").symlink_to(elsewhere)  # planted after the run, before apply
    a = changes(fresh_home, "apply", rid)
    assert a.returncode == 1
    assert f"safebox: refused: {fresh_home.work}/src/evil: 'src' on the way is a symlink" in a.stderr, a.stderr
    assert f"safebox: conflict: {fresh_home.work}/src: changed on the host since the run started" in a.stderr
    assert list(elsewhere.iterdir()) == [] and (fresh_home.work / "src").is_symlink()
    # Control: forced, the link itself is replaced by the layer's directory, still never followed.
    ok = changes(fresh_home, "apply", rid, "--force")
    assert ok.returncode == 0, ok.stderr
    assert list(elsewhere.iterdir()) == []
    assert not (fresh_home.work / "src").is_symlink()
    assert (fresh_home.work / "src" / "evil").read_text() == "planted\n"


def test_two_applies_of_one_run_do_not_race(fresh_home: FakeHome) -> None:
    r = fresh_home.run(["sh", "-c", "echo ok > plain.txt"], opts=["--review"])
    assert r.returncode == 0, r.stderr
    rid = held_id(fresh_home)
    lock = fresh_home.root / ".cache" / "safebox" / "review" / rid / "lock"
    fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # as an apply at work holds it
        a = changes(fresh_home, "apply", rid)
        assert a.returncode == 125
        assert f"safebox: held run {rid}: another `safebox changes` is at work on it; apply refused" in a.stderr
        assert not (fresh_home.work / "plain.txt").exists()
    finally:
        os.close(fd)
    ok = changes(fresh_home, "apply", rid)  # control: once it is released
    assert ok.returncode == 0, ok.stderr
    assert (fresh_home.work / "plain.txt").read_text() == "ok\n"


def test_a_held_run_another_user_could_write_is_refused(fresh_home: FakeHome) -> None:
    r = fresh_home.run(["sh", "-c", "echo ok > plain.txt"], opts=["--review"])
    assert r.returncode == 0, r.stderr
    rid = held_id(fresh_home)
    d = fresh_home.root / ".cache" / "safebox" / "review" / rid
    if os.geteuid() == 0:
        os.chown(d, 65534, 65534)  # another user's
    else:
        d.chmod(0o777)  # or one anyone could have filled
    a = changes(fresh_home, "apply", rid)
    assert a.returncode == 125
    assert f"safebox: held run {rid} belongs to uid " in a.stderr and "will not read or apply it" in a.stderr
    assert not (fresh_home.work / "plain.txt").exists()
    os.chown(d, os.geteuid(), os.getegid())
    d.chmod(0o700)
    assert changes(fresh_home, "apply", rid).returncode == 0  # control: its owner's, it applies


def test_a_killed_run_leaves_the_host_untouched_and_its_layer_listed(fresh_home: FakeHome) -> None:
    before = listing(fresh_home)
    p = fresh_home.popen(["sh", "-c", "echo half > partial.txt && exec sleep 60"], mode=BOTH, opts=["--review"])
    base = fresh_home.root / ".cache" / "safebox" / "review"
    try:
        assert wait_for(lambda: any(base.glob("*/layers/0/upper/partial.txt")), timeout=20)
    finally:
        p.send_signal(signal.SIGKILL)
        p.communicate(timeout=20)
    assert listing(fresh_home) == before
    rows = json.loads(changes(fresh_home, "list", "--json").stdout)
    assert [r["status"] for r in rows] == ["interrupted"]
    shown = changes(fresh_home, "show", rows[0]["id"])
    assert f"A {fresh_home.work}/partial.txt" in shown.stdout
    assert changes(fresh_home, "discard", rows[0]["id"]).returncode == 0
    assert json.loads(changes(fresh_home, "list", "--json").stdout) == []


def test_the_api_holds_shows_applies_and_discards_a_runs_changes(fresh_home: FakeHome) -> None:
    import safebox

    env = fresh_home.env()
    base = fresh_home.root / ".cache" / "safebox" / "review"
    before = listing(fresh_home)
    with safebox.Sandbox(cwd=fresh_home.work, env=env, review=True) as sb:
        r = sb.run(["sh", "-c", "echo more >> README.md && echo new > new.txt && echo x > .envrc"])
        assert r.returncode == 0
        assert listing(fresh_home) == before  # held, not on the host
        rows = {os.path.relpath(c["path"], fresh_home.work): c for c in sb.changes(diff=True)}
        assert {k: (v["kind"], v["runs_code"]) for k, v in rows.items()} == {
            "README.md": ("modified", False), "new.txt": ("added", False), ".envrc": ("added", True)}
        assert "+more" in rows["README.md"]["diff"]
        out = sb.apply()
        assert sorted(os.path.basename(p) for p in out["applied"]) == ["README.md", "new.txt"]
        assert out["code"] == [str(fresh_home.work / ".envrc")] and not (fresh_home.work / ".envrc").exists()
        assert (fresh_home.work / "new.txt").read_text() == "new\n"
        with pytest.raises(safebox.SafeboxError, match="still waits: apply"):
            sb.run(["true"])  # the next command would not see the held .envrc
        sb.discard()
        assert sb.held_run is None and held_dirs(base) == []
        sb.run(["true"])
        assert sb.held_run is None and held_dirs(base) == []  # nothing changed: nothing held
        sb.run(["sh", "-c", "echo again > again.txt"])
        assert sb.held_run is not None
    assert held_dirs(base) == [] and not (fresh_home.work / "again.txt").exists()  # dropped with the Sandbox
    with safebox.Sandbox(cwd=fresh_home.work, env=env, review=True, keep=True) as sb:
        sb.run(["sh", "-c", "echo kept > kept.txt"])
        rid = sb.held_run
    assert [p.name for p in held_dirs(base)] == [rid]  # keep=True: it survives the Sandbox
    assert changes(fresh_home, "apply", str(rid)).returncode == 0
    assert (fresh_home.work / "kept.txt").read_text() == "kept\n"


def test_review_composes_with_the_audit_log_the_violations_feed_and_learn(fresh_home: FakeHome) -> None:
    log = fresh_home.root / "audit.jsonl"
    learned = fresh_home.root / "learned.json"
    r = fresh_home.run(["sh", "-c", "echo more >> README.md; echo x > /etc/safebox-review-probe; true"],
                       opts=["--review", "--audit-log", str(log), "--learn", str(learned)])
    assert r.returncode == 0, r.stderr
    # The feed still names the refused write, as without --review.
    assert "safebox: refused 1 operation: 1 write (/etc/safebox-review-probe)" in r.stderr, r.stderr
    assert learned.exists()  # --learn wrote its policy
    rid = held_id(fresh_home)
    assert changes(fresh_home, "apply", rid).returncode == 0
    other = fresh_home.run(["sh", "-c", "echo y > y.txt"], opts=["--review", "--audit-log", str(log)])
    assert other.returncode == 0, other.stderr
    assert changes(fresh_home, "discard", held_id(fresh_home)).returncode == 0
    events = [json.loads(line) for line in log.read_text().splitlines()]
    kinds = [e["event"] for e in events]
    assert "denied" in kinds
    held = [e for e in events if e["event"] == "review_held"]
    assert [(h["added"], h["modified"], h["deleted"]) for h in held] == [(0, 1, 0), (1, 0, 0)]
    assert held[0]["changes"][0]["path"] == str(fresh_home.work / "README.md")
    applied = [e for e in events if e["event"] == "review_applied"]
    assert applied and applied[0]["applied"] == [str(fresh_home.work / "README.md")] and applied[0]["review"] == rid
    assert held[0]["review"] == rid
    assert [e["event"] for e in events][-1] == "review_discarded"
    # Control: without --review the same run's write lands and no review event is written.
    (fresh_home.work / "README.md").write_text("hello\n")
    plain = fresh_home.root / "plain.jsonl"
    c = fresh_home.run(["sh", "-c", "echo more >> README.md"], opts=["--audit-log", str(plain)])
    assert c.returncode == 0 and (fresh_home.work / "README.md").read_text() == "hello\nmore\n"
    assert "review_" not in plain.read_text()


#: Run in a user and mount namespace of the test's own (as root and as an
#: unprivileged user alike), so that small tmpfs can stand for full disks.
_FULL_DISKS = r"""
set -u
S="$1"; base="$2"
mkdir -p "$base/state" "$base/proj"
mount -t tmpfs -o size=2m none "$base/state" || exit 90
mount -t tmpfs -o size=256k none "$base/proj" || exit 91
export HOME="$base/state/home"; mkdir -p "$HOME"; cd "$base/proj"
echo "== layer full"
"$S" exec --review -- sh -c 'head -c 8388608 /dev/zero > big; echo "dd rc=$?"' 2>&1
echo "host: $(ls -A)"
id=$("$S" changes list --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[-1]["id"])')
"$S" changes discard "$id" 2>&1
echo "== host full"
"$S" exec --review -- sh -c 'head -c 524288 /dev/zero > big; echo small > small' >/dev/null 2>&1
id=$("$S" changes list --json | python3 -c 'import json,sys; print(json.load(sys.stdin)[-1]["id"])')
"$S" changes apply "$id"; echo "apply rc=$?"
echo "host: $(ls -A)"
"$S" changes apply "$id" small; echo "apply small rc=$?"
echo "host: $(ls -A)"
"""


def test_full_disks_give_enospc_and_never_a_half_applied_tree(scratch: Path) -> None:
    base = Path(tempfile.mkdtemp(prefix="full-", dir=scratch))
    base.chmod(0o755)
    r = subprocess.run(["unshare", "-Urm", "sh", "-c", _FULL_DISKS, "sh", str(SAFEBOX), str(base)],
                       capture_output=True, text=True, timeout=120, check=False, env={"PATH": os.environ["PATH"]})
    out = r.stdout + r.stderr
    layer, host = out.split("== host full")
    # The layer's disk filled: the command got ENOSPC inside; the host got nothing.
    assert "No space left on device" in layer and "dd rc=1" in layer, out
    assert "host: \n" in layer, out
    # The host's disk cannot take the change: refused before anything is written...
    assert "safebox: cannot apply: the changes need 524294 bytes under " in host, out
    assert f"({os.strerror(28)}); nothing was applied" in host and "apply rc=125\nhost: \n" in host, out
    # ...control: what fits is applied.
    assert "apply small rc=0\nhost: small\n" in host, out


def test_an_apply_killed_half_way_is_finished_by_the_next(fresh_home: FakeHome) -> None:
    script = ("import os\nfor d in range(20):\n    os.makedirs(f'out/d{d}')\n"
              "for i in range(2000):\n    open(f'out/d{i % 20}/f{i}', 'w').write(str(i))\n")
    r = fresh_home.run(["python3", "-c", script], opts=["--review"])
    assert r.returncode == 0, r.stderr
    rid = held_id(fresh_home)
    p = subprocess.Popen([str(SAFEBOX), "changes", "apply", rid], cwd=fresh_home.work, env=fresh_home.env(),
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(lambda: (fresh_home.work / "out" / "d0").exists(), timeout=30)
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)
    # What a kill between the copy and the rename leaves: a temporary file beside its target.
    (fresh_home.work / "out" / "d1").mkdir(parents=True, exist_ok=True)
    leftover = fresh_home.work / "out" / "d1" / ".f1.safebox-apply-0123abcd"
    leftover.write_text("half")
    again = changes(fresh_home, "apply", rid)
    assert again.returncode == 0, again.stderr
    files = sorted(str(f.relative_to(fresh_home.work)) for f in (fresh_home.work / "out").rglob("*") if f.is_file())
    assert files == sorted(f"out/d{i % 20}/f{i}" for i in range(2000))  # every file, no temporary one
    assert all((fresh_home.work / f"out/d{i % 20}/f{i}").read_text() == str(i) for i in range(0, 2000, 97))
    assert changes(fresh_home, "apply", rid).stdout == ""  # and a third has nothing left to do


def test_names_and_contents_the_command_chose_cannot_drive_the_terminal(fresh_home: FakeHome) -> None:
    r = fresh_home.run(["sh", "-c", "printf 'a\\033]0;pwned\\007\\n' > \"$(printf 'x\\033[2Jy')\""], opts=["--review"])
    assert r.returncode == 0, r.stderr
    rid = held_id(fresh_home)
    for out in (changes(fresh_home, "show", rid).stdout, changes(fresh_home, "diff", rid).stdout):
        assert "\x1b" not in out and "\x07" not in out
        assert "x\\x1b[2Jy" in out
    assert "+a\\x1b]0;pwned\\x07" in changes(fresh_home, "diff", rid).stdout
    # Control: the file itself holds the bytes, and apply puts them on the host as they are.
    assert changes(fresh_home, "apply", rid).returncode == 0
    assert (fresh_home.work / "x\x1b[2Jy").read_bytes() == b"a\x1b]0;pwned\x07\n"


def test_the_layers_are_out_of_the_commands_reach_and_set_id_bits_never_reach_the_host(fresh_home: FakeHome) -> None:
    # Inside, the held run's own directories are not to be found: only the merged view.
    r = fresh_home.run(["sh", "-c", "echo x > tool && chmod 6755 tool && stat -c %a tool && "
                        "ls -A ~/.cache/safebox/run/*/*/review; ls -A ~/.cache/safebox/review 2>&1; "
                        "ls -A /tmp; grep -c ' /tmp/' /proc/self/mountinfo; true"],
                       opts=["--review"])
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines()[0] == "6755"  # the command set them, in its layer
    assert "layers" not in r.stdout and "upper" not in r.stdout, r.stdout
    # The stage the layers came in by (the private /tmp) is gone: neither a mount nor a directory.
    assert "safebox-review" not in r.stdout and r.stdout.splitlines()[-1] == "0", r.stdout
    rid = held_id(fresh_home)
    assert (fresh_home.root / ".cache" / "safebox" / "review" / rid / "layers" / "0" / "upper" / "tool").exists()
    assert changes(fresh_home, "apply", rid).returncode == 0
    assert oct((fresh_home.work / "tool").stat().st_mode & 0o7777) == "0o755"  # kept, but for set-user/group-ID


def test_held_runs_are_bounded_and_old_ones_swept(fresh_home: FakeHome) -> None:
    base = fresh_home.root / ".cache" / "safebox" / "review"
    base.mkdir(parents=True, mode=0o700)

    def fake(rid: str) -> None:
        d = base / rid
        d.mkdir(mode=0o700)
        (d / "meta.json").write_text(json.dumps({"id": rid, "roots": [], "created": 0}))

    fake("20200101-000000-aaaaaa")  # years old: swept by the next run
    for i in range(100):
        fake(f"29990101-000000-{i:06x}")
    r = fresh_home.run(["sh", "-c", "echo x > new.txt"], opts=["--review"])
    assert r.returncode == 125
    assert f"safebox: 100 held runs already wait in {base}: --review will not make another\n" in r.stderr, r.stderr
    assert "hint: apply or discard some: `safebox changes list`, `safebox changes discard ID`" in r.stderr
    assert not (base / "20200101-000000-aaaaaa").exists()
    # Control: with one discarded, the run is held again.
    assert changes(fresh_home, "discard", "29990101-000000-000000").returncode == 0
    ok = fresh_home.run(["sh", "-c", "echo x > new.txt"], opts=["--review"])
    assert ok.returncode == 0, ok.stderr
    assert not (fresh_home.work / "new.txt").exists()


def _upper(home: FakeHome, rid: str) -> Path:
    return home.root / ".cache" / "safebox" / "review" / rid / "layers" / "0" / "upper"


def test_apply_moves_a_file_out_of_the_layer_without_its_attributes_and_copies_a_hard_linked_one(
        fresh_home: FakeHome) -> None:
    script = ("import os\nopen('moved.txt', 'w').write('m')\nopen('tool', 'w').write('t')\nos.chmod('tool', 0o6755)\n"
              "open('tagged', 'w').write('x')\nos.setxattr('tagged', 'user.origin', b'the command')\n"
              "open('README.md', 'a').write('more')\nopen('a', 'w').write('a')\nos.link('a', 'b')\n")
    r = fresh_home.run(["python3", "-c", script], opts=["--review"])
    assert r.returncode == 0, r.stderr
    rid = held_id(fresh_home)
    up = _upper(fresh_home, rid)
    ino = {n: os.lstat(up / n).st_ino for n in ("moved.txt", "tool", "tagged", "README.md", "a")}
    # Control: what the layer holds carries what must not reach the host.
    assert os.listxattr(up / "tagged") == ["user.origin"]
    assert "user.overlay.origin" in os.listxattr(up / "README.md")  # overlayfs's mark of a copied-up file
    assert os.lstat(up / "tool").st_mode & 0o7777 == 0o6755 and os.lstat(up / "a").st_nlink == 2
    assert changes(fresh_home, "apply", rid).returncode == 0
    w = fresh_home.work
    for n in ("moved.txt", "tool", "tagged", "README.md"):
        st = os.lstat(w / n)
        assert (st.st_ino, st.st_nlink) == (ino[n], 1), n  # the layer's file itself, its layer name gone
        assert not (up / n).exists() and os.listxattr(w / n) == [], n
    assert os.lstat(w / "tool").st_mode & 0o7777 == 0o755
    assert (w / "README.md").read_text().endswith("more") and (w / "tagged").read_text() == "x"
    # A file with a second name in the layer is copied: each host name its own file, the layer's left whole.
    assert {os.lstat(w / n).st_ino for n in "ab"} & {ino["a"]} == set()
    assert [(w / n).read_text() for n in "ab"] == ["a", "a"] and os.lstat(up / "a").st_nlink == 2
    assert changes(fresh_home, "show", rid).stdout.count(str(w)) == 0  # nothing left to apply


def test_an_apply_stopped_inside_a_move_is_finished_by_the_next_and_a_third_changes_nothing(
        fresh_home: FakeHome) -> None:
    r = fresh_home.run(["sh", "-c", "echo one > one && echo two > two && rm -r src && mkdir src && "
                        "echo fresh > src/new.c"], opts=["--review"])
    assert r.returncode == 0, r.stderr
    rid = held_id(fresh_home)
    up, w = _upper(fresh_home, rid), fresh_home.work
    # What a stop leaves: after the rename, before the layer's name is unlinked (one file, two names)...
    os.link(up / "one", w / "one")
    # ...and after the link beside the target, before the rename.
    os.link(up / "two", w / ".two.safebox-apply-0badf00d")
    again = changes(fresh_home, "apply", rid)
    assert again.returncode == 0, again.stderr
    assert os.lstat(w / "one").st_nlink == 1 and not (up / "one").exists()
    assert (w / "two").read_text() == "two\n" and os.lstat(w / "two").st_nlink == 1
    assert sorted(p.name for p in w.iterdir() if "safebox-apply" in p.name) == []
    assert sorted(os.listdir(w / "src")) == ["new.c"]  # the directory the command replaced
    # A third apply has nothing to do, and leaves the replaced directory's new file (copied, not
    # moved: taken out of the opaque layer directory, the host's file would look deleted by the run).
    third = changes(fresh_home, "apply", rid)
    assert (third.returncode, third.stdout) == (0, ""), third.stderr
    assert (w / "src" / "new.c").read_text() == "fresh\n" and (up / "src" / "new.c").exists()


def test_a_run_on_the_directories_an_empty_run_left_starts_when_it_starts(fresh_home: FakeHome) -> None:
    # A run that changed nothing leaves its empty directories for the next one (one rename each way).
    spare = fresh_home.root / ".cache" / "safebox" / "review" / ".spare"
    assert fresh_home.run(["true"], opts=["--review"]).returncode == 0
    assert spare.is_dir() and changes(fresh_home, "list", "--json").stdout.strip() == "[]"  # never a held run
    time.sleep(0.05)  # past the file system clock's tick
    (fresh_home.work / "README.md").write_text("host edit\n")  # before the next run starts: no conflict
    time.sleep(0.05)
    r = fresh_home.run(["sh", "-c", "echo more >> README.md"], opts=["--review"])
    assert r.returncode == 0, r.stderr
    assert not spare.exists()  # taken
    a = changes(fresh_home, "apply", held_id(fresh_home))
    assert a.returncode == 0 and "conflict" not in a.stderr, a.stderr
    assert (fresh_home.work / "README.md").read_text() == "host edit\nmore\n"
