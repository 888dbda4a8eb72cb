"""Hygiene: environment secrets, inherited descriptors, leftovers, signals and children.

A run must leave nothing behind on the host — no run dir, no process — after a
normal exit, after SIGTERM, and after SIGKILL of safebox itself (the killed
run's dir is swept at the next start).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from sbx import (
    BOTH,
    BWRAP_ONLY,
    HELPER_ONLY,
    FakeHome,
    host,
    kill_tree_by_arg,
    pids_with_arg,
    unique_sleep_arg,
    wait_for,
)

ALL_MODES = [BOTH, BWRAP_ONLY, HELPER_ONLY]
SECRETS = {"GITHUB_TOKEN": "ghp_fake", "AWS_SECRET_ACCESS_KEY": "aws-fake", "FOO_PASSWORD": "pw-fake",
           "ACTIONS_RUNTIME_TOKEN": "actions-fake"}

def _env_dict(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


@pytest.mark.parametrize("mode", ALL_MODES)
def test_credential_variables_are_scrubbed_while_path_and_home_stay(shared_home: FakeHome, mode: str) -> None:
    env = {**SECRETS, "SAFE_VAR": "kept"}
    control = _env_dict(host(["env"], env=shared_home.env(env)).stdout)
    assert all(control[k] == v for k, v in SECRETS.items())

    r = shared_home.run(["env"], mode=mode, env=env)
    assert r.returncode == 0, r.stderr
    inside = _env_dict(r.stdout)
    for k, v in SECRETS.items():
        assert k not in inside
        assert v not in r.stdout
    assert inside["PATH"] == shared_home.env()["PATH"]
    assert inside["HOME"] == str(shared_home.root)
    assert inside["SAFE_VAR"] == "kept"


# Issue 22 item 7: secrets and pointers to them by the word in their name.
REVIEW_SECRETS = {"PASSWORD": "pw-1", "TOKEN": "tok-1", "SECRET": "sec-1", "GPG_PASSPHRASE": "gpg-1",
                  "DOCKER_PASS": "dock-1", "DB_PASS": "db-1", "DEPLOY_KEY": "dep-1", "SIGNING_KEY": "sig-1",
                  "OPENAI_KEY": "oai-1", "STRIPE_SK": "sk-1", "GIT_ASKPASS": "/x/askpass-1",
                  "PGPASSFILE": "/x/pgpass-1", "GPG_AGENT_INFO": "/x/agent-1", "SSH_ASKPASS": "/x/sshask-1"}
LOOK_ALIKES = {"TOKENIZERS_PARALLELISM": "false", "KEY_LENGTH_BITS": "4096", "SSH_TTY": "/dev/pts/9",
               "XDG_SESSION_TYPE": "tty", "CLAUDE_CODE_MAX_OUTPUT_TOKENS": "8192"}


def test_secret_names_and_pointers_are_scrubbed_by_word_and_look_alikes_reach_the_command(
        fresh_home: FakeHome) -> None:
    env = {**REVIEW_SECRETS, **LOOK_ALIKES}
    control = _env_dict(host(["env"], env=fresh_home.env(env)).stdout)
    assert all(control[k] == v for k, v in env.items())

    r = fresh_home.run(["env"], env=env)
    assert r.returncode == 0, r.stderr
    inside = _env_dict(r.stdout)
    assert sorted(k for k in REVIEW_SECRETS if k in inside) == []
    assert not [v for v in REVIEW_SECRETS.values() if v in r.stdout]
    assert {k: inside.get(k) for k in LOOK_ALIKES} == LOOK_ALIKES

    # Passed on purpose: env.allow in a --policy file lets one through, and
    # only that one.
    pol = fresh_home.root / "pass-deploy-key.json"
    pol.write_text('{"env": {"allow": ["DEPLOY_KEY"]}}')
    r = fresh_home.run(["env"], env=env, opts=["--policy", str(pol)])
    assert r.returncode == 0, r.stderr
    inside = _env_dict(r.stdout)
    assert sorted(k for k in REVIEW_SECRETS if k in inside) == ["DEPLOY_KEY"]
    assert inside["DEPLOY_KEY"] == "dep-1"


@pytest.mark.parametrize("mode", ALL_MODES)
def test_only_stdin_stdout_and_stderr_are_inherited(shared_home: FakeHome, mode: str) -> None:
    r_fd, w_fd = os.pipe()
    f_fd = os.open(shared_home.root / "outside.txt", os.O_RDONLY)
    try:
        control = host(["ls", "/proc/self/fd"], pass_fds=(r_fd, w_fd, f_fd))
        assert {str(r_fd), str(w_fd), str(f_fd)} <= set(control.stdout.split())
        r = shared_home.run(["ls", "/proc/self/fd"], mode=mode, pass_fds=(r_fd, w_fd, f_fd))
        assert r.returncode == 0, r.stderr
        # 0, 1, 2 and the descriptor ls itself opened on /proc/self/fd.
        assert sorted(r.stdout.split(), key=int) == ["0", "1", "2", "3"], r.stdout
    finally:
        for fd in (r_fd, w_fd, f_fd):
            os.close(fd)


def _run_dirs(home: FakeHome) -> list[str]:
    try:
        return sorted(os.listdir(home.run_base))
    except FileNotFoundError:
        return []


@pytest.mark.parametrize("mode", ALL_MODES)
def test_a_normal_exit_leaves_no_run_dir_and_no_process(fresh_home: FakeHome, mode: str) -> None:
    arg = unique_sleep_arg()
    r = fresh_home.run(["sh", "-c", f"sleep {arg} & kill $!; wait; exit 0"], mode=mode)
    assert r.returncode == 0, r.stderr
    assert _run_dirs(fresh_home) == []
    assert pids_with_arg(arg) == []


def _start_and_wait_for(home: FakeHome, arg: str, mode: str) -> subprocess.Popen[str]:
    proc = home.popen(["sleep", arg], mode=mode)
    assert wait_for(lambda: pids_with_arg(arg)), "the sandboxed sleep never started"
    return proc


@pytest.mark.parametrize("mode", ALL_MODES)
def test_sigterm_to_safebox_stops_the_command_and_cleans_up(fresh_home: FakeHome, mode: str) -> None:
    arg = unique_sleep_arg()
    proc = _start_and_wait_for(fresh_home, arg, mode)
    try:
        assert len(_run_dirs(fresh_home)) == 1  # control: a live run has its run dir
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 128 + signal.SIGTERM, err
        assert wait_for(lambda: pids_with_arg(arg) == [], timeout=5)
        assert _run_dirs(fresh_home) == []
    finally:
        proc.kill()
        proc.communicate()
        kill_tree_by_arg(arg)


@pytest.mark.parametrize("mode", ALL_MODES)
def test_sigkill_to_safebox_kills_the_sandbox_and_the_next_start_sweeps_its_run_dir(fresh_home: FakeHome,
                                                                                  mode: str) -> None:
    arg = unique_sleep_arg()
    proc = _start_and_wait_for(fresh_home, arg, mode)
    try:
        stale = _run_dirs(fresh_home)
        assert len(stale) == 1
        proc.kill()
        proc.communicate()
        assert _run_dirs(fresh_home) == stale  # SIGKILL: nothing could clean up yet
        survived = not wait_for(lambda: pids_with_arg(arg) == [], timeout=5)
        r = fresh_home.run(["true"], mode=mode)
        assert r.returncode == 0, r.stderr
        assert _run_dirs(fresh_home) == []  # swept at the next start
        assert not survived, "the sandboxed command outlived a SIGKILLed safebox"
    finally:
        kill_tree_by_arg(arg)


@pytest.mark.parametrize("mode", ALL_MODES)
def test_a_protected_file_planted_before_safebox_was_sigkilled_is_quarantined_at_the_next_start(
        fresh_home: FakeHome, mode: str) -> None:
    """.envrc did not exist: the command may create it (a new name in a
    write root cannot be refused without a placeholder), and the end of the
    run moves it out. When safebox is SIGKILLed no end of run comes; the
    watch list in the killed run's dir lets the next start do it."""
    planted = fresh_home.work / ".envrc"  # direnv runs it on the host
    assert not planted.exists()
    ready = fresh_home.work / "planted"
    proc = fresh_home.popen(["sh", "-c", f"echo '{{\"evil\": 1}}' > {planted}; touch {ready}; sleep 60"],
                            mode=mode)
    try:
        assert wait_for(ready.exists, 30)
        proc.kill()
        proc.communicate()
        # The attack: with no end of run, the planted file stays in the tree.
        assert planted.read_text() == '{"evil": 1}\n'
        r = fresh_home.run(["true"], mode=mode)
        assert r.returncode == 0, r.stderr
        assert not planted.exists()
        prefix = f"safebox: a killed earlier run's command created protected file {planted}; moved it to "
        line = next((ln for ln in r.stderr.splitlines() if ln.startswith(prefix)), None)
        assert line is not None, r.stderr
        assert Path(line[len(prefix):]).read_text() == '{"evil": 1}\n'
        assert _run_dirs(fresh_home) == []
    finally:
        proc.kill()
        proc.communicate()


@pytest.mark.parametrize("mode", ALL_MODES)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_signals_sent_to_safebox_reach_the_command(fresh_home: FakeHome, mode: str, sig: signal.Signals) -> None:
    name = sig.name[3:]
    mark = fresh_home.work / f"trapped-{name}"
    script = f"trap 'echo {name} > {mark}; exit 0' {name}; echo ready; while :; do sleep 0.05; done"
    proc = fresh_home.popen(["sh", "-c", script], mode=mode)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=30)
        assert mark.read_text() == f"{name}\n", err
        assert proc.returncode == 0, err
    finally:
        proc.kill()
        proc.communicate()


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY, HELPER_ONLY])
def test_background_children_die_with_the_command(fresh_home: FakeHome, mode: str) -> None:
    arg = unique_sleep_arg()
    try:
        # setsid: the child leaves the command's process group, as a daemonizing tool would.
        r = fresh_home.run(["sh", "-c", f"setsid sleep {arg} </dev/null >/dev/null 2>&1 & echo started"],
                           mode=mode, timeout=30)
        assert r.returncode == 0 and r.stdout == "started\n", r.stderr
        assert wait_for(lambda: pids_with_arg(arg) == [], timeout=5), "a background child outlived the run"
    finally:
        kill_tree_by_arg(arg)


def test_background_child_survives_without_safebox_control() -> None:
    """Control for the test above: outside the sandbox the same child lives on."""
    arg = unique_sleep_arg()
    try:
        r = host(["sh", "-c", f"setsid sleep {arg} </dev/null >/dev/null 2>&1 & echo started"])
        assert r.stdout == "started\n"
        assert wait_for(lambda: pids_with_arg(arg) != [], timeout=5)
    finally:
        kill_tree_by_arg(arg)

