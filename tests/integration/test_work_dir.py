"""Write roots of ``/`` and write roots that make a whole system tree writable
(issue 11 item 12, issue 22 item 6): ``/`` is refused by the flag or key that
asked for it, and a work dir or an ``allowWrite`` entry of ``$HOME``, a
directory above it or a system directory is warned about on every run."""

from __future__ import annotations

import json
from pathlib import Path

from sbx import FakeHome

SLASH = "`/` is refused: it would make the whole host writable"


def test_allow_write_slash_is_refused_naming_the_flag(shared_home: FakeHome) -> None:
    r = shared_home.run(["true"], opts=["--allow-write", "/"])
    assert r.returncode == 125
    assert r.stderr == (f"safebox: --allow-write /: {SLASH}\n"
                        "hint: allow only the directories the command writes\n"), r.stderr
    # Control: the same run with a narrower write root works.
    ok = shared_home.run(["true"], opts=["--allow-write", str(shared_home.work)])
    assert ok.returncode == 0 and ok.stderr == "", ok.stderr


def test_a_link_to_slash_in_allow_write_is_refused_as_slash(fresh_home: FakeHome) -> None:
    link = fresh_home.root / "everything"
    link.symlink_to("/")
    r = fresh_home.run(["true"], opts=["--allow-write", str(link)])
    assert r.returncode == 125
    assert r.stderr.splitlines()[0] == f"safebox: --allow-write {link} (it resolves to /): {SLASH}", r.stderr


def test_allow_write_slash_in_a_policy_file_is_refused_naming_the_key_and_file(fresh_home: FakeHome) -> None:
    pol = fresh_home.root / "p.json"
    pol.write_text(json.dumps({"filesystem": {"allowWrite": ["/"]}}))
    r = fresh_home.run(["true"], opts=["--policy", str(pol)])
    assert r.returncode == 125
    assert r.stderr.splitlines()[0] == f"safebox: {pol}: filesystem.allowWrite entry /: {SLASH}", r.stderr


def test_a_work_dir_of_slash_is_refused_as_such(shared_home: FakeHome) -> None:
    r = shared_home.run(["true"], cwd=Path("/"))
    assert r.returncode == 125
    assert r.stderr == ("safebox: the work dir / is a write root (the built-in filesystem.allowWrite entry `.`): "
                        f"{SLASH}\nhint: cd into a project directory first\n"), r.stderr


def test_a_work_dir_of_home_is_warned_about_without_verbose(fresh_home: FakeHome) -> None:
    r = fresh_home.run(["true"], cwd=fresh_home.root)
    assert r.returncode == 0
    assert r.stderr == (f"safebox: warning: the work dir {fresh_home.root} is your home directory, and the work "
                        f"dir is writable: all of {fresh_home.root} is writable inside but for the protected and "
                        "denied paths; run from a project directory to narrow it\n"), r.stderr
    # Control: from a project directory, not a word.
    ok = fresh_home.run(["true"])
    assert ok.returncode == 0 and ok.stderr == "", ok.stderr


def test_a_work_dir_of_etc_is_warned_about_without_verbose(shared_home: FakeHome) -> None:
    r = shared_home.run(["true"], cwd=Path("/etc"))
    assert r.returncode == 0, r.stderr
    assert r.stderr == ("safebox: warning: the work dir /etc is a system directory, and the work dir is writable: "
                        "all of /etc is writable inside but for the protected and denied paths; run from a "
                        "project directory to narrow it\n"), r.stderr


def _home_below(fresh_home: FakeHome) -> tuple[Path, dict[str, str]]:
    """A directory of the test's own holding a $HOME (not the session's
    scratch dir, which holds every other test's home and what they left)."""
    above = fresh_home.root / "above"
    (above / "home").mkdir(parents=True)
    return above, {"HOME": str(above / "home")}


def test_a_work_dir_above_the_home_is_warned_about_without_verbose(fresh_home: FakeHome) -> None:
    above, env = _home_below(fresh_home)
    r = fresh_home.run(["true"], cwd=above, env=env)
    assert r.returncode == 0, r.stderr
    assert r.stderr == (f"safebox: warning: the work dir {above} is a directory that holds your home directory, and "
                        f"the work dir is writable: all of {above} is writable inside but for the protected and "
                        "denied paths; run from a project directory to narrow it\n"), r.stderr


def test_every_warned_system_dir_is_listed_in_the_guide() -> None:
    from safebox.policy.system_dirs import WARNED

    guide = (Path(__file__).resolve().parents[2] / "docs" / "index.md").read_text()
    section = guide[guide.index("### The work dir is a write root"):]
    for d in sorted(WARNED):
        assert f"`{d}`" in section, d


def _warned(entry: str, what: str, path: str, via: str = "") -> str:
    return (f"safebox: warning: {entry}{via} is {what}: all of {path} is writable inside but for the protected and "
            "denied paths; allow only the directories the command writes\n")


def test_allow_write_of_a_system_directory_is_warned_about_as_a_work_dir_is(shared_home: FakeHome) -> None:
    # Issue 22 item 6: `--allow-write /etc` was silent where a work dir of
    # /etc was not.
    r = shared_home.run(["true"], opts=["--allow-write", "/etc"])
    assert r.returncode == 0, r.stderr
    assert r.stderr == _warned("--allow-write /etc", "a system directory", "/etc"), r.stderr
    # Control: a directory of the project's own, or deeper in a system tree
    # (a root the user wrote on purpose, as /usr/src/app is a work dir), is
    # not warned about.
    for ok_root in (str(shared_home.work), "/etc/cron.d"):
        ok = shared_home.run(["true"], opts=["--allow-write", ok_root])
        assert ok.returncode == 0 and ok.stderr == "", (ok_root, ok.stderr)


def test_allow_write_of_the_home_or_a_directory_above_it_is_warned_about(fresh_home: FakeHome) -> None:
    home = str(fresh_home.root)
    r = fresh_home.run(["true"], opts=["--allow-write", home])
    assert r.returncode == 0, r.stderr
    assert r.stderr == _warned(f"--allow-write {home}", "your home directory", home), r.stderr
    parent, env = _home_below(fresh_home)
    above = str(parent)
    r = fresh_home.run(["true"], opts=["--allow-write", above], env=env)
    assert r.returncode == 0, r.stderr
    assert r.stderr == _warned(f"--allow-write {above}", "a directory that holds your home directory", above), r.stderr


def test_allow_write_through_a_link_to_a_system_directory_is_warned_about(fresh_home: FakeHome) -> None:
    link = fresh_home.root / "config"
    link.symlink_to("/etc")
    r = fresh_home.run(["true"], opts=["--allow-write", str(link)])
    assert r.returncode == 0, r.stderr
    assert r.stderr == _warned(f"--allow-write {link}", "a system directory", str(link), " (it resolves to /etc)")


def test_allow_write_of_a_system_directory_in_a_policy_file_is_warned_about_naming_the_file(
        fresh_home: FakeHome) -> None:
    pol = fresh_home.root / "p.json"
    pol.write_text(json.dumps({"filesystem": {"allowWrite": ["/etc"]}}))
    r = fresh_home.run(["true"], opts=["--policy", str(pol)])
    assert r.returncode == 0, r.stderr
    assert r.stderr == _warned(f"{pol}: filesystem.allowWrite entry /etc", "a system directory", "/etc"), r.stderr


def test_a_home_under_tmp_is_no_reason_to_warn_about_the_private_tmp() -> None:
    # The built-in allowWrite entry /tmp is the sandbox's own tmpfs: that a
    # home lies under the host's /tmp (a CI job's, a test's) is no warning.
    import shutil
    import tempfile

    from sbx import make_home

    base = Path(tempfile.mkdtemp(prefix="safebox-tmp-home-", dir="/tmp"))
    try:
        base.chmod(0o755)
        home = make_home(base)
        r = home.run(["true"])
        assert r.returncode == 0 and r.stderr == "", r.stderr
        # Control: an entry above that home, asked for, is warned about.
        w = home.run(["true"], opts=["--allow-write", str(base)])
        assert w.returncode == 0, w.stderr
        assert w.stderr == _warned(f"--allow-write {base}", "a directory that holds your home directory", str(base))
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_chdir_makes_another_directory_the_work_dir_and_the_callers_is_not_writable(fresh_home: FakeHome) -> None:
    # `safebox mcp wrap` starts each server with --chdir: the client's own directory (a home) stays read-only.
    other = fresh_home.root / "other"
    other.mkdir()
    ok = fresh_home.run(["sh", "-c", "pwd; echo x > here.txt"])  # control: the caller's directory is the work dir
    assert ok.returncode == 0 and ok.stdout == f"{fresh_home.work}\n", ok.stderr
    r = fresh_home.run(["sh", "-c", f"pwd; echo y > mine.txt; echo z > {fresh_home.work}/there.txt"],
                       opts=["--chdir", str(other)])
    assert r.returncode == 2 and r.stdout == f"{other}\n"  # sh: a redirection that fails
    assert f"{fresh_home.work}/there.txt: Read-only file system" in r.stderr, r.stderr
    assert (other / "mine.txt").read_text() == "y\n" and not (fresh_home.work / "there.txt").exists()


def test_chdir_to_a_missing_directory_or_to_slash_is_refused(shared_home: FakeHome) -> None:
    gone = shared_home.root / "no-such-dir"
    r = shared_home.run(["true"], opts=["--chdir", str(gone)])
    assert r.returncode == 125
    assert r.stderr == (f"safebox: exec: --chdir {gone}: No such file or directory\n"
                        "hint: give an existing directory (safebox mcp wrap creates each server's)\n"), r.stderr
    slash = shared_home.run(["true"], opts=["-C", "/"])
    assert slash.returncode == 125 and slash.stderr.startswith("safebox: the work dir / is a write root"), slash.stderr
