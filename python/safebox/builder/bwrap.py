"""Pure: ResolvedPolicy → bubblewrap argv. Touches no filesystem.

Mount order (bwrap applies its arguments in order; a later mount on a deeper
path shadows an earlier one, so the order *is* the policy):

1. ``--ro-bind / /``: the whole host, read-only.
2. ``--dev /dev``, ``--proc /proc``: a minimal devtmpfs and a fresh procfs for
   the new pid namespace (the command cannot see host processes); then
   ``--tmpfs /proc/1``: pid 1 is bubblewrap's reaper, and its ``/proc``
   entry (command line with the policy path, environment, descriptors) is
   covered by an empty tmpfs, made read-only in step 10.
3. ``--tmpfs /tmp``: private, writable, gone with the sandbox. With
   ``limits.tmpSize``, ``--size N`` before it, and a tmpfs of the same size
   on ``/dev/shm`` (otherwise a directory of bwrap's unbounded ``/dev``
   tmpfs, a way around the /tmp limit). ``--allow-gpu``: each GPU node
   with ``--dev-bind NODE /dev/...`` into that ``/dev`` (builder/devices.py;
   ``--bind`` would be ``nodev``), and no other.
4. Write roots, shallow first: ``--bind W W``.
5. Pinned directories (``.git``, and every directory between a write root
   and a protected, masked or self-protected path): ``--bind G G`` so they
   cannot be renamed away from the read-only entries below them (a mount
   point cannot be renamed), merged with step 4 in depth order.
6. Sealed directories (a ``.git`` missing ``hooks``/``config``): ``--ro-bind D D``
   then each existing unprotected child ``--bind C C``: creating the missing
   entry fails with EROFS.
7. Read-only re-binds beneath write roots: mandatory protection, ``denyWrite``,
   safebox's own installation and state dir; then the sandbox-private tool
   caches of the presets (leaves of the state dir), ``--bind C C``.
8. Deny-read: directories get ``--tmpfs D`` (made read-only in step 10, so a
   write there fails rather than vanishing), files get ``--ro-bind EMPTY F``
   (safebox's own empty file, mode 0200, in the run dir: never the host's
   ``/dev/null``, which root can turn into a regular file).
   After every bind of steps 4-7, so none of them can uncover a mask; under
   the private ``/tmp`` only where such a bind brought the host path back
   (``needs_mask``). Then masked credential files (``credentials.files``,
   mode ``mask``) get ``--ro-bind COPY F``, the copy holding the sentinel
   (over a deny-read mask of the same file, which it replaces), and covered
   files (a CI job's ``.git/config`` holding the runner's token:
   safebox/ci_job/) get ``--ro-bind COPY F``, a scrubbed copy from the run
   dir, under the same rule as the masks. Steps 4-8 take
   only the paths beneath no carve-out: then each ``allowRead`` carve-out
   inside a mask (builder/regions.py), shallow first: ``--ro-bind A A``
   (``--bind`` when a write root holds it), from the host, so bwrap creates
   its mount point in the still-writable tmpfs; and after it steps 4-8 for
   the paths beneath it, which its bind covered (a write root, a protected
   file, a ``denyRead`` path more specific than the carve-out, a covered
   file). Every path belongs to the deepest carve-out at or above it, or to
   none. A write root inside a read-only dot entry of ``$HOME``
   (``--allow-write ~/.cache/foo`` with the work dir at ``~``;
   builder/home_files.py) is such a carve-out too, ``--bind``, over the
   read-only bind instead of a mask.
9. Allowed unix sockets under the private ``/tmp`` or a mask, bound back in;
   then the run dir, read-only, so the helper finds its policy even when a
   mask covers the run dir's parent. (Unlisted host sockets, when
   ``allowUnixSockets`` lists paths or ``--allow-gpu`` is on, are masked by
   ``safebox.run.mounter`` after all of these, skipping one gone since the
   listing: ``builder/bulk.py`` ``split_sockets``; among the step-8 file
   masks only on a host where the mounter cannot run.)
10. ``--remount-ro`` every deny-read tmpfs (only the tmpfs itself: the
    carve-outs bound into it keep their own flags).
11. Namespaces and process options: ``--unshare-all`` (user, ipc, pid, net,
    uts, cgroup), ``--die-with-parent``, ``--new-session`` (no TIOCSTI into
    the caller's terminal), ``--cap-drop ALL``, ``--chdir``.
12. The command: the helper (``--policy-file``, ``--status-fd``, and
    ``--handoff-fd`` when there is a proxy: the helper hands its listeners on
    the proxy ports to safebox), or, with ``--without helper``, the command
    itself (behind a shell that starts socat bridges when there is a proxy).

A big policy's entries of steps 4-8 may be left out of this argv and made
by ``safebox.run.mounter`` inside the sandbox instead, while the helper's
``--sync-fd`` (or, with ``--without helper``, a shell stanza in front of
step 12: ``sync_lines``) holds the command; ``builder/bulk.py`` says which,
and docs/layers.md, "Big policies", why the result is the same.
"""

from __future__ import annotations

from safebox.builder.resolved import Layers, ResolvedPolicy


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def host_binds(rp: ResolvedPolicy) -> list[str]:
    """The binds of steps 4-7, which bring host paths back into view, in the
    private ``/tmp`` too (a work dir or ``$HOME`` under ``/tmp``)."""
    out = [*rp.write_roots, *rp.pinned_dirs, *rp.read_only]
    for d, kids in rp.sealed_dirs:
        out += [d, *kids]
    # A carve-out is bound from the host too, where it is visible itself.
    out += [c for c, _ in rp.carve_outs if not any(_under(c, t) for t in rp.private_tmp)
            or any(_under(c, b) for b in out)]
    return out


def needs_mask(rp: ResolvedPolicy, path: str) -> bool:
    """Whether a deny-read path is visible when step 8 runs, and so must be masked.

    Under the private ``/tmp`` a host path is absent unless a bind of steps
    4-7 brought it back: a work dir or ``$HOME`` under ``/tmp`` (agent task
    worktrees, CI containers with ``HOME=/tmp``) is such a bind, and a denied
    path beneath it is as readable as anywhere else (issue 11: these masks
    were skipped as "already absent"). Under ``/proc`` and ``/dev`` nothing
    is absent (the fresh procfs has cpuinfo, sys, ...; bwrap's /dev has shm,
    pts, ...): those are masked like any other path, over the new mounts.
    A path that is absent is not mounted over: bwrap would create it in the
    private ``/tmp`` as an empty mount point.
    """
    if not any(_under(path, t) for t in rp.private_tmp):
        return True
    return any(_under(path, b) for b in host_binds(rp))


def mount_args(rp: ResolvedPolicy) -> list[str]:
    """Steps 1-10 of the module docstring."""
    a: list[str] = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/proc/1"]
    size = ["--size", str(rp.tmp_size)] if rp.tmp_size else []
    for t in rp.private_tmp:
        a += [*size, "--tmpfs", t]
    if size:
        a += [*size, "--tmpfs", "/dev/shm"]
    for node, inside in rp.gpu_nodes:
        # --dev-bind: a plain --bind is nodev, and the node would not open.
        a += ["--dev-bind", node, inside]
    masked: list[str] = []
    groups = _by_carve_out(rp)
    a += _region_args(groups[""] if groups else rp, masked, whole=rp)
    for c, writable in rp.carve_outs:
        if not needs_mask(rp, c):
            continue  # its mask was not mounted: the private /tmp hides the host path already
        a += ["--bind" if writable else "--ro-bind", c, c]
        if c in groups:
            # A write root that is the carve-out itself is bound by it already.
            own = groups[c]
            a += _region_args(own.replace(write_roots=tuple(w for w in own.write_roots if w != c)) if writable
                              else own, masked, whole=rp)
    for sock in rp.socket_binds:
        a += ["--bind", sock, sock]
    if rp.run_dir:
        a += ["--ro-bind", rp.run_dir, rp.run_dir]
    if rp.review_layers:
        # --review: detached by safebox-helper --review once the overlays are made.
        a += ["--bind", rp.review_layers, rp.review_stage]
    if rp.helper_path and any(_under(rp.helper_path, t) for t in rp.private_tmp):
        # safebox installed under /tmp: the private /tmp would hide the helper.
        a += ["--ro-bind", rp.helper_path, rp.helper_path]
    if rp.publish_dir:
        # The published ports' sockets are created inside, by the bridge.
        a += ["--bind", rp.publish_dir, rp.publish_dir]
    for d in ("/proc/1", *masked):
        a += ["--remount-ro", d]
    return a


def _region_args(rp: ResolvedPolicy, masked: list[str], *, whole: ResolvedPolicy) -> list[str]:
    """Steps 4-8 for the paths of one region (all, or those beneath one
    carve-out); ``whole`` is the policy they belong to (``needs_mask``)."""
    a: list[str] = []
    # Write roots and pinned directories are both read-write self-binds;
    # shallow first, so a deeper one is never hidden by a shallower one.
    for w in sorted({*rp.write_roots, *rp.pinned_dirs}, key=lambda p: (p.count("/"), p)):
        a += ["--bind", w, w]
    for d, kids in rp.sealed_dirs:
        a += ["--ro-bind", d, d]
        for k in kids:
            a += ["--bind", k, k]
    for p in rp.read_only:
        a += ["--ro-bind", p, p]
    for c in rp.cache_dirs:
        a += ["--bind", c, c]
    for d in rp.mask_dirs:
        if not needs_mask(whole, d):
            continue
        a += ["--tmpfs", d]
        masked.append(d)
    for f in rp.mask_files:
        if not needs_mask(whole, f):
            continue
        if not whole.empty_file:
            raise ValueError(f"no empty file to mask {f} with")  # fail closed: resolve() always sets it
        a += ["--ro-bind", whole.empty_file, f]
    for real, copy in rp.masked_files:
        a += ["--ro-bind", copy, real]
    for copy, f in rp.overlays:
        if needs_mask(whole, f):
            a += ["--ro-bind", copy, f]
    return a


def _by_carve_out(rp: ResolvedPolicy) -> dict[str, ResolvedPolicy]:
    """The mounts of steps 4-8 split by the deepest carve-out at or above each
    path ("" for none), as ResolvedPolicy copies holding only their own."""
    if not rp.carve_outs:
        return {}
    outs = {c for c, _ in rp.carve_outs}

    def owner(p: str) -> str:
        d = p
        while True:
            if d in outs:
                return d
            if d == "/" or not d:
                return ""
            d = d[:d.rfind("/")] or "/"

    fields: dict[str, dict[str, list[object]]] = {}

    def put(field: str, p: str, item: object) -> None:
        fields.setdefault(owner(p), {}).setdefault(field, []).append(item)

    for field in ("write_roots", "pinned_dirs", "read_only", "cache_dirs", "mask_dirs", "mask_files"):
        for p in getattr(rp, field):
            put(field, p, p)
    for d, kids in rp.sealed_dirs:
        put("sealed_dirs", d, (d, kids))
    for real, copy in rp.masked_files:
        put("masked_files", real, (real, copy))
    for copy, f in rp.overlays:
        put("overlays", f, (copy, f))
    empty = {f: () for f in ("write_roots", "pinned_dirs", "read_only", "cache_dirs", "mask_dirs", "mask_files",
                             "sealed_dirs", "masked_files", "overlays")}
    fields.setdefault("", {})
    return {k: rp.replace(**{**empty, **{f: tuple(v) for f, v in by.items()}}) for k, by in fields.items()}


def namespace_args(rp: ResolvedPolicy, *, bwrap_status_fd: int | None) -> list[str]:
    """Step 11."""
    a = ["--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
         "--hostname", "safebox", "--chdir", rp.cwd]
    if bwrap_status_fd is not None:
        a += ["--json-status-fd", str(bwrap_status_fd)]
    return a


# What the launcher shell reports on the status fd when there is no helper:
# the same protocol line, with every helper layer absent.
NO_HELPER_STATUS = '{"v":1,"ok":true,"landlock":null,"nnp":false,"caps":false,"seccomp":false,"bridges":0}'


def sync_lines(sync_fd: int, cwd: str | None = None) -> list[str]:
    """The handshake that holds the sandbox while safebox makes a big
    policy's mounts in it (``safebox.run.mounter``): ``R`` out, ``G`` back, or
    exit 125 before anything else runs. ``sync_fd`` is a single digit (dash
    reads ``>&12`` as a syntax error). With ``cwd`` (``--review``), enter
    it again after ``G``: bubblewrap's chdir holds the directory mounted
    there before, and an overlay made on it since is seen only through a
    new look-up of its path."""
    assert 3 <= sync_fd <= 9, sync_fd
    out = [f"printf R >&{sync_fd} && IFS= read -r go <&{sync_fd} && [ \"$go\" = G ] || exit 125",
           f"exec {sync_fd}>&-"]
    if cwd:
        quoted = "'" + cwd.replace("'", "'\\''") + "'"
        out.append(f"cd -- {quoted} || exit 125")
    return out


def launcher_script(rp: ResolvedPolicy, *, socat: str, status_fd: int | None, sync_fd: int | None = None) -> str:
    """The shell that stands in for the helper with ``--without helper``: it
    starts the bridges, reports on the status fd (so Python can tell a bwrap
    set-up failure from the command's own exit status), and execs the command."""
    import shlex  # only for --without helper; shlex pulls in re

    lines = sync_lines(sync_fd, rp.cwd if rp.review_layers else None) if sync_fd is not None else []
    for b in rp.bridges:
        lines.append(f"{shlex.quote(socat)} -b 262144 TCP-LISTEN:{b.port},bind=127.0.0.1,fork,reuseaddr "
                     f"UNIX-CONNECT:{shlex.quote(b.socket_path)} </dev/null >/dev/null 2>&1 &")
    for b in rp.bridges:
        lines.append(f"i=0; until {shlex.quote(socat)} -u OPEN:/dev/null TCP:127.0.0.1:{b.port} 2>/dev/null; "
                     f"do i=$((i+1)); [ $i -gt 200 ] && {{ echo 'safebox: bridge did not start' >&2; exit 125; }}; "
                     f"sleep 0.01; done")
    for port, sock in rp.publish:
        lines.append(f"{shlex.quote(socat)} -b 262144 UNIX-LISTEN:{shlex.quote(sock)},fork,unlink-early,mode=600 "
                     f"TCP4:127.0.0.1:{port} </dev/null >/dev/null 2>&1 &")
    if status_fd is not None:
        lines.append(f"printf '%s\\n' '{NO_HELPER_STATUS}' >&{status_fd}; exec {status_fd}>&-")
    lines.append('exec "$@"')
    return "\n".join(lines)


def command_args(rp: ResolvedPolicy, command: list[str], *, status_fd: int | None, socat: str,
                 handoff_fd: int | None = None, sync_fd: int | None = None) -> list[str]:
    """Step 12; with ``sync_fd``, behind the handshake of ``sync_lines``."""
    match rp.layers:
        case Layers.BOTH:
            a = [rp.helper_path, "--policy-file", rp.policy_path]
            if status_fd is not None:
                a += ["--status-fd", str(status_fd)]
            if handoff_fd is not None:
                a += ["--handoff-fd", str(handoff_fd)]
            if sync_fd is not None:
                # The helper holds itself at the handshake (no shell's exec in front of it: main.c sync_handshake).
                a += ["--sync-fd", str(sync_fd)]
                if rp.review_layers:
                    a += ["--enter-cwd", rp.cwd]
            return ["--", *a, "--", *command]
        case Layers.BWRAP_ONLY:
            if rp.bridges or rp.publish or status_fd is not None or sync_fd is not None:
                script = launcher_script(rp, socat=socat, status_fd=status_fd, sync_fd=sync_fd)
                return ["--", "/bin/sh", "-c", script, "safebox-launcher", *command]
            return ["--", *command]
        case Layers.HELPER_ONLY:
            raise ValueError("no bwrap argv on a helper-only run")


def build_argv(rp: ResolvedPolicy, command: list[str], *, status_fd: int | None,
               bwrap_status_fd: int | None = None, socat: str = "socat",
               handoff_fd: int | None = None) -> list[str]:
    """The complete argument list for bwrap (without ``bwrap`` itself), in order."""
    return [*mount_args(rp), *namespace_args(rp, bwrap_status_fd=bwrap_status_fd),
            *command_args(rp, command, status_fd=status_fd, socat=socat, handoff_fd=handoff_fd)]
