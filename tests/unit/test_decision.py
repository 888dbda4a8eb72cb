"""Golden decisions (python/safebox/run/decision.py, step 5 of a command):
the resolved policy and the session's choices in, the frozen value the
launch takes out. Pure: no host, milliseconds."""

from __future__ import annotations

import pytest

from safebox.builder.resolved import Layers, NetKind, ResolvedPolicy
from safebox.policy.effective import EffectivePolicy
from safebox.run import plan
from safebox.run.decision import Choices, Decision, decide

CMD = "/run/sb/1/cmd-1"


def resolved(layers: Layers = Layers.BOTH) -> ResolvedPolicy:
    bridges, _ = plan.bridges(layers, http_sock="/run/sb/1/http.sock", socks_sock="/run/sb/1/socks.sock",
                              tcp_ports=(0, 0) if layers is not Layers.HELPER_ONLY else (40001, 40002))
    return ResolvedPolicy(layers=layers, cwd="/home/u/proj", write_roots=("/home/u/proj",), read_only=(),
                          sealed_dirs=(), helper_path="/opt/sb/safebox-helper", policy_path=f"{CMD}/policy",
                          run_dir="/run/sb/1", net=NetKind.PROXY, bridges=bridges,
                          landlock_rules=(("read", "/"), ("write", "/home/u/proj")))


def test_a_networked_command_under_both_layers_gets_the_golden_decision() -> None:
    rp = resolved()
    d = decide(rp, EffectivePolicy(), choices=Choices(layers=Layers.BOTH, strict=True, connect_ports=(3128, 1080),
                                                      socat=None), command_dir=CMD, env={"PATH": "/usr/bin"})
    assert (d.rp, d.env, d.seccomp_path, d.observe_path) == (rp, {"PATH": "/usr/bin"}, f"{CMD}/seccomp.bpf", None)
    assert d.helper_policy.decode().splitlines() == [
        "safebox-policy 3", "strict 1", "landlock on",
        f"fs read {b'/'.hex()}", f"fs write {b'/home/u/proj'.hex()}",
        "net proxy", "connect_port 3128", "connect_port 1080", "bind none",
        "scope abstract_unix", "scope signal",
        f"seccomp {f'{CMD}/seccomp.bpf'.encode().hex()}",
        "listen 3128", "listen 1080", "end",
    ]


def test_the_observing_program_is_named_only_when_the_session_loaded_one() -> None:
    rp = resolved()
    on = decide(rp, EffectivePolicy(), choices=Choices(layers=Layers.BOTH, strict=False, connect_ports=(),
                                                       socat=None, observe=True), command_dir=CMD, env={})
    assert on.observe_path == f"{CMD}/observe.bpf"
    assert f"seccomp_observe {f'{CMD}/observe.bpf'.encode().hex()}" in on.helper_policy.decode().splitlines()
    off = decide(rp, EffectivePolicy(), choices=Choices(layers=Layers.BOTH, strict=False, connect_ports=(),
                                                        socat=None), command_dir=CMD, env={})
    assert off.observe_path is None and "seccomp_observe" not in off.helper_policy.decode()


def test_without_the_helper_no_seccomp_program_is_named() -> None:
    d = decide(resolved(Layers.BWRAP_ONLY), EffectivePolicy(),
               choices=Choices(layers=Layers.BWRAP_ONLY, strict=False, connect_ports=(), socat="/usr/bin/socat"),
               command_dir=CMD, env={})
    assert d.seccomp_path is None and "seccomp" not in d.helper_policy.decode()


def test_the_mounts_split_is_the_one_given_and_none_without_one() -> None:
    from safebox.builder.bulk import BulkPlan

    rp = resolved()
    choices = Choices(layers=Layers.BOTH, strict=False, connect_ports=(), socat=None)
    split = (rp.replace(read_only=()), BulkPlan())
    assert decide(rp, EffectivePolicy(), choices=choices, command_dir=CMD, env={}, split=split).split == split
    assert decide(rp, EffectivePolicy(), choices=choices, command_dir=CMD, env={}).split is None


def test_the_decision_is_frozen() -> None:
    d = decide(resolved(), EffectivePolicy(), choices=Choices(layers=Layers.BOTH, strict=False, connect_ports=(),
                                                              socat=None), command_dir=CMD, env={})
    assert isinstance(d, Decision)
    with pytest.raises(AttributeError, match="frozen"):
        d.env = {}  # type: ignore[misc]


# -- the environment -----------------------------------------------------------

def test_the_environment_is_scrubbed_proxied_and_marked() -> None:
    from safebox.run.decision import EnvInputs, environment

    rp = resolved()
    env, removed = environment(rp, EffectivePolicy(env_deny=("*_TOKEN",)), layers=Layers.BOTH,
                               made_of=EnvInputs(environ={"PATH": "/usr/bin", "GH_TOKEN": "s3cret", "TMPDIR": "/x"}))
    assert removed == ["GH_TOKEN"]
    assert "GH_TOKEN" not in env and env["PATH"] == "/usr/bin"
    assert env["TMPDIR"] == "/tmp" and env["SAFEBOX_SANDBOX"] == "1"
    assert env["HTTPS_PROXY"].startswith("http://127.0.0.1:")


def test_the_network_plans_variables_replace_and_a_masked_one_is_not_said_removed() -> None:
    from safebox.run.decision import EnvInputs, environment

    env, removed = environment(
        resolved(), EffectivePolicy(env_deny=("*_TOKEN",)), layers=Layers.BOTH,
        made_of=EnvInputs(environ={"GH_TOKEN": "real", "OTHER_TOKEN": "x", "SSL_CERT_FILE": "/etc/ca"},
                          netplan=(("SSL_CERT_FILE",), (("GH_TOKEN", "sentinel"),))))
    assert env["GH_TOKEN"] == "sentinel" and "SSL_CERT_FILE" not in env and "OTHER_TOKEN" not in env
    assert sorted(removed) == ["OTHER_TOKEN", "SSL_CERT_FILE"]


def test_without_bwrap_the_tmpdir_is_the_commands_own_and_ci_and_gpu_variables_come_last() -> None:
    from safebox.run.decision import EnvInputs, environment

    env, _ = environment(resolved(Layers.HELPER_ONLY), EffectivePolicy(devices_gpu=(2, 5)), layers=Layers.HELPER_ONLY,
                         made_of=EnvInputs(environ={"CUDA_VISIBLE_DEVICES": "2,5"}, run_tmp="/tmp/safebox-run.x",
                                           ci_env={"GITHUB_ENV": f"{CMD}/github_env"}))
    assert env["TMPDIR"] == "/tmp/safebox-run.x"
    assert env["GITHUB_ENV"] == f"{CMD}/github_env"
    assert env["CUDA_VISIBLE_DEVICES"] == "0,1"  # the selection's GPUs, as numbered inside


# -- properties, over every combination of the session's choices ---------------

def _choices() -> list[tuple[Layers, bool, bool, tuple[int, ...], int | None, bool]]:
    import itertools

    return list(itertools.product((Layers.BOTH, Layers.HELPER_ONLY, Layers.BWRAP_ONLY), (False, True), (False, True),
                                  ((), (3128, 1080), (40001,)), (None, 3), (False, True)))


@pytest.mark.parametrize(("layers", "strict", "observe", "ports", "abi_max", "bind"), _choices())
def test_every_decision_names_exactly_what_its_choices_ask_for(layers: Layers, strict: bool, observe: bool,
                                                               ports: tuple[int, ...], abi_max: int | None,
                                                               bind: bool) -> None:
    """Whatever the choices: the seccomp program is named iff the helper
    runs, the observing one iff the session loaded it, strict and the ABI
    cap and the connect ports (a networked run) as chosen, one rule line per
    Landlock rule, and the same inputs give the same bytes (nothing read
    from the host: the command dir does not exist)."""
    rp = resolved(layers)
    policy = EffectivePolicy(allow_local_binding=bind)
    choices = Choices(layers=layers, strict=strict, connect_ports=ports, socat=None, observe=observe,
                      abi_max=abi_max)
    d = decide(rp, policy, choices=choices, command_dir="/nonexistent/cmd-1", env={"A": "1"})
    lines = d.helper_policy.decode().splitlines()
    assert (d.seccomp_path is not None) == (layers is not Layers.BWRAP_ONLY)
    assert (d.observe_path is not None) == observe
    assert [ln.split()[0] for ln in lines].count("seccomp") == (d.seccomp_path is not None)
    assert [ln.split()[0] for ln in lines].count("seccomp_observe") == observe
    assert f"strict {int(strict)}" in lines
    assert ("abi_max 3" in lines) == (abi_max == 3)
    assert [ln for ln in lines if ln.startswith("connect_port ")] == [f"connect_port {p}" for p in ports]
    assert f"bind {'any' if bind else 'none'}" in lines
    assert len([ln for ln in lines if ln.startswith("fs ")]) == len(rp.landlock_rules)
    assert lines[0] == "safebox-policy 3" and lines[-1] == "end"
    assert (d.rp, d.env) == (rp, {"A": "1"})
    assert decide(rp, policy, choices=choices, command_dir="/nonexistent/cmd-1", env={"A": "1"}) == d
