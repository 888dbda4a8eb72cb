"""Presets, refusal lines, missing write roots and the hidden-/tmp hint,
through the real ``safebox exec`` (bwrap, helper, proxy).

The real package managers against local registries are in
test_toolchains.py; here the tool is a shell, so every mode is cheap to cover.
Refused destinations are refused by the proxy before any lookup: nothing
leaves the machine.
"""

from __future__ import annotations

import os
import select
from collections.abc import Iterator
from pathlib import Path

import pytest

from safebox.policy.presets import PRESETS, project_key
from sbx import BOTH, BWRAP_ONLY, HELPER_ONLY, FakeHome, host, missing, token, tree_listing

pytestmark = pytest.mark.needs_bwrap

MODES = [BOTH, HELPER_ONLY, BWRAP_ONLY]


def caches(home: FakeHome, work: Path | None = None) -> Path:
    """The caches of the runs in ``work`` (default: the home's work tree)."""
    return home.root / ".cache" / "safebox" / "sandbox-caches" / project_key(str(work or home.work))


def safebox_lines(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("safebox:")]


@pytest.mark.parametrize("mode", MODES)
def test_a_preset_gives_the_tool_a_writable_private_cache_and_keeps_the_hosts_read_only(
        fresh_home: FakeHome, mode: str) -> None:
    host_cache = fresh_home.root / ".npm"
    (host_cache / "_cacache").mkdir(parents=True)
    (host_cache / "_cacache" / "index").write_text("host entry\n")
    before = tree_listing(host_cache)
    # The home is a write root here: the host cache would be writable without the preset.
    r = fresh_home.run(["sh", "-c", 'echo "$npm_config_cache"; echo poisoned > "$npm_config_cache/entry" && '
                        'echo cache-ok; echo poisoned > ~/.npm/_cacache/index; echo rc=$?'],
                       mode=mode, cwd=fresh_home.root, opts=["--preset", "npm"])
    assert r.returncode == 0, r.stderr
    leaf = caches(fresh_home, fresh_home.root) / "npm" / "npm"
    assert r.stdout.splitlines()[0] == str(leaf)
    assert "cache-ok" in r.stdout
    assert "rc=2" in r.stdout and ("Read-only file system" in r.stderr or "Permission denied" in r.stderr)
    assert (leaf / "entry").read_text() == "poisoned\n"
    assert tree_listing(host_cache) == before
    assert (host_cache / "_cacache" / "index").read_text() == "host entry\n"


def test_control_without_a_preset_the_host_cache_under_a_write_root_is_writable(fresh_home: FakeHome) -> None:
    # With the work dir at $HOME its dot entries are read-only unless a write
    # root is named inside them (issue 22): the control names ~/.npm.
    (fresh_home.root / ".npm").mkdir()
    r = fresh_home.run(["sh", "-c", "echo x > ~/.npm/probe"], cwd=fresh_home.root,
                       opts=["--allow-write", str(fresh_home.root / ".npm")])
    assert r.returncode == 0, r.stderr
    assert (fresh_home.root / ".npm" / "probe").read_text() == "x\n"


def test_a_host_cache_the_user_made_a_write_root_of_stays_writable_with_the_preset(fresh_home: FakeHome) -> None:
    # `--allow-write ~/.npm` says so explicitly; the preset must not take it back silently.
    (fresh_home.root / ".npm").mkdir()
    r = fresh_home.run(["sh", "-c", "echo x > ~/.npm/probe"],
                       opts=["--preset", "npm", "--allow-write", str(fresh_home.root / ".npm")])
    assert r.returncode == 0, r.stderr
    assert (fresh_home.root / ".npm" / "probe").read_text() == "x\n"


def test_the_sandbox_cannot_write_beside_its_cache_leaves(fresh_home: FakeHome) -> None:
    # A command that could replace a leaf with a symlink would have the next
    # run bind the symlink's target read-write.
    r = fresh_home.run(["sh", "-c", 'd=$(dirname "$PIP_CACHE_DIR"); mv "$PIP_CACHE_DIR" "$d/moved"; echo rc=$?; '
                        'ln -s ~/.ssh "$d/evil"; echo rc=$?'], opts=["--preset", "pip"])
    assert r.stdout.split() == ["rc=1", "rc=1"], r.stderr
    assert sorted(os.listdir(caches(fresh_home) / "pip")) == ["pip", "uv"]


def test_a_cache_leaf_replaced_by_a_symlink_is_refused_with_125(fresh_home: FakeHome) -> None:
    assert fresh_home.run(["true"], opts=["--preset", "go"]).returncode == 0
    leaf = caches(fresh_home) / "go" / "gomodcache"
    leaf.rmdir()
    leaf.symlink_to(fresh_home.root / ".ssh")
    r = fresh_home.run(["true"], opts=["--preset", "go"])
    assert r.returncode == 125
    assert safebox_lines(r.stderr) == [f"safebox: sandbox cache {leaf} is not a directory owned by you; "
                                       "refusing to use it"]


def test_the_cache_persists_across_sandbox_runs(fresh_home: FakeHome) -> None:
    mark = token()
    assert fresh_home.run(["sh", "-c", f'echo {mark} > "$GOMODCACHE/m"'], opts=["--preset", "go"]).returncode == 0
    r = fresh_home.run(["sh", "-c", 'cat "$GOMODCACHE/m"'], opts=["--preset", "go"])
    assert r.stdout.strip() == mark


def test_allowing_a_registry_by_hand_redirects_its_cache_too(fresh_home: FakeHome) -> None:
    # The README's `safebox exec --allow-domain registry.npmjs.org -- npm install`.
    r = fresh_home.run(["sh", "-c", 'echo "$npm_config_cache"'], opts=["--allow-domain", "registry.npmjs.org"])
    assert r.stdout.strip() == str(caches(fresh_home) / "npm" / "npm")


# ------------------------------------------------------------------ one project cannot steer another
# Review finding (issue 22 item 8): the caches were keyed by preset only, so
# what one project's run wrote there (CARGO_HOME/config.toml naming a
# rustc-wrapper, a package manager under COREPACK_HOME) ran in every later run
# of every project, with that project's write roots and credentials.

CARGO = "/usr/bin/cargo"  # Debian's: root's rustup cargo is not the unprivileged user's


def cargo_project(work: Path) -> None:
    (work / "src").mkdir(parents=True, exist_ok=True)
    (work / "Cargo.toml").write_text('[package]\nname = "hello"\nversion = "0.1.0"\nedition = "2018"\n')
    (work / "src" / "main.rs").write_text('fn main() { println!("hello"); }\n')


# Project A's run plants a rustc-wrapper in its CARGO_HOME: the wrapper
# leaves a mark in the work tree of whichever run's cargo executes it.
PLANT_WRAPPER = (
    'mkdir -p "$CARGO_HOME/bin" && '
    'printf \'#!/bin/sh\\necho "wrapper ran in $PWD" >> "$PWD/PWNED"\\nexec "$@"\\n\' > "$CARGO_HOME/bin/wrap" && '
    'chmod +x "$CARGO_HOME/bin/wrap" && '
    'printf \'[build]\\nrustc-wrapper = "%s/bin/wrap"\\n\' "$CARGO_HOME" > "$CARGO_HOME/config.toml" && echo planted')


def other_project(home: FakeHome) -> Path:
    b = home.root / "other-project"
    b.mkdir()
    return b


def test_a_rustc_wrapper_one_project_plants_in_cargo_home_never_runs_in_another_projects_build(
        fresh_home: FakeHome) -> None:
    if not os.access(CARGO, os.X_OK):
        missing(f"cargo is not installed at {CARGO} (apt-get install cargo; build.py setup --tests does it)")
    a, b = fresh_home.work, other_project(fresh_home)
    cargo_project(a)
    cargo_project(b)
    r = fresh_home.run(["sh", "-c", PLANT_WRAPPER], opts=["--preset", "cargo"], cwd=a)
    assert r.stdout.strip() == "planted", r.stderr
    env = {"CARGO_TARGET_DIR": "target"}
    rb = fresh_home.run([CARGO, "build", "-q", "--offline"], opts=["--preset", "cargo"], cwd=b, env=env,
                        timeout=300)
    assert rb.returncode == 0, rb.stderr
    assert not (b / "PWNED").exists()
    assert (b / "target" / "debug" / "hello").is_file()
    # Control: the wrapper is real and cargo runs it, in the project that
    # planted it (its own cache is its own to poison: it can write its tree anyway).
    ra = fresh_home.run([CARGO, "build", "-q", "--offline"], opts=["--preset", "cargo"], cwd=a, env=env,
                        timeout=300)
    assert ra.returncode == 0, ra.stderr
    assert (a / "PWNED").read_text().startswith(f"wrapper ran in {a}")


@pytest.mark.parametrize("mode", MODES)
def test_no_cache_of_any_preset_is_shared_between_two_work_dirs(fresh_home: FakeHome, mode: str) -> None:
    # Every variable a preset sets (COREPACK_HOME, PNPM_HOME, GOMODCACHE,
    # maven.repo.local, ...) names a dir of the run's own project: a file
    # project A leaves in its dirs is not in project B's, and B cannot write A's.
    presets = [n for n, p in PRESETS.items() if p.caches]
    opts = [x for n in presets for x in ("--preset", n)]
    show = ('{ for v in npm_config_cache YARN_CACHE_FOLDER PNPM_HOME COREPACK_HOME PIP_CACHE_DIR UV_CACHE_DIR '
            'CARGO_HOME GOMODCACHE GOCACHE; do eval "echo \\$$v"; done; '
            'echo "$MAVEN_OPTS" | sed -n "s/.*-Dmaven.repo.local=\\([^ ]*\\).*/\\1/p"; }')
    a, b = fresh_home.work, other_project(fresh_home)
    mark = token()
    ra = fresh_home.run(["sh", "-c", f'{show} | while read d; do echo {mark} > "$d/planted" || exit 1; done; {show}'],
                        mode=mode, opts=opts, cwd=a)
    assert ra.returncode == 0, ra.stderr
    dirs_a = ra.stdout.split()
    assert len(dirs_a) == 10 and all(d.startswith(str(caches(fresh_home, a)) + "/") for d in dirs_a)
    assert all(Path(d, "planted").read_text().strip() == mark for d in dirs_a)
    rb = fresh_home.run(["sh", "-c", f'{show}; for d in {" ".join(dirs_a)}; do echo x > "$d/planted"; echo rc=$?; '
                         'done; ' + f'{show} | while read d; do ls -A "$d"; done; echo end'],
                        mode=mode, opts=opts, cwd=b)
    assert rb.returncode == 0, rb.stderr
    lines = rb.stdout.split()
    dirs_b = lines[:10]
    assert all(d.startswith(str(caches(fresh_home, b)) + "/") for d in dirs_b)
    assert not set(dirs_a) & set(dirs_b)
    # B cannot plant in A's caches (the state dir is read-only inside) ...
    assert lines[10:20] == ["rc=2"] * 10  # dash: a redirection that fails
    err = "Read-only file system" if mode != HELPER_ONLY else "Permission denied"
    assert rb.stderr.count(err) == 10, rb.stderr
    assert all(Path(d, "planted").read_text().strip() == mark for d in dirs_a)
    # ... and its own caches hold nothing of A's: they start empty.
    assert lines[20:] == ["end"]
    # Control: A's next run finds what A left.
    again = fresh_home.run(["sh", "-c", f'{show} | while read d; do cat "$d/planted"; done'], mode=mode, opts=opts,
                           cwd=a)
    assert again.stdout.split() == [mark] * 10, again.stderr


def test_a_run_in_a_subdirectory_does_not_share_the_parent_projects_caches(fresh_home: FakeHome) -> None:
    # The subdirectory's run can write less than its parent's: what it
    # plants must not run in a run that can write the whole tree.
    sub = fresh_home.work / "sub"
    sub.mkdir()
    r = fresh_home.run(["sh", "-c", 'echo "$CARGO_HOME"'], opts=["--preset", "cargo"], cwd=sub)
    top = fresh_home.run(["sh", "-c", 'echo "$CARGO_HOME"'], opts=["--preset", "cargo"])
    assert r.stdout.strip() == str(caches(fresh_home, sub) / "cargo" / "cargo-home")
    assert top.stdout.strip() == str(caches(fresh_home) / "cargo" / "cargo-home")
    assert r.stdout != top.stdout


# ------------------------------------------------------------------ refusals

def test_refused_hosts_are_explained_once_per_host_and_port_for_connect_http_and_socks5(
        shared_home: FakeHome) -> None:
    script = ("curl -sS -o /dev/null -p https://pypi.org/; curl -sS -o /dev/null -p https://pypi.org/; "
              "curl -sS -o /dev/null http://example.org/x; "
              "curl -sS -o /dev/null -x socks5h://127.0.0.1:1080 http://example.net:81/; true")
    r = shared_home.run(["sh", "-c", script], opts=["--allow-domain", "example.com"])
    assert safebox_lines(r.stderr) == [
        "safebox: refused CONNECT to pypi.org:443 (pypi.org is not in network.allowedDomains); "
        "fix: --allow-domain pypi.org or --preset pip (network.allowedDomains in a policy file)",
        "safebox: refused HTTP to example.org:80 (example.org is not in network.allowedDomains); "
        "fix: --allow-domain example.org (network.allowedDomains in a policy file)",
        "safebox: refused SOCKS5 to example.net:81 (example.net is not in network.allowedDomains); "
        "fix: --allow-domain example.net (network.allowedDomains in a policy file)",
        # No end-of-run summary: each refusal is explained once (docs/violations.md).
    ]
    # The client's own view stays what it was: a 403 / SOCKS5 reply 2.
    assert "CONNECT tunnel failed, response 403" in r.stderr


def test_quiet_prints_no_refusal_line(shared_home: FakeHome) -> None:
    r = shared_home.run(["sh", "-c", "curl -sS -o /dev/null -p https://pypi.org/; true"],
                        opts=["-q", "--allow-domain", "example.com"])
    assert "CONNECT tunnel failed, response 403" in r.stderr  # control: it was refused
    assert safebox_lines(r.stderr) == []


def test_a_refusal_line_appears_while_the_command_still_runs(shared_home: FakeHome) -> None:
    p = shared_home.popen(["sh", "-c", "curl -sS -o /dev/null -p https://pypi.org/ 2>/dev/null; exec sleep 60"],
                          opts=["--allow-domain", "example.com"])
    try:
        assert p.stderr is not None
        ready, _, _ = select.select([p.stderr], [], [], 20)
        assert ready, "no refusal line within 20 s"
        line = p.stderr.readline()
        assert line.startswith("safebox: refused CONNECT to pypi.org:443 ")
        assert p.poll() is None  # the command is still running
    finally:
        p.kill()
        p.communicate(timeout=30)  # reaps it and closes the pipes


def test_a_refused_host_is_explained_without_bwrap_too(shared_home: FakeHome) -> None:
    r = shared_home.run(["sh", "-c", "curl -sS -o /dev/null -p https://pypi.org/; true"], mode=HELPER_ONLY,
                        opts=["--allow-domain", "example.com"])
    assert any(ln.startswith("safebox: refused CONNECT to pypi.org:443 ") for ln in safebox_lines(r.stderr))


# ------------------------------------------------------------------ missing write roots

def test_a_missing_allow_write_dir_is_created_and_writable(fresh_home: FakeHome) -> None:
    want = fresh_home.root / f"new-{token()}"
    r = fresh_home.run(["sh", "-c", f"echo ok > {want}/f"], opts=["--allow-write", str(want)])
    assert r.returncode == 0, r.stderr
    assert (want / "f").read_text() == "ok\n"
    assert safebox_lines(r.stderr) == [f"safebox: created the missing write root {want} (--allow-write)"]


def test_a_missing_allow_write_dir_without_its_parent_is_refused_with_125(fresh_home: FakeHome) -> None:
    want = fresh_home.root / "no-parent" / "x"
    r = fresh_home.run(["sh", "-c", "echo ran"], opts=["--allow-write", str(want)])
    assert r.returncode == 125
    assert r.stdout == ""
    assert safebox_lines(r.stderr) == [
        f"safebox: --allow-write/filesystem.allowWrite {want} does not exist and neither does its parent "
        f"{want.parent}; safebox creates one directory, not a chain"]
    assert not want.parent.exists()


def test_control_an_existing_allow_write_dir_is_used_as_it_is(fresh_home: FakeHome) -> None:
    want = fresh_home.root / "exists"
    want.mkdir()
    r = fresh_home.run(["sh", "-c", f"echo ok > {want}/f"], opts=["--allow-write", str(want)])
    assert r.returncode == 0 and safebox_lines(r.stderr) == []


# ------------------------------------------------------------------ hidden /tmp

@pytest.fixture
def host_tmp_file() -> Iterator[Path]:
    p = Path("/tmp") / f"sbx-hint-{token()}"
    p.write_text("on the host\n")
    p.chmod(0o644)
    yield p
    p.unlink()


def test_a_host_tmp_path_hidden_by_the_private_tmp_gets_one_hint(shared_home: FakeHome, host_tmp_file: Path) -> None:
    assert host(["cat", str(host_tmp_file)]).stdout == "on the host\n"  # control
    r = shared_home.run(["cat", str(host_tmp_file)])
    assert r.returncode == 1
    assert safebox_lines(r.stderr) == [
        f"safebox: hint: {host_tmp_file} exists on the host, but the sandbox has a private /tmp that hides it; "
        f"use --allow-write {host_tmp_file} to bind it in, or a path outside /tmp"]


def test_the_hinted_fix_works_and_quiet_silences_the_hint(shared_home: FakeHome, host_tmp_file: Path) -> None:
    r = shared_home.run(["cat", str(host_tmp_file)], opts=["--allow-write", str(host_tmp_file)])
    assert r.returncode == 0 and r.stdout == "on the host\n"
    q = shared_home.run(["cat", str(host_tmp_file)], opts=["--quiet"])
    assert q.returncode == 1 and safebox_lines(q.stderr) == []


def test_no_hint_for_a_tmp_path_the_command_made_itself(shared_home: FakeHome) -> None:
    r = shared_home.run(["sh", "-c", "false /tmp/not-on-the-host-" + token()])
    assert r.returncode == 1 and safebox_lines(r.stderr) == []


def test_policy_show_tells_what_a_preset_expanded_to_and_where_it_came_from(shared_home: FakeHome) -> None:
    import json
    import subprocess

    from sbx import SAFEBOX

    r = subprocess.run([str(SAFEBOX), "policy", "show", "--preset", "pip", "--json"], cwd=shared_home.work,
                       env=shared_home.env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert {"key": "network.allowedDomains", "value": "files.pythonhosted.org",
            "source": "preset pip (command line)"} in doc["sources"]
    assert {"key": "presets", "value": "pip", "source": "command line"} in doc["sources"]
    pip = doc["presets"]["pip"]
    assert pip["domains"] == ["pypi.org", "files.pythonhosted.org"]
    assert pip["caches"][0]["env"] == {"PIP_CACHE_DIR": str(caches(shared_home) / "pip" / "pip")}
    text = subprocess.run([str(SAFEBOX), "policy", "show", "--preset", "pip"], cwd=shared_home.work,
                          env=shared_home.env(), capture_output=True, text=True, timeout=60).stdout
    assert "  pypi.org  <- preset pip (command line)" in text.splitlines()
    assert f"    PIP_CACHE_DIR={caches(shared_home) / 'pip' / 'pip'}" in text.splitlines()
    bad = subprocess.run([str(SAFEBOX), "exec", "--preset", "nmp", "--", "true"], cwd=shared_home.work,
                         env=shared_home.env(), capture_output=True, text=True, timeout=60)
    assert bad.returncode == 125
    assert bad.stderr.splitlines()[0] == ("safebox: --preset nmp: unknown preset 'nmp' (did you mean npm?); "
                                         "known: npm, pip, cargo, go, maven, github")
