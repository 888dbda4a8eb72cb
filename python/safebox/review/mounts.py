"""The overlays of a ``--review`` run: which mounts, in what order.

Made at the mounter's handshake (run/supervise.py), after every mount of
the normal run exists: the plan is read off the sandbox's own mount table
(``/proc/PID/mountinfo`` of bubblewrap's sandbox process, paths as the
sandbox sees them), so it rebuilds exactly the stack the normal run has
above each write root. helper/review.c has the plan's format.

* each outermost write root gets an overlay (``V``): the host directory
  is its lower layer, the held run's layer its upper;
* every mount beneath it that is read-only, not a directory of the host
  (a tmpfs mask) or a socket, is put back on top from a copy (``K``):
  read-only, masked and protected paths keep their rule inside the layer;
* every other read-write mount beneath it (a pin, a nested write root) is
  bound from the overlay onto itself (``I``): its writes are held too.
"""

from __future__ import annotations

import os

from safebox.errors import BuildError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from safebox.builder.resolved import ResolvedPolicy

#: Bytes overlayfs's option string gives a meaning to.
_SPECIAL = (",", ":", "\\", "=")
#: File systems that never hold the host's files.
_NOT_HOST = ("tmpfs", "proc", "devtmpfs", "mqueue", "devpts", "sysfs")


def unsupported(rp: ResolvedPolicy, *, bwrap: str | None) -> str | None:
    """Why this run cannot hold its writes in a layer, or None."""
    import stat

    from safebox.builder.resolved import Layers

    if rp.layers is Layers.HELPER_ONLY or not bwrap:
        return ("--review needs bubblewrap's mount namespace for its overlays, and this run has none "
                "(helper-only mode)")
    release = os.uname().release
    try:
        major, minor = (int("".join(c for c in part if c.isdigit()) or 0) for part in release.split(".")[:2])
    except ValueError:
        major, minor = 0, 0
    if (major, minor) < (5, 12):
        return (f"--review needs overlayfs in a user namespace (Linux 5.11) and mount_setattr (5.12); "
                f"this kernel is {release}")
    try:
        if os.stat(bwrap).st_mode & stat.S_ISUID:
            return "--review cannot mount in a setuid bubblewrap's namespaces (they are root's, not yours)"
    except OSError:
        pass
    if not (rp.helper_path and os.access(rp.helper_path, os.X_OK)):
        return "--review needs safebox-helper to mount its overlays, and it is not installed or not executable"
    for w in roots(rp):
        if any(c in w for c in _SPECIAL):
            return f"--review cannot hold writes to {w!r}: overlayfs's options cannot name a path with , : \\ or ="
    return None


def roots(rp: ResolvedPolicy) -> tuple[str, ...]:
    """The write roots whose writes are held: the outermost ones (a write
    root inside another is held with it) but the private tmp dirs, which
    are the sandbox's own tmpfs (a write root beneath one is bound from
    the host, and held)."""
    from safebox.builder.paths import Nearest

    near = Nearest(w for w in rp.write_roots if w not in rp.private_tmp)
    return tuple(sorted(w for w in near.paths if near.above(w) is None))


def _unescape(field: str) -> str:
    if "\\" not in field:
        return field
    raw = field.encode()
    parts = raw.split(b"\\")
    out = parts[0] + b"".join(bytes([int(x[:3], 8)]) + x[3:] for x in parts[1:])
    return os.fsdecode(out)


def parse_mountinfo(text: str) -> list[tuple[str, bool, str]]:
    """(mount point, read-only, file system type) of each line, in order."""
    out = []
    for line in text.splitlines():
        left, _, right = line.partition(" - ")
        f = left.split(" ")
        if len(f) < 6 or not right:
            continue
        fstype = right.split(" ", 1)[0]
        out.append((_unescape(f[4]), "ro" in f[5].split(","), fstype))
    return out


def plan(rp: ResolvedPolicy, table: list[tuple[str, bool, str]], *, held: tuple[str, ...]) -> bytes:
    """The plan (helper/review.c) for the write roots ``held``, from the
    sandbox's mount table ``table``. Raises BuildError for a root that
    is not a mount point of its own (its writes could not be held)."""
    points = {p for p, _, _ in table}
    keep_rw = {*rp.socket_binds, *rp.cache_dirs, *((rp.publish_dir,) if rp.publish_dir else ())}
    parts = [b"G\0", os.fsencode(rp.review_stage), b"\0"]
    for root in held:
        if root not in points:
            raise BuildError(f"--review cannot hold the writes to {root}: it is not a mount of its own "
                             "in the sandbox", hint="report this with `safebox exec --dry-run --review`")
        parts += [b"V\0", os.fsencode(root), b"\0"]
        prefix = root + "/"
        for path, ro, fstype in table:
            if not path.startswith(prefix):
                continue
            if ro or fstype in _NOT_HOST or path in keep_rw:
                op = b"K"
            else:
                op = b"I"
            parts += [op, b"\0", os.fsencode(path), b"\0"]
    return b"".join(parts)


class Pending:
    """safebox-helper --review at work; ``wait`` collects it (once)."""

    def __init__(self, child: int, err: int) -> None:
        self._child, self._err = child, err

    def wait(self) -> None:
        """Raises BuildError with the helper's message when it failed."""
        chunks = []
        try:
            while chunk := os.read(self._err, 4096):
                chunks.append(chunk)
        finally:
            os.close(self._err)
            _, status = os.waitpid(self._child, 0)
        if status != 0:
            text = b"".join(chunks).decode(errors="replace").strip()
            lines = [ln.removeprefix("safebox-helper: ") for ln in text.splitlines() if ln.strip()]
            msg = next((ln for ln in lines if not ln.startswith("hint:")), f"the helper exited with status {status}")
            hint = next((ln.removeprefix("hint: ") for ln in lines if ln.startswith("hint:")), None)
            raise BuildError(msg, hint=hint or 'run without --review, or see docs/review.md, "Where it works"')


def _table(pid: int) -> list[tuple[str, bool, str]]:
    try:
        with open(f"/proc/{pid}/mountinfo", encoding="utf-8", errors="surrogateescape") as f:
            return parse_mountinfo(f.read())
    except OSError as e:
        raise BuildError(f"--review: cannot read the sandbox's mount table: {e.strerror}") from None


def start(pid: int, rp: ResolvedPolicy, *, helper: str, env: dict[str, str]) -> Pending:
    """Start mounting the overlays in the sandbox of bubblewrap's process
    ``pid`` and return at once (the caller builds the violations table
    meanwhile, as for safebox.run.mounter); ``wait`` on the result."""
    from safebox.run.spawn import spawn

    data = plan(rp, _table(pid), held=roots(rp))
    fds: list[int] = []
    try:
        ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        fds.append(ns)
        memfd = os.memfd_create("safebox-review-plan", os.MFD_CLOEXEC)
        fds.append(memfd)
        view = memoryview(data)
        while view:
            view = view[os.write(memfd, view):]
        os.lseek(memfd, 0, os.SEEK_SET)
        err_r, err_w = os.pipe()
        fds.append(err_w)
        argv = [helper, "--review", "--namespace-fd", str(ns), "--plan-fd", str(memfd)]
        try:
            child = spawn(helper, argv, env, pass_fds=(ns, memfd), dup_to=((err_w, 2),))
        except BaseException:
            os.close(err_r)
            raise
    except OSError as e:
        raise BuildError(f"--review: cannot start the helper's mounter: {e.strerror}") from None
    finally:
        for fd in fds:
            os.close(fd)
    return Pending(child, err_r)


class Early:
    """safebox-helper --review started while bubblewrap builds the sandbox,
    waiting on a pipe for its plan: its exec is off the run's way (each
    process's start counted, on a loaded machine most of all). ``go`` gives
    it the plan once the sandbox is built; ``abandon`` when it never is."""

    def __init__(self, pid: int, ns_ino: int, child: int, plan_w: int, err: int) -> None:
        self._pid, self._ns_ino, self._child, self._plan_w, self._err = pid, ns_ino, child, plan_w, err

    def go(self, rp: ResolvedPolicy, *, helper: str, env: dict[str, str]) -> Pending:
        """The plan, from the mount table now; the mounter at work. Started
        afresh (``start``) if bubblewrap's process is no longer in the
        mount namespace the early one holds."""
        try:
            now = os.stat(f"/proc/{self._pid}/ns/mnt").st_ino
        except OSError:
            now = -1
        if now != self._ns_ino:
            self.abandon()
            return start(self._pid, rp, helper=helper, env=env)
        data = plan(rp, _table(self._pid), held=roots(rp))
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(self._plan_w, view):]
        except OSError:
            pass  # the helper is gone: its status and message say why (wait)
        finally:
            os.close(self._plan_w)
            self._plan_w = -1
        return Pending(self._child, self._err)

    def abandon(self) -> None:
        """End of file on the plan (it exits at once), and collected."""
        if self._plan_w < 0:
            return
        os.close(self._plan_w)
        self._plan_w = -1
        os.close(self._err)
        os.waitpid(self._child, 0)


def prestart(pid: int, *, helper: str, env: dict[str, str]) -> Early:
    """Start the mounter for the sandbox of bubblewrap's process ``pid``
    (its mount namespace exists from its clone on: the descriptor taken now
    sees the mounts bubblewrap makes after) before the sandbox is built."""
    from safebox.run.spawn import spawn

    fds: list[int] = []
    try:
        ns = os.open(f"/proc/{pid}/ns/mnt", os.O_RDONLY | os.O_CLOEXEC)
        fds.append(ns)
        ino = os.fstat(ns).st_ino
        plan_r, plan_w = os.pipe()
        fds.append(plan_r)
        err_r, err_w = os.pipe()
        fds.append(err_w)
        argv = [helper, "--review", "--namespace-fd", str(ns), "--plan-fd", str(plan_r)]
        try:
            child = spawn(helper, argv, env, pass_fds=(ns, plan_r), dup_to=((err_w, 2),))
        except BaseException:
            os.close(err_r)
            os.close(plan_w)
            raise
    except OSError as e:
        raise BuildError(f"--review: cannot start the helper's mounter: {e.strerror}") from None
    finally:
        for fd in fds:
            os.close(fd)
    return Early(pid, ino, child, plan_w, err_r)
