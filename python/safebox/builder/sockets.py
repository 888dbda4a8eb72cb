"""``network.allowUnixSockets`` under bubblewrap: which host unix sockets
to hide behind a mask and which allowed ones exist (seccomp cannot see a
connect() path, and Landlock has no unix-connect right)."""

from __future__ import annotations

import os
import stat

from safebox.builder.resolved import Layers
from safebox.errors import BuildError
from safebox.policy.effective import EffectivePolicy

TYPE_CHECKING = False
if TYPE_CHECKING:
    from safebox.builder.unix_diag import BoundSocket


def host_unix_sockets(bound: list[BoundSocket]) -> list[str]:
    """Paths of the unix sockets bound in this network namespace, from the
    kernel's sock_diag answer (builder/unix_diag.py), each name exactly as
    bound: ``/proc/net/unix`` prints a name raw, so one holding a newline
    was split into two lines there and its socket went unmasked (found in
    review)."""
    return sorted({_normalised(b.name) for b in bound if b.name.startswith("/")})


def _normalised(path: str) -> str:
    """``path`` as bound (the kernel keeps the name bind() was given, any
    process's, any user's: ``/var/tmp//x.sock``, ``/a/./x``, ``/a/b/../x``)
    with its directory resolved (``realpath``: ``..`` after a symlink is
    the link target's parent, as for the kernel), so that the mask's path
    is one the mounter's plan and the helper's tables take: an unresolved
    one failed every ``allowUnixSockets`` and ``--allow-gpu`` run on the
    host (125, "mount plan: ... not a normalised absolute path"). A
    normalised path is returned as it is (its directory may be a link, which
    the mask follows as before)."""
    parts = path.split("/")[1:]
    if all(part not in ("", ".", "..") for part in parts):
        return path
    head, tail = os.path.split(path)
    return os.path.join(os.path.realpath(head), tail)


def split_unix_sockets(allowed: tuple[str, ...], candidates: list[str]) -> tuple[list[str], list[str]]:
    """(sockets to hide, allowed sockets that exist).

    seccomp cannot see a connect() path and Landlock has no unix-connect right
    (ABI <= 7), so per-path filtering is done with mounts: every socket the
    host has bound (sock_diag, builder/unix_diag.py) that is not listed gets /dev/null
    bound over it, and connect() there fails (ECONNREFUSED). Sockets bound
    after the sandbox starts are not covered (docs/policy-reference.md).
    """
    allowed_real = {os.path.realpath(a) for a in allowed}
    hide: list[str] = []
    keep: list[str] = []
    for path in candidates:
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISSOCK(st.st_mode):
            continue
        (keep if os.path.realpath(path) in allowed_real else hide).append(path)
    for a in sorted(allowed_real):
        try:
            if stat.S_ISSOCK(os.lstat(a).st_mode) and a not in keep:
                keep.append(a)
        except OSError:
            pass
    return sorted(set(hide)), sorted(set(keep))


GPU_UNIX_HELPER_ONLY = ("--allow-gpu (devices.gpu) without bubblewrap: CUDA needs unix sockets (its UVM descriptor "
                        "server), and without bubblewrap's mounts no host socket (docker, dbus, ssh-agent) can be "
                        "hidden from the command")
GPU_UNIX_HINT = ('run with bubblewrap, or accept every host socket being reachable with '
                 'network.allowAllUnixSockets = true (docs/gpu.md, "Unix sockets")')


def foreign_on_the_way(sock: str) -> str | None:
    """The first directory from ``/`` down to ``sock``'s that is not ours
    nor root's (or is gone), else None. bubblewrap binds a socket by its
    name: another user could replace a directory of theirs on the way with a
    symlink before the sandbox's mounts and have a file of ours elsewhere
    (``~/.ssh/authorized_keys``) bound writable at that name (under
    ``--without helper`` nothing else stops the write; with the helper,
    Landlock's write rule for the private ``/tmp`` may cover the bind). Each
    is looked at with ``lstat``; a link of root's (``/var/run``) is followed
    by the next look, as the kernel follows it."""
    me = os.geteuid()
    d = ""
    for part in os.path.dirname(sock).split("/")[1:]:
        d = f"{d}/{part}"
        try:
            owner = os.lstat(d).st_uid
        except OSError:
            return d
        if owner not in (me, 0):
            return d
    return None


def check_bound_sockets(paths: list[str] | tuple[str, ...], why: str) -> None:
    """Refuse (BuildError) to bind any of ``paths`` (allowed sockets, by
    name) that :func:`foreign_on_the_way` faults; ``why``: where it is."""
    for sock in paths:
        d = foreign_on_the_way(sock)
        if d is not None:
            raise BuildError(f"network.allowUnixSockets {sock}: {why}, and {d} on the way to it is not yours "
                             "nor root's: its owner could replace it with a link before the sandbox's mounts "
                             "and have a file of yours bound there",
                             hint="move the socket to a directory of yours, or remove it from "
                                  "network.allowUnixSockets")


def hides_host_sockets(policy: EffectivePolicy, layers: Layers) -> bool:
    """Whether unix sockets are on with every unlisted host socket hidden:
    ``allowUnixSockets`` under bubblewrap, or a GPU (CUDA serves its UVM
    descriptors on a unix socket: docs/gpu.md, "Unix sockets"). A GPU
    without bubblewrap, where nothing can be hidden, is refused unless
    ``allowAllUnixSockets`` accepts every host socket."""
    if policy.allow_all_unix_sockets:
        return False
    if layers is Layers.HELPER_ONLY:
        if policy.devices_gpu:
            raise BuildError(GPU_UNIX_HELPER_ONLY, hint=GPU_UNIX_HINT)
        return False
    return bool(policy.allow_unix_sockets or policy.devices_gpu)


def unix_sockets(policy: EffectivePolicy, *, warnings: list[str], notes: list[str]) -> tuple[list[str], list[str]]:
    """(sockets to mask, allowed sockets) for ``allowUnixSockets`` paths
    under bubblewrap. By identity first (builder/unix_diag.py): an allowed
    path must be its socket's own name, not a hard link's, a renamed file's
    or a relative bind's (refused); a hidden socket with a second name is a
    warning (refused under --strict), one whose name may have changed a
    note (-v)."""
    from safebox.builder import unix_diag

    bound = unix_diag.listening()
    unix_diag.check_allowed(policy.allow_unix_sockets, bound)
    unhidden, maybe_unhidden = unix_diag.unhideable(policy.allow_unix_sockets, bound)
    if unhidden:
        more = f" and {len(unhidden) - 3} more" if len(unhidden) > 3 else ""
        what = (f"network.allowUnixSockets: {len(unhidden)} host unix socket{'s' if len(unhidden) > 1 else ''} "
                f"cannot be hidden, as a mask covers one name and {'they have' if len(unhidden) > 1 else 'it has'} "
                f"more: {', '.join(unhidden[:3])}{more}; a command that finds another name can connect to it")
        if policy.strict:
            raise BuildError(f"--strict: {what}", hint="remove the socket's extra links, or run without --strict "
                                                       "(docs/policy-reference.md, \"Unix sockets\")")
        warnings.append(what + ' (--strict refuses to run so; docs/policy-reference.md, "Unix sockets")')
    if maybe_unhidden:
        more = f" and {len(maybe_unhidden) - 3} more" if len(maybe_unhidden) > 3 else ""
        notes.append("network.allowUnixSockets: host unix sockets whose current name safebox may not know (no mask "
                     f"covers a name it does not know): {', '.join(maybe_unhidden[:3])}{more}")
    return split_unix_sockets(policy.allow_unix_sockets, host_unix_sockets(bound))
