"""One command run in a sandbox (:class:`Command`), in a
:class:`~safebox.run.session.Session`: what it decides again for every
command, since a command run before it may have changed the tree (planted
links, the write roots' scan, the resolve with its lstat/realpath, the
protected-name watch, its environment, its run records), its start, and
its finish (explain refusals, quarantine, records). docs/layers.md ("The
run path") quotes the sequence.
"""

from __future__ import annotations

import os
import time

from safebox._record import Frozen, rmtree
from safebox.builder.resolved import Layers, ResolvedPolicy
from safebox.errors import BuildError, PolicyError
from safebox.policy.load import user_config_dir
from safebox.run import host as _host
from safebox.run import plan as _plan
from safebox.run.decision import Choices, Decision, EnvInputs, decide, environment, gpu_selection
from safebox.run.protect import settle, write_watch
from safebox.run.rundir import make_run_tmp
from safebox.run.supervise import Launch, Stdio, checkpoint

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from safebox.builder.caches import CachePlan
    from safebox.builder.resolve import HostFacts
    from safebox.builder.walks import Scan
    from safebox.policy.effective import EffectivePolicy
    from safebox.review.store import Held
    from safebox.run.publish import PublishForwarder
    from safebox.run.session import Session
    from safebox.violations.observer import Observer


#: Namespace holds `safebox exec` closes by exiting (Command.cleanup).
_HELD_UNTIL_EXIT: list[int] = []


class Prepared(Frozen):
    """Steps 1 and 2's value: the policy this command runs under (the
    session's, with the CI files' and the helper-only TMPDIR's entries) and
    the state dir's memory of earlier runs' write roots (builder/memory.py)."""

    policy: EffectivePolicy
    earlier_roots: dict[str, float]


class Facts(Frozen):
    """Step 4's value, what the host showed: the resolved policy (every mount
    and rule, host paths looked up: lstat, realpath, the walks, the memory
    files, the GPU nodes), the presets' caches, and this run's own files
    (--policy, --audit-log, --summary, expanded)."""

    rp: ResolvedPolicy
    caches: CachePlan | None
    given: tuple[str, ...]


class Command:
    """One command in a :class:`Session`: prepared by :meth:`prepare`,
    started by :meth:`start`, ended by :meth:`finish` (which always cleans up).

    Each step of :meth:`_prepare` returns a value the next takes
    (:class:`Prepared`, :class:`Facts`, then the resolved policy and the
    :class:`~safebox.run.decision.Decision` the launch takes); the
    attributes are what the command must release (:meth:`cleanup`) and the
    decision its start and finish read."""

    def __init__(self, session: Session, argv: tuple[str, ...], *, environ: Mapping[str, str], cwd: str | None,
                 prescan: dict[tuple[str, int], Any] | None) -> None:
        self.s, self.argv, self.environ, self.cwd, self.prescan = session, argv, environ, cwd, prescan
        # What the command holds, released by cleanup().
        self.recorder: Any = None
        self.ci_run: Any = None
        self.run_tmp: str | None = None
        self.scan: Scan | None = None
        self.dir: str | None = None
        self.forwarders: list[PublishForwarder] = []
        self.observers: list[Observer] = []
        self.launch: Launch | None = None
        self.held: Held | None = None  # --review: the held run (review/run.py)
        # The values its steps returned, for start() and finish().
        self.prepared: Prepared | None = None
        self.facts: Facts | None = None
        self.decision: Decision | None = None
        self.network_from = 0

    @property
    def rp(self) -> ResolvedPolicy | None:
        """The resolved policy, once decided."""
        return self.decision.rp if self.decision is not None else None

    # -- 1. prepare -----------------------------------------------------------

    def prepare(self) -> str | None:
        """Look at the tree and build everything; returns the ``--dry-run``
        text for a dry run, else None. Raises (after cleaning up) on error."""
        try:
            return self._prepare()
        except BaseException:
            self.cleanup()
            raise

    def _prepare(self) -> str | None:
        s = self.s
        # 1. The write roots: no planted links, missing ones created or refused.
        earlier = self._check_roots()
        # 2. Run records, CI files, the helper-only TMPDIR.
        p = self.prepared = Prepared(policy=self._records_and_ci(earlier), earlier_roots=earlier)
        # 3. The scan of the write roots (adopting the CLI's prescan): ripgrep
        # starts now and searches them while the rest is prepared.
        from safebox.builder.walks import Scan

        self.scan = Scan(p.policy, layers=s.layers, rg_path=_host.tool("rg", s.tools), prestarted=self.prescan)
        self.dir = s.run_dir.command_dir() if s.run_dir is not None else s.run_path
        if s.opts.cli:
            checkpoint("bwrap")
        # 4. Observe: resolve every mount and rule, host paths looked up
        # (lstat, realpath, the walks, the memory files), as one Facts.
        facts = self.facts = self._observe(p.policy)
        # 5. Before the start: what the run leaves on the host (the write
        # roots remembered, the publish sockets, CI files, the watch list,
        # --review's layers), as the resolved policy the decision takes.
        rp = self._before_start(facts, p)
        # 6. Decide: the helper policy, the seccomp files, the environment,
        # the mounts split between bubblewrap and the mounter.
        d = self.decision = self._decide(rp, p.policy, facts)
        if s.opts.dry_run:
            return self._dry_run(d)
        self._write_files(d)
        return None

    def _check_roots(self) -> dict[str, float]:
        """The write roots checked; returns the memory of earlier runs' roots."""
        from safebox.builder.memory import WRITE_ROOTS, read_write_roots
        from safebox.builder.planted import refuse_planted_links

        s = self.s
        policy = s.policy
        earlier = read_write_roots(os.path.join(s.state, WRITE_ROOTS))
        refuse_planted_links(policy, layers=s.layers, cwd=s.cwd, pwd=self.environ.get("PWD"), earlier=earlier)
        # A missing write root the user asked for is created or refused, never
        # skipped (builder/write_roots.py); after the symlink check, so that no
        # directory is created through a link a sandbox planted.
        missing_roots = [w for w in policy.allow_write if not os.path.lexists(w)]
        if missing_roots:
            from safebox.builder.write_roots import create_missing

            for n in create_missing(tuple(missing_roots),
                                    skip=("/tmp",) if s.layers is not Layers.HELPER_ONLY else (),
                                    never_under=(s.state, user_config_dir(s.home)), deny_read=policy.deny_read,
                                    allow_read=policy.allow_read, dry_run=s.opts.dry_run):
                if not s.opts.quiet:
                    s.say(n)
        return earlier

    def _records_and_ci(self, earlier: dict[str, float]) -> EffectivePolicy:
        """The run records and CI files opened; returns the command's policy."""
        s = self.s
        policy = s.policy
        # Run records (report.py) only when a log, a summary or --learn wants
        # them: the common run pays for one environment lookup.
        if s._wants_records():
            from safebox.hostio import refuse_planted_links
            from safebox.report import Recorder

            # The files safebox writes from the host, named by the user: no
            # directory on the way may be a link a sandboxed run could have made.
            roots = (*policy.allow_write, *earlier, s.cwd)
            for flag, f in (("--audit-log", s.opts.audit_log), ("--summary", s.summary), ("--learn", s.opts.learn)):
                if f:
                    refuse_planted_links(os.path.abspath(f), roots, what=flag)

            self.recorder = Recorder(audit_log=s.opts.audit_log, summary=s.summary, learn=s.opts.learn, run=s.run_id,
                                     learn_base=s.opts.learn_base, enforce_argv=s.opts.enforce_argv)
        if self.environ.get("GITHUB_ACTIONS") == "true" or self.environ.get("GITLAB_CI") == "true":
            from safebox import ci_job as ci

            kind = ci.detect(self.environ)
            if kind is not None:
                self.ci_run = ci.prepare(self.environ, kind=kind, cwd=s.cwd, home=s.home,
                                         bwrap=s.layers is not Layers.HELPER_ONLY, dry_run=s.opts.dry_run)
                deny = tuple(p for p in self.ci_run.deny_read if p not in policy.allow_read)
                policy = policy.replace(deny_read=(*policy.deny_read, *deny),
                                        deny_write=(*policy.deny_write, *self.ci_run.deny_write),
                                        allow_write=(*policy.allow_write, *self.ci_run.allow_write))
        if s.layers is Layers.HELPER_ONLY and not s.opts.dry_run:
            # No private /tmp without bwrap. The command gets its own TMPDIR, a
            # write root of its own: /tmp itself may refuse new entries when it
            # lies on the way to safebox's installation (see landlock_rules).
            self.run_tmp = make_run_tmp(self.environ.get("TMPDIR") or "/tmp")
            policy = policy.replace(allow_write=(*policy.allow_write, self.run_tmp))
        return policy

    def _host_facts(self, given: tuple[str, ...]) -> HostFacts:
        from safebox.builder.resolve import HostFacts
        from safebox.builder.selfprotect import import_paths, self_paths

        s = self.s
        assert self.dir is not None
        return HostFacts(helper_path=s.helper, self_paths=(*self_paths(), s.helper), run_files=given,
                         import_paths=import_paths(), allow_import_roots=s.opts.allow_import_roots,
                         path_dirs=tuple(self.environ.get("PATH", "").split(":")),
                         state_dir=s.state, run_dir=s.run_path,
                         policy_path=os.path.join(self.dir, "policy"), rg_path=_host.tool("rg", s.tools))

    def _observe(self, policy: EffectivePolicy) -> Facts:
        from safebox.builder.resolve import resolve
        from safebox.policy.load import expand_path

        s = self.s
        assert self.scan is not None
        caches = None
        if policy.cache_presets:
            # Presets named, or whose registry is allowed anyway: their tools'
            # caches go to sandbox-private dirs of this work dir's own
            # (builder/caches.py): another project's runs never read them.
            from safebox.builder.caches import prepare

            caches = prepare(policy.cache_presets, state=s.state, home=s.home, work_dir=s.cwd,
                             create=not s.opts.dry_run)
        # The --policy file is this run's input like the user and project
        # files (those are protected by name): read-only inside. So are the
        # --audit-log and --summary files: the command must not forge the
        # record of its own run (the proxy and safebox append from the host).
        given = tuple(expand_path(f, s.ctx) for f in (*s.opts.policy_files, s.opts.audit_log, s.summary) if f)
        rp = resolve(policy, layers=s.layers, cwd=s.cwd, home=s.home, host=self._host_facts(given),
                     bridges=s.bridges, scan=self.scan,
                     **({"cache_dirs": caches.dirs, "cache_host_paths": caches.host_paths} if caches else {}))
        if self.cwd is not None:
            rp = rp.replace(cwd=os.path.realpath(self.cwd))
        if policy.devices_gpu:
            from safebox.builder.devices import find_gpu_nodes, with_gpu

            rp = with_gpu(rp, find_gpu_nodes(gpu_selection(policy), environ=dict(self.environ)))
        if s.netplan is not None and s.netplan.masked_files:
            rp = rp.replace(masked_files=s.netplan.masked_files)  # credentials.files, mode "mask"
        if s.proxy is not None and s.proxy.capture_port:
            from safebox.run.netcapture import resolv_conf  # the sandbox's DNS (docs/network.md, "DNS")

            rp = rp.replace(masked_files=(*rp.masked_files, resolv_conf(s.run_path)))
        return Facts(rp=rp, caches=caches, given=given)

    def _before_start(self, facts: Facts, p: Prepared) -> ResolvedPolicy:
        from safebox.builder.memory import WRITE_ROOTS, remember_write_roots

        s, rp = self.s, facts.rp
        if not s.opts.dry_run:
            # Remembered before the command exists: a link it plants in one
            # of these is refused by later runs (refuse_planted_links).
            remember_write_roots(os.path.join(s.state, WRITE_ROOTS), p.earlier_roots,
                                 tuple(r for r in rp.write_roots if r != self.run_tmp), time.time())
        rp = self._publish(rp)
        for w in s.warnings:
            s.say(w)  # now that the sandbox is built: a refusal stays one line
        if self.ci_run is not None:
            assert self.dir is not None
            rp = rp.replace(overlays=self.ci_run.materialize(self.dir, dry_run=s.opts.dry_run))
            if s.opts.verbose:
                for n in self.ci_run.notes:
                    s.say(n)
        for w in rp.warnings:
            s.say(w)
        if s.opts.verbose or not s.opts.cli:  # the API: every note is a `message` event
            for n in rp.notes:
                s.say(n)
        rp = rp.replace(tmp_size=s.limits.tmp_size)
        if s.run_dir is not None and self.dir is not None:
            write_watch(self.dir, rp)
        if s.opts.review:
            from safebox.review.run import attach

            rp, self.held = attach(rp, bwrap=s.bwrap, state=s.state, command_dir=self.dir or s.run_path,
                                   command=self.argv, cwd=s.cwd, dry_run=s.opts.dry_run, audit_log=s.opts.audit_log,
                                   all_unix_sockets=s.policy.allow_all_unix_sockets)
        return rp

    def _publish(self, rp: ResolvedPolicy) -> ResolvedPolicy:
        s = self.s
        if s.ports and s.layers is Layers.BWRAP_ONLY:
            # The host relay connects only through a socket the helper pinned
            # before the command existed (run/publish.py); without the helper
            # nothing can pin it, and the name alone can be redirected.
            raise PolicyError("--publish needs the helper: it cannot be used with --without helper")
        if not s.ports or s.layers is Layers.HELPER_ONLY:
            # Without bwrap the command shares the host's network: its port
            # is reachable as it is, and --publish has nothing to do.
            return rp
        if s.socat is None:
            raise BuildError("socat not found; --publish needs it", hint="install socat")
        assert self.dir is not None
        pub_dir = os.path.join(self.dir, "pub")
        if not s.opts.dry_run:
            os.mkdir(pub_dir, 0o700)
            from safebox.run.publish import PublishForwarder

            for port in s.ports:
                self.forwarders.append(PublishForwarder(port, os.path.join(pub_dir, f"{port}.sock")))
        return rp.replace(publish=tuple((p, os.path.join(pub_dir, f"{p}.sock")) for p in s.ports),
                          publish_dir=pub_dir)

    def _decide(self, rp: ResolvedPolicy, policy: EffectivePolicy, facts: Facts) -> Decision:
        s = self.s
        assert self.dir is not None
        abi_max = self.environ.get("SAFEBOX_TEST_ABI_MAX")  # test-only: prove the down-level paths
        choices = Choices(layers=s.layers, strict=s.strict, connect_ports=s.connect_ports, socat=s.socat,
                          limits=s.limits, observe=bool(s.seccomp.observe_bpf),
                          abi_max=int(abi_max) if abi_max else None)
        made_of = EnvInputs(environ=self.environ, run_tmp=self.run_tmp, caches=facts.caches,
                            netplan=(tuple(s.netplan.env_unset), tuple(s.netplan.env_set)) if s.netplan else None,
                            ci_env=self.ci_run.env if self.ci_run is not None else None)
        env, removed = environment(rp, policy, layers=s.layers, made_of=made_of)
        if s.opts.verbose and removed:
            s.say(f"removed from the environment: {', '.join(removed)}")
        # The one host read left: the mount table and the tools, for a big policy's split.
        split = _host.bulk_plan(rp, s.bwrap) if s.bwrap and s.layers is not Layers.HELPER_ONLY else None
        return decide(rp, policy, choices=choices, command_dir=self.dir, env=env, split=split)

    def _dry_run(self, d: Decision) -> str:
        s, rp = self.s, d.rp
        mounts, bulk = d.split if d.split is not None else (rp, None)
        return _plan.dry_run_text(rp, self.argv, d.helper_policy, s.seccomp.filter_id,
                                  socat=s.socat or "socat", limits=s.limits, mounts=mounts, bulk=bulk)

    def _write_files(self, d: Decision) -> None:
        from safebox.builder.helper_policy import write_policy_file

        s = self.s
        if d.seccomp_path:
            write_policy_file(d.seccomp_path, s.seccomp.bpf)
        if d.observe_path:
            write_policy_file(d.observe_path, s.seccomp.observe_bpf)
        write_policy_file(d.rp.policy_path, d.helper_policy)

    def _make_observer(self) -> Observer:
        # Called by the launch once bwrap (or the helper) is starting: these
        # imports, the table and the supervisor's start overlap the
        # sandbox's set-up instead of preceding it.
        from safebox.violations.observer import Observer
        from safebox.violations.table import build as build_table

        assert self.rp is not None and self.dir is not None
        obs = Observer(helper=self.s.helper, run_dir=self.dir,
                       capture_port=self.s.proxy.capture_port if self.s.proxy is not None else None,
                       capture_keys=self.s.proxy.capture_keys if self.s.proxy is not None else None,
                       table=build_table(self.rp, reads=self.s.seccomp.observe == "all",
                                         ports=self.s.connect_ports))
        self.observers.append(obs)
        return obs

    # -- 2. start ---------------------------------------------------------------

    def start(self, *, stdio: Stdio | None = None) -> Launch:
        """Spawn the sandbox; returns once the command exists."""
        s, d, p = self.s, self.decision, self.prepared
        assert d is not None and p is not None
        rp = d.rp
        if self.recorder is not None:
            self.recorder.start(command=list(self.argv), layers=s.layers.value, cwd=s.cwd,
                                mode="learn" if s.opts.learn else "enforce",
                                policy=s.opts.policy_files[-1] if s.opts.policy_files else None,
                                policies=list(s.opts.policy_files),
                                presets=list(p.policy.presets), ci=self.ci_run.kind if self.ci_run else None,
                                observe=s.seccomp.observe)
        self.network_from = len(s.feed_network)
        self.launch = Launch(rp, self.argv, d.env, split=d.split, bwrap=s.bwrap, socat=s.socat or "socat",
                             cli=s.opts.cli, say=s.say, verbose=s.opts.verbose, proxy=s.proxy, filter_id=s.seccomp.filter_id,
                             forwarders=tuple(self.forwarders), limits=s.limits,
                             make_observer=self._make_observer if d.observe_path else None, stdio=stdio,
                             want_status=self.recorder is not None or not s.opts.cli)
        try:
            self.launch.start()
        except BaseException:
            self.cleanup()
            raise
        return self.launch

    # -- 3. finish --------------------------------------------------------------

    def finish(self, rc: int) -> list[Any]:
        """After the command ended with ``rc``: explain refusals, settle
        protected names, CI files, run records; clean up. Returns the
        violations feed's events (empty when nothing was refused)."""
        try:
            return self._finish(rc)
        finally:
            self.cleanup()

    def _finish(self, rc: int) -> list[Any]:
        s, rp, p, facts = self.s, self.rp, self.prepared, self.facts
        assert rp is not None and p is not None and facts is not None
        observer = self.observers.pop(0) if self.observers else None
        records = observer.finish() if observer is not None else []
        if rc != 0 and not s.opts.quiet and rp.private_tmp:
            hint = _host.hidden_tmp_hint(self.argv, rp)
            if hint:
                s.say(hint)
        network = s.feed_network[self.network_from:]
        events: list[Any] = []
        if observer is not None or network:
            events = _explain(s, rp, p.policy, observer, records, network,
                              audit=self.recorder.audit if self.recorder else None, own=facts.given,
                              ci_run=self.ci_run)
        lost = self.launch.supervisor_lost if self.launch is not None else None
        if lost is not None:
            # Said at once (run/supervise.py) and again here, after the
            # summary of what was observed until then.
            s.say(f"the run was stopped when the violations supervisor died ({lost}): refusals after that were "
                  f"not observed; exit status {rc}")
        quarantined, restored = settle(rp, s.state, say=s.say)
        if self.held is not None:
            from safebox.review.run import finish as review_finish

            self.held = review_finish(self.held, rc, say=s.say, audit=self.recorder.audit if self.recorder else None,
                                      summary=s.summary)
        refused = self.ci_run.finish(self._passing()) if self.ci_run is not None else []
        for r in refused:
            s.say(f"refused {r.file} entry {r.name!r}: {r.reason} (not passed on to later steps; docs/ci.md)")
        if self.recorder is not None:
            if s.proxy is not None and s.opts.cli:
                s.proxy.stop()  # every relay closed: the byte counts are final
            launch = self.launch
            status = launch.status if launch is not None else None
            self.recorder.stop(exit=rc, limits=launch.limits_hit if launch else [], quarantined=quarantined,
                               restored_links=restored,
                               hosts=s.proxy.destinations() if s.proxy is not None else [],
                               enforced=_enforced(status) if status else None,
                               refused_entries=[{"file": r.file, "name": r.name, "reason": r.reason} for r in refused],
                               learn_out=s.opts.learn)
            for note in self.recorder.finish(home=s.home):
                s.say(note)
        if self.ci_run is not None:
            for r in self.ci_run.append_step_summary():  # after safebox's report, never before it
                s.say(f"refused {r.file} entry {r.name!r}: {r.reason} (not passed on to later steps; docs/ci.md)")
        return events

    def _passing(self) -> Any:
        """What this CI step may pass on (ci.passEnv, ci.passPath), and every
        place a sandboxed run could have written, this one's or an earlier
        one's: no PATH entry may lie there."""
        from safebox.ci_job import Passing

        s, rp, p = self.s, self.rp, self.prepared
        assert rp is not None and p is not None
        earlier = tuple(p.earlier_roots)  # the state dir's memory
        writable = (*rp.write_roots, *rp.cache_dirs, *earlier, s.state)
        return Passing(env=p.policy.ci_pass_env, path=p.policy.ci_pass_path, writable=writable)

    def cleanup(self) -> None:
        """Release everything the command holds (idempotent)."""
        held = self.launch.take_namespace_hold() if self.launch is not None else -1
        try:
            self._release()
        finally:
            # Last: the command dir, bound into the sandbox, is gone (see
            # take_namespace_hold). `safebox exec` leaves it to its own
            # exit: the holder's teardown then starts as safebox ends, not
            # on the CPU safebox still needs (a task in the kernel is not
            # preempted: CONFIG_PREEMPT_NONE, most distributions' servers).
            if held >= 0 and self.s.opts.cli:
                _HELD_UNTIL_EXIT.append(held)
            elif held >= 0:
                os.close(held)

    def _release(self) -> None:
        if self.launch is not None:
            self.launch.close()
        for obs in self.observers:
            obs.finish()  # idempotent: reaps the supervisor if the launch failed after starting it
        self.observers = []
        if self.scan is not None:
            self.scan.abandon()
        if self.ci_run is not None:
            self.ci_run.cleanup()
            self.ci_run = None
        if self.recorder is not None:
            self.recorder.close()
        for fw in self.forwarders:
            fw.close()
        self.forwarders = []
        if self.run_tmp is not None:
            rmtree(self.run_tmp)
            self.run_tmp = None
        if self.dir is not None and self.s.run_dir is not None:
            rmtree(self.dir)
            self.dir = None


def _enforced(status: Any) -> dict[str, Any]:
    """The helper's status as the ``stop`` run record's ``enforced``."""
    ll = status.landlock
    return {"landlock": None if ll is None else {"abi": ll.abi, "kernel_abi": ll.kernel_abi, "fs": ll.fs,
                                                  "net": ll.net, "scope": ll.scope},
            "seccomp": status.seccomp, "caps": status.caps, "nnp": status.nnp}


def _explain(s: Session, rp: ResolvedPolicy, policy: EffectivePolicy, observer: Observer | None,
             records: list[bytes], network: list[tuple[Any, ...]], *, audit: Any,
             own: tuple[str, ...] = (), ci_run: Any = None) -> list[Any]:
    """The feed's output: a line when observation was impossible, the
    ``denied`` audit events, the summary (every event with -v). Returns the
    feed's events."""
    if observer is not None and observer.off is not None and not s.opts.quiet:
        from safebox.violations.observer import WHY_OFF

        s.say(f"refusals are not observed in this run: {WHY_OFF.get(observer.off, observer.off)} "
              "(the sandbox is enforced as usual; `safebox doctor` checks this host)")
    if not records and not network:
        return []
    from safebox.violations.quick import only_quiet

    if s.opts.cli and not network and audit is None and not s.opts.verbose and only_quiet(records):
        # glibc's name-service probes only: nothing to print or record (the
        # API still gets them as events).
        return []
    from safebox.violations.feed import Feed, ci_entries  # only when there is something to explain

    feed = Feed(rp, policy=policy, home=s.home, table=observer.table if observer else None,
                status=observer.status if observer else None, own=tuple(os.path.realpath(p) for p in own),
                added=ci_entries(ci_run))
    feed.add_records(records)
    feed.add_network(network, explained=not s.opts.quiet)  # the proxy printed a line per host unless --quiet
    if audit is not None:
        feed.write_audit(audit)
    if s.opts.quiet and not s.opts.verbose:
        return list(feed.events)  # --quiet: the audit log keeps every refusal
    for line in feed.summary(verbose=s.opts.verbose):
        s.say(line)
    return list(feed.events)


__all__ = ["Command", "Facts", "Prepared"]
