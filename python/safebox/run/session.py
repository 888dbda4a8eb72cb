"""The run path: a sandbox (:class:`Session`) and each command run in it
(:class:`~safebox.run.command.Command`, run/command.py). ``safebox exec``
is one session with one command; :class:`safebox.Sandbox` is one session
with as many commands as the caller runs. docs/layers.md ("The run path")
quotes both sequences.

What a session decides once: the policy (loaded and merged), the layers,
the limits plan, the tools (found outside the write roots), the helper's
checks, the run dir, the proxy, the seccomp programs. What each command
decides again: everything that looks at the work tree (run/command.py).
"""

from __future__ import annotations

import os

from safebox._record import Frozen, path_outside
from safebox.builder import walkcache
from safebox.builder.resolved import Layers, NetKind
from safebox.errors import BuildError, HelperError
from safebox.policy.defaults import credential_env
from safebox.policy.load import Context, state_dir, user_config_dir
from safebox.run import host as _host
from safebox.run import limits as _limits
from safebox.run import plan as _plan
from safebox.run.command import Command
from safebox.run.rundir import RunDir, private_dir, sweep_stale
from safebox.run.supervise import checkpoint

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Mapping
    from typing import Any

    from safebox.policy.effective import EffectivePolicy
    from safebox.proxy.deferred import DeferredProxy
    from safebox.run.netsetup import NetPlan
    from safebox.runtime.decisions import Runtime

class Options(Frozen):
    """How a session runs; everything but the policy and the command."""

    strict: bool = False
    without: _plan.Without | None = None
    dry_run: bool = False
    audit_log: str | None = None
    verbose: bool = False
    publish: tuple[str, ...] = ()  # ports as given on the command line
    quiet: bool = False  # no refused-host lines, no hints
    #: The proxy may print its refused-host lines on the process's stderr
    #: (``safebox exec``). The API's ``quiet=True`` turns it off: refusals
    #: then reach the harness as events only.
    proxy_stderr: bool = True
    learn: str | None = None  # --learn OUT: any public host; the suggested policy goes to OUT
    summary: str | None = None  # --summary FILE: append this run's Markdown report
    observe: str | None = None  # --observe: off, calls, writes, all; None: calls, or all with --audit-log
    policy_files: tuple[str, ...] = ()  # protected like the user's policy files (read-only inside)
    #: ``--learn``: the policy the run ran under, as one policy document
    #: (called when the learned policy is written), and the command line
    #: that enforces the file written (printed then).
    learn_base: Callable[[], dict[str, Any]] | None = None
    enforce_argv: tuple[str, ...] = ()
    #: ``safebox exec``: take over the process's signals, mark its
    #: descriptors, become the child subreaper, reap every child. False
    #: (the API): touch nothing process-wide.
    cli: bool = True
    #: --review: the command's writes held in a layer (safebox.review).
    review: bool = False
    #: The caller's import path may hold a write root (a harness started
    #: from its own repo); see docs/api.md for what that costs.
    allow_import_roots: bool = False
    #: Runtime decisions (runtime/decisions.py): live lists, on_request, --ask, --control-fd.
    runtime: Runtime | None = None


class Programs(Frozen):
    """A session's seccomp programs (step 8): the helper's, named by its
    filter id, and the observing one (empty: none), for ``observe`` mode
    (off, calls, writes, all)."""

    observe: str
    bpf: bytes = b""
    filter_id: str = ""
    observe_bpf: bytes = b""


class Session:
    """One sandbox: a policy, its layers, its run dir and proxy. Close it (or
    use it as a context manager) to stop the proxy and remove the run dir."""

    def __init__(self, load: Callable[[Context, str], EffectivePolicy], *, opts: Options,
                 say: Callable[[str], None], cwd: str | None = None, environ: Mapping[str, str] | None = None,
                 network_event: Callable[[tuple[Any, ...], object], None] | None = None) -> None:
        self.opts, self.say = opts, say
        self.environ: Mapping[str, str] = environ if environ is not None else os.environ
        self.run_dir: RunDir | None = None
        self.proxy: DeferredProxy | None = None
        self.network_event = network_event
        #: The proxy's refusals (host, port, protocol, decision), for the feed.
        self.feed_network: list[tuple[Any, ...]] = []
        try:
            self._open(load, cwd)
        except BaseException:
            self.close()
            raise

    def _open(self, load: Callable[[Context, str], EffectivePolicy], cwd: str | None) -> None:
        # 1. Where: the work dir, home, the private state dir.
        self.cwd = os.path.realpath(cwd if cwd is not None else os.getcwd())
        self.home = _host.home(self.environ)
        self.ctx = Context(cwd=self.cwd, home=self.home, credential_env=credential_env(self.environ))
        self.state = state_dir(self.home)
        self.cache_dir = os.path.join(self.state, "cache")
        private_dir(self.state)
        walkcache.bind(self.state)  # the start walks are kept here, read-only to the command
        # 2. Settle and remove the run dirs of runs whose safebox died
        # (SIGKILL), before anything looks at the tree: protected files their
        # commands planted are quarantined now, and a walk started earlier
        # (the cli's prescan) saw them, so it is dropped (`settled`).
        notes = sweep_stale(os.path.join(self.state, "run"))
        for note in notes:
            self.say(note)
        self.settled = bool(notes)
        # safebox's own config dir is created (0700, empty) so that it exists
        # to be masked: a missing one under a write root could otherwise be
        # created by the command, planting the user policy of the next run.
        private_dir(user_config_dir(self.home))
        # 3. The policy (cached for the CLI; pydantic only on a miss).
        self.policy = load(self.ctx, self.cache_dir)
        self.warnings = _host.check_write_roots(self.policy, cwd=self.cwd, home=self.home)
        self.strict = self.policy.strict or self.opts.strict
        self.ports = _plan.publish_ports(self.opts.publish, self.policy)
        # 4. Tools found outside the write roots; the layers. bwrap, socat,
        # ripgrep and find run on the host: never from a PATH entry the
        # sandboxed command can write (found in review: a planted .venv/bin/rg).
        self.tools = path_outside([self.cwd, *self.policy.allow_write])
        self.bwrap = _host.tool("bwrap", self.tools)
        self.layers, layer_notes = _plan.decide_layers(self.opts.without, bwrap=self.bwrap)
        if self.strict and self.layers is not Layers.BOTH:
            raise BuildError(f"--strict: refusing to run with {self.layers.value} (every layer must be enforced)",
                             hint="run `safebox doctor` to see why bubblewrap cannot run here")
        for n in layer_notes:
            self.say(n)
        self._check_control_fd()
        # 5. The limits plan.
        self.limits = _limits.for_run(self.policy, bwrap=self.bwrap if self.layers is not Layers.HELPER_ONLY else None,
                                      helper=self.layers is not Layers.BWRAP_ONLY, strict=self.strict,
                                      cache_dir=self.cache_dir)
        for w in self.limits.warnings:
            self.say(w)
        if self.opts.verbose:
            self.say(self.limits.summary())
        # 6. The helper's checks.
        self._check_helper()
        self.socat = _host.tool("socat", self.tools)
        # 7. The run dir, the network plan, the proxy (one per session): the
        # plan for srt's network and credential keys is run/netsetup.py's.
        if not self.opts.dry_run:
            self.run_dir = RunDir(os.path.join(self.state, "run"), say=self.say)
        self.run_path = self.run_dir.path if self.run_dir else os.path.join(self.state, "run", "DRY-RUN")
        self.netplan = self._network_plan()
        if self.netplan is not None and self.netplan.deny_read:
            self.policy = self.policy.replace(deny_read=(*self.policy.deny_read, *self.netplan.deny_read))
        self._start_network()
        # 8. The seccomp programs (builder/bpf_cache.py, the one cache).
        self.seccomp = self._seccomp()

    def _check_control_fd(self) -> None:
        """--control-fd: refused where the command could write it by a path (runtime/control_fd.py)."""
        if self.opts.runtime is not None and self.opts.runtime.control_fd is not None:
            from safebox.runtime.control_fd import check_unreachable

            check_unreachable(self.opts.runtime.control_fd, roots=(self.cwd, *self.policy.allow_write),
                              landlock=self.layers is not Layers.BWRAP_ONLY,
                              private_tmp=self.layers is not Layers.HELPER_ONLY)

    def _check_helper(self) -> None:
        from safebox.run.helper_binary import check_helper, find_helper, replaceable

        self.helper = find_helper()
        if self.layers is Layers.BWRAP_ONLY:
            return
        check_helper(self.helper)
        # What `safebox doctor` fails on (a user's own venv): refused with
        # --strict, said once on every other run, never silent.
        exposed = replaceable(self.helper)
        if exposed and self.strict:
            raise HelperError(f"--strict: refusing a helper that a process other than root could replace: {exposed}",
                              hint="install safebox as root, system-wide (`safebox doctor` shows the fix)")
        if exposed:
            self.say(f"warning: a process other than root could replace the helper ({exposed}); "
                     "`safebox doctor` fails on this and --strict refuses to run")

    def _network_plan(self) -> NetPlan | None:
        """The network's kind; srt's network and credential keys' plan (None: none needed)."""
        if self.policy.strict_allowlist:
            from safebox.policy.srtnet import check_strict

            check_strict(learn=bool(self.opts.learn), ask=self.opts.cli and self.opts.runtime is not None
                         and self.opts.runtime.callback is not None)
        live = self.opts.runtime is not None and self.opts.runtime.networked
        self.net = (NetKind.PROXY if self.policy.allowed_domains or self.policy.allowed_addresses or self.opts.learn or live
                    else NetKind.NONE)
        self.run_id = os.urandom(8).hex()
        if not self.policy.needs_netplan(self.environ):  # srt's parentProxy, tlsTerminate, credentials
            return None
        from safebox.run.netsetup import prepare

        netplan = prepare(self.policy, environ=self.environ, networked=self.net is NetKind.PROXY,
                          run_dir=None if self.opts.dry_run else self.run_path,
                          can_bind=self.layers is not Layers.HELPER_ONLY)
        for note in (*netplan.warnings, *(netplan.notes if self.opts.verbose else ())):
            self.say(note)
        return netplan

    def _start_network(self) -> None:
        """The proxy (dry run: its socket names only), the bridges into the sandbox."""
        self.bridges: tuple[Any, ...] = ()
        self.connect_ports: tuple[int, ...] = ()
        if self.opts.cli:
            checkpoint("proxy")
        if self.net is not NetKind.PROXY:
            return
        if self.layers is Layers.BWRAP_ONLY and self.socat is None:
            raise BuildError("socat not found; without the helper it bridges the proxy into the sandbox",
                             hint="install socat (apt-get install socat)")
        if self.opts.dry_run:
            socks = (os.path.join(self.run_path, "http.sock"), os.path.join(self.run_path, "socks.sock"))
        else:
            proxy = self.proxy = self._start_proxy()
            socks = (str(proxy.http_socket), str(proxy.socks_socket))
        tcp = (self.proxy.http_port or 0, self.proxy.socks_port or 0) if self.proxy else (0, 0)
        self.bridges, self.connect_ports = _plan.bridges(self.layers, http_sock=socks[0], socks_sock=socks[1],
                                                         tcp_ports=tcp)
        if self.layers is Layers.HELPER_ONLY and self.connect_ports:
            # Stated on every such run, not only with -v: it is a hole the
            # user must know of (docs/threat-model.md).
            self.say(f"without bubblewrap the command shares the host's network: Landlock limits its TCP "
                     f"connections to ports {' and '.join(map(str, self.connect_ports))}, but on any address "
                     "(Landlock port rules carry no address); use bwrap, or --strict to refuse")

    def _denied(self, *refusal: Any) -> None:
        self.feed_network.append(refusal)
        if self.network_event is not None:
            # Called in the proxy's thread, inside the refused connection's
            # task: the owner is the command whose listeners it came through.
            self.network_event(refusal, self.proxy.current_owner() if self.proxy is not None else None)

    def _start_proxy(self) -> DeferredProxy:
        from safebox.proxy.config import ProxyConfig
        from safebox.proxy.deferred import DeferredProxy

        netplan = self.netplan
        live, ask = self.opts.runtime.attach(
            self.policy.allowed_domains, self.policy.denied_domains, learn=bool(self.opts.learn),
            allow_local_destinations=self.policy.allow_local_destinations) if self.opts.runtime else (None, None)
        # Listeners now, the proxy itself at the first client (proxy/deferred.py).
        proxy = DeferredProxy(ProxyConfig(
            allowed_domains=self.policy.allowed_domains, denied_domains=self.policy.denied_domains,
            allow_local_destinations=self.policy.allow_local_destinations,
            allowed_addresses=self.policy.allowed_addresses,
            audit_log=self.opts.audit_log or None, explain=not self.opts.quiet and self.opts.proxy_stderr,
            learn=bool(self.opts.learn),
            run_id=self.run_id if self._wants_records() else None,
            parent=netplan.parent if netplan else None,
            mitm=netplan.mitm if netplan else None, injector=netplan.injector if netplan else None,
            denied=self._denied, say=None if self.opts.cli else self.say, live=live, ask=ask,
            keys=self.policy.net_keys()),
            run_dir=self.run_path, tcp=self.layers is Layers.HELPER_ONLY, capture=self._capture(),
            # Unix sockets only for the socat bridges of --without helper;
            # with the helper, the proxy serves on the listeners it hands over.
            unix=self.layers is Layers.BWRAP_ONLY)
        proxy.start()
        return proxy

    def _capture(self) -> bool:
        from safebox.run.netcapture import wants_capture  # docs/network.md, "Capture"

        return wants_capture(both_layers=self.layers is Layers.BOTH, dry_run=self.opts.dry_run, observe=_plan.observe_mode(
            self.opts.observe, layers=self.layers, dry_run=self.opts.dry_run, audit_log=bool(self.opts.audit_log)))

    def _wants_records(self) -> bool:
        return bool(self.opts.audit_log or self.summary or self.opts.learn) and not self.opts.dry_run

    @property
    def summary(self) -> str | None:
        """``--summary`` or ``$GITHUB_STEP_SUMMARY``: where the Markdown report goes."""
        return self.opts.summary or self.environ.get("GITHUB_STEP_SUMMARY") or None

    def _seccomp(self) -> Programs:
        from safebox.builder import bpf_cache

        mode = _plan.observe_mode(self.opts.observe, layers=self.layers, dry_run=self.opts.dry_run,
                                  audit_log=bool(self.opts.audit_log))
        if self.layers is Layers.BWRAP_ONLY:
            return Programs(observe=mode)
        listed = bool(self.policy.allow_unix_sockets or self.policy.allow_all_unix_sockets)
        # A GPU alone turns on SOCK_SEQPACKET only: CUDA's UVM socket (docs/gpu.md, "Unix sockets").
        seq = bool(self.policy.devices_gpu) and not listed
        unix = listed or seq
        inet = _plan.seccomp_inet(self.layers, self.net)
        bpf, filter_id = bpf_cache.load(cache_dir=self.cache_dir, allow_unix_sockets=unix, inet=inet,
                                        unix_seqpacket_only=seq)
        observing = b""
        if mode != "off":
            observing, _ = bpf_cache.load(cache_dir=self.cache_dir, allow_unix_sockets=unix, inet=inet,
                                          observe=mode, unix_seqpacket_only=seq)
        return Programs(observe=mode, bpf=bpf, filter_id=filter_id, observe_bpf=observing)

    def command(self, argv: tuple[str, ...], *, env: Mapping[str, str] | None = None, cwd: str | None = None,
                prescan: dict[tuple[str, int], Any] | None = None) -> Command:
        """Prepare ``argv`` to run in this sandbox (nothing runs yet)."""
        return Command(self, argv, environ=env if env is not None else self.environ, cwd=cwd,
                       prescan=None if self.settled else prescan)

    def close(self) -> None:
        """Stop the proxy and remove the run dir (idempotent)."""
        if self.proxy is not None:
            self.proxy.stop()
        if self.run_dir is not None:
            self.run_dir.remove()
            self.run_dir = None

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["Command", "Options", "Programs", "Session"]
