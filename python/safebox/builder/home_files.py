"""A writable ``$HOME`` keeps its start-up files, by rule, not by list (issue 22).

With the work dir at ``$HOME``, or ``--allow-write ~``, the list of protected
names left the rest of ``$HOME``'s start-up files writable, and the review
planted ``~/.bash_aliases`` (Debian's ``.bashrc`` sources it) and
``~/.local/lib/python3.11/site-packages/x.pth``, which both ran on the host,
and wrote ``~/.cargo/config.toml`` and ``~/.vimrc``. No list of such files is
complete, so the rule covers them all:

* when a write root holds ``$HOME``, every dotfile and dot-directory directly
  in ``$HOME`` is read-only inside (a read-only bind each; the big-policy
  mounter makes them when there are many), and one the command creates is
  quarantined after the run (a new name cannot be made to fail without making
  ``$HOME`` itself read-only). A symlinked one protects its target and is
  restored after the run if replaced, as a protected symlink is.
* Except what the policy grants below ``$HOME``: a write root at or inside a
  dot entry (``--allow-write ~/.cache/foo``, or the work dir inside one) stays
  writable, bound again over the read-only entry, and a dot entry whose
  target lies in such a write root is left to it. The presets' caches live in
  safebox's state dir and are bound after every read-only entry (bwrap.py).
* The user's site-packages (``~/.local`` and ``$PYTHONUSERBASE``,
  ``lib/python*/site-packages``) keeps its ``*.pth`` files and its
  ``sitecustomize``/``usercustomize`` modules read-only whenever it lies in a
  write root, even one named explicitly, and new ones are quarantined:
  Python runs them at every start.

``home_files`` looks at the host (one listing of ``$HOME``, a readlink per
symlink); ``new_paths`` says after the run what was created.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from safebox._record import Frozen, listdir_as_owner
from safebox.builder.paths import Nearest

#: Kinds of ``HomeFiles.watch`` records.
DOT = "dot"  # any new name beginning with "." directly in the directory
SITE = "site"  # a new site hook (see is_site_hook) in DIR/python*/site-packages


class HomeFiles(Frozen):
    """What the rule decided for one run."""

    read_only: list[str]  # existing entries (resolved), bound read-only
    reopened: list[str]  # write roots inside one of them: bound read-write again after it
    links: list[tuple[str, str]]  # (symlink, its target text): restored after the run if replaced
    missing: list[str]  # targets of dangling dot symlinks in a write root: quarantined if created
    files: list[str]  # dotfiles directly in $HOME: checked for other names (hard links)
    # (directory, DOT | SITE, the names there at the start): what is new
    # after the run is quarantined (new_paths).
    watch: list[tuple[str, str, tuple[str, ...]]]
    notes: list[str]


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def is_site_hook(name: str) -> bool:
    """A name in site-packages whose code Python runs at every start: a
    ``.pth`` file (its ``import`` lines run), or the ``sitecustomize`` /
    ``usercustomize`` module in any form (``.py``, a sourceless ``.pyc``, an
    extension module, a package directory)."""
    return name.endswith(".pth") or name.split(".", 1)[0] in ("sitecustomize", "usercustomize")


def site_hooks(lib: str) -> list[str]:
    """The site hooks under ``lib`` (a user base's ``lib``), relative to it:
    ``python3.11/site-packages/x.pth``."""
    out: list[str] = []
    versions = [v for v in listdir_as_owner(lib) or () if v.startswith("python")]
    for v in sorted(versions):
        names = listdir_as_owner(f"{lib}/{v}/site-packages")
        if names is None:
            continue
        out += [f"{v}/site-packages/{n}" for n in sorted(names) if is_site_hook(n)]
    return out


def user_bases(home: str, env: Mapping[str, str]) -> list[str]:
    """Where Python's user site lives: ``~/.local``, and ``$PYTHONUSERBASE``
    if the caller sets it (the host's next Python reads whichever it is given)."""
    bases = [os.path.join(home, ".local")]
    if env.get("PYTHONUSERBASE", "").startswith("/"):
        bases.append(env["PYTHONUSERBASE"])
    return list(dict.fromkeys(os.path.realpath(b) for b in bases))


def home_files(home: str, write_roots: list[str], *, env: Mapping[str, str],
               keep: tuple[str, ...] = (), granted: list[str] | tuple[str, ...] = ()) -> HomeFiles:
    """Apply the rule of the module docstring. ``keep``: paths safebox itself
    creates during the run (its audit log), never quarantined; ``granted``:
    directories in a write root the policy lets the command write although
    it would not otherwise (``allowWritePathDirs``), treated as write roots
    named there."""
    roots = Nearest(write_roots)
    h = os.path.realpath(home)
    f = _Found()
    if h != "/" and roots.at_or_above(h) is not None:
        f.home_dots(h, Nearest([*write_roots, *granted]) if granted else roots, keep)
    for base in user_bases(h, env):
        if roots.at_or_above(base) is None:
            continue
        lib = base + "/lib"
        before = site_hooks(lib)
        for rel in before:
            p = f"{lib}/{rel}"
            if os.path.islink(p):
                f.links.append((p, os.readlink(p)))
                p = os.path.realpath(p)
                if roots.at_or_above(p) is None or not os.path.lexists(p):
                    continue
            f.ro.add(p)
        f.watch.append((lib, SITE, tuple(before)))
    held = Nearest(f.ro)
    return HomeFiles(read_only=sorted(f.ro),
                     reopened=sorted({w for w in (*write_roots, *granted) if held.above(w) is not None}),
                     links=f.links, missing=f.missing, files=f.files, watch=f.watch, notes=f.notes)


class _Found:
    """What :func:`home_files` has found so far."""

    def __init__(self) -> None:
        self.ro: set[str] = set()
        self.links: list[tuple[str, str]] = []
        self.missing: list[str] = []
        self.files: list[str] = []
        self.watch: list[tuple[str, str, tuple[str, ...]]] = []
        self.notes: list[str] = []

    def home_dots(self, h: str, roots: Nearest, keep: tuple[str, ...]) -> None:
        """The dot entries directly in ``h``, which a write root holds."""
        try:
            with os.scandir(h) as it:
                entries = [e for e in it if e.name.startswith(".")]
        except OSError:
            return  # a write root is listable (resolve refuses one that is not), but $HOME may be gone
        count = 0
        for e in entries:
            target = e.path
            if e.is_symlink():
                try:
                    self.links.append((e.path, os.readlink(e.path)))
                except OSError:
                    continue  # vanished since the listing
                target = os.path.realpath(e.path)
            elif e.is_file(follow_symlinks=False):
                self.files.append(e.path)
            nearest = roots.at_or_above(target)
            if nearest is None:
                continue  # outside every write root: read-only already
            if not _under(h, nearest):
                continue  # a write root below $HOME holds it: the policy grants it
            if _under(h, target):
                self.notes.append(f"{e.path} points at {target}, which holds $HOME: not kept read-only as a "
                                  "whole (the dot entries in $HOME are, one by one)")
                continue
            if not os.path.lexists(target):
                self.missing.append(target)  # a dangling link: the command could create its target
                continue
            self.ro.add(target)
            count += 1
        names = {e.name for e in entries} | {os.path.basename(k) for k in keep if os.path.dirname(k) == h}
        self.watch.append((h, DOT, tuple(sorted(names))))
        if count:
            self.notes.append(f"kept read-only: {count} dot entries of $HOME ({h} lies in a write root; "
                              "docs/policy-reference.md, \"Mandatory protection\")")


def new_paths(watch: tuple[tuple[str, str, tuple[str, ...]], ...] | list[tuple[str, str, tuple[str, ...]]]
              ) -> list[str]:
    """What the run created that the rule watches: new dot names directly in
    a watched ``$HOME``, new site hooks in a user site."""
    out: list[str] = []
    for d, kind, before in watch:
        had = set(before)
        if kind == DOT:
            now = listdir_as_owner(d)
            if now is None:
                continue
            out += [f"{d}/{n}" for n in sorted(now) if n.startswith(".") and n not in had]
        elif kind == SITE:
            out += [f"{d}/{rel}" for rel in site_hooks(d) if rel not in had]
    return out


__all__ = ["DOT", "SITE", "HomeFiles", "home_files", "is_site_hook", "new_paths", "site_hooks", "user_bases"]
