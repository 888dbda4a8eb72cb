"""A writable $HOME keeps its start-up files, by rule (issue 22, review finding 6).

The review ran with the work dir at $HOME and planted ``~/.bash_aliases``
(Debian's ``.bashrc`` sources it) and
``~/.local/lib/python3.11/site-packages/x.pth``, which both ran on the host,
and wrote ``~/.cargo/config.toml`` and ``~/.vimrc``. None is on the list of
protected names. Now every dot entry directly in $HOME is read-only inside
(EROFS under bubblewrap), one the command creates is quarantined after the
run, and the user site's ``*.pth`` / ``*customize`` are protected even where
the policy grants the site. Each test has its control: the same kind of
write where the rule does not apply (a non-dot file in $HOME, a write root
the policy names inside a dot entry) lands.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sbx import BOTH, BWRAP_ONLY, HELPER_ONLY, FakeHome

MOUNT_MODES = [BOTH, BWRAP_ONLY]
SITE = ".local/lib/python3.11/site-packages"


def _in_home(home: FakeHome, script: str, *, mode: str = BOTH, opts: tuple[str, ...] = ()) -> tuple[int, str]:
    """Run ``script`` with the work dir at $HOME; (exit status, stderr)."""
    r = home.run(["sh", "-c", script], mode=mode, opts=opts, cwd=home.root)
    return r.returncode, r.stderr


def _moved_to(stderr: str, path: Path) -> Path:
    prefix = f"safebox: the command created protected file {path}; moved it to "
    line = next((ln for ln in stderr.splitlines() if ln.startswith(prefix)), None)
    assert line is not None, stderr
    return Path(line[len(prefix):])


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_bash_aliases_planted_in_a_writable_home_is_quarantined(fresh_home: FakeHome, mode: str) -> None:
    aliases = fresh_home.root / ".bash_aliases"
    rc, err = _in_home(fresh_home, "echo ok > notes.txt; echo 'alias ls=\"id >/tmp/pwned\"' > .bash_aliases",
                       mode=mode)
    assert rc == 0, err
    assert (fresh_home.root / "notes.txt").read_text() == "ok\n"  # control: $HOME is writable
    assert not aliases.exists()
    assert _moved_to(err, aliases).read_text().startswith("alias ls=")


@pytest.mark.parametrize("mode", MOUNT_MODES)
@pytest.mark.parametrize("name", [".bash_aliases", ".vimrc"])
@pytest.mark.parametrize("how", ["work dir", "--allow-write ~"])
def test_an_existing_dotfile_in_a_writable_home_stays_read_only(fresh_home: FakeHome, mode: str, name: str,
                                                                how: str) -> None:
    (fresh_home.root / name).write_text("\" mine\n")
    script = f"cd {fresh_home.root} && echo ok > notes.txt; echo evil >> {name}"
    if how == "work dir":
        rc, err = _in_home(fresh_home, script, mode=mode)
    else:  # from the project, with the home granted
        r = fresh_home.run(["sh", "-c", script], mode=mode, opts=["--allow-write", "~"])
        rc, err = r.returncode, r.stderr
    assert (fresh_home.root / "notes.txt").read_text() == "ok\n"  # control
    assert rc != 0
    assert f"sh: 1: cannot create {name}: Read-only file system" in err, err
    assert (fresh_home.root / name).read_text() == "\" mine\n"


def test_control_without_bubblewrap_an_existing_dotfile_is_written_as_bashrc_is(fresh_home: FakeHome) -> None:
    """Helper-only hosts keep the watch only (docs/policy-reference.md), as for ``.bashrc``."""
    (fresh_home.root / ".vimrc").write_text("\" mine\n")
    rc, err = _in_home(fresh_home, "echo evil >> .vimrc", mode=HELPER_ONLY)
    assert rc == 0, err
    assert (fresh_home.root / ".vimrc").read_text() == "\" mine\nevil\n"


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_cargo_config_cannot_be_written_in_an_existing_cargo_dir_and_a_new_one_is_quarantined(
        fresh_home: FakeHome, mode: str) -> None:
    (fresh_home.root / ".cargo").mkdir()
    rc, err = _in_home(fresh_home, "printf '[build]\\nrustc-wrapper = \"/tmp/x\"\\n' > .cargo/config.toml",
                       mode=mode)
    assert rc != 0
    assert "cannot create .cargo/config.toml: Read-only file system" in err, err
    assert not (fresh_home.root / ".cargo" / "config.toml").exists()
    # No ~/.cargo yet: the command makes one, which is moved out after the run.
    (fresh_home.root / ".cargo").rmdir()
    rc, err = _in_home(fresh_home, "mkdir .cargo && echo '[build]' > .cargo/config.toml", mode=mode)
    assert rc == 0, err
    assert not (fresh_home.root / ".cargo").exists()
    assert (_moved_to(err, fresh_home.root / ".cargo") / "config.toml").read_text() == "[build]\n"


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_pth_file_cannot_be_planted_in_the_user_site(fresh_home: FakeHome, mode: str) -> None:
    site = fresh_home.root / SITE
    site.mkdir(parents=True)
    rc, err = _in_home(fresh_home, f"echo 'import os; os.system(\"id\")' > {SITE}/x.pth", mode=mode)
    assert rc != 0
    assert f"cannot create {SITE}/x.pth: Read-only file system" in err, err
    assert not (site / "x.pth").exists()


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_the_user_site_keeps_its_hooks_even_where_the_policy_grants_it(fresh_home: FakeHome, mode: str) -> None:
    """``--allow-write ~/.local``: packages may be installed there, but a
    ``.pth`` or ``usercustomize`` runs at every Python start on the host."""
    site = fresh_home.root / SITE
    site.mkdir(parents=True)
    (site / "old.pth").write_text("/opt/lib\n")
    # From a project, $HOME not writable: the site rule holds on its own.
    script = (f"cd {site} && echo pkg > pkg.py; echo evil >> old.pth; echo 'import os' > new.pth; "
              "echo 'import os' > usercustomize.py")
    r = fresh_home.run(["sh", "-c", script], mode=mode, opts=["--allow-write", str(fresh_home.root / ".local")])
    assert (site / "pkg.py").read_text() == "pkg\n", r.stderr  # control: the grant holds
    assert "old.pth: Read-only file system" in r.stderr, r.stderr
    assert (site / "old.pth").read_text() == "/opt/lib\n"
    assert not (site / "new.pth").exists() and not (site / "usercustomize.py").exists()
    assert _moved_to(r.stderr, site / "new.pth").read_text() == "import os\n"
    assert _moved_to(r.stderr, site / "usercustomize.py").read_text() == "import os\n"


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_write_root_named_inside_a_dot_dir_stays_writable_and_keeps_its_own_protection(
        fresh_home: FakeHome, mode: str) -> None:
    foo = fresh_home.root / ".cache" / "foo"
    (foo / "repo" / ".git" / "hooks").mkdir(parents=True)
    (foo / "repo" / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    script = "echo c > .cache/foo/x; echo d > .cache/other; echo e > .cache/foo/repo/.git/hooks/pre-commit"
    rc, err = _in_home(fresh_home, script, mode=mode, opts=("--allow-write", str(foo)))
    assert (foo / "x").read_text() == "c\n", err  # control: the grant named inside ~/.cache holds
    assert "cannot create .cache/other: Read-only file system" in err, err
    assert "cannot create .cache/foo/repo/.git/hooks/pre-commit: Read-only file system" in err, err
    assert rc != 0 and not (fresh_home.root / ".cache" / "other").exists()


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_symlinked_dotfile_protects_its_target_and_is_restored_if_replaced(fresh_home: FakeHome,
                                                                            mode: str) -> None:
    (fresh_home.root / "dotfiles").mkdir()
    (fresh_home.root / "dotfiles" / "vimrc").write_text("\" managed\n")
    (fresh_home.root / ".vimrc").symlink_to("dotfiles/vimrc")
    rc, err = _in_home(fresh_home, "echo evil >> .vimrc", mode=mode)
    assert rc != 0 and "cannot create .vimrc: Read-only file system" in err, err
    rc, err = _in_home(fresh_home, "rm .vimrc && echo evil > .vimrc", mode=mode)
    assert rc == 0, err
    assert os.readlink(fresh_home.root / ".vimrc") == "dotfiles/vimrc"
    assert (fresh_home.root / "dotfiles" / "vimrc").read_text() == "\" managed\n"
    assert f"safebox: protected symlink {fresh_home.root}/.vimrc: the command replaced it" in err, err


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_with_many_dot_entries_the_mounter_keeps_them_read_only_and_preset_caches_writable(
        fresh_home: FakeHome, mode: str) -> None:
    """Past the big-policy threshold the read-only binds are the mounter's,
    made after bubblewrap's; the presets' caches (bound read-write after
    them, inside the read-only ~/.cache) must stay on top."""
    for i in range(100):
        (fresh_home.root / f".tool{i}").mkdir()
    script = ("echo ok > notes.txt; echo evil > .tool42/config; "
              "echo c > \"$npm_config_cache/probe\" && echo cache-written")
    r = fresh_home.run(["sh", "-c", script], mode=mode, opts=["--preset", "npm"], cwd=fresh_home.root)
    assert (fresh_home.root / "notes.txt").read_text() == "ok\n", r.stderr  # control
    assert "cannot create .tool42/config: Read-only file system" in r.stderr, r.stderr
    assert "cache-written" in r.stdout, r.stderr
    assert not (fresh_home.root / ".tool42" / "config").exists()


def test_a_dotfile_with_another_name_is_refused_as_a_protected_file_is(fresh_home: FakeHome) -> None:
    """A read-only bind covers one name; through a hard link elsewhere in the
    writable $HOME the command would rewrite ``~/.vimrc`` all the same."""
    vimrc = fresh_home.root / ".vimrc"
    vimrc.write_text("\" mine\n")
    other = fresh_home.root / "dotfiles-vimrc"
    os.link(vimrc, other)
    rc, err = _in_home(fresh_home, f"echo evil >> {other.name}")
    assert rc == 125, err
    assert f"safebox: protected file {vimrc} has 2 hard links" in err, err
    assert vimrc.read_text() == "\" mine\n"
    # Control: once it has one name, the run goes ahead and the dotfile is read-only.
    other.unlink()
    rc, err = _in_home(fresh_home, "echo ok > notes.txt")
    assert rc == 0 and (fresh_home.root / "notes.txt").read_text() == "ok\n", err


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_dotfile_planted_in_a_home_the_command_then_made_unlistable_is_still_quarantined(
        fresh_home: FakeHome, mode: str) -> None:
    """Found in review: the check after the run skipped a directory it could
    not list, and `chmod 311 ~` kept the new `.bash_aliases` (bash opens it by
    name all the same). safebox opens a directory of the user's to its owner
    for the listing and puts the mode back."""
    aliases = fresh_home.root / ".bash_aliases"
    rc, err = _in_home(fresh_home, "echo 'alias ls=id' > .bash_aliases; chmod 311 .", mode=mode)
    try:
        assert rc == 0, err
        assert not aliases.exists()
        assert _moved_to(err, aliases).read_text() == "alias ls=id\n"
        assert oct(fresh_home.root.stat().st_mode & 0o777) == "0o311"  # as the command left it
    finally:
        fresh_home.root.chmod(0o755)


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_pth_planted_in_a_granted_site_the_command_then_made_unlistable_is_still_quarantined(
        fresh_home: FakeHome, mode: str) -> None:
    lib = fresh_home.root / ".local" / "lib"
    lib.mkdir(parents=True)
    site = fresh_home.root / SITE
    script = f"mkdir -p {site} && echo 'import os' > {site}/zz.pth && chmod 311 {lib}"
    r = fresh_home.run(["sh", "-c", script], mode=mode, opts=["--allow-write", str(fresh_home.root / ".local")],
                       cwd=fresh_home.work)
    try:
        assert r.returncode == 0, r.stderr
        assert not (fresh_home.root / SITE / "zz.pth").exists(), r.stderr
        assert _moved_to(r.stderr, fresh_home.root / SITE / "zz.pth").read_text() == "import os\n"
    finally:
        lib.chmod(0o755)


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_top_level_protected_name_planted_in_a_work_dir_made_unlistable_is_still_quarantined(
        fresh_home: FakeHome, mode: str) -> None:
    r = fresh_home.run(["sh", "-c", "echo '{}' > .mcp2.json; mkdir .claude; echo x > .envrc; chmod 311 ."], mode=mode)
    try:
        assert r.returncode == 0, r.stderr
        assert not (fresh_home.work / ".envrc").exists(), r.stderr
        assert not (fresh_home.work / ".claude").exists(), r.stderr
    finally:
        fresh_home.work.chmod(0o755)


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_with_the_write_root_at_dot_config_gits_global_config_and_login_files_stay_protected(
        fresh_home: FakeHome, mode: str) -> None:
    """Found in review: with `--allow-write ~/.config` the `.config/git`,
    `fish`, `autostart` names were taken relative to the write root and
    missed: a new `~/.config/git/config` with core.fsmonitor ran at the
    user's next `git status`."""
    cfg = fresh_home.root / ".config"
    (cfg / "fish").mkdir(parents=True)  # present and empty
    script = ("mkdir -p ~/.config/git && printf '[core]\\n\\tfsmonitor = touch PWNED\\n' > ~/.config/git/config; "
              "echo x > ~/.config/fish/config.fish 2>/dev/null || echo refused; echo ok > ~/.config/app.conf")
    r = fresh_home.run(["sh", "-c", script], mode=mode, opts=["--allow-write", str(cfg)])
    assert r.returncode == 0, r.stderr
    assert r.stdout == "refused\n", r.stdout
    assert not (cfg / "git" / "config").exists() and not (cfg / "git").exists(), r.stderr
    assert (cfg / "app.conf").read_text() == "ok\n"  # control: the rest of the granted root is writable
