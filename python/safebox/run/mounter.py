"""The mounts of a big policy, and the masks of the host's unix sockets,
made inside the sandbox before the command starts.

``builder/bulk.py`` decides which mounts bubblewrap leaves to safebox (and
why: bubblewrap's cost per mount grows with the mount table; a host socket
listed before the sandbox existed may be gone by its mount, and only the
mounter can skip it: ``split_sockets``). Here the
helper makes them: ``safebox-helper --mount`` (helper/mounter.c) enters the
sandbox's user and mount namespaces, which bubblewrap created as the same
user (``setns``, as ``nsenter`` does), and makes them with ``mount(2)`` and
``mount_setattr(2)``: one or two system calls per entry, whatever the table
holds. The plan goes to it in a memfd (helper/mountplan.h has the format).

The sandbox is held at a handshake while this runs: the first program inside
(a ``/bin/sh`` stanza in front of the helper or the command) writes ``R`` on
a socket and waits for ``G``; nothing of the command exists yet. A failure
ends the run (exit 125) before ``G``: the command never starts with a mount
missing.

Why in C: the kernel's part is about 5 µs a bind; a forked Python child
added a fork of safebox (page tables, then copy-on-write faults in safebox
while it builds the violations table) and a microsecond of interpreter per
call. helper/mounter.c's comment has the order of the mounts and why each
is bound from a copy of the tree.
"""

from __future__ import annotations

import os

from safebox.builder.bulk import BulkOp, BulkPlan
from safebox.errors import BuildError, RunError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from safebox.builder.resolved import ResolvedPolicy

_LETTER = {BulkOp.WRITE: b"W", BulkOp.PIN: b"P", BulkOp.READ_ONLY: b"R", BulkOp.MASK_DIR: b"D",
           BulkOp.MASK_FILE: b"F", BulkOp.MASK_SOCKET: b"U"}


def supported() -> bool:
    """Whether this kernel has ``mount_setattr`` (Linux 5.12): without it
    bubblewrap makes every mount, as for a small policy. A kernel that
    claims the version and lacks the call fails the run with the helper's
    message (never a silent skip)."""
    release = os.uname().release
    try:
        major, minor = (int("".join(c for c in part if c.isdigit()) or 0) for part in release.split(".")[:2])
    except ValueError:
        return False
    return (major, minor) >= (5, 12)


def encode(plan: BulkPlan) -> bytes:
    """The plan in the helper's format (helper/mountplan.h)."""
    parts = [b"S\0", os.fsencode(plan.scratch), b"\0"]
    if plan.empty:
        parts += [b"E\0", os.fsencode(plan.empty), b"\0"]
    for op, path in plan.ops:
        parts += [_LETTER[op], b"\0", os.fsencode(path), b"\0"]
    return b"".join(parts)


class Pending:
    """The helper at work; ``wait`` collects it.

    ``hold`` is the write end of the pipe the helper's namespace holder
    waits on: the caller closes it once the sandbox has gone (see
    ``start``)."""

    def __init__(self, child: int, err: int, ops: int, hold: int) -> None:
        self._child, self._err, self._ops = child, err, ops
        self.hold = hold

    def wait(self) -> None:
        """Wait for the helper. Raises BuildError naming the entry that
        could not be mounted. Safe to call once only."""
        try:
            chunks = []
            while chunk := os.read(self._err, 4096):
                chunks.append(chunk)
        finally:
            os.close(self._err)
            _, status = os.waitpid(self._child, 0)
        if status != 0:
            text = b"".join(chunks).decode(errors="replace").strip()
            lines = [ln.removeprefix("safebox-helper: ") for ln in text.splitlines() if ln.strip()]
            msg = lines[0] if lines else f"the helper exited with status {status}"
            raise BuildError(f"cannot make the policy's {self._ops} mounts inside the sandbox: {msg}",
                             hint="see docs/layers.md, \"Big policies\"; `safebox doctor` checks the kernel")


def start(pid: int, plan: BulkPlan, *, helper: str, env: dict[str, str]) -> Pending:
    """Start making ``plan``'s mounts in the mount namespace of ``pid``
    (bubblewrap's sandbox) and return at once: the caller does its own work
    meanwhile (the violations table) and then ``wait``s.

    The helper first forks a holder of the namespace, outside it, which
    exits when ``Pending.hold`` is closed (or safebox dies): the last
    reference to a mount namespace takes its mounts down one by one, about
    15 ms for 10,000, and without the holder the sandbox's last process
    would pay that in an exit safebox waits for (helper/mounter.c, step 1)."""
    from safebox.run.spawn import spawn

    fds: list[int] = []
    try:
        try:
            ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        except OSError as e:
            raise BuildError(f"cannot open the sandbox's mount namespace: {e.strerror}") from None
        fds.append(ns)
        memfd = os.memfd_create("safebox-mount-plan", os.MFD_CLOEXEC)
        fds.append(memfd)
        data = encode(plan)
        view = memoryview(data)
        while view:
            view = view[os.write(memfd, view):]
        os.lseek(memfd, 0, os.SEEK_SET)
        hold_r, hold_w = os.pipe()
        fds.append(hold_r)
        err_r, err_w = os.pipe()
        fds.append(err_w)
        argv = [helper, "--mount", "--namespace-fd", str(ns), "--plan-fd", str(memfd), "--hold-fd", str(hold_r)]
        try:
            child = spawn(helper, argv, env, pass_fds=(ns, memfd, hold_r), dup_to=((err_w, 2),))
        except BaseException:
            os.close(hold_w)
            os.close(err_r)
            raise
    finally:
        for fd in fds:
            os.close(fd)
    return Pending(child, err_r, len(plan.ops), hold_w)


def after_bwrap(sync: Any, child: int | None, bulk: BulkPlan, rp: ResolvedPolicy, *, env: dict[str, str],
                start_observer: Callable[[], None]) -> int:
    """Once bubblewrap asks (``R`` on ``sync``, its sandbox built), make the
    mounts it could not: ``bulk``'s, then ``--review``'s overlays on top of
    every other mount (docs/review.md); then let the sandbox's first program
    go on (``G``). The supervisor is started meanwhile (``start_observer``):
    the helper, which hands it its listener, runs only after ``G``. Returns
    the descriptor holding the mount namespace (-1: none). Nothing on
    ``sync`` (end of file): bubblewrap failed, and reports it itself."""
    hold = -1
    early = None
    if rp.review_layers and child is not None:
        from safebox.review import mounts as review_mounts

        # Its exec while bubblewrap builds the sandbox; the plan once it is built.
        early = review_mounts.prestart(child, helper=rp.helper_path, env=env)
    try:
        if sync.recv(1) == b"R":
            if child is None:
                raise RunError("bubblewrap did not report its sandbox's pid; cannot make the mounts")
            pending = start(child, bulk, helper=rp.helper_path, env=env) if bulk.ops else None
            try:
                if pending is not None:
                    hold = pending.hold
                    try:
                        start_observer()
                    finally:
                        pending.wait()
                if early is not None:
                    # The big policy's mounts included: the overlays read the mount table back.
                    review, early = early.go(rp, helper=rp.helper_path, env=env), None
                    review.wait()
            except BaseException:
                if hold >= 0:
                    os.close(hold)
                raise
            sync.sendall(b"G\n")
        elif bulk.ops:
            start_observer()  # as without the mounter; bubblewrap's failure is reported by its caller
    finally:
        if early is not None:
            early.abandon()
    sync.close()
    return hold
