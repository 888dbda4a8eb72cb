"""The plan, pure: decided facts in, bubblewrap argv and helper policy out.

Nothing here reads the filesystem, the environment or the clock: every
input is an argument (the resolved policy from ``builder.resolve``, the
bulk split from ``run.host.bulk_plan``, the ports the proxy got). Golden
tests pin the output (tests/unit/test_run_plan.py).
"""

from __future__ import annotations

from safebox._record import StrEnum
from safebox.builder.resolved import Bridge, Layers, NetKind, ResolvedPolicy
from safebox.errors import BuildError, PolicyError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from safebox.builder.bulk import BulkPlan
    from safebox.policy.effective import EffectivePolicy
    from safebox.run.limits import Plan

# Ports the bridges listen on inside the sandbox's own network namespace
# (private, so fixed numbers cannot collide with anything on the host).
HTTP_BRIDGE_PORT = 3128
SOCKS_BRIDGE_PORT = 1080

#: bubblewrap refuses more arguments than this, --args file included
#: (bubblewrap.c: MAX_ARGS), whatever E2BIG would allow.
BWRAP_MAX_ARGS = 9000


class Without(StrEnum):
    """``--without``: run one layer alone."""

    BWRAP = "bwrap"
    HELPER = "helper"


def decide_layers(without: Without | None, *, bwrap: str | None) -> tuple[Layers, list[str]]:
    """Which layers run, and what to tell the user about it."""
    notes: list[str] = []
    match without:
        case Without.BWRAP:
            return Layers.HELPER_ONLY, notes
        case Without.HELPER:
            if bwrap is None:
                # Refused here, before anything is spawned or printed
                # (--dry-run too): the launch cannot run bubblewrap alone
                # without bubblewrap, and falling back to the helper would
                # run the one layer the user asked to leave out.
                raise BuildError("--without helper runs bubblewrap alone, and bubblewrap was not found on PATH "
                                 "(outside the write roots)",
                                 hint="install it (apt-get install bubblewrap), or leave out --without helper")
            return Layers.BWRAP_ONLY, notes
        case None:
            if bwrap is None:
                notes.append("bubblewrap not found: running with the helper alone "
                             "(Landlock + seccomp + capability drop; no mount or pid isolation)")
                return Layers.HELPER_ONLY, notes
            return Layers.BOTH, notes


def observe_mode(requested: str | None, *, layers: Layers, dry_run: bool, audit_log: bool) -> str:
    """``--observe``: off, calls, writes or all. The default is writes (a
    refused write is explained: which rule, which fix; the CLI and the API
    alike), and all with --audit-log, where every refusal is recorded.
    ``calls`` watches no file call, the fast mode for a file-heavy job on
    tmpfs (docs/violations.md, "Cost and the default"). Nothing is observed
    without the helper, which installs the observing filter."""
    if layers is Layers.BWRAP_ONLY or dry_run:
        return "off"
    if requested is not None:
        return requested
    return "all" if audit_log else "writes"


def publish_ports(raw: tuple[str, ...], policy: EffectivePolicy) -> tuple[int, ...]:
    """Validate ``--publish`` values; publishing needs the command to be allowed to listen."""
    ports: list[int] = []
    for value in raw:
        if not value.isdigit() or not 1 <= int(value) <= 65535:
            raise PolicyError(f"--publish: {value!r} is not a port number (1-65535)")
        if int(value) in ports:
            raise PolicyError(f"--publish: port {value} given twice")
        if int(value) in (HTTP_BRIDGE_PORT, SOCKS_BRIDGE_PORT) and policy.allowed_domains:
            raise PolicyError(f"--publish: port {value} is taken by the proxy bridge inside the sandbox")
        ports.append(int(value))
    if ports and not policy.allow_local_binding:
        raise PolicyError("--publish needs network.allowLocalBinding = true (the command may not listen otherwise)")
    return tuple(ports)


def bridges(layers: Layers, *, http_sock: str, socks_sock: str,
            tcp_ports: tuple[int, int]) -> tuple[tuple[Bridge, ...], tuple[int, ...]]:
    """(the proxy's endpoints inside the sandbox, the ports the command may
    connect to). Inside bwrap: fixed ports of the sandbox's own network
    namespace; without it, the ports the proxy got on the host's loopback."""
    if layers is Layers.HELPER_ONLY:
        return ((Bridge(port=tcp_ports[0] or 0, socket_path=http_sock, scheme="http"),
                 Bridge(port=tcp_ports[1] or 0, socket_path=socks_sock, scheme="socks5h")),
                tuple(p for p in tcp_ports if p))
    return ((Bridge(port=HTTP_BRIDGE_PORT, socket_path=http_sock, scheme="http"),
             Bridge(port=SOCKS_BRIDGE_PORT, socket_path=socks_sock, scheme="socks5h")),
            (HTTP_BRIDGE_PORT, SOCKS_BRIDGE_PORT))


def seccomp_inet(layers: Layers, net: NetKind) -> str:
    """The seccomp program's inet mode (the values of ``seccomp.InetMode``)."""
    if layers is Layers.HELPER_ONLY:
        return "tcp_only" if net is NetKind.PROXY else "none"
    return "any"  # an empty network namespace: inet sockets reach nothing


def helper_policy_for(rp: ResolvedPolicy, policy: EffectivePolicy, *, strict: bool,
                      seccomp_path: str | None, connect_ports: tuple[int, ...], socat: str | None,
                      limits: Plan | None = None, observe_path: str | None = None,
                      abi_max: int | None = None) -> bytes:
    """The helper policy bytes for a resolved run."""
    from safebox.builder.helper_policy import FsAccess, HelperPolicy, NetMode, render

    net = NetMode.PROXY if rp.net is NetKind.PROXY else NetMode.OFF
    # Inside bwrap the helper listens on the proxy ports and hands the
    # listeners to the proxy; without bwrap the proxy listens on the host.
    listens = tuple(b.port for b in rp.bridges) if rp.layers is Layers.BOTH else ()
    publishes = rp.publish if rp.layers is Layers.BOTH else ()
    hp = HelperPolicy(
        fs_rules=tuple((FsAccess(c), p) for c, p in rp.landlock_rules),
        net=net, connect_ports=connect_ports if net is NetMode.PROXY else (),
        bind_any=policy.allow_local_binding, seccomp_path=seccomp_path, observe_path=observe_path, strict=strict,
        abi_max=abi_max, listens=listens, publishes=publishes,
        socat_path=socat if publishes else None,
        rlimit_nproc=limits.rlimit_nproc if limits else 0, rlimit_data=limits.rlimit_data if limits else 0)
    return render(hp)


def bwrap_argv(mounts: ResolvedPolicy, rp: ResolvedPolicy, command: tuple[str, ...], *,
               bwrap_status_fd: int, status_fd: int, socat: str, handoff_fd: int | None,
               sync_fd: int | None) -> tuple[list[str], list[str]]:
    """(the options bwrap reads from ``--args``, the argv tail after them):
    mounts (what bubblewrap makes of ``mounts``; the rest is the mounter's),
    namespaces, then the command behind the helper (builder/bwrap.py)."""
    from safebox.builder.bwrap import command_args, mount_args, namespace_args

    opts = mount_args(mounts) + namespace_args(rp, bwrap_status_fd=bwrap_status_fd)
    tail = command_args(rp, list(command), status_fd=status_fd, socat=socat, handoff_fd=handoff_fd,
                        sync_fd=sync_fd)
    return opts, tail


def check_bwrap_limit(count: int, mounts: ResolvedPolicy, *, moved: int) -> None:
    """Refuse, naming the cause, a policy whose mounts bubblewrap would refuse
    with a bare "Exceeded maximum number of arguments"."""
    if count <= BWRAP_MAX_ARGS:
        return
    why = (f"{len(mounts.write_roots)} write roots, {len(mounts.pinned_dirs)} pinned dirs, "
           f"{len(mounts.read_only)} read-only entries, {len(mounts.mask_dirs) + len(mounts.mask_files)} masks")
    hint = ("write roots under /tmp are bound by bubblewrap itself (the sandbox's /tmp is private): "
            "list their common parent instead" if moved else
            "this host cannot use safebox's own mounter (a setuid bubblewrap, or Linux older than 5.12): "
            "list common parents instead of every entry")
    raise BuildError(f"the policy needs {count} bubblewrap arguments ({why}); bubblewrap takes at most "
                     f"{BWRAP_MAX_ARGS}", hint=hint)


def dry_run_text(rp: ResolvedPolicy, command: tuple[str, ...], policy_bytes: bytes, filter_id: str, *,
                 socat: str, limits: Plan | None, mounts: ResolvedPolicy, bulk: BulkPlan | None) -> str:
    """What ``--dry-run`` prints: the argv (with the descriptor numbers a
    real run would use), the mounts safebox makes itself, the limits, the
    helper policy."""
    import shlex

    from safebox.builder.helper_policy import readable

    ops: tuple[tuple[Any, str], ...] = bulk.ops if bulk is not None else ()
    if rp.layers is not Layers.HELPER_ONLY:
        handoff = 5 if rp.layers is Layers.BOTH and (rp.bridges or rp.publish) else None
        opts, tail = bwrap_argv(mounts, rp, command, bwrap_status_fd=4, status_fd=3, socat=socat,
                                handoff_fd=handoff, sync_fd=6 if ops or rp.review_layers else None)
        argv = ["bwrap", *opts, *tail]
    else:
        argv = [rp.helper_path, "--policy-file", rp.policy_path, "--status-fd", "3", "--", *command]
    out = ["# bwrap argv" if rp.layers is not Layers.HELPER_ONLY else "# helper argv (no bwrap)",
           " \\\n  ".join(shlex.quote(a) for a in argv)]
    if ops:
        out.append(f"# then made by safebox inside the sandbox, before the command starts ({len(ops)} mounts; "
                   "docs/layers.md, \"Big policies\")")
        out += [f"{op.value} {shlex.quote(path)}" for op, path in ops]
    if limits is not None:
        out.append(f"# {limits.summary()}")
    out.append(f"# helper policy ({rp.policy_path}; seccomp filter {filter_id or 'none'}): "
               "paths shown decoded; the file holds them hex-encoded")
    return "\n".join(out) + "\n" + readable(policy_bytes)


__all__ = ["BWRAP_MAX_ARGS", "HTTP_BRIDGE_PORT", "SOCKS_BRIDGE_PORT", "Without", "bridges", "bwrap_argv",
           "check_bwrap_limit", "decide_layers", "dry_run_text", "helper_policy_for", "observe_mode",
           "publish_ports", "seccomp_inet"]
