"""Supervision of one command: spawn bwrap (or the helper alone), read the
helper's status, relay signals (run/spawn.py), wait, map the exit status.

:class:`Launch` is one command's life: :meth:`Launch.start` spawns and
returns once the helper has reported (the command exists, or start-up
failed and the error is raised); :meth:`Launch.wait` waits and maps the
status; :meth:`Launch.close` undoes everything (idempotent). Under
``safebox exec`` (``cli=True``) the process's signals are taken over and
relayed to the command (``_signals``); under the API nothing process-wide is
touched: no signal handler, no close-on-exec marking of the caller's
descriptors (the child closes them: :func:`spawn`), no working-directory
change, no child subreaper.
"""

from __future__ import annotations

import os
import time

from safebox import _signals
from safebox._record import read_until
from safebox.builder.resolved import Layers, ResolvedPolicy
from safebox.errors import EXIT_SAFEBOX_FAILED, EXIT_TIMEOUT, HelperError, RunError
from safebox.run import limits as _limits
from safebox.run import plan as _plan
from safebox.run.spawn import Relay, become_subreaper, reap_descendants, spawn

TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal  # the same functions and constants, as typeshed describes them
    from collections.abc import Callable
    from typing import Any

    from safebox.builder.bulk import BulkPlan
    from safebox.proxy.deferred import DeferredProxy
    from safebox.run.cgroups import Cgroup
    from safebox.run.helper_binary import HelperStatus
    from safebox.run.limits import Plan
    from safebox.run.publish import PublishForwarder
    from safebox.violations.observer import Observer
else:
    import _signal as signal  # the C module: `signal` wraps it in enums (~4.5 ms of import)

_SIGNAL_NAMES = {getattr(signal, n): n for n in ("SIGKILL", "SIGSEGV", "SIGABRT", "SIGBUS", "SIGTERM", "SIGILL",
                                                 "SIGFPE", "SIGSYS", "SIGXCPU")}


def exit_status(wstatus: int) -> int:
    """The shell's convention: the command's own status, 128+N on signal N."""
    code = os.waitstatus_to_exitcode(wstatus)
    return 128 - code if code < 0 else code


def _wait(pid: int) -> int:
    while True:
        try:
            _, st = os.waitpid(pid, 0)
            return st
        except ChildProcessError:
            return 0
        except InterruptedError:
            continue


def _read_bwrap_child(fd: int) -> int | None:
    """bwrap's --json-status-fd: the first document holds "child-pid" once the
    sandbox exists. A fixed key in a fixed document; read without a JSON parser
    (``json`` costs ~5 ms of import on the hot path)."""
    buf = read_until(fd, b"}")
    if not buf:
        return None
    key = b'"child-pid":'
    at = buf.find(key)
    if at < 0:
        return None
    digits = buf[at + len(key):].lstrip(b" ").split(b",", 1)[0].split(b"}", 1)[0].strip()
    return int(digits) if digits.isdigit() else None


def _low_numbers(taken: set[int], *, sync: bool) -> tuple[int, int | None]:
    """The numbers the status pipe (and the mounter's sync socket) get in
    bwrap's child. The launcher shell (dash) of --without helper and the
    mounter's handshake name their descriptors in redirections, which take
    a single digit: those two get numbers 3-9, none that one of ``taken``
    (ours, the sources of dups, which are made in order, and the passed
    ones) has."""
    low = [n for n in range(3, 10) if n not in taken]
    return low[0], low[1] if sync else None


def test_pause(point: str) -> None:
    """``SAFEBOX_TEST_PAUSE=POINT``: safebox stops itself (SIGSTOP) at the
    point of start-up named ``POINT`` -- ``proxy`` (before the proxy
    exists), ``bwrap`` (before the sandbox is spawned, ahead of resolving),
    ``mounts`` (resolved, just before bubblewrap is spawned) or ``command``
    (spawned, before the command exists) -- so that the stress test can land
    a signal exactly there and SIGCONT it (tests/security/test_signal_stress.py).
    Harmless outside tests: it only stops, as SIGSTOP from the caller could
    at any point. ``mounts`` lies between the listing of the host's unix
    sockets and their masks on purpose: the test of that window
    (tests/security/test_unix_socket_race.py) removes a listed socket there;
    the others lie before anything is resolved or after the sandbox exists."""
    if os.environ.get("SAFEBOX_TEST_PAUSE") == point:
        os.kill(os.getpid(), signal.SIGSTOP)


def checkpoint(before: str) -> None:
    """A point of start-up where a terminating signal ends it (``_signals.check``)."""
    _signals.check()
    test_pause(before)
    _signals.check()


class Stdio:
    """Descriptors to become the command's 0, 1 and 2 (None: safebox's own)."""

    def __init__(self, stdin: int | None = None, stdout: int | None = None, stderr: int | None = None) -> None:
        self.dup_to = tuple((fd, n) for n, fd in enumerate((stdin, stdout, stderr)) if fd is not None)


class Launch:
    """One command's life in the sandbox (see the module's docstring)."""

    def __init__(self, rp: ResolvedPolicy, command: tuple[str, ...], env: dict[str, str], *,
                 split: tuple[ResolvedPolicy, BulkPlan] | None = None, bwrap: str | None, socat: str, cli: bool, say: Callable[[str], None], verbose: bool = False,
                 proxy: DeferredProxy | None = None, filter_id: str = "", forwarders: tuple[PublishForwarder, ...] = (),
                 limits: Plan | None = None, make_observer: Callable[[], Observer] | None = None,
                 stdio: Stdio | None = None, want_status: bool = False) -> None:
        self.rp, self.command, self.env = rp, command, env
        self.split = split  # under bubblewrap: its mounts, and the mounter's (run.host.bulk_plan)
        self.bwrap, self.socat, self.cli, self.say, self.verbose = bwrap, socat, cli, say, verbose
        self.proxy, self.filter_id, self.forwarders = proxy, filter_id, forwarders
        self.limits, self.make_observer = limits, make_observer
        self.stdio = stdio or Stdio()
        self.want_status = want_status  # parse the helper's status even when all is well (run records, API)
        self.relay = Relay(cli=cli)
        self.observer: Observer | None = None
        self.cgroup: Cgroup | None = limits.cgroup() if limits is not None else None
        self.limits_hit: list[str] = []
        #: How the violations supervisor died during the run ("killed by
        #: SIGKILL"), which ended the run; None while it serves.
        self.supervisor_lost: str | None = None
        self._supervisor_fd = -1  # its pidfd, polled while waiting
        self.status: HelperStatus | None = None
        self.line: bytes | None = None
        self.pid = -1
        self.started = 0.0
        self.returncode: int | None = None
        self._tmp_watch: list[tuple[str, int]] = []
        self._fds: list[int] = []  # ours to close
        self._ends: list[Any] = []  # socket ends to close
        self._ns_held = -1  # closing it lets the mount namespace go (mounter.start)

    # -- start -----------------------------------------------------------------

    def _pipe(self) -> tuple[int, int]:
        r, w = os.pipe()
        self._fds += [r, w]
        return r, w

    def _close_fd(self, fd: int) -> None:
        if fd in self._fds:
            self._fds.remove(fd)
            os.close(fd)

    def _handoff(self) -> tuple[Any, Any] | None:
        """The pair over which the helper hands listeners back: the proxy
        ports and published sockets (helper/handoff.c, helper/publish.c),
        the observing filter's listener (main.c)."""
        rp = self.rp
        if not ((rp.layers is Layers.BOTH and ((self.proxy is not None and rp.bridges) or self.forwarders))
                or self.make_observer is not None):
            return None
        return self._socketpair()

    def _start_observer(self) -> None:
        if self.make_observer is not None:
            self.observer = self.make_observer()
            self.observer.start(lambda path, argv, pass_fds: spawn(path, argv, self.env, pass_fds=pass_fds,
                                                                   block_signals=True))
            try:
                self._supervisor_fd = os.pidfd_open(self.observer.pid)
                self._fds.append(self._supervisor_fd)
            except OSError:
                pass  # Linux < 5.3: polled by waitid in wait_until's fallback instead (see _supervisor_watch)

    def _supervisor_watch(self) -> tuple[int, Callable[[], None]] | None:
        """What :func:`limits.wait_until` polls besides the sandbox: the
        supervisor's pidfd, and what to do when it ends."""
        if self._supervisor_fd < 0 or self.supervisor_lost is not None:
            return None
        return self._supervisor_fd, self._supervisor_ended

    def _supervisor_ended(self) -> None:
        """The supervisor ended while the sandbox runs. Exit status 0: it
        stopped by itself, as it does once no sandboxed task is left (the
        command's end, seen before bwrap's). Anything else, a signal above
        all, leaves the observing filter without a listener: the kernel
        answers ENOSYS to every notified call, so the command's writes,
        execs and connects fail from then on, unexplained. safebox then
        ends the run at once, says so, and exits 125 (issue 22, item 13)."""
        observer = self.observer
        if observer is None or observer.pid <= 0:
            return
        try:
            info = os.waitid(os.P_PID, observer.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG)
        except ChildProcessError:
            return
        if info is None or (info.si_code == os.CLD_EXITED and info.si_status == 0):
            return
        if info.si_code in (os.CLD_KILLED, os.CLD_DUMPED):
            name = _SIGNAL_NAMES.get(info.si_status, f"signal {info.si_status}")
            how = f"killed by {name}"
        else:
            how = f"exit status {info.si_status}"
        self.supervisor_lost = how
        self.say(f"the violations supervisor (safebox-helper --supervise, pid {observer.pid}) died ({how}): "
                 "stopping the sandbox, whose watched calls would fail with ENOSYS from now on; exit status "
                 f"{EXIT_SAFEBOX_FAILED}")
        self.kill_tree()

    def start(self) -> None:
        """Spawn; return once the command exists. Raises (after undoing
        everything) when start-up fails; the command then never ran."""
        try:
            self._start()
        except BaseException:
            self.close()
            raise

    def _start(self) -> None:
        handoff = self._handoff()
        status_r, status_w = self._pipe()
        if self.cgroup is not None:
            try:
                self.cgroup.create()
            except OSError as e:
                raise RunError(f"cannot set up the sandbox's cgroup {self.cgroup.name}: {e.strerror or e}",
                               hint="`safebox doctor` shows where safebox makes cgroups") from None
        self.started = time.monotonic()  # limits.wallTime counts from here
        if self.rp.layers is Layers.HELPER_ONLY:
            self._spawn_helper(status_w, handoff)
        else:
            self._spawn_bwrap(status_w, handoff)
        self._close_fd(status_w)
        from safebox.run.helper_binary import read_status_line, status_ok

        self.line = read_status_line(status_r)
        self._close_fd(status_r)
        if self.observer is not None:
            self.observer.status = self.line  # the feed reads the Landlock ABI from it
        self.relay.ready()
        if self.limits is not None and self.rp.layers is not Layers.HELPER_ONLY:
            self._tmp_watch = _limits.open_tmp_watch(self.relay.bwrap_child, self.rp.tmp_size)
        if self.line is None or not status_ok(self.line):
            self.wait()  # raises: the sandbox's start failed, and the reason is known once it exited

    def _spawn_helper(self, status_w: int, handoff: tuple[Any, Any] | None) -> None:
        rp = self.rp
        argv = [rp.helper_path, "--policy-file", rp.policy_path, "--status-fd", str(status_w)]
        fds: tuple[int, ...] = (status_w,)
        if handoff:
            argv += ["--handoff-fd", str(handoff[1].fileno())]
            fds += (handoff[1].fileno(),)
        argv += ["--", *self.command]
        self.relay.install()
        if self.cli:
            become_subreaper()
        path, argv = self.cgroup.wrap(rp.helper_path, argv) if self.cgroup else (rp.helper_path, argv)
        self.pid = spawn(path, argv, self.env, pass_fds=fds, cwd=rp.cwd, dup_to=self.stdio.dup_to)
        self.relay.spawned = self.pid
        self.relay.target_pgid = self.pid  # setpgroup=0: the helper (then the command) leads its group
        if self.cli:
            test_pause("command")  # a signal now is queued for the command
        self._start_observer()
        if handoff:
            handoff[1].close()
            if self.observer is not None:
                self.observer.forward(handoff[0])

    def _spawn_bwrap(self, status_w: int, handoff: tuple[Any, Any] | None) -> None:
        rp, bwrap = self.rp, self.bwrap
        assert bwrap is not None and self.split is not None
        bw_r, bw_w = self._pipe()
        mounts, bulk = self.split
        # bwrap reads its options from a descriptor: thousands of deny
        # entries never hit E2BIG, and the argv stays short in `ps`.
        args_fd = os.memfd_create("safebox-bwrap-args")
        self._fds.append(args_fd)
        handoff_fd = handoff[1].fileno() if handoff else None
        fds = (args_fd, bw_w) + ((handoff_fd,) if handoff_fd else ())
        # The sandbox's first program waits on this until the mounts are
        # made (run/mounter.py).
        sync = self._socketpair() if bulk.ops or rp.review_layers else None
        status_n, sync_fd = _low_numbers({*fds, status_w, *(fd for fd, _ in self.stdio.dup_to),
                                          *((sync[1].fileno(),) if sync else ())}, sync=sync is not None)
        dup_to = (*self.stdio.dup_to, (status_w, status_n), *(((sync[1].fileno(), sync_fd),) if sync else ()))
        opts, tail = _plan.bwrap_argv(mounts, rp, self.command, bwrap_status_fd=bw_w, status_fd=status_n,
                                      socat=self.socat, handoff_fd=handoff_fd, sync_fd=sync_fd)
        os.write(args_fd, b"\0".join(os.fsencode(a) for a in opts) + b"\0")
        os.lseek(args_fd, 0, os.SEEK_SET)
        argv = ["bwrap", "--args", str(args_fd), *tail]
        _plan.check_bwrap_limit(len(opts) + len(argv) - 1, mounts, moved=len(bulk.ops))
        self.relay.install()
        path, argv = self.cgroup.wrap(bwrap, argv) if self.cgroup else (bwrap, argv)
        if self.cli:
            test_pause("mounts")  # the host's sockets listed, none masked yet
        self.pid = spawn(path, argv, self.env, pass_fds=fds, dup_to=dup_to)
        self.relay.spawned = self.pid
        if self.cli:
            test_pause("command")  # a signal now is queued for the command
        if not bulk.ops:
            self._start_observer()  # while bwrap builds the sandbox (--review's overlays come after)
        self._close_fd(bw_w)
        self._close_fd(args_fd)
        # bw_r stays open until close(): bwrap writes its exit document on
        # it at the end, and would die of SIGPIPE (141) on a closed pipe.
        self.relay.bwrap_child = _read_bwrap_child(bw_r)
        if sync:
            sync[1].close()
            from safebox.run import mounter

            self._ns_held = mounter.after_bwrap(sync[0], self.relay.bwrap_child, bulk, rp, env=self.env,
                                                start_observer=self._start_observer)
        if handoff:
            self._adopt(handoff[0], handoff[1])

    def _socketpair(self) -> tuple[Any, Any]:
        import _socket  # `socket` imports enum and selectors (~4 ms): not for one pair

        pair = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_STREAM)
        self._ends += pair
        return pair[0], pair[1]

    def _adopt(self, ours: Any, theirs: Any) -> None:
        theirs.close()  # only bwrap's copies remain: end of file once they are gone
        adopted = 1
        if self.proxy is not None and self.rp.bridges:
            adopted = self.proxy.adopt(ours, ports={b.port: b.scheme for b in self.rp.bridges}, key=self)
        if self.forwarders and adopted:
            from safebox.run.publish import receive_pinned

            receive_pinned(ours, list(self.forwarders))
        if self.observer is not None and adopted:
            self.observer.forward(ours)

    # -- signals ---------------------------------------------------------------

    def send_signal(self, signum: int) -> None:
        """Deliver ``signum`` to the command (as safebox relays its own)."""
        if self.pid > 0:
            self.relay.handler(signum)

    def signal_all(self, signum: int) -> None:
        """``signum`` to every process of the sandbox but bwrap's init (whose
        death would SIGKILL them all): those in its pid namespace, or without
        bwrap those in the command's process group."""
        if self.pid <= 0:
            return
        child = self.relay.bwrap_child
        if not child:
            try:
                os.killpg(self.relay.target_pgid or self.pid, signum)
            except OSError:
                pass
            return
        try:
            ns = os.readlink(f"/proc/{child}/ns/pid")
        except OSError:
            return  # the sandbox is gone
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == child:
                continue
            try:
                if os.readlink(f"/proc/{name}/ns/pid") == ns:
                    os.kill(int(name), signum)
            except OSError:
                pass

    def kill_tree(self) -> None:
        """SIGKILL the whole sandbox: every process in it, at once."""
        if self.pid > 0:
            _limits.kill_sandbox(ns_init=self.relay.bwrap_child, pgid=self.relay.target_pgid, pid=self.pid,
                                 cgroup=self.cgroup)

    # -- wait ------------------------------------------------------------------

    def wait(self, timeout: float | None = None) -> int | None:
        """Wait for the command; its exit status, or None when ``timeout``
        (seconds) passed first. Raises when the sandbox never started."""
        if self.returncode is not None:
            return self.returncode
        wall = self.started + self.limits.wall_time if self.limits is not None and self.limits.wall_time else None
        until = time.monotonic() + timeout if timeout is not None else None
        timed_out = False
        watch = self._supervisor_watch()
        if wall is not None and (until is None or wall <= until):
            got, timed_out = _limits.stop_at_deadline(self.pid, wall, terminate=lambda: self.relay.handler(
                signal.SIGTERM), kill=self.kill_tree, watch=watch)
            wstatus = _wait(self.pid) if got is None else got
        elif until is not None:
            done, got = os.waitpid(self.pid, os.WNOHANG)  # ended already: poll() must see it
            got = got if done else _limits.wait_until(self.pid, until, watch=watch)
            if got is None:
                return None
            wstatus = got
        elif watch is not None:
            got = _limits.wait_until(self.pid, float("inf"), watch=watch)
            wstatus = _wait(self.pid) if got is None else got
        else:
            wstatus = _wait(self.pid)
        if self.rp.layers is Layers.HELPER_ONLY:
            if self.cli:
                reap_descendants(keep=self.observer.pid if self.observer is not None else -1)
            else:
                # No subreaper under the API: what is left of the command's
                # group goes with it (docs/api.md, "What the API leaves alone in the caller").
                # The pid is reaped: only its group (which outlives it while
                # members remain) is named, never the pid itself.
                try:
                    os.killpg(self.pid, signal.SIGKILL)
                except OSError:
                    pass
                if self.cgroup is not None:
                    self.cgroup.kill()
        self.pid = -1
        self.relay.spawned = None  # reaped: its pid may be anyone's now
        if self.cli:
            # Still caught, only recorded: a signal arriving while safebox
            # cleans up must not kill it half-way (run dir, proxy, quarantine).
            _signals.stop_forwarding()
        rc = EXIT_TIMEOUT if timed_out else exit_status(wstatus)
        if self.supervisor_lost is None and self._supervisor_watch() is not None:
            self._supervisor_ended()  # died as the command ended: the command's end may be ENOSYS's doing
        if self.supervisor_lost is not None:
            rc = EXIT_SAFEBOX_FAILED
        self._explain_limits(timed_out)
        self._check_status(rc, wstatus)
        self.returncode = rc
        return rc

    def _explain_limits(self, timed_out: bool) -> None:
        if self.limits is None:
            return
        for key, msg in _limits.explain(self.limits, timed_out=timed_out, cgroup=self.cgroup,
                                        full=_limits.full_tmp(self._tmp_watch)):
            self.say(msg)
            self.limits_hit.append(key)
        self._tmp_watch = []

    def _check_status(self, rc: int, wstatus: int) -> None:
        """Raise when the sandbox failed before the command ran; say what
        was not enforced (and, with -v, what was)."""
        from safebox.run.helper_binary import parse_status, status_ok

        rp, line = self.rp, self.line
        # A part that could not be enforced appears as `false` in the line;
        # only then (or with -v, or on failure) is the JSON parsed.
        if line is not None and (self.verbose or not status_ok(line) or self.want_status
                                 or (b":false" in line and rp.layers is not Layers.BWRAP_ONLY)):
            self.status = parse_status(line)
            if not self.status.ok:
                raise HelperError(f"helper refused: {self.status.error}")
            missing = self.status.unenforced() if rp.layers is not Layers.BWRAP_ONLY else []
            if missing:
                self.say("not enforced on this host: " + "; ".join(missing) + " (--strict refuses to run so)")
        if line is None and self.cli and os.WIFSIGNALED(wstatus) and os.WTERMSIG(wstatus) in _signals.TERMINATING \
                and _signals.received(os.WTERMSIG(wstatus)):
            # posix_spawn moves the child into a group of its own only after
            # clone: for that instant it is in safebox's group, and the
            # group's signal, pending in it, kills it just before it execs
            # bwrap (or the helper). The command never existed: the start-up
            # ended by that signal, not by a failing bwrap.
            raise _signals.StartInterrupted(os.WTERMSIG(wstatus))
        if line is None and rp.layers is not Layers.HELPER_ONLY:
            raise RunError(f"bubblewrap could not create the sandbox (exit {rc}; its message is above)",
                           hint="run `safebox doctor`; on hosts without user namespaces use --without bwrap")
        if line is None:
            raise HelperError(f"the helper exited before reporting (exit {rc}; its message is above)")
        if self.verbose:
            summary = self.status.summary() if self.status else "helper not used"
            if self.status and self.status.seccomp and self.filter_id:
                summary += f" (filter {self.filter_id})"  # names the program in the cache and in docs/seccomp.md
            self.say(f"layers: {rp.layers.value}; {summary}")

    # -- close -----------------------------------------------------------------

    def close(self) -> None:
        """Kill what is left of the sandbox and release everything (idempotent)."""
        if self.pid > 0:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            _wait(self.pid)
            self.pid = -1
        for fd in self._fds:
            try:
                os.close(fd)
            except OSError:
                pass
        self._fds = []
        for end in self._ends:
            end.close()
        self._ends = []
        for _, fd in self._tmp_watch:
            os.close(fd)
        self._tmp_watch = []
        if self.proxy is not None and not self.cli:
            self.proxy.release(self)  # the sandbox's proxy outlives this command; its listeners go with it
        if self.cgroup is not None:
            self.cgroup.remove()
        if self._ns_held >= 0:
            # Only now, with every process of the sandbox gone: the holder's
            # exit takes the mounts down, after safebox has returned.
            os.close(self._ns_held)
            self._ns_held = -1
        if self.cli:
            # Still caught, only recorded: a signal arriving while safebox
            # cleans up must not kill it half-way (run dir, proxy, quarantine).
            _signals.stop_forwarding()

    def take_namespace_hold(self) -> int:
        """The descriptor whose closing lets the sandbox's mount namespace go
        (mounter.start), now the caller's to close, or -1. For a caller that
        removes a directory bound into the sandbox after :meth:`close`:
        while the namespace is being taken down, that rmdir(2) waits for
        it (the kernel detaches the directory's mounts in every namespace,
        under the lock the teardown holds); while it is held, it does not."""
        fd, self._ns_held = self._ns_held, -1
        return fd


__all__ = ["Launch", "Relay", "Stdio", "checkpoint", "exit_status", "spawn", "test_pause"]
