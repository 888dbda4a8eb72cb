"""Step 5 of a command, pure: the resolved policy and the session's choices
in, one frozen :class:`Decision` out, the value the launch takes (issue 24
item 1: plan, observe, decide, launch, settle). Nothing here reads the host
or writes; golden tests in tests/unit/test_decide.py run in milliseconds.
The environment is built before (run/command.py ``_environment``: it says
what it removed) and passed in."""

from __future__ import annotations

import os

from safebox._record import Frozen
from safebox.builder.resolved import Layers, ResolvedPolicy
from safebox.run.plan import helper_policy_for

TYPE_CHECKING = False
if TYPE_CHECKING:
    from safebox.limits import Plan
    from safebox.policy.effective import EffectivePolicy


class Decision(Frozen):
    """What one command runs under, decided before any of it runs: the
    resolved policy, the helper's policy file, the environment, and where
    the helper finds its seccomp programs (None: not used in this run). The
    launch takes it; nothing changes it after."""

    rp: ResolvedPolicy
    helper_policy: bytes
    env: dict[str, str]
    seccomp_path: str | None
    observe_path: str | None


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
           env: dict[str, str]) -> Decision:
    """The decision for one command whose files live in ``command_dir``."""
    seccomp_path = os.path.join(command_dir, "seccomp.bpf") if choices.layers is not Layers.BWRAP_ONLY else None
    observe_path = os.path.join(command_dir, "observe.bpf") if choices.observe else None
    helper = helper_policy_for(rp, policy, strict=choices.strict, seccomp_path=seccomp_path,
                               connect_ports=choices.connect_ports, socat=choices.socat, limits=choices.limits,
                               observe_path=observe_path, abi_max=choices.abi_max)
    return Decision(rp=rp, helper_policy=helper, env=env, seccomp_path=seccomp_path, observe_path=observe_path)


__all__ = ["Choices", "Decision", "decide"]
