"""The rule for a writable $HOME's start-up files (builder/home_files.py), on
real trees in ``tmp_path``; the runs themselves are in
tests/security/test_home_start_files.py."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from safebox.builder.home_files import DOT, SITE, home_files, is_site_hook, new_paths


@pytest.mark.parametrize(("name", "hook"), [
    ("x.pth", True), ("distutils-precedence.pth", True), ("sitecustomize.py", True),
    ("usercustomize.py", True), ("usercustomize.pyc", True), ("sitecustomize.cpython-311-x86_64-linux-gnu.so", True),
    ("sitecustomize", True),  # a package directory
    ("requests", False), ("pth.py", False), ("my_usercustomize.py", False), ("x.pth.bak", False),
])
def test_a_site_hook_is_a_pth_file_or_a_customize_module_in_any_form(name: str, hook: bool) -> None:
    assert is_site_hook(name) is hook


def _home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    for d in (".cache/foo", ".config", ".local/lib/python3.11/site-packages", "proj", "dotfiles"):
        (h / d).mkdir(parents=True)
    (h / ".vimrc").write_text("x\n")
    (h / "notes.txt").write_text("x\n")
    (h / "dotfiles" / "bashrc").write_text("x\n")
    (h / ".bashrc").symlink_to("dotfiles/bashrc")
    (h / ".bash_aliases").symlink_to("dotfiles/aliases")  # dangling
    (h / ".local/lib/python3.11/site-packages/x.pth").write_text("x\n")
    return h


def test_every_dot_entry_of_a_writable_home_is_read_only_and_only_those(tmp_path: Path) -> None:
    h = _home(tmp_path)
    hf = home_files(str(h), [str(h)], env={})
    assert hf.read_only == sorted([f"{h}/.cache", f"{h}/.config", f"{h}/.local", f"{h}/.vimrc",
                                   f"{h}/dotfiles/bashrc", f"{h}/.local/lib/python3.11/site-packages/x.pth"])
    assert sorted(hf.links) == [(f"{h}/.bash_aliases", "dotfiles/aliases"), (f"{h}/.bashrc", "dotfiles/bashrc")]
    assert hf.missing == [f"{h}/dotfiles/aliases"]
    assert hf.files == [f"{h}/.vimrc"]
    assert hf.reopened == []


def test_a_write_root_named_in_a_dot_dir_is_reopened_and_one_naming_the_entry_exempts_it(tmp_path: Path) -> None:
    h = _home(tmp_path)
    hf = home_files(str(h), [str(h), f"{h}/.cache/foo", f"{h}/.config"], env={})
    assert f"{h}/.cache" in hf.read_only and f"{h}/.config" not in hf.read_only
    assert hf.reopened == [f"{h}/.cache/foo"]


def test_nothing_in_home_is_decided_when_no_write_root_holds_it(tmp_path: Path) -> None:
    h = _home(tmp_path)
    hf = home_files(str(h), [f"{h}/proj"], env={})
    assert hf.read_only == [] and hf.watch == [] and hf.links == []


def test_the_user_site_is_protected_wherever_a_write_root_holds_it(tmp_path: Path) -> None:
    h = _home(tmp_path)
    base = tmp_path / "pyuser"
    (base / "lib" / "python3.12" / "site-packages").mkdir(parents=True)
    (base / "lib" / "python3.12" / "site-packages" / "usercustomize.py").write_text("x\n")
    hf = home_files(str(h), [f"{h}/.local", str(base)], env={"PYTHONUSERBASE": str(base)})
    assert hf.read_only == sorted([f"{base}/lib/python3.12/site-packages/usercustomize.py",
                                   f"{h}/.local/lib/python3.11/site-packages/x.pth"])
    assert (f"{base}/lib", SITE, ("python3.12/site-packages/usercustomize.py",)) in hf.watch


def test_new_dot_entries_and_site_hooks_are_what_the_run_created(tmp_path: Path) -> None:
    h = _home(tmp_path)
    hf = home_files(str(h), [str(h)], env={}, keep=(f"{h}/.audit.jsonl",))
    (h / ".bash_logout2").write_text("x\n")
    (h / ".audit.jsonl").write_text("{}\n")  # safebox's own log: kept
    (h / "new-notes").write_text("x\n")  # not a dot entry
    (h / ".local/lib/python3.11/site-packages/y.pth").write_text("x\n")
    (h / ".local/lib/python3.13/site-packages").mkdir(parents=True)
    (h / ".local/lib/python3.13/site-packages/sitecustomize.py").write_text("x\n")
    (h / ".local/lib/python3.11/site-packages/pkg.py").write_text("x\n")
    assert sorted(new_paths(hf.watch)) == sorted([f"{h}/.bash_logout2",
                                                  f"{h}/.local/lib/python3.11/site-packages/y.pth",
                                                  f"{h}/.local/lib/python3.13/site-packages/sitecustomize.py"])
    assert any(kind == DOT for _, kind, _ in hf.watch)


def test_a_killed_runs_watch_file_quarantines_new_dot_entries_at_the_next_start(tmp_path: Path) -> None:
    from safebox.builder.resolved import Layers, ResolvedPolicy
    from safebox.run.protect import settle_watch, write_watch

    h = _home(tmp_path)
    odd = ".odd,name\nwith newline"
    (h / odd).write_text("x\n")  # names that a comma or a line would split are kept whole
    hf = home_files(str(h), [str(h)], env={})
    rp = ResolvedPolicy(layers=Layers.BOTH, cwd=str(h), write_roots=(str(h),), read_only=(), sealed_dirs=(),
                        watch_new=tuple(hf.watch))
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    write_watch(str(run_dir), rp)
    (h / ".planted").write_text("x\n")
    state = tmp_path / "state"
    state.mkdir()
    msgs = settle_watch(str(run_dir), str(state))
    assert not (h / ".planted").exists() and (h / odd).exists()
    assert len(msgs) == 1 and msgs[0].startswith(f"a killed earlier run's command created protected file {h}/.planted")
    assert os.path.exists(msgs[0].rsplit("moved it to ", 1)[1])


def test_a_write_root_inside_a_read_only_dot_dir_is_bound_after_it_and_its_protection_after_that() -> None:
    from safebox.builder.bwrap import mount_args
    from safebox.builder.resolved import Layers, ResolvedPolicy

    h = "/home/u"
    rp = ResolvedPolicy(layers=Layers.BOTH, cwd=h, write_roots=(h, f"{h}/.cache/foo"),
                        read_only=(f"{h}/.cache", f"{h}/.vimrc", f"{h}/.cache/foo/.git/hooks"), sealed_dirs=(),
                        carve_outs=((f"{h}/.cache/foo", True),))
    a = mount_args(rp)
    binds = [(a[i], a[i + 1]) for i in range(len(a) - 1) if a[i] in ("--bind", "--ro-bind") and a[i + 1] != "/"]
    assert binds == [("--bind", h), ("--ro-bind", f"{h}/.cache"), ("--ro-bind", f"{h}/.vimrc"),
                     ("--bind", f"{h}/.cache/foo"), ("--ro-bind", f"{h}/.cache/foo/.git/hooks")]
