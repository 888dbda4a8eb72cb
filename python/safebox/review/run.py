"""``--review`` in a run: make the held run before the sandbox, say what it
holds after (run/session.py calls these two)."""

from __future__ import annotations

import os

from safebox.errors import BuildError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

    from safebox.builder.resolved import ResolvedPolicy
    from safebox.review.store import Held


def attach(rp: ResolvedPolicy, *, bwrap: str | None, state: str, command_dir: str, command: tuple[str, ...],
           cwd: str, dry_run: bool, audit_log: str | None = None,
           all_unix_sockets: bool = False) -> tuple[ResolvedPolicy, Held | None]:
    """``rp`` with the held run's layers bound in; refuses (BuildError,
    exit 125) where overlayfs cannot be had, never silently runs without."""
    from safebox.review import mounts, store

    why = mounts.unsupported(rp, bwrap=bwrap)
    if why is not None:
        raise BuildError(why, hint='run without --review (the writes then land on the host); docs/review.md, '
                                   '"Where it works"')
    # The stage: in the sandbox's own /tmp (a tmpfs: bubblewrap makes the
    # directory there, the mounter removes it; nothing on the host's disk),
    # else a directory of the run dir (read-only in the sandbox).
    tmp = "/tmp" in rp.private_tmp
    rp = _bind_held_sockets(rp, mounts.roots(rp), all_unix_sockets=all_unix_sockets)
    stage = f"/tmp/.safebox-review-{os.urandom(4).hex()}" if tmp else os.path.join(command_dir, "review")
    if dry_run:
        return rp.replace(review_layers="<held run>/layers", review_stage=stage), None
    held = store.create(state, roots=mounts.roots(rp), command=command, cwd=cwd, audit_log=audit_log)
    if not tmp:
        os.mkdir(stage, 0o700)
    return rp.replace(review_layers=held.layers, review_stage=stage), held


def _bind_held_sockets(rp: ResolvedPolicy, held: tuple[str, ...], *, all_unix_sockets: bool) -> ResolvedPolicy:
    """``rp`` with every allowed unix socket in a held write root bound onto
    itself: the overlay over the root would show the socket's inode from its
    lower layer, and a connect() to that refuses (ECONNREFUSED: the
    listener is bound to the host's inode, not the overlay's). As a mount
    beneath the root, the mounter puts it back on top of the overlay
    (mounts.plan keeps socket_binds), so the socket keeps its rule.

    ``allowAllUnixSockets`` lists none: the host's bound sockets are listed
    then (sock_diag), those that are sockets at their name now, never one
    under a mask (a socket in a ``denyRead`` directory stays hidden: only
    ``allowUnixSockets`` names one back in). One gone before bubblewrap
    binds it fails the start (125, bubblewrap's line), never silently.

    bubblewrap binds by name, so every directory on the way to the socket
    must be ours or root's (``sockets.foreign_on_the_way``): a named socket
    elsewhere is refused (125); with ``allowAllUnixSockets`` it is left to
    the overlay."""
    from safebox.builder.paths import is_under
    from safebox.builder.sockets import check_bound_sockets, foreign_on_the_way

    listed = rp.sockets_allowed
    if all_unix_sockets:
        from safebox.builder import unix_diag
        from safebox.builder.sockets import host_unix_sockets

        masked = (*rp.mask_dirs, *rp.mask_files)
        listed = tuple(s for s in host_unix_sockets(unix_diag.listening())
                       if _is_socket(s) and not any(is_under(s, m) for m in masked)
                       and foreign_on_the_way(s) is None)
    extra = tuple(s for s in listed if s not in rp.socket_binds and any(is_under(s, r) for r in held))
    check_bound_sockets(extra, "--review binds it onto itself in its held write root")
    return rp.replace(socket_binds=(*rp.socket_binds, *extra)) if extra else rp


def _is_socket(path: str) -> bool:
    """Whether ``path`` is a socket now (``lstat``: a link is not one)."""
    import stat

    try:
        return stat.S_ISSOCK(os.lstat(path).st_mode)
    except OSError:
        return False


#: The diff in a step summary is cut after this many bytes (GitHub takes 1 MiB a step).
SUMMARY_MAX = 256 << 10


def finish(held: Held, rc: int, *, say: Callable[[str], None], audit: object | None = None,
           summary: str | None = None) -> Held:
    """Record the end; one line: what the layers hold, the commands next."""
    from safebox.review import store

    if _empty(held):
        # Nothing to review (the common case of a read-only job): no held run is left behind
        # (its empty directories are the next run's).
        store.recycle(held)
        say(f"review: the run changed nothing in its write roots; nothing is held (exit status {rc})")
        if audit is not None:
            _event(audit, "review_held", review=held.id, added=0, modified=0, deleted=0, changes=[])
        return held.replace(meta={**held.meta, "status": "empty"})
    from safebox.review import layer

    cs = layer.changes(held)
    if not cs:
        # Nothing to review: no held run is left behind to list and discard.
        store.remove(held)
        say(f"review: the run changed nothing in its write roots; nothing is held (exit status {rc})")
        if audit is not None:
            _event(audit, "review_held", review=held.id, added=0, modified=0, deleted=0, changes=[])
        return held.replace(meta={**held.meta, "status": "empty"})
    held = store.update(held, status="held", exit=rc)
    added, modified, deleted = layer.counts(cs)
    code = sum(c.runs_code for c in cs)
    extra = f" ({code} that would run code on the host, applied only when named)" if code else ""
    say(f"review: held run {held.id}: {added} added, {modified} modified, {deleted} deleted{extra}; nothing "
        f"reached the host. Next: `safebox changes diff {held.id}`, `safebox changes apply {held.id}`, "
        f"`safebox changes discard {held.id}`")
    if summary:
        _summary(summary, held, cs)
    if audit is not None:
        _event(audit, "review_held", review=held.id, added=added, modified=modified, deleted=deleted,
               changes=[c.as_json() for c in cs[:1000]])
    return held


def _empty(held: Held) -> bool:
    """Whether every layer is empty (cheaper than walking for changes)."""
    for k in range(len(held.roots)):
        try:
            if os.listdir(held.upper(k)):
                return False
        except FileNotFoundError:
            continue
    return True


def _event(audit: object, kind: str, **fields: object) -> None:
    write = getattr(audit, "event", None)
    if callable(write):
        write(kind, **fields)


def _summary(path: str, held: Held, cs: list[Any]) -> None:
    """The held changes as Markdown, appended to ``--summary`` (in CI,
    ``$GITHUB_STEP_SUMMARY``): the counts, each path, the diff (cut at
    SUMMARY_MAX), and how to apply."""
    from safebox import hostio
    from safebox.review import layer

    added, modified, deleted = layer.counts(cs)
    mark = {"added": "A", "modified": "M", "deleted": "D"}
    out = [f"### safebox: held changes of run `{held.id}`\n",
           f"{added} added, {modified} modified, {deleted} deleted; nothing reached the work tree. Apply with "
           f"`safebox changes apply {held.id}` (docs/review.md).\n", "```"]
    out += [f"{mark[c.kind]} {c.path}{'  (runs code: applied only when named)' if c.runs_code else ''}" for c in cs]
    out += ["```", "", "<details><summary>diff</summary>", "", "```diff"]
    size, cut = 0, False
    for c in cs:
        d = layer.diff(held, c).replace("```", "`` `")
        if size + len(d) > SUMMARY_MAX:
            cut = True
            break
        size += len(d)
        out.append(d.rstrip("\n"))
    if cut:
        out.append(f"... cut at {SUMMARY_MAX} bytes: `safebox changes diff {held.id}` shows the rest")
    out += ["```", "</details>", ""]
    hostio.append(path, ("\n".join(out) + "\n").encode())
