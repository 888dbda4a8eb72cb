"""``resolve``: look at the host once and fix every path decision, as a
frozen ``ResolvedPolicy``. Everything after it (builder/bwrap.py,
builder/helper_policy.py, run/plan.py) is pure.

The host reads it makes are split by concern into the modules it calls:

* builder/walks.py: the write roots (``Scan``), and ripgrep and find under them;
* builder/protected.py: the mandatory-protected paths the walks found, hard
  links, pinned parents; builder/gitpaths.py: what git configs name;
* builder/realpaths.py: ``denyRead``/``allowRead`` followed to their targets;
* builder/planted.py: symlinks planted on the way to a write root, PATH dirs;
* builder/memory.py: the state dir's memories of earlier runs;
* builder/selfprotect.py: safebox's own installation, import path, state dir;
* builder/sockets.py: ``allowUnixSockets``; builder/landlock.py: Landlock rules.

The names other modules import from here are re-exported (``__all__``).
"""

from __future__ import annotations

import os

from safebox._record import Frozen
from safebox.builder.home_files import HomeFiles, home_files
from safebox.builder.landlock import UNMASKABLE_DEVICES, landlock_rules
from safebox.builder.memory import (
    _KNOWN_MAX,
    _KNOWN_MAX_BYTES,
    KNOWN_GIT_DIRS,
    WRITE_ROOTS,
    read_known_git_dirs,
    read_write_roots,
    remember_git_dirs,
    remember_write_roots,
)
from safebox.builder.paths import Nearest, by_depth, collapse, is_under
from safebox.builder.planted import links_on_the_way, path_dirs_in_write_roots, refuse_planted_links
from safebox.builder.protected import (
    Protected,
    config_in_roots,
    link_candidates,
    pin_ancestors,
    protected_paths,
    refuse_hard_links,
    top_candidates,
)
from safebox.builder.realpaths import RealPaths, read_regions
from safebox.builder.regions import Regions
from safebox.builder.resolved import EMPTY_FILE, Bridge, Layers, NetKind, ResolvedPolicy
from safebox.builder.selfprotect import import_dirs, import_paths, refuse_unmasking, self_paths, state_masks
from safebox.builder.sockets import check_bound_sockets, hides_host_sockets, unix_sockets
from safebox.builder.walks import (
    RootScan,
    Scan,
    _find_links_finish,
    _only_harmless_walk_errors,
    _rg_finish,
    prestart,
    unlistable_message,
)
from safebox.errors import BuildError
from safebox.policy.effective import EffectivePolicy

__all__ = [
    "KNOWN_GIT_DIRS", "WRITE_ROOTS", "_KNOWN_MAX", "_KNOWN_MAX_BYTES", "HostFacts", "RootScan", "Scan",
    "_find_links_finish", "_only_harmless_walk_errors", "_rg_finish", "carve_outs", "import_paths",
    "link_candidates", "links_on_the_way", "path_dirs_in_write_roots", "pin_ancestors", "prestart",
    "protected_paths", "read_known_git_dirs", "read_write_roots", "refuse_planted_links", "remember_git_dirs",
    "remember_write_roots", "resolve", "self_paths", "top_candidates",
]


class HostFacts(Frozen):
    """Paths safebox itself lives at; all are kept read-only inside."""

    helper_path: str
    self_paths: tuple[str, ...]  # package dir, venv prefix, interpreter, helper
    state_dir: str
    run_dir: str
    policy_path: str
    rg_path: str | None
    import_paths: tuple[str, ...] = ()  # sys.path and the base prefixes; see resolve()
    # The API's harness started from its own repo: an import path entry that
    # holds a write root is left writable instead of refused (docs/api.md).
    allow_import_roots: bool = False
    path_dirs: tuple[str, ...] = ()  # the caller's $PATH entries; see path_dirs_in_write_roots
    # This run's own files given on the command line (--policy, --audit-log):
    # read-only inside like safebox's installation, and refused with a second
    # name (a forged audit line, a policy rewritten for the next run).
    run_files: tuple[str, ...] = ()






def carve_outs(regions: Regions, *, layers: Layers, write_roots: list[str], read_only: list[str],
               sealed: set[str], helper: str) -> tuple[tuple[str, bool], ...]:
    """The carve-outs bwrap binds back over their masks, as (path, writable),
    shallow first. Writable when a write root holds it and no read-only
    re-bind or sealed directory does (the bind from the host replaces what
    was mounted there). The helper too, when a mask hides it: bwrap runs it
    inside (a ``denyRead: ["~"]`` with safebox installed in ``~/.local``)."""
    out = []
    for a in regions.allows:
        writable = (any(is_under(a, w) for w in write_roots) and not any(is_under(a, r) for r in read_only)
                    and not any(is_under(a, d) for d in sealed))
        out.append((a, writable))
    if layers is Layers.BOTH and helper and not regions.readable(helper):
        out.append((helper, False))
    return tuple(sorted(out, key=lambda x: (x[0].count("/"), x[0])))


def resolve(policy: EffectivePolicy, *, layers: Layers, cwd: str, home: str, host: HostFacts,
            bridges: tuple[Bridge, ...] = (), scan: Scan | None = None,
            cache_dirs: tuple[str, ...] = (), cache_host_paths: tuple[str, ...] = ()) -> ResolvedPolicy:
    """Look at the host once and decide every mount and rule.

    ``cache_dirs``: the presets' sandbox-private caches (builder/caches.py),
    writable inside; ``cache_host_paths``: the host's own caches of those
    tools, read-only inside even beneath a write root."""
    if scan is None:
        scan = Scan(policy, layers=layers, rg_path=host.rg_path)
    pattern_notes: list[str] = []
    if policy.deny_read_globs or policy.allow_read_globs or policy.deny_write_globs:
        from safebox.builder.globs import expand_policy

        try:
            policy, pattern_notes = expand_policy(policy)
        except BaseException:
            scan.abandon()
            raise
    # A host cache the user made a write root of (--allow-write ~/.npm), or
    # one holding a write root, is theirs to write: keeping it read-only
    # would silently take back what they asked for.
    cache_host_paths = tuple(h for h in cache_host_paths
                             if not any(is_under(w, os.path.realpath(h)) for w in scan.write_roots))
    try:
        rp = _resolve(policy.replace(deny_write=(*policy.deny_write, *cache_host_paths)) if cache_host_paths
                      else policy, layers=layers, cwd=cwd, home=home, host=host, bridges=bridges, scan=scan,
                      extra_exclude=cache_host_paths)
        if pattern_notes:
            rp = rp.replace(notes=(*pattern_notes, *rp.notes))
        return _with_caches(rp, cache_dirs) if cache_dirs else rp
    except BaseException:
        scan.abandon()
        raise


def _with_caches(rp: ResolvedPolicy, cache_dirs: tuple[str, ...]) -> ResolvedPolicy:
    """Add the presets' cache leaves: writable inside, under every layer."""
    regions = Regions([*rp.mask_dirs, *rp.mask_files], [c for c, _ in rp.carve_outs])
    for c in cache_dirs:
        m = regions.deny_over(c)
        if m is not None:
            raise BuildError(f"the sandbox cache {c} lies inside denied {m}: a preset's cache cannot be "
                             "unreadable; remove the denyRead entry or the preset, or re-allow the cache "
                             "with filesystem.allowRead")
    rules = (*rp.landlock_rules, *(("write", c) for c in cache_dirs))
    return rp.replace(cache_dirs=cache_dirs if rp.layers is not Layers.HELPER_ONLY else (),
                      landlock_rules=rules)


class _Masks(Frozen):
    """What is denied, and what is safebox's own: decided before the walks are collected."""

    mask_dirs: list[str]
    mask_files: list[str]
    regions: Regions
    imports: list[str]  # Python's import path, resolved
    own: tuple[str, ...]  # safebox's installation, this run's files, its state dir, the import path


def _masks(policy: EffectivePolicy, *, layers: Layers, host: HostFacts, write_roots: list[str], roots: Nearest,
           realpaths: RealPaths, notes: list[str]) -> _Masks:
    """The read regions and safebox's own paths, after every refusal they call for."""
    own_masks = state_masks(host.state_dir, layers=layers, write_roots=write_roots)
    mask_dirs, mask_files, regions, n = read_regions((*policy.deny_read, *own_masks), policy.allow_read, realpaths)
    notes += n
    refuse_unmasking(regions, own_masks)
    for w in write_roots:
        d = regions.deny_over(w)
        if d is not None:
            raise BuildError(f"filesystem.allowWrite {w} lies inside denied {d}: "
                             "a write root cannot be unreadable; remove one of them, or re-allow the write "
                             "root with filesystem.allowRead")

    # The interpreter's import path too (the base installation behind a venv,
    # a `pip --user` site, the entry script's dir): code planted there runs
    # in safebox at its next start, outside any sandbox. An entry that holds
    # a write root (PYTHONPATH=. in the work dir, `python -m safebox` run from
    # it) cannot be kept read-only without taking the write root away, so
    # safebox refuses to run at all (found in review: the command planted
    # safebox/__init__.py there). build.py's launcher runs Python with -I,
    # which ignores PYTHONPATH.
    imports = import_dirs(host.import_paths, write_roots, allow_roots=host.allow_import_roots, notes=notes)
    _refuse_unmaskable([*mask_dirs, *mask_files])
    # A denied path inside a denied directory needs no mount of its own (nor
    # a Landlock exclusion): read_regions kept only the denies that change
    # something, which keeps a deny inside a carve-out (collapsing them by
    # ancestry would drop it and leave it readable).
    refuse_hard_links([p for p in (os.path.realpath(f) for f in host.run_files)
                       if roots.at_or_above(p) is not None])
    own = tuple(sorted({os.path.realpath(p) for p in (*host.self_paths, *host.run_files, host.state_dir)
                        if os.path.lexists(p)}
                       | set(imports)))
    return _Masks(mask_dirs=mask_dirs, mask_files=mask_files, regions=regions, imports=imports, own=own)


def _collect_protected(policy: EffectivePolicy, *, scan: Scan, home: str, state_dir: str) -> Protected:
    """The walks' answers (builder/protected.py), with the git dirs remembered across runs."""
    known_file = os.path.join(state_dir, KNOWN_GIT_DIRS)
    known_before = read_known_git_dirs(known_file)
    prot = protected_paths(scan.procs, scan.write_roots, home, known=known_before,
                           allow_git_config=policy.allow_git_config)
    remember_git_dirs(known_file, known_before, tuple(prot.known))
    scan.procs = {}
    return prot


class _Kept(Frozen):
    """What stays read-only beneath the write roots, and what is watched."""

    read_only: set[str]
    missing: list[str]
    home: HomeFiles
    path_links: list[tuple[str, str]]


def _kept(policy: EffectivePolicy, *, layers: Layers, home: str, host: HostFacts, write_roots: list[str],
          roots: Nearest, regions: Regions, prot: Protected, deny_write: dict[str, bool], imports: list[str],
          notes: list[str], warnings: list[str]) -> _Kept:
    """Every path kept read-only beneath the write roots, and every missing one watched."""
    deny_write_real = sorted(deny_write)
    missing = list(prot.missing)
    read_only: set[str] = set(prot.existing)
    read_only.update(p for p in deny_write_real if deny_write[p])
    read_only.update(prot.unlistable)
    # A writable $HOME keeps its start-up files: every dot entry directly in
    # it, and the user site's .pth and *customize (builder/home_files.py).
    # allowWritePathDirs grants the PATH directories in a write root
    # (~/.local/bin): they stay writable inside a read-only dot entry too.
    granted = path_dirs_in_write_roots(host.path_dirs, write_roots).existing if policy.allow_write_path_dirs else []
    hf = home_files(home, write_roots, env=os.environ, keep=tuple(os.path.realpath(f) for f in host.run_files),
                    granted=granted)
    refuse_hard_links(hf.files)
    read_only.update(hf.read_only)
    missing.extend(hf.missing)
    notes += hf.notes
    # The user's configuration that runs code (git's global config, login
    # start-up: defaults.PROTECTED_DIRS' `.config/...` names), anchored where
    # the host reads it, not only at the top of a write root: with the write
    # root at ~/.config itself those names were relative to it and missed
    # (review). Existing ones read-only, missing ones watched.
    cfg_existing, cfg_missing = config_in_roots(home, roots, regions)
    read_only.update(cfg_existing)
    missing.extend(cfg_missing)
    for p in deny_write_real:
        if not deny_write[p] and roots.at_or_above(p) is not None:
            missing.append(p)
    path_links: list[tuple[str, str]] = []
    if not policy.allow_write_path_dirs:
        pdirs = path_dirs_in_write_roots(host.path_dirs, write_roots)
        read_only.update(pdirs.existing)
        missing.extend(pdirs.missing)
        path_links = [lk for lk in pdirs.links if lk not in prot.links]
        if pdirs.existing:
            notes.append("kept read-only as directories of PATH inside a write root "
                         f"(filesystem.allowWritePathDirs): {', '.join(pdirs.existing)}")
        if layers is not Layers.HELPER_ONLY:
            warnings += _path_dir_warnings(pdirs.existing, write_roots)
    # Self-protection: safebox's installation, its state dir (policy cache,
    # seccomp cache, run dirs) and the policy files of this run stay
    # read-only even beneath a write root: a command that could change them
    # would decide the next run's sandbox.
    for p in (*host.self_paths, *host.run_files, host.state_dir):
        if os.path.lexists(p):
            read_only.add(os.path.realpath(p))
    read_only.update(imports)
    return _Kept(read_only=read_only, missing=missing, home=hf, path_links=path_links)


def _binds(kept: _Kept, *, masks: _Masks, prot: Protected, write_roots: list[str], roots: Nearest
           ) -> tuple[list[str], list[str]]:
    """(the read-only re-binds, the pinned parents): only what lies beneath a
    write root and changes something."""
    regions, read_only = masks.regions, kept.read_only
    # Only what lies beneath a write root needs re-binding; outside, / is read-only already.
    read_only_list = regions.readable_only(roots.covered(read_only))
    sealed_set = {d for d, _ in prot.sealed}
    sealed_near = Nearest(sealed_set)
    # The parents of protected symlinks too: renaming one would carry the link
    # away from where it is checked after the run.
    pins = pin_ancestors([*read_only_list, *sealed_set, *prot.git_dirs, *masks.mask_dirs, *masks.mask_files,
                          *(link for link, _ in (*prot.links, *kept.path_links))], write_roots)
    pins = [p for p in pins if p not in sealed_set and p not in read_only
            and regions.readable(p)
            and sealed_near.above(p) is None]
    # A read-only bind is recursive: one beneath another (a protected .git
    # inside a denyWrite directory) adds a mount and nothing else, and so
    # does a pin beneath one (nothing can be renamed in a read-only mount).
    # Except across a write root bound again over one (home.reopened: an
    # allowWrite inside a read-only dot entry of $HOME): what lies beneath
    # it is mounted again after it.
    reopened = Nearest(kept.home.reopened)
    read_only_list = _collapse_within(read_only_list, reopened)
    ro = Nearest(read_only_list)

    def covered(p: str) -> bool:
        r, w = ro.above(p), reopened.at_or_above(p)
        return r is not None and (w is None or is_under(r, w))

    return read_only_list, [p for p in pins if not covered(p)]


def _resolve(policy: EffectivePolicy, *, layers: Layers, cwd: str, home: str, host: HostFacts,
             bridges: tuple[Bridge, ...], scan: Scan, extra_exclude: tuple[str, ...] = ()) -> ResolvedPolicy:
    notes = list(scan.notes)
    write_roots = scan.write_roots
    roots = Nearest(write_roots)
    realpaths = RealPaths()
    masks = _masks(policy, layers=layers, host=host, write_roots=write_roots, roots=roots, realpaths=realpaths,
                   notes=notes)
    regions, mask_files = masks.regions, masks.mask_files
    # denyWrite: existing paths are re-bound read-only below (bwrap) and, on
    # a helper-only host, left out of Landlock's write grant like safebox's
    # own files; missing ones beneath a write root are watched like missing
    # protected files. Before issue 11 both were silently not enforced.
    # Host caches a preset redirected (extra_exclude) are kept out of the
    # write grants too, so that they stay read-only without bwrap as well.
    deny_write = _resolve_deny_write(policy.deny_write, realpaths)
    excl = {*masks.own, *(p for p in sorted(deny_write) if deny_write[p]),
            *(os.path.realpath(p) for p in extra_exclude if os.path.lexists(p))}
    prot = _collect_protected(policy, scan=scan, home=home, state_dir=host.state_dir)
    # A directory the walks could not list hides whatever is protected in it:
    # read-only for the whole run (a read-only bind: even chmod fails with
    # EROFS, so the command cannot make it listable and write beneath it),
    # on a helper-only host out of Landlock's write grant; said on every run.
    warnings = [f"{why}: it is read-only inside for this run; to write there: {fix}"
                for why, fix in map(unlistable_message, prot.unlistable)]
    excl.update(prot.unlistable)
    rules = landlock_rules(layers=layers, write_roots=write_roots, mask_dirs=masks.mask_dirs, mask_files=mask_files,
                           write_exclude=tuple(sorted(excl)), carve_outs=regions.allows)
    socket_binds: list[str] = []
    hide: list[str] = []
    keep: list[str] = []
    if hides_host_sockets(policy, layers):
        hide, keep = unix_sockets(policy, warnings=warnings, notes=notes)
        mask_files = sorted(set(mask_files) | set(hide))
        # An allowed socket under the private /tmp or a masked directory is
        # invisible unless bound back in.
        socket_binds = [k for k in keep if is_under(k, "/tmp") or not regions.readable(k)]
        check_bound_sockets(socket_binds, "it is bound into the sandbox by its name (under /tmp or a mask)")
    kept = _kept(policy, layers=layers, home=home, host=host, write_roots=write_roots, roots=roots, regions=regions,
                 prot=prot, deny_write=deny_write, imports=masks.imports, notes=notes, warnings=warnings)
    read_only_list, pins = _binds(kept, masks=masks, prot=prot, write_roots=write_roots, roots=roots)
    # Deny-read paths that do not exist yet but lie under a write root: the
    # command could create them (say ~/.config/safebox/policy.toml for the
    # next run); they are watched and quarantined like protected files.
    missing = [*kept.missing, *(p for p in policy.deny_read
                                if roots.at_or_above(p) is not None and not os.path.lexists(p))]
    if layers is not Layers.HELPER_ONLY:
        rules.append(("write", "/tmp"))
    return _resolved(layers=layers, cwd=cwd, host=host, bridges=bridges, write_roots=write_roots, masks=masks,
                     mask_files=mask_files, prot=prot, kept=kept, read_only=read_only_list, pins=pins,
                     socket_binds=socket_binds, socket_masks=hide, missing=missing, rules=rules, notes=notes,
                     warnings=warnings, sockets_allowed=keep)


def _resolved(*, layers: Layers, cwd: str, host: HostFacts, bridges: tuple[Bridge, ...], write_roots: list[str],
              masks: _Masks, mask_files: list[str], prot: Protected, kept: _Kept, read_only: list[str],
              pins: list[str], socket_binds: list[str], socket_masks: list[str], missing: list[str],
              rules: list[tuple[str, str]], notes: list[str], warnings: list[str],
              sockets_allowed: list[str]) -> ResolvedPolicy:
    """The frozen answer, from what ``_resolve`` decided."""
    sealed_set = {d for d, _ in prot.sealed}
    hf = kept.home
    net = NetKind.PROXY if bridges else NetKind.NONE
    private_tmp = ("/tmp",) if layers is not Layers.HELPER_ONLY else ()
    return ResolvedPolicy(
        layers=layers, cwd=cwd, write_roots=tuple(write_roots), read_only=tuple(read_only),
        sealed_dirs=tuple((d, tuple(k)) for d, k in prot.sealed),
        pinned_dirs=tuple(by_depth({*pins, *(g for g in prot.git_dirs if g not in sealed_set)})),
        mask_dirs=tuple(masks.mask_dirs), mask_files=tuple(mask_files), private_tmp=private_tmp,
        carve_outs=tuple(sorted((*carve_outs(masks.regions, layers=layers, write_roots=write_roots,
                                             read_only=read_only, sealed=sealed_set, helper=host.helper_path),
                                 *((w, True) for w in hf.reopened)),
                                key=lambda x: (x[0].count("/"), x[0]))),
        net=net, bridges=bridges, helper_path=host.helper_path, policy_path=host.policy_path,
        socket_binds=tuple(socket_binds), socket_masks=tuple(socket_masks), sockets_allowed=tuple(sockets_allowed),
        run_dir=host.run_dir, empty_file=os.path.join(host.run_dir, EMPTY_FILE) if host.run_dir else "",
        watch_missing=tuple(sorted(set(missing))), watch_tops=tuple(prot.tops),
        watch_links=tuple(dict.fromkeys([*prot.links, *kept.path_links, *hf.links])),
        watch_new=tuple(hf.watch), watch_deep=prot.deep,
        landlock_rules=tuple(rules),
        notes=tuple(notes), warnings=tuple(warnings))


def _collapse_within(paths: list[str], reopened: Nearest) -> list[str]:
    """``collapse`` (shallow first), within each region of the write roots
    bound again over a read-only entry, and outside them."""
    if not reopened.paths:
        return collapse(paths, shallow_first=True)
    groups: dict[str | None, list[str]] = {}
    for p in paths:
        groups.setdefault(reopened.at_or_above(p), []).append(p)
    return by_depth(p for g in groups.values() for p in collapse(g))


def _refuse_unmaskable(masks: list[str]) -> None:
    """BuildError for a denied path every sandbox needs."""
    for p in masks:
        if p in UNMASKABLE_DEVICES or p in ("/dev/pts", "/dev/fd") or p.startswith(("/dev/pts/", "/dev/fd/")):
            raise BuildError(f"filesystem.denyRead {p}: cannot be masked: every sandbox needs this device "
                             "(the command's terminal, /dev/null, randomness); remove it from the policy")


def _resolve_deny_write(paths: tuple[str, ...], realpaths: RealPaths) -> dict[str, bool]:
    """The ``denyWrite`` paths resolved, each saying whether it exists."""
    realpaths.prefetch(paths)
    deny_write: dict[str, bool] = {}  # resolved path -> exists
    for p, target, kind, err in realpaths.resolve_each(paths):
        if err is not None:  # as os.path.lexists: a path that cannot be looked at is not there
            target = os.path.realpath(p)
            there = os.path.lexists(target)
        else:
            there = kind is not None and (kind != "link" or os.path.lexists(target))
        deny_write[target] = deny_write.get(target, False) or there
    return deny_write


def _path_dir_warnings(path_dirs: list[str], write_roots: list[str]) -> list[str]:
    """A warning for each write root that a directory on PATH keeps read-only."""
    warnings = []
    for w in write_roots:
        d = next((d for d in path_dirs if is_under(w, d)), None)
        if d is not None:
            warnings.append(f"the write root {w} is {'a directory on PATH' if d == w else f'inside {d}, on PATH'}"
                            ": it stays read-only so that nothing can be planted for your shell to run; "
                            "set filesystem.allowWritePathDirs = true in a policy file to write there")
    return warnings
