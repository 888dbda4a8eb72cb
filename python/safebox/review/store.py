"""Held runs in safebox's state dir: ``STATE/review/ID/``.

* ``meta.json`` -- the run: command, work dir, the write roots held (in
  layer order), when it started, its exit status, what was applied;
* ``layers/`` -- its change time, set by the last ``layers/K`` made just
  before the command, is the run's start on the file system's own clock
  (conflicts; a ``started`` file, where an older safebox made one, is
  read first): no file of its own to create (each costs ~0.4 ms here);
* ``layers/K/upper``, ``layers/K/work`` -- the overlay of write root K;
* ``lock`` -- held (``flock``) by an ``apply`` or ``discard`` at work.

Everything here is safebox's own, made before the command exists; the
layers' contents are the command's (hostile: safebox.review.layer reads
them without following links). A held run is used only when its directory
is this user's and not writable by anyone else: another user's held run is
refused, never read.
"""

from __future__ import annotations

import errno
import os
import stat
import time

from safebox._record import Frozen
from safebox.errors import RunError

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

#: At most this many held runs; a new ``--review`` run beyond it is refused.
MAX_HELD = 100
#: Held runs older than this are swept when a new one is made.
SWEEP_AFTER_S = 30 * 86400
_DIGITS, _HEX = frozenset("0123456789"), frozenset("0123456789abcdef")


def is_id(name: str) -> bool:
    """Whether ``name`` is a held run's id (``20260101-120000-a1b2c3``):
    checked by hand, as ``re`` is kept off the start of a run."""
    return (len(name) == 22 and name[8] == "-" and name[15] == "-" and _DIGITS.issuperset(name[:8])
            and _DIGITS.issuperset(name[9:15]) and _HEX.issuperset(name[16:]))


def dumps(value: object) -> str:
    """``value`` (dicts, lists, str, int, float, bool, None) as JSON, as
    ``json.dumps`` writes it (ASCII only): the start of a ``--review`` run
    writes meta.json without importing json (and re), which a start never
    loads (tests/integration/test_import_budget.py)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return '"' + "".join(_ESC.get(c) or (c if " " <= c < "\x7f" else _uescape(c)) for c in value) + '"'
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise ValueError(f"{value!r} is not JSON")
        return float.__repr__(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(dumps(v) for v in value) + "]"
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError("JSON object keys must be str here")
        return "{" + ", ".join(f"{dumps(k)}: {dumps(v)}" for k, v in value.items()) + "}"
    raise TypeError(f"{type(value).__name__} is not JSON")


_ESC = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f"}


def _uescape(c: str) -> str:
    n = ord(c)
    if n < 0x10000:
        return f"\\u{n:04x}"
    n -= 0x10000
    return f"\\u{0xD800 | (n >> 10):04x}\\u{0xDC00 | (n & 0x3FF):04x}"


class Held(Frozen):
    """One held run."""

    id: str
    dir: str
    meta: dict[str, Any] = {}

    @property
    def roots(self) -> tuple[str, ...]:
        return tuple(self.meta.get("roots", ()))

    def upper(self, k: int) -> str:
        return os.path.join(self.dir, "layers", str(k), "upper")

    @property
    def layers(self) -> str:
        return os.path.join(self.dir, "layers")

    def started_ns(self) -> int:
        """The run's start on the file system's clock (the marker's ctime)."""
        for marker in ("started", "layers"):
            try:
                return os.stat(os.path.join(self.dir, marker), follow_symlinks=False).st_ctime_ns
            except OSError:
                continue
        return int(self.meta.get("started_ns", 0))


def base(state: str) -> str:
    return os.path.join(state, "review")


def _write_meta(d: str, meta: dict[str, Any]) -> None:
    from safebox import hostio

    with hostio.pin(d) as pd:
        pd.replace("meta.json", dumps(meta).encode())


def create(state: str, *, roots: tuple[str, ...], command: tuple[str, ...], cwd: str,
           audit_log: str | None = None) -> Held:
    """A new held run for ``roots`` (each an empty layer)."""
    b = base(state)
    os.makedirs(b, mode=0o700, exist_ok=True)
    sweep(state)
    if len(_ids(b)) >= MAX_HELD:
        raise RunError(f"{MAX_HELD} held runs already wait in {b}: --review will not make another",
                       hint="apply or discard some: `safebox changes list`, `safebox changes discard ID`")
    now = time.time()
    rid = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now)) + "-" + os.urandom(3).hex()
    d = os.path.join(b, rid)
    spare = _take_spare(b, d)
    if not spare:
        os.mkdir(d, 0o700)
        os.mkdir(os.path.join(d, "layers"), 0o700)
    for k in range(1 if spare else 0, len(roots)):
        os.mkdir(os.path.join(d, "layers", str(k)), 0o700)
        for sub in ("upper", "work"):
            os.mkdir(os.path.join(d, "layers", str(k), sub), 0o700)
    # The run's start (Held.started_ns): the change time of `layers`, set
    # now (a spare's is that of an earlier run).
    os.chmod(os.path.join(d, "layers"), 0o700)
    with _pinned(d) as pd:
        meta: dict[str, Any] = {"v": 1, "id": rid, "uid": os.geteuid(), "command": list(command), "cwd": cwd,
                                "roots": list(roots), "created": now, "status": "running", "exit": None,
                                "applied": [], "discarded": False,
                                "audit_log": os.path.abspath(audit_log) if audit_log else None,
                                "started_ns": os.stat("layers", dir_fd=pd.fd, follow_symlinks=False).st_ctime_ns}
        pd.write_exclusive("meta.json", dumps(meta).encode())
    return Held(id=rid, dir=d, meta=meta)


#: A run that changed nothing leaves its empty directories here for the
#: next to take (one rename each way, where making and removing them cost
#: ~0.4 ms a directory on the benchmarks' disk): never listed, never a
#: held run (not an id).
SPARE = ".spare"


def _take_spare(b: str, d: str) -> bool:
    """Rename the spare to ``d``: True when it is there now, checked (a
    directory of this user's, mode 0700, holding ``layers/0/upper`` and
    ``layers/0/work``, both empty, and nothing else). One run takes it (the
    rename is atomic); a bad one is removed and False returned."""
    try:
        os.rename(os.path.join(b, SPARE), d)
    except OSError:
        return False
    try:
        st = os.stat(d, follow_symlinks=False)
        lay = os.path.join(d, "layers")
        good = (stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and stat.S_IMODE(st.st_mode) == 0o700
                and os.listdir(d) == ["layers"] and os.listdir(lay) == ["0"]
                and sorted(os.listdir(os.path.join(lay, "0"))) == ["upper", "work"]
                and not os.listdir(os.path.join(lay, "0", "upper")) and not os.listdir(os.path.join(lay, "0", "work")))
    except OSError:
        good = False
    if not good:
        from safebox._record import rmtree

        if os.path.islink(d) or not os.path.isdir(d):
            os.unlink(d)
        else:
            rmtree(d)
    return good


def recycle(h: Held) -> None:
    """Remove the held run of a run that changed nothing: its directories
    become the spare the next run takes (a run of one write root, while
    there is none), else they are removed."""
    if len(h.roots) == 1 and h.meta.get("status") == "running":
        try:
            work = os.path.join(h.dir, "layers", "0", "work")
            upper = os.path.join(h.dir, "layers", "0", "upper")
            _clear_work(work)
            if not os.listdir(upper) and not os.listdir(work):
                # Made again: the write root's own directory in the run was this one, its mode, times,
                # attributes and inode flags the command's to set (no change a held run lists), and
                # the next run's root would show them.
                os.rmdir(upper)
                os.mkdir(upper, 0o700)
                os.unlink(os.path.join(h.dir, "meta.json"))
                try:
                    os.rename(h.dir, os.path.join(os.path.dirname(h.dir), SPARE))
                    return
                except OSError:
                    pass  # a spare is there already
        except OSError:
            pass
    remove(h)


def _clear_work(work: str) -> None:
    """Remove overlayfs's own ``work/work`` (``incompat/volatile/dirty``
    inside, mode 000) from a layer's work directory."""
    for n in os.listdir(work):
        if n == "work":
            _open_up(os.path.join(work, n))
            vol = os.path.join(work, n, "incompat", "volatile")
            if os.path.lexists(os.path.join(vol, "dirty")):
                os.unlink(os.path.join(vol, "dirty"))
            for x in (vol, os.path.dirname(vol)):
                if os.path.lexists(x):
                    os.rmdir(x)
        os.rmdir(os.path.join(work, n))


def _pinned(d: str) -> Any:
    from safebox import hostio

    return hostio.pin(d)


def update(h: Held, **changes: Any) -> Held:
    meta = {**h.meta, **changes}
    _write_meta(h.dir, meta)
    return h.replace(meta=meta)


def _ids(b: str) -> list[str]:
    try:
        return sorted(n for n in os.listdir(b) if is_id(n))
    except FileNotFoundError:
        return []


def open_held(state: str, rid: str) -> Held:
    """The held run ``rid`` of this user. Refuses a malformed id, a
    missing run, and a directory that is not this user's own."""
    from safebox import hostio

    if not is_id(rid):
        raise RunError(f"{rid!r} is not a held run's id (they look like 20260101-120000-a1b2c3)",
                       hint="`safebox changes list` shows them")
    d = os.path.join(base(state), rid)
    try:
        st = os.stat(d, follow_symlinks=False)
    except FileNotFoundError:
        raise RunError(f"no held run {rid} in {base(state)}", hint="`safebox changes list` shows them") from None
    if not stat.S_ISDIR(st.st_mode):
        raise RunError(f"held run {rid}: {d} is not a directory; safebox will not use it")
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise RunError(f"held run {rid} belongs to uid {st.st_uid}, not to this user ({os.geteuid()}), or is "
                       "writable by others: safebox will not read or apply it",
                       hint="apply a run as the user who made it")
    with hostio.pin(d) as pd:
        raw = pd.read("meta.json", max_size=1 << 20, missing_ok=False)
    import json

    try:
        meta = json.loads(raw or b"{}")
    except ValueError:
        raise RunError(f"held run {rid}: meta.json is not JSON") from None
    if not isinstance(meta, dict) or meta.get("id") != rid or not isinstance(meta.get("roots"), list):
        raise RunError(f"held run {rid}: meta.json is not a held run's")
    return Held(id=rid, dir=d, meta=meta)


def list_held(state: str) -> list[Held]:
    out = []
    for rid in _ids(base(state)):
        try:
            out.append(open_held(state, rid))
        except RunError:
            continue
    return out


def size_of(h: Held) -> int:
    """Bytes the layers hold (what ``list`` shows)."""
    total = 0
    for _top, _dirs, files, dfd in os.fwalk(h.layers, follow_symlinks=False):
        for n in files:
            try:
                total += os.stat(n, dir_fd=dfd, follow_symlinks=False).st_blocks * 512
            except OSError:
                pass
    return total


def remove(h: Held) -> None:
    from safebox._record import rmtree

    if h.meta.get("status") == "running" and _remove_empty(h):
        return
    # overlayfs leaves work/work and what it holds (incompat/volatile/)
    # mode 000: rmtree needs to list them. They are overlayfs's, ours, and
    # out of the command's reach; each opened without following a link.
    for k in range(len(h.roots)):
        _open_up(os.path.join(h.dir, "layers", str(k), "work", "work"))
    rmtree(h.dir)


def _open_up(d: str, depth: int = 0) -> None:
    from safebox._record import open_to_owner

    if depth > 4 or open_to_owner(d) is None and not os.access(d, os.R_OK | os.X_OK):
        return
    try:
        names = os.listdir(d)
    except OSError:
        return
    for n in names:
        p = os.path.join(d, n)
        if os.path.isdir(p) and not os.path.islink(p):
            _open_up(p, depth + 1)


def sweep(state: str) -> None:
    """Remove held runs older than SWEEP_AFTER_S (docs/review.md); the id
    says when each was made, so only those are opened."""
    cutoff = time.strftime("%Y%m%d-%H%M%S", time.gmtime(time.time() - SWEEP_AFTER_S))
    for rid in _ids(base(state)):
        if rid[:15] < cutoff:
            try:
                remove(open_held(state, rid))
            except RunError:
                continue


def _remove_empty(h: Held) -> bool:
    """The fast way for a run that wrote nothing: rmdir and unlink only."""
    try:
        for k in range(len(h.roots)):
            lay = os.path.join(h.dir, "layers", str(k))
            work = os.path.join(lay, "work")
            _clear_work(work)
            os.rmdir(work)
            os.rmdir(os.path.join(lay, "upper"))
            os.rmdir(lay)
        os.rmdir(os.path.join(h.dir, "layers"))
        os.unlink(os.path.join(h.dir, "meta.json"))
        os.rmdir(h.dir)
        return True
    except OSError:
        return False


class Lock:
    """``flock`` on the held run's lock file; refuses a second holder."""

    def __init__(self, h: Held, what: str) -> None:
        import fcntl

        with _pinned(h.dir) as pd:
            self.fd = pd.open("lock", os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            os.close(self.fd)
            if e.errno in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise RunError(f"held run {h.id}: another `safebox changes` is at work on it; {what} refused",
                               hint="wait for it to end, then run this again") from None
            raise

    def __enter__(self) -> Lock:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)
