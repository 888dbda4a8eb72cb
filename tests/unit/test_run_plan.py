"""Golden outputs of the pure plan (python/safebox/run/plan.py): resolved
facts in, bubblewrap argv and helper policy out, as a session builds them."""

from __future__ import annotations

import pytest

from safebox.builder.resolved import Layers, NetKind, ResolvedPolicy
from safebox.errors import BuildError, PolicyError
from safebox.policy.effective import EffectivePolicy
from safebox.run import plan


def resolved(**kw: object) -> ResolvedPolicy:
    bridges, _ = plan.bridges(Layers.BOTH, http_sock="/run/sb/1/http.sock", socks_sock="/run/sb/1/socks.sock",
                              tcp_ports=(0, 0))
    base: dict[str, object] = dict(
        layers=Layers.BOTH, cwd="/home/u/proj", write_roots=("/home/u/proj",), read_only=(), sealed_dirs=(),
        helper_path="/opt/sb/safebox-helper", policy_path="/run/sb/1/cmd-1/policy", run_dir="/run/sb/1",
        net=NetKind.PROXY, bridges=bridges, landlock_rules=(("read", "/"), ("write", "/home/u/proj")))
    base.update(kw)
    return ResolvedPolicy(**base)  # type: ignore[arg-type]


def effective(**kw: object) -> EffectivePolicy:
    return EffectivePolicy(**kw)  # type: ignore[arg-type]


def test_a_networked_command_gets_the_golden_bwrap_argv() -> None:
    rp = resolved()
    opts, tail = plan.bwrap_argv(rp, rp, ("make", "test"), bwrap_status_fd=4, status_fd=3, socat="/usr/bin/socat",
                                 handoff_fd=5, sync_fd=None)
    assert opts == [
        "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/proc/1", "--tmpfs", "/tmp",
        "--bind", "/home/u/proj", "/home/u/proj", "--ro-bind", "/run/sb/1", "/run/sb/1", "--remount-ro", "/proc/1",
        "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL", "--hostname", "safebox",
        "--chdir", "/home/u/proj", "--json-status-fd", "4",
    ]
    assert tail == ["--", "/opt/sb/safebox-helper", "--policy-file", "/run/sb/1/cmd-1/policy", "--status-fd", "3",
                    "--handoff-fd", "5", "--", "make", "test"]


def test_a_networked_command_gets_the_golden_helper_policy() -> None:
    rp = resolved()
    text = plan.helper_policy_for(rp, effective(), strict=True, seccomp_path="/run/sb/1/cmd-1/seccomp.bpf",
                                  connect_ports=(3128, 1080), socat=None, abi_max=None)
    assert text.decode().splitlines() == [
        "safebox-policy 3", "strict 1", "landlock on",
        f"fs read {b'/'.hex()}", f"fs write {b'/home/u/proj'.hex()}",
        "net proxy", "connect_port 3128", "connect_port 1080", "bind none",
        "scope abstract_unix", "scope signal",
        f"seccomp {b'/run/sb/1/cmd-1/seccomp.bpf'.hex()}",
        "listen 3128", "listen 1080", "end",
    ]


def test_without_bwrap_the_proxy_ports_are_the_hosts_and_the_helper_listens_on_none() -> None:
    bridges, ports = plan.bridges(Layers.HELPER_ONLY, http_sock="h", socks_sock="s", tcp_ports=(40001, 40002))
    assert [(b.port, b.scheme) for b in bridges] == [(40001, "http"), (40002, "socks5h")]
    assert ports == (40001, 40002)
    rp = resolved(layers=Layers.HELPER_ONLY, bridges=bridges)
    text = plan.helper_policy_for(rp, effective(), strict=False, seccomp_path=None, connect_ports=ports, socat=None)
    assert "listen" not in text.decode() and "connect_port 40001" in text.decode()


@pytest.mark.parametrize(("without", "bwrap", "layers"), [
    (None, "/usr/bin/bwrap", Layers.BOTH), (None, None, Layers.HELPER_ONLY),
    (plan.Without.BWRAP, "/usr/bin/bwrap", Layers.HELPER_ONLY), (plan.Without.HELPER, "/usr/bin/bwrap", Layers.BWRAP_ONLY),
])
def test_the_layers_follow_without_and_the_presence_of_bwrap(without: plan.Without | None, bwrap: str | None,
                                                            layers: Layers) -> None:
    assert plan.decide_layers(without, bwrap=bwrap)[0] is layers


def test_without_helper_and_without_bubblewrap_is_refused_naming_the_fix() -> None:
    # Found in review: the launch asserted a bubblewrap it did not have
    # ("internal error: AssertionError", and --dry-run printed a bwrap argv).
    with pytest.raises(BuildError) as e:
        plan.decide_layers(plan.Without.HELPER, bwrap=None)
    assert str(e.value) == ("--without helper runs bubblewrap alone, and bubblewrap was not found on PATH "
                            "(outside the write roots)")
    assert e.value.hint == "install it (apt-get install bubblewrap), or leave out --without helper"


def test_observation_defaults_to_writes_and_to_all_with_an_audit_log() -> None:
    assert plan.observe_mode(None, layers=Layers.BOTH, dry_run=False, audit_log=False) == "writes"
    assert plan.observe_mode(None, layers=Layers.BOTH, dry_run=False, audit_log=True) == "all"
    assert plan.observe_mode("all", layers=Layers.BWRAP_ONLY, dry_run=False, audit_log=True) == "off"


def test_publish_ports_are_checked_and_need_local_binding() -> None:
    with pytest.raises(PolicyError, match="not a port number"):
        plan.publish_ports(("http",), effective(allow_local_binding=True))
    with pytest.raises(PolicyError, match="needs network.allowLocalBinding"):
        plan.publish_ports(("8080",), effective())
    assert plan.publish_ports(("8080",), effective(allow_local_binding=True)) == (8080,)


def test_a_policy_beyond_bubblewraps_argument_limit_is_refused_naming_the_counts() -> None:
    rp = resolved()
    plan.check_bwrap_limit(plan.BWRAP_MAX_ARGS, rp, moved=0)
    with pytest.raises(BuildError, match="bubblewrap takes at most 9000"):
        plan.check_bwrap_limit(plan.BWRAP_MAX_ARGS + 1, rp, moved=0)
