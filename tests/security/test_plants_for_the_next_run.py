"""Plants a command could leave for the next run (attacks found in review),
each now stopped; each with its control.

- renaming a parent of safebox's state dir to plant a forged cache (turned
  off denyRead and seccomp for the next run);
- planting `.git/commondir` to redirect git's config past the read-only one;
- creating the user policy `~/.config/safebox/policy.toml` for the next run;
- creating a missing protected directory (`.claude/`) at the work root.
"""

from __future__ import annotations

import os
import subprocess

from sbx import BOTH, FakeHome, host


def test_renaming_a_parent_of_the_state_dir_fails(fresh_home: FakeHome) -> None:
    fresh_home.run(["true"], cwd=fresh_home.root)  # the state dir exists now
    cache = fresh_home.root / ".cache"
    r = fresh_home.run(["mv", str(cache), str(cache) + "-old"], mode=BOTH, opts=["--allow-write", "~"],
                       cwd=fresh_home.root)
    assert r.returncode != 0 and "Device or resource busy" in r.stderr, r.stderr
    assert (cache / "safebox").is_dir()
    # Control: a sibling directory that holds nothing protected can be renamed.
    (fresh_home.root / "plain").mkdir()
    ok = fresh_home.run(["mv", str(fresh_home.root / "plain"), str(fresh_home.root / "plain2")],
                        opts=["--allow-write", "~"], cwd=fresh_home.root)
    assert ok.returncode == 0, ok.stderr
    # And without safebox the rename of .cache works.
    assert host(["mv", str(cache), str(cache) + "-x"]).returncode == 0
    os.rename(str(cache) + "-x", cache)


def test_planting_git_commondir_is_quarantined_and_git_stays_clean(fresh_home: FakeHome) -> None:
    commondir = fresh_home.work / ".git" / "commondir"
    r = fresh_home.run(["sh", "-c", f"echo /nonexistent > {commondir} && echo planted"])
    assert r.stdout == "planted\n"  # the write itself cannot be refused (no placeholder) ...
    assert not commondir.exists()  # ... but it does not survive the run
    assert f"safebox: the command created protected file {commondir}; moved it to" in r.stderr
    g = subprocess.run(["git", "-C", str(fresh_home.work), "status", "--porcelain"], capture_output=True, text=True)
    assert g.returncode == 0, g.stderr


def test_the_user_policy_cannot_be_planted_even_with_home_writable(fresh_home: FakeHome) -> None:
    policy = fresh_home.root / ".config" / "safebox" / "policy.toml"
    r = fresh_home.run(["sh", "-c", f"mkdir -p {policy.parent} && echo 'strict = false' > {policy}"],
                       opts=["--allow-write", "~"], cwd=fresh_home.root)
    assert r.returncode != 0 and "Read-only file system" in r.stderr, r.stderr
    assert not policy.exists()
    # Control: a sibling config dir the policy grants is writable in the same
    # kind of run (with $HOME writable, its dot entries are read-only unless a
    # write root is named inside them: issue 22).
    other = fresh_home.root / ".config" / "other"
    ok = fresh_home.run(["sh", "-c", f"echo x > {other}/f"], cwd=fresh_home.root,
                        opts=["--allow-write", "~", "--allow-write", str(other)])
    assert ok.returncode == 0, ok.stderr


def test_a_missing_protected_directory_created_at_the_work_root_is_quarantined(fresh_home: FakeHome) -> None:
    claude = fresh_home.work / ".claude"
    r = fresh_home.run(["sh", "-c", f"mkdir {claude} && echo '{{}}' > {claude}/settings.json && echo made"])
    assert r.stdout == "made\n"
    assert not claude.exists()
    assert f"safebox: the command created protected file {claude}; moved it to" in r.stderr
    # Control: an ordinary directory created the same way stays.
    ok = fresh_home.run(["mkdir", str(fresh_home.work / "build")])
    assert ok.returncode == 0 and (fresh_home.work / "build").is_dir()
