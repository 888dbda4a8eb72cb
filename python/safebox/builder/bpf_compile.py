"""The seccomp rule table (``builder/seccomp.py``) compiled to a classic-BPF
program by libseccomp (pyseccomp), and the name that program goes by.

Only the native architecture is in the program (``ACT_BADARCH`` is
``KILL_PROCESS``; docs/seccomp.md); the program is checked against the
helper's size limit. The filter id (:func:`filter_id`) names the table, the
options and the libseccomp version; :func:`compile_with_id` is the miss
path of ``builder/bpf_cache.py``, the one cache of programs.
"""

from __future__ import annotations

import errno
import hashlib
import os
import platform
import struct
import sys
import tempfile
from typing import Any, assert_never

from safebox import __version__
from safebox.builder import seccomp
from safebox.builder.seccomp import Action, Cond, InetMode, Observe, Op, Rule, Watch, active_rules, notified, watched
from safebox.errors import BuildError

# The helper's limit (docs/helper-protocol.md); the kernel's is BPF_MAXINSNS = 4096 too.
MAX_INSTRUCTIONS = 4096
BPF_INSTRUCTION_SIZE = 8  # sizeof(struct sock_filter)

# Syscalls libseccomp 2.5.4 cannot name yet, by native number. Only consulted
# when libseccomp resolves the name to nothing.
_FALLBACK_NUMBERS: dict[str, dict[str, int]] = {
    "x86_64": {"open_tree_attr": 467},
}

# ------------------------------------------------------------------ compiling


def _errno_of(action: Action) -> int:
    match action:
        case Action.EPERM:
            return errno.EPERM
        case Action.ENOSYS:
            return errno.ENOSYS
        case _:  # pragma: no cover
            assert_never(action)


def _resolve(sc: Any, name: str) -> int | None:
    """Native syscall number, or None when the syscall does not exist on this arch."""
    nr = int(sc.resolve_syscall(sc.Arch.NATIVE, name))
    if nr >= 0:
        return nr
    fallback = _FALLBACK_NUMBERS.get(platform.machine(), {}).get(name)
    if fallback is not None:
        return fallback
    # libseccomp gives a negative pseudo-number (e.g. vm86 on x86_64, -10071) for a
    # syscall that exists on other arches only, and -1 for a name it does not know.
    if nr == -1:
        raise BuildError(f"seccomp: libseccomp does not know syscall {name!r}",
                         hint="upgrade libseccomp, or add its number to _FALLBACK_NUMBERS")
    return None


def libseccomp_identity() -> tuple[str, str]:
    """(version, identity) of the libseccomp this process loaded (imports
    pyseccomp): the identity is the shared object's path, size, mtime and
    inode, as found in /proc/self/maps, so that the exec hot path can tell a
    changed library with one stat and without loading it (bpf_cache)."""
    version = libseccomp_version()
    path = ""
    with open("/proc/self/maps") as maps:
        for line in maps:
            name = line.rstrip("\n").split(maxsplit=5)[-1]
            if os.path.basename(name).startswith("libseccomp.so"):
                path = name
                break
    if not path:
        return version, f"unknown {version}"
    st = os.stat(path)
    return version, f"{path} {st.st_size} {st.st_mtime_ns} {st.st_ino}"


def libseccomp_version() -> str:
    """The loaded libseccomp's version, ``"2.5.4"`` (imports pyseccomp)."""
    import ctypes

    import pyseccomp as sc

    class _Version(ctypes.Structure):
        _fields_ = [("major", ctypes.c_uint), ("minor", ctypes.c_uint), ("micro", ctypes.c_uint)]

    fn = sc._libseccomp.seccomp_version  # noqa: SLF001 -- pyseccomp does not wrap it
    fn.restype = ctypes.POINTER(_Version)
    fn.argtypes = ()
    v = fn().contents
    return f"{v.major}.{v.minor}.{v.micro}"


def compile_program(*, allow_unix_sockets: bool, allow_inet: InetMode, observe: Observe = Observe.OFF,
                    unix_seqpacket_only: bool = False) -> bytes:
    """Compile the active rules into a raw classic-BPF program (native endian).

    With ``observe`` other than OFF, the EPERM rules return
    SECCOMP_RET_USER_NOTIF (the supervisor answers EPERM) and the watched
    calls notify too (the supervisor answers "continue"). A watched call is
    never on the denylist: the supervisor continues every watched call it is
    sent, so a denied one would run (checked here, and by a unit test).

    Raises :class:`BuildError` if libseccomp is missing or rejects a rule.
    """
    try:
        import pyseccomp as sc
    except (ImportError, RuntimeError) as exc:  # pyseccomp raises RuntimeError without libseccomp
        raise BuildError(f"seccomp: cannot load pyseccomp/libseccomp: {exc}",
                         hint="install libseccomp (Debian: libseccomp2) and pyseccomp") from exc
    try:
        filt = sc.SyscallFilter(sc.ALLOW)
        # Only the native arch is in the filter: any other audit arch (i386 via int 0x80)
        # and, on x86_64, any x32 syscall number (libseccomp adds that check) is killed.
        filt.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
        active = active_rules(allow_unix_sockets=allow_unix_sockets, allow_inet=allow_inet,
                              unix_seqpacket_only=unix_seqpacket_only)
        for rule in active:
            _add_rule(sc, filt, sc.NOTIFY if notified(rule, observe) else sc.ERRNO(_errno_of(rule.action)), rule)
        watches = watched(observe)
        _refuse_denied_and_watched(active, watches)
        for w in watches:
            _add_rule(sc, filt, sc.NOTIFY, w)
        with tempfile.TemporaryFile() as out:
            filt.export_bpf(out)
            out.seek(0)
            program = out.read()
    except OSError as exc:
        raise BuildError(f"seccomp: libseccomp failed: {exc}") from exc
    _check_program(program)
    return program


def _add_rule(sc: Any, filt: Any, act: Any, entry: Rule | Watch) -> None:
    """``entry``'s call, under all of its conditions, gets ``act``; a call
    not on this arch is left out (unreachable through the native ABI)."""
    nr = _resolve(sc, entry.syscall)
    if nr is None:
        return
    filt.add_rule(act, nr, *(_arg(sc, c) for c in entry.conds))


def _arg(sc: Any, c: Cond) -> Any:
    """libseccomp's form of one comparison: ``MASKED_EQ`` takes (mask, value)."""
    ops = {Op.EQ: sc.EQ, Op.NE: sc.NE, Op.GT: sc.GT, Op.GE: sc.GE, Op.MASKED_EQ: sc.MASKED_EQ}
    return sc.Arg(c.arg, ops[c.op], c.mask if c.op is Op.MASKED_EQ else c.value,
                  c.value if c.op is Op.MASKED_EQ else 0)


def _refuse_denied_and_watched(active: tuple[Rule, ...], watches: tuple[Watch, ...]) -> None:
    """A watched call must not be on the denylist: the supervisor continues it."""
    clash = {r.syscall for r in active} & {w.syscall for w in watches}
    if clash:
        raise BuildError(f"seccomp: {sorted(clash)} both denied and watched; the supervisor would let them run")


def _check_program(program: bytes) -> None:
    n, rem = divmod(len(program), BPF_INSTRUCTION_SIZE)
    if n == 0 or rem or n > MAX_INSTRUCTIONS:
        raise BuildError(f"seccomp: bad BPF program size {len(program)} bytes "
                         f"(need a non-zero multiple of {BPF_INSTRUCTION_SIZE}, "
                         f"at most {MAX_INSTRUCTIONS} instructions)")


# -------------------------------------------------------------------- caching


def table_digest() -> str:
    """sha256 of the rule and watch tables' repr: changes whenever any entry changes."""
    return hashlib.sha256(repr((seccomp.RULES, seccomp.WATCH)).encode()).hexdigest()


def cache_key(*, allow_unix_sockets: bool, allow_inet: InetMode, libseccomp: str,
              observe: Observe = Observe.OFF, unix_seqpacket_only: bool = False) -> str:
    """Full sha256 hex key of the program for these options and this
    libseccomp version (pure: the caller passes the version)."""
    material = repr((
        seccomp.CACHE_FORMAT, __version__, table_digest(), platform.machine(), sys.byteorder,
        ("allow_unix_sockets", allow_unix_sockets), ("allow_inet", allow_inet.value),
        ("libseccomp", libseccomp),
    ) + ((("observe", observe.value),) if observe is not Observe.OFF else ())
      + ((("unix_seqpacket_only", True),) if unix_seqpacket_only else ()))
    return hashlib.sha256(material.encode()).hexdigest()


def filter_id(*, allow_unix_sockets: bool, allow_inet: InetMode, libseccomp: str,
              observe: Observe = Observe.OFF, unix_seqpacket_only: bool = False) -> str:
    """The first 16 hex digits of :func:`cache_key`: names the program in logs and the cache."""
    return cache_key(allow_unix_sockets=allow_unix_sockets, allow_inet=allow_inet, libseccomp=libseccomp,
                     observe=observe, unix_seqpacket_only=unix_seqpacket_only)[:16]


def compile_with_id(*, allow_unix_sockets: bool, allow_inet: InetMode,
                    observe: Observe = Observe.OFF, unix_seqpacket_only: bool = False) -> tuple[bytes, str, str]:
    """The program for these options, its filter id and the identity of the
    libseccomp it was compiled with (:func:`libseccomp_identity`), for
    ``builder/bpf_cache.py``, the one cache of programs.

    The filter id (:func:`filter_id`) holds the libseccomp version because
    libseccomp's output is not only a layout: its 64-bit argument
    comparisons were wrong before 2.4 (CVE-2019-9893), so a program compiled
    by a buggy libseccomp must not outlive the upgrade that fixes it; the
    cache keys its entries on the library file's identity for the same
    reason (an upgrade is a miss).
    """
    try:
        version, ident = libseccomp_identity()
    except (ImportError, RuntimeError, OSError) as exc:  # pyseccomp raises RuntimeError without libseccomp
        raise BuildError(f"seccomp: cannot load pyseccomp/libseccomp: {exc}",
                         hint="install libseccomp (Debian: libseccomp2) and pyseccomp") from exc
    fid = filter_id(allow_unix_sockets=allow_unix_sockets, allow_inet=allow_inet, libseccomp=version,
                    observe=observe, unix_seqpacket_only=unix_seqpacket_only)
    return compile_program(allow_unix_sockets=allow_unix_sockets, allow_inet=allow_inet, observe=observe,
                           unix_seqpacket_only=unix_seqpacket_only), fid, ident


def instructions(program: bytes) -> list[tuple[int, int, int, int]]:
    """Decode ``program`` into ``(code, jt, jf, k)`` tuples (for tests and debugging)."""
    _check_program(program)
    return [struct.unpack_from("=HBBI", program, off) for off in range(0, len(program), BPF_INSTRUCTION_SIZE)]
