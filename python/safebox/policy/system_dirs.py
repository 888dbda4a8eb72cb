"""Which directories safebox never proposes as a write root, and which write
roots it warns about: one module, so that the summary's fix lines, learn
mode's suggestions and the run's warnings cannot disagree (issue 22 item 6:
learn once suggested ``allowWrite: ["/etc", "/usr/local/bin", "~"]`` while the
summary said "/etc ... stays refused", and enforcing it wrote a root cron
file).

Two rules, the first stricter than the second:

* :func:`never_suggested`: a directory no fix and no learned policy ever
  names (the summary, violations/feed.py; ``--learn`` and ``policy
  suggest``, learn.py). Any directory *in* a system tree (:data:`SYSTEM_TREES`
  and every top-level ``/lib*``, but the caches :data:`VAR_CACHES`), ``/``,
  and every directory from the root down to the home itself. A suggestion is
  applied without much thought; one that hands the sandbox the host's
  configuration, programs or dotfiles must never be made.
* :func:`whole_tree`: a write root the user asked for (the work dir, an
  ``allowWrite`` entry) that makes a whole system tree, the home or a
  directory above it writable: warned about on every run (run/host.py).
  Exact directories only (:data:`WARNED`): ``/usr/src/app``, a common
  container work dir, is a project like any other, and a root the user
  wrote on purpose deeper in a system tree (``/var/www/html``) is not
  second-guessed on every run.
"""

from __future__ import annotations

import os

__all__ = ["SYSTEM_TREES", "VAR_CACHES", "WARNED", "never_suggested", "whole_tree"]

#: Trees whose every directory is never suggested. ``/var`` is one except
#: for its caches (:data:`VAR_CACHES`); every top-level ``/lib*`` is one too.
SYSTEM_TREES = ("/etc", "/usr", "/bin", "/sbin", "/boot", "/proc", "/sys", "/dev", "/run", "/opt", "/srv", "/var")
VAR_CACHES = ("/var/cache", "/var/tmp")

#: Directories that, as a write root, make a whole system tree writable:
#: warned about on every run. The home and every directory above it are
#: added at run time (:func:`whole_tree`).
WARNED = frozenset({"/bin", "/boot", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32", "/media",
                    "/mnt", "/opt", "/root", "/run", "/sbin", "/srv", "/usr", "/usr/bin", "/usr/lib",
                    "/usr/local", "/usr/local/bin", "/usr/sbin", "/usr/share", "/var", "/var/lib"})


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _homes(home: str) -> tuple[str, ...]:
    """``home`` as given and with symlinks resolved (the supervisor reports
    resolved paths: ``HOME=/home/u`` may be ``/data/u``); none for ``/``."""
    if not home:
        return ()
    return tuple(h for h in dict.fromkeys((os.path.normpath(home), os.path.realpath(home))) if h != "/")


def never_suggested(directory: str, *, home: str) -> str | None:
    """Why no fix or learned policy may make ``directory`` writable ("/etc
    is a system directory"; "/ is the whole system"; "~ is the home itself,
    with its dotfiles"; "/home holds the home"), or None when one may.
    ``home``: the caller's home directory (absolute), compared as given and
    with symlinks resolved."""
    d = os.path.normpath(directory)
    if d == "/":
        return "/ is the whole system"
    for h in _homes(home):
        if _under(h, d):
            return "~ is the home itself, with its dotfiles" if d == h else f"{d} holds the home"
    top = "/" + d.lstrip("/").split("/", 1)[0]
    if top.startswith("/lib") or (top in SYSTEM_TREES and not any(_under(d, c) for c in VAR_CACHES)):
        return f"{d} is a system directory"
    return None


def whole_tree(directory: str, *, home: str) -> str | None:
    """What ``directory``, as a write root, makes writable when that is a
    whole system tree, the home or more ("a system directory", "your home
    directory", "a directory that holds your home directory"), or None.
    ``directory`` and ``home`` are compared as given and with symlinks
    resolved. ``/`` itself is refused before this is asked (run/host.py)."""
    d = os.path.normpath(directory)
    homes = _homes(home)
    if d in homes:
        return "your home directory"
    if d in WARNED:
        return "a system directory"
    if d != "/" and any(_under(h, d) for h in homes):
        return "a directory that holds your home directory"
    return None
