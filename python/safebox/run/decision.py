"""Step 5 of a command, pure: the resolved policy and the session's choices
in, one frozen :class:`Decision` out, the value the launch takes (issue 24
item 1: plan, observe, decide, launch, settle), and the command's
environment (:func:`environment`). Nothing here reads the host or writes;
golden tests in tests/unit/test_decision.py run in milliseconds."""

from __future__ import annotations

import os

from safebox._record import Frozen
from safebox.builder.resolved import Layers, ResolvedPolicy
from safebox.run.plan import helper_policy_for

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from safebox.builder.bulk import BulkPlan
    from safebox.builder.caches import CachePlan
    from safebox.policy.effective import EffectivePolicy
    from safebox.run.limits import Plan


class Decision(Frozen):
    """What one command runs under, decided before any of it runs: the
    resolved policy, the helper's policy file, the environment, where the
    helper finds its seccomp programs (None: not used in this run), and
    under bubblewrap which mounts it makes and which safebox's mounter makes
    after it (run.host.bulk_plan; None without bubblewrap). The launch
    takes it; nothing changes it after."""

    rp: ResolvedPolicy
    helper_policy: bytes
    env: dict[str, str]
    seccomp_path: str | None
    observe_path: str | None
    split: tuple[ResolvedPolicy, BulkPlan] | None = None


class Choices(Frozen):
    """What the session decided that a command's decision depends on."""

    layers: Layers
    strict: bool
    connect_ports: tuple[int, ...]
    socat: str | None
    limits: Plan | None = None
    observe: bool = False  # an observing seccomp program is loaded (Session._seccomp)
    abi_max: int | None = None  # test-only: SAFEBOX_TEST_ABI_MAX, to prove the down-level paths


def decide(rp: ResolvedPolicy, policy: EffectivePolicy, *, choices: Choices, command_dir: str,
           env: dict[str, str], split: tuple[ResolvedPolicy, BulkPlan] | None = None) -> Decision:
    """The decision for one command whose files live in ``command_dir``;
    ``split``: the mounts split between bubblewrap and the mounter."""
    seccomp_path = os.path.join(command_dir, "seccomp.bpf") if choices.layers is not Layers.BWRAP_ONLY else None
    observe_path = os.path.join(command_dir, "observe.bpf") if choices.observe else None
    helper = helper_policy_for(rp, policy, strict=choices.strict, seccomp_path=seccomp_path,
                               connect_ports=choices.connect_ports, socat=choices.socat, limits=choices.limits,
                               observe_path=observe_path, abi_max=choices.abi_max)
    return Decision(rp=rp, helper_policy=helper, env=env, seccomp_path=seccomp_path, observe_path=observe_path,
                    split=split)


class EnvInputs(Frozen):
    """What a command's environment is made from, besides the policy: the
    caller's variables and what the session and command prepared."""

    environ: Mapping[str, str]
    run_tmp: str | None = None  # the helper-only TMPDIR (no private /tmp without bwrap)
    #: The network plan's variables (run/netsetup.py: credentials.envVars, the TLS
    #: trust bundle): (names to unset, (name, value) to set); None: no plan.
    netplan: tuple[tuple[str, ...], tuple[tuple[str, str], ...]] | None = None
    caches: CachePlan | None = None  # the presets' caches (builder/caches.py)
    ci_env: Mapping[str, str] | None = None  # $GITHUB_ENV & co.: this run's own files


def gpu_selection(policy: EffectivePolicy) -> tuple[int, ...] | None:
    """devices.gpu's indices, or None for every GPU."""
    gpu = policy.devices_gpu
    return None if gpu is True else tuple(gpu) if isinstance(gpu, tuple) else None


def environment(rp: ResolvedPolicy, policy: EffectivePolicy, *, layers: Layers,
                made_of: EnvInputs) -> tuple[dict[str, str], list[str]]:
    """(the command's environment, the caller's variables removed from it)."""
    from safebox.builder.env import build_env

    env, removed = build_env(made_of.environ, deny=policy.env_deny, allow=policy.env_allow,
                             bridges=rp.bridges if layers is not Layers.HELPER_ONLY else
                             tuple(b for b in rp.bridges if b.port),
                             private_tmp=layers is not Layers.HELPER_ONLY, tmpdir=made_of.run_tmp)
    if made_of.netplan is not None:  # credentials.envVars; the TLS trust bundle variables
        unset, set_ = made_of.netplan
        removed += [k for k in unset if env.pop(k, None) is not None]
        env.update(set_)
        removed = [k for k in removed if k not in env]  # masked ones are there, as sentinels
    if made_of.caches is not None:
        from safebox.builder.caches import cache_env

        http = next((b for b in rp.bridges if b.scheme == "http" and b.port), None)
        env.update(cache_env(made_of.caches, env, proxy=("127.0.0.1", http.port) if http else None))
    if made_of.ci_env is not None:
        env.update(made_of.ci_env)
    if policy.devices_gpu:
        from safebox.builder.devices import gpu_env

        env.update(gpu_env(gpu_selection(policy)))
    return env, removed


__all__ = ["Choices", "Decision", "EnvInputs", "decide", "environment", "gpu_selection"]
