"""The host trusts nothing the sandbox touched (issue 22, docs/threat-model.md
"Host-side handling"): the review's reproductions against the real
``safebox exec``, each with its control.

- a step swaps the runner's step summary and ``$GITHUB_ENV`` for symlinks to
  files it cannot read: nothing of them reaches the summary, the runner's
  files or stderr;
- an earlier run planted ``audit.jsonl -> ~/.bashrc``: the next run refuses
  the log (125) and the rc file is untouched;
- ``--learn`` and ``policy suggest -o`` of a character device write it in
  place and never rename a file over it (as root this once turned the host's
  ``/dev/null`` into a regular file).
"""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path

import pytest

from sbx import BOTH, HELPER_ONLY, SAFEBOX, FakeHome, host

pytestmark = pytest.mark.needs_bwrap


def _runner(home: FakeHome) -> dict[str, str]:
    """A GitHub runner's file commands beside the fake home, as the runner lays them out."""
    cmds = home.root / "runner" / "_temp" / "_runner_file_commands"
    cmds.mkdir(parents=True)
    env = {"GITHUB_ACTIONS": "true", "RUNNER_TEMP": str(cmds.parent), "GITHUB_WORKSPACE": str(home.work)}
    for var, name in (("GITHUB_ENV", "set_env_1"), ("GITHUB_PATH", "add_path_1"),
                      ("GITHUB_STEP_SUMMARY", "step_summary_1")):
        (cmds / name).write_text("")
        env[var] = str(cmds / name)
    return env


SWAP = ('ln -sf "$HOME/.ssh/id_rsa" "$GITHUB_STEP_SUMMARY.t" && mv -f "$GITHUB_STEP_SUMMARY.t" "$GITHUB_STEP_SUMMARY"'
        ' && ln -sf "$HOME/.netrc" "$GITHUB_ENV.t" && mv -f "$GITHUB_ENV.t" "$GITHUB_ENV" && echo swapped')


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_runner_files_swapped_for_symlinks_inside_are_never_followed_after_the_run(
        fresh_home: FakeHome, mode: str) -> None:
    env = _runner(fresh_home)
    r = fresh_home.run(["sh", "-c", SWAP], env=env, mode=mode)
    assert r.stdout == "swapped\n", r.stderr
    assert fresh_home.secret not in r.stderr
    for var in ("GITHUB_STEP_SUMMARY", "GITHUB_ENV"):
        assert fresh_home.secret not in Path(env[var]).read_text(), var
        assert (f"safebox: refused {var} entry '*': refused whole: a symlink; safebox never follows one in a "
                "place a sandboxed command could write") in r.stderr, r.stderr
    # The report safebox itself writes still reaches the runner's summary.
    assert Path(env["GITHUB_STEP_SUMMARY"]).read_text().startswith("### safebox: `sh -c ")


def test_control_the_swapped_links_lead_to_the_secrets_when_followed(fresh_home: FakeHome) -> None:
    """Following what the step left, as the code before the fix did, reads both secrets."""
    link = fresh_home.work / "summary-link"
    link.symlink_to(fresh_home.root / ".ssh" / "id_rsa")
    assert fresh_home.secret in host(["cat", str(link)]).stdout
    link.unlink()
    link.symlink_to(fresh_home.root / ".netrc")
    assert fresh_home.secret in host(["cat", str(link)]).stdout


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_an_audit_log_planted_as_a_symlink_to_bashrc_is_refused_and_bashrc_is_untouched(
        fresh_home: FakeHome, mode: str) -> None:
    rc = fresh_home.root / ".bashrc"
    before = rc.read_bytes()
    log = fresh_home.work / "audit.jsonl"
    log.symlink_to(rc)  # what an earlier run with the work dir writable can leave
    r = fresh_home.run(["sh", "-c", "echo ran"], opts=["--audit-log", str(log)], mode=mode)
    assert (r.returncode, r.stdout) == (125, "")
    assert (f"safebox: cannot open audit log {log}: a symlink; safebox never follows one in a place a sandboxed "
            "command could write") in r.stderr, r.stderr
    assert rc.read_bytes() == before
    # Control: the link itself leads to the rc file; an append through it lands there.
    assert host(["sh", "-c", f"echo appended >> {log}"]).returncode == 0
    assert rc.read_bytes() == before + b"appended\n"


def test_an_audit_log_that_is_a_plain_file_of_the_user_is_appended(fresh_home: FakeHome) -> None:
    log = fresh_home.root / "audit.jsonl"
    for _ in range(2):
        assert fresh_home.run(["true"], opts=["--audit-log", str(log)]).returncode == 0
    assert [ln.count('"event":"start"') for ln in log.read_text().splitlines()].count(1) == 2


def _char_device(fresh_home: FakeHome) -> Path:
    """A character device the test may write: as root, a node of /dev/null's
    numbers made by the test (never the host's /dev/null, which the code
    before the fix would have replaced); unprivileged, /dev/null itself (a
    rename over it fails for a user, so the machine is safe either way)."""
    if os.geteuid() != 0:
        return Path("/dev/null")
    dev = fresh_home.root / "null-dev"
    os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    return dev


def test_learn_into_a_character_device_writes_it_in_place_and_never_replaces_it(fresh_home: FakeHome) -> None:
    dev = _char_device(fresh_home)
    before = dev.stat()
    r = fresh_home.run(["true"], opts=["--learn", str(dev)])
    assert r.returncode == 0, r.stderr
    after = dev.stat()
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    # Control: into a plain file the policy is written.
    out = fresh_home.root / "learned.json"
    assert fresh_home.run(["true"], opts=["--learn", str(out)]).returncode == 0
    assert '"allowedDomains"' in out.read_text()


def test_policy_suggest_into_a_character_device_writes_it_in_place(fresh_home: FakeHome) -> None:
    log = fresh_home.root / "audit.jsonl"
    assert fresh_home.run(["true"], opts=["--audit-log", str(log)]).returncode == 0
    dev = _char_device(fresh_home)
    before = dev.stat()
    r = subprocess.run([str(SAFEBOX), "policy", "suggest", str(log), "-o", str(dev)], capture_output=True,
                       text=True, env=fresh_home.env(), check=False)
    assert r.returncode == 0, r.stderr
    after = dev.stat()
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


def test_learn_output_planted_as_a_symlink_is_refused_and_its_target_untouched(fresh_home: FakeHome) -> None:
    rc = fresh_home.root / ".bashrc"
    before = rc.read_bytes()
    out = fresh_home.work / "learned.json"
    out.symlink_to(rc)
    r = fresh_home.run(["true"], opts=["--learn", str(out)])
    assert r.returncode == 125
    assert f"safebox: cannot write the policy to {out}: not a regular file; safebox will not replace it" in r.stderr
    assert rc.read_bytes() == before and out.is_symlink()


def test_a_report_of_an_audit_log_swapped_for_a_link_to_a_key_never_reads_the_key(fresh_home: FakeHome) -> None:
    log = fresh_home.work / "audit.jsonl"
    log.symlink_to(fresh_home.root / ".ssh" / "id_rsa")
    r = subprocess.run([str(SAFEBOX), "report", str(log)], capture_output=True, text=True, env=fresh_home.env(),
                       check=False)
    assert r.returncode == 125
    assert fresh_home.secret not in r.stdout + r.stderr
    assert f"safebox: {log}: cannot read the audit log: a symlink" in r.stderr, r.stderr


def test_a_fifo_planted_as_a_nested_repositorys_config_never_holds_the_next_start(fresh_home: FakeHome) -> None:
    """Found in review: reading .git/config with a blocking open() waited
    forever on a fifo the command left, and every later start hung."""
    # Made here, as a run that left it would have (the watch at depth now
    # moves a new repository's config out after a run: what stays is one
    # that was there before, or came from elsewhere).
    git = fresh_home.work / "sub" / ".git"
    for d in ("objects", "refs"):
        (git / d).mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    os.mkfifo(git / "config")
    os.mkfifo(git / "commondir")
    assert stat.S_ISFIFO((git / "config").lstat().st_mode)
    r = fresh_home.run(["echo", "ran"], timeout=30)
    assert (r.returncode, r.stdout) == (0, "ran\n"), r.stderr


def test_a_directory_of_the_audit_log_swapped_for_a_link_by_an_earlier_run_is_refused(fresh_home: FakeHome) -> None:
    """Found in review: run 1 makes `logs -> ~/.bashrc.d`; run 2's `--audit-log logs/audit.jsonl` then
    wrote JSON lines (with `$(…)` in a refused path) into a directory the shell sources."""
    rcd = fresh_home.root / ".bashrc.d"
    rcd.mkdir()
    assert fresh_home.run(["ln", "-s", str(rcd), "logs"]).returncode == 0  # a sandboxed run plants it
    r = fresh_home.run(["true"], opts=["--audit-log", "logs/audit.jsonl"])
    assert (r.returncode, r.stdout) == (125, "")
    assert (f"safebox: {fresh_home.work}/logs/audit.jsonl: {fresh_home.work}/logs on the way is a symlink inside the "
            f"write root {fresh_home.work}, which a sandboxed command could have made; safebox never follows one "
            "there for --audit-log") in r.stderr, r.stderr
    assert list(rcd.iterdir()) == []
    # Controls: a real directory there works; a link of the user's outside every write root is followed.
    (fresh_home.work / "logs").unlink()
    (fresh_home.work / "logs").mkdir()
    assert fresh_home.run(["true"], opts=["--audit-log", "logs/audit.jsonl"]).returncode == 0
    mine = fresh_home.root / "my-logs"
    mine.symlink_to(fresh_home.work / "logs")
    assert fresh_home.run(["true"], opts=["--audit-log", str(mine / "b.jsonl")]).returncode == 0
    assert (fresh_home.work / "logs" / "b.jsonl").exists()
