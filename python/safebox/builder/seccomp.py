"""The seccomp denylist and watch list, kept as data, and what they say for
one call (:func:`decide`). Pure: no libseccomp; ``builder/bpf_compile.py``
compiles them.

The filter is the last layer the helper installs (after no_new_privs, Landlock
and the capability drop). It is a *denylist* on top of namespaces and Landlock,
as bubblewrap/flatpak use it: the default action is ALLOW, and the entries of
:data:`RULES` close kernel interfaces that the other layers do not cover
(ptrace, io_uring, keyrings, new namespaces, TIOCSTI, socket families, ...).
Every denied call fails with ``EPERM``; ``clone3`` fails with ``ENOSYS`` so that
glibc falls back to ``clone``, whose flags this filter can inspect.

Architecture (see ``docs/seccomp.md``): the program is built for the native
architecture only. ``ACT_BADARCH`` is ``KILL_PROCESS``, so a call made through
another ABI (``int 0x80`` -> ``AUDIT_ARCH_I386``) kills the process with SIGSYS;
on x86_64 libseccomp also sends every syscall number with the x32 bit
(``0x40000000``) to the bad-arch action, so x32 entry points are killed too.
Both are asserted by ``tests/security/test_seccomp.py``.

Arguments the kernel declares as ``int``/``unsigned int`` are compared on their
low 32 bits only (``MASKED_EQ`` with mask ``0xffffffff``): the kernel truncates
the register, so junk in the upper half must not dodge a match (flatpak's
TIOCSTI bypass, CVE-2019-10063). Where a rule compares the full 64 bits
(``NE``, ``GT``, ``GE``) junk in the upper half makes the rule *match*, i.e. the
call is denied: failing closed.

Caching: one cache, ``builder/bpf_cache.py``, keyed on the identity of this
module's file and the compiler's, the options and the libseccomp file the
program was compiled with, so that a hit imports neither this module nor
pyseccomp (which loads libseccomp through ctypes).
``bpf_compile.compile_with_id`` is its miss path.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import assert_never

# Bump when the meaning of the table changes without a safebox version
# change (the filter id includes both).
CACHE_FORMAT = 1


class InetMode(StrEnum):
    """What the filter does with ``socket(AF_INET/AF_INET6, ...)``."""

    ANY = "any"
    """bwrap runs the command in its own network namespace (empty, or only the
    bridges): inet sockets can reach nothing the namespace does not offer."""
    TCP_ONLY = "tcp_only"
    """Helper-only host with a proxy: Landlock restricts TCP connect/bind to the
    bridge ports, but it has no UDP/raw rules, so every non-TCP inet socket is
    denied here (and TCP Fast Open, which connects without ``connect``)."""
    NONE = "none"
    """Helper-only host with no network: no inet socket at all."""


class Observe(StrEnum):
    """Which program: the plain denylist, or the observing one of the violations feed."""

    OFF = "off"
    """Denied calls get their errno in the kernel (SECCOMP_RET_ERRNO); nothing is watched."""
    CALLS = "calls"
    """Denied calls, exec, connect and chdir notify the supervisor; no file call
    does (the default without --audit-log: nothing per file call, see WATCH)."""
    WRITES = "writes"
    """As CALLS, and the write-intent file calls (open for writing, mkdir, rename...)."""
    ALL = "all"
    """As WRITES, and every open (reads of masked paths are reported too)."""


class Action(StrEnum):
    """What a matching call gets."""

    EPERM = "EPERM"  # the denylist's answer
    ENOSYS = "ENOSYS"  # "this kernel has no such call": makes callers fall back (clone3)


class Op(StrEnum):
    """Argument comparisons (libseccomp's ``SCMP_CMP_*``); 64-bit unless masked."""

    EQ = "EQ"
    NE = "NE"
    GT = "GT"
    GE = "GE"
    MASKED_EQ = "MASKED_EQ"  # (arg & mask) == value


class When(StrEnum):
    """Which compile options an entry applies under."""

    ALWAYS = "always"
    UNIX_DENIED = "unix_denied"  # allow_unix_sockets is False
    UNIX_SEQPACKET_ONLY = "unix_seqpacket_only"  # unix sockets on for a GPU alone (docs/gpu.md)
    INET_TCP_ONLY = "inet_tcp_only"  # allow_inet is InetMode.TCP_ONLY
    INET_NONE = "inet_none"  # allow_inet is InetMode.NONE


@dataclass(frozen=True)
class Cond:
    """One argument comparison; all conditions of an entry must hold (AND)."""

    arg: int
    op: Op
    value: int
    mask: int = 0  # MASKED_EQ only

    def matches(self, args: tuple[int, ...]) -> bool:
        """Evaluate on raw 64-bit register values, as the compiled program does."""
        a = args[self.arg] & 0xFFFF_FFFF_FFFF_FFFF
        match self.op:
            case Op.EQ:
                return a == self.value
            case Op.NE:
                return a != self.value
            case Op.GT:
                return a > self.value
            case Op.GE:
                return a >= self.value
            case Op.MASKED_EQ:
                return (a & self.mask) == self.value
            case _:  # pragma: no cover
                assert_never(self.op)


@dataclass(frozen=True)
class Rule:
    """One denylist entry: ``syscall`` with all of ``conds`` gets ``action``."""

    syscall: str
    conds: tuple[Cond, ...]
    action: Action
    why: str
    when: When = When.ALWAYS


# ----------------------------------------------------------------- constants
# UAPI values, spelled out so the table is data (and identical on every host).

_LOW32 = 0xFFFF_FFFF
_SOCK_TYPE_MASK = 0xF  # the kernel's SOCK_TYPE_MASK; SOCK_NONBLOCK/SOCK_CLOEXEC live above it

AF_UNSPEC, AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, AF_PACKET, AF_VSOCK = 0, 1, 2, 10, 16, 17, 40
SOCK_STREAM = 1
SOCK_SEQPACKET = 5
IPPROTO_TCP = 6
NETLINK_ROUTE = 0
TIOCSTI, TIOCLINUX = 0x5412, 0x541C
MSG_FASTOPEN = 0x2000_0000

# CLONE_NEW* flags. CLONE_NEWTIME (0x80) overlaps clone()'s exit-signal byte
# (CSIGNAL), so only unshare() can take it; clone3() is ENOSYS as a whole.
CLONE_NEWNS = 0x0002_0000
CLONE_NEWCGROUP = 0x0200_0000
CLONE_NEWUTS = 0x0400_0000
CLONE_NEWIPC = 0x0800_0000
CLONE_NEWUSER = 0x1000_0000
CLONE_NEWPID = 0x2000_0000
CLONE_NEWNET = 0x4000_0000
CLONE_NEWTIME = 0x0000_0080
_CLONE_NS_FLAGS = {
    "CLONE_NEWNS": CLONE_NEWNS,
    "CLONE_NEWCGROUP": CLONE_NEWCGROUP,
    "CLONE_NEWUTS": CLONE_NEWUTS,
    "CLONE_NEWIPC": CLONE_NEWIPC,
    "CLONE_NEWUSER": CLONE_NEWUSER,
    "CLONE_NEWPID": CLONE_NEWPID,
    "CLONE_NEWNET": CLONE_NEWNET,
}

# Families socket() may create; every other family is denied (flatpak keeps a
# family allowlist the same way). AF_UNIX is conditional, AF_INET/AF_INET6
# depend on InetMode, AF_NETLINK is limited to NETLINK_ROUTE.
_SOCKET_FAMILY_LIMIT = AF_PACKET  # families >= 17 are all denied by one GE rule
_DENIED_LOW_FAMILIES = {
    AF_UNSPEC: "AF_UNSPEC",
    3: "AF_AX25",
    4: "AF_IPX",
    5: "AF_APPLETALK",
    6: "AF_NETROM",
    7: "AF_BRIDGE",
    8: "AF_ATMPVC",
    9: "AF_X25",
    11: "AF_ROSE",
    12: "AF_DECnet",
    13: "AF_NETBEUI",
    14: "AF_SECURITY",
    15: "AF_KEY",
}


def _deny(syscall: str, why: str, *conds: Cond, when: When = When.ALWAYS) -> Rule:
    return Rule(syscall, conds, Action.EPERM, why, when)


def _low32(arg: int, value: int) -> Cond:
    """``arg``'s low 32 bits equal ``value`` (for ``int``/``unsigned int`` arguments)."""
    return Cond(arg, Op.MASKED_EQ, value, _LOW32)


def _bit(arg: int, flag: int) -> Cond:
    """``flag`` is set in ``arg``."""
    return Cond(arg, Op.MASKED_EQ, flag, flag)


def _inet_rules() -> tuple[Rule, ...]:
    rules: list[Rule] = []
    for fam, fam_name in ((AF_INET, "AF_INET"), (AF_INET6, "AF_INET6")):
        rules.append(_deny(
            "socket", f"{fam_name}: no network at all on a helper-only host without a proxy",
            Cond(0, Op.EQ, fam), when=When.INET_NONE))
        # Types: everything but SOCK_STREAM (DGRAM, RAW, SEQPACKET, DCCP, PACKET, and
        # the invalid ones, so a future type is denied too). Type masked to the
        # kernel's SOCK_TYPE_MASK: SOCK_NONBLOCK|SOCK_CLOEXEC must not dodge it.
        for sock_type in (0, *range(2, _SOCK_TYPE_MASK + 1)):
            rules.append(_deny(
                "socket",
                f"{fam_name} type {sock_type}: Landlock only restricts TCP; UDP/raw would bypass it",
                Cond(0, Op.EQ, fam), Cond(1, Op.MASKED_EQ, sock_type, _SOCK_TYPE_MASK),
                when=When.INET_TCP_ONLY))
        # Protocols: SOCK_STREAM is also SCTP (132), SMC (256) and MPTCP (262), which
        # Landlock's TCP rules do not cover since sk_is_tcp() (kernel 6.14-era fix).
        # 1..5 name no stream protocol (EPROTONOSUPPORT) but are denied to fail closed.
        rules.append(_deny(
            "socket", f"{fam_name} protocol > IPPROTO_TCP (SCTP, SMC, MPTCP): not covered by Landlock",
            Cond(0, Op.EQ, fam), Cond(2, Op.GT, IPPROTO_TCP), when=When.INET_TCP_ONLY))
        for proto in range(1, IPPROTO_TCP):
            rules.append(_deny(
                "socket", f"{fam_name} protocol {proto}: only 0 and IPPROTO_TCP are TCP",
                Cond(0, Op.EQ, fam), Cond(2, Op.EQ, proto), when=When.INET_TCP_ONLY))
    # TCP Fast Open: sendto/sendmsg with MSG_FASTOPEN connects an unconnected TCP
    # socket without connect(2), so without the LSM connect hook Landlock relies on.
    for name, flags_arg in (("sendto", 3), ("sendmsg", 2), ("sendmmsg", 3)):
        rules.append(_deny(
            name, "MSG_FASTOPEN connects without connect(2), bypassing Landlock's TCP connect rules",
            _bit(flags_arg, MSG_FASTOPEN), when=When.INET_TCP_ONLY))
    return tuple(rules)


RULES: tuple[Rule, ...] = (
    # --- other processes' memory and tracing
    _deny("ptrace", "inspect/modify other processes; Yama/Landlock limit it, but no sandboxed tool needs it"),
    _deny("process_vm_readv", "read another process's memory (ptrace-equivalent)"),
    _deny("process_vm_writev", "write another process's memory (ptrace-equivalent)"),
    _deny("pidfd_getfd", "steal a descriptor from another process (ptrace-equivalent)"),
    # --- kernel attack surface with a long CVE history and no use in a sandbox
    _deny("bpf", "eBPF verifier/JIT attack surface; unprivileged bpf is only a liability here"),
    _deny("perf_event_open", "perf: kernel attack surface and side channels"),
    _deny("userfaultfd", "stalls kernel copies at will: the classic race-exploit primitive"),
    _deny("io_uring_setup", "io_uring runs socket/open/... without passing through this filter"),
    _deny("io_uring_enter", "io_uring (see io_uring_setup)"),
    _deny("io_uring_register", "io_uring (see io_uring_setup)"),
    _deny("keyctl", "kernel keyrings are not namespaced: the user's keys are reachable"),
    _deny("add_key", "kernel keyrings (see keyctl)"),
    _deny("request_key", "kernel keyrings (see keyctl)"),
    # --- mounts and root changes: the filesystem view is bwrap's and Landlock's
    _deny("mount", "change the filesystem view the other layers set up"),
    _deny("umount2", "uncover paths bwrap masked"),
    _deny("move_mount", "new mount API (see mount)"),
    _deny("open_tree", "new mount API: clone a mount tree"),
    _deny("open_tree_attr", "new mount API (6.15): open_tree with attributes"),
    _deny("fsopen", "new mount API (see mount)"),
    _deny("fsconfig", "new mount API (see mount)"),
    _deny("fsmount", "new mount API (see mount)"),
    _deny("fspick", "new mount API (see mount)"),
    _deny("mount_setattr", "change mount flags such as read-only"),
    _deny("pivot_root", "change the root mount"),
    _deny("chroot", "needs CAP_SYS_CHROOT (dropped); denied anyway, no sandboxed tool needs it"),
    # --- namespaces: a new user namespace gives back every capability inside it
    _deny("setns", "join another namespace"),
    *(
        _deny("unshare", f"{name}: a new namespace (user ns: full caps inside it)", _bit(0, flag))
        for name, flag in (*_CLONE_NS_FLAGS.items(), ("CLONE_NEWTIME", CLONE_NEWTIME))
    ),
    *(
        # clone(flags, ...) on x86_64: flags are argument 0 (the kernel reads its low 32 bits).
        _deny("clone", f"{name}: a new namespace (see unshare)", _bit(0, flag))
        for name, flag in _CLONE_NS_FLAGS.items()
    ),
    Rule("clone3", (), Action.ENOSYS,
         "flags sit in a struct seccomp cannot read; ENOSYS makes glibc fall back to clone"),
    # --- terminal injection: a sandboxed process must not type into the user's shell
    _deny("ioctl", "TIOCSTI pushes input into the terminal", _low32(1, TIOCSTI)),
    _deny("ioctl", "TIOCLINUX (e.g. paste selection) injects input on a VT", _low32(1, TIOCLINUX)),
    # --- sockets
    _deny("socket", "AF_UNIX off by policy: host daemons (docker, dbus, ssh-agent) listen there",
          Cond(0, Op.EQ, AF_UNIX), when=When.UNIX_DENIED),
    # --allow-gpu alone turns AF_UNIX on for CUDA's UVM descriptor server, a
    # SOCK_SEQPACKET socket (docs/gpu.md, "Unix sockets"). Only that type: a
    # host daemon's STREAM or DGRAM socket (docker, dbus, ssh-agent, journald)
    # that the masks miss (bound after the start, or in another network
    # namespace) then cannot be connected to (EPROTOTYPE, or EPERM here).
    *(
        _deny("socket", f"AF_UNIX type {sock_type}: a GPU turns on SOCK_SEQPACKET only",
              Cond(0, Op.EQ, AF_UNIX), Cond(1, Op.MASKED_EQ, sock_type, _SOCK_TYPE_MASK),
              when=When.UNIX_SEQPACKET_ONLY)
        for sock_type in range(_SOCK_TYPE_MASK + 1) if sock_type != SOCK_SEQPACKET
    ),
    _deny("socket", "families >= 17 (AF_PACKET, AF_ALG, AF_VSOCK to the VM host, AF_XDP, AF_SMC, ...) "
          "and any value with junk in the upper 32 bits", Cond(0, Op.GE, _SOCKET_FAMILY_LIMIT)),
    *(
        _deny("socket", f"{name}: legacy/unneeded socket family", Cond(0, Op.EQ, fam))
        for fam, name in _DENIED_LOW_FAMILIES.items()
    ),
    _deny("socket", "AF_NETLINK other than NETLINK_ROUTE (sock_diag lists host sockets, audit, "
          "uevents, netfilter, generic); ROUTE stays for getifaddrs/iproute (writes need CAP_NET_ADMIN)",
          Cond(0, Op.EQ, AF_NETLINK), Cond(2, Op.NE, NETLINK_ROUTE)),
    *_inet_rules(),
    # --- personality: only PER_LINUX may be set (as flatpak). libseccomp 2.5 allows one
    # comparison per argument per rule, so allowing the 0xffffffff query as well would need
    # hundreds of rules; ADDR_NO_RANDOMIZE/READ_IMPLIES_EXEC/MMAP_PAGE_ZERO are exploit aids.
    _deny("personality", "only PER_LINUX: other personalities disable ASLR/NX or map page zero",
          Cond(0, Op.NE, 0)),
    # --- legacy, privileged or system-wide calls (all need dropped capabilities; denied
    # so that a kernel bug in their permission checks is not reachable)
    _deny("vm86", "i386 only (unreachable: i386 is ACT_BADARCH); kept for a multi-arch filter"),
    _deny("vm86old", "i386 only (see vm86)"),
    _deny("uselib", "a.out loader from 1990s Linux; ENOSYS unless CONFIG_USELIB"),
    _deny("kexec_load", "replace the running kernel"),
    _deny("kexec_file_load", "replace the running kernel"),
    _deny("init_module", "load kernel code"),
    _deny("finit_module", "load kernel code"),
    _deny("delete_module", "unload kernel code"),
    _deny("open_by_handle_at", "opens any inode by handle, escaping mounts (the 'shocker' breakout)"),
    _deny("acct", "process accounting to a file: system-wide"),
    _deny("quotactl", "disk quotas: system-wide"),
    _deny("quotactl_fd", "disk quotas: system-wide"),
    _deny("swapon", "system-wide swap"),
    _deny("swapoff", "system-wide swap"),
    _deny("reboot", "reboot/halt, or kexec a loaded kernel"),
    _deny("syslog", "kernel log: kernel addresses and host activity"),
    _deny("lookup_dcookie", "oprofile leftover; leaks paths (removed in 6.10, ENOSYS)"),
    _deny("nfsservctl", "removed in 3.1; ENOSYS"),
    _deny("ioperm", "raw I/O port access"),
    _deny("iopl", "raw I/O privilege level"),
    _deny("sethostname", "a helper-only host shares the host's UTS namespace"),
    _deny("setdomainname", "a helper-only host shares the host's UTS namespace"),
    _deny("settimeofday", "the clock is system-wide (CLOCK_REALTIME is not namespaced)"),
    _deny("clock_settime", "the clock is system-wide (see settimeofday)"),
)
"""The denylist, in the order it is compiled. ``adjtimex``/``clock_adjtime`` stay
allowed (``modes == 0`` is a read used by time tools; setting needs
CAP_SYS_TIME, dropped) and so does ``name_to_handle_at`` (a handle is useless
without ``open_by_handle_at``). ``socketpair`` is never filtered: a connected
pair reaches nothing outside the process tree."""


# ------------------------------------------------------------- the watch list
# Calls the observing program (Observe.CALLS/WRITES/ALL) sends to the supervisor,
# which always answers "continue": the kernel then runs them with every
# layer's checks, exactly as without observation (docs/violations.md). The
# supervisor knows where each one's arguments are (WATCHES in
# helper/supervise.c; a unit test checks the two lists agree).

O_WRONLY, O_RDWR, O_CREAT, O_TRUNC = 0o1, 0o2, 0o100, 0o1000


@dataclass(frozen=True)
class Watch:
    """One watched call: ``syscall`` with all of ``conds`` notifies the supervisor
    under ``tier`` and every mode above it (CALLS < WRITES < ALL)."""

    syscall: str
    conds: tuple[Cond, ...]
    why: str
    tier: Observe = Observe.WRITES


def _write_intent(name: str, flags_arg: int) -> tuple[Watch, ...]:
    """``open``-like calls: only those that may write (any of these flag bits set)."""
    bits = ((O_WRONLY, "O_WRONLY"), (O_RDWR, "O_RDWR"), (O_CREAT, "O_CREAT"), (O_TRUNC, "O_TRUNC"))
    return (*(Watch(name, (_bit(flags_arg, bit),), f"{label}: may write") for bit, label in bits),
            Watch(name, (), "every open: reads of masked paths", tier=Observe.ALL))


WATCH: tuple[Watch, ...] = (
    *_write_intent("open", 1),
    *_write_intent("openat", 2),
    Watch("openat2", (), "flags sit in a struct seccomp cannot read: every call"),
    Watch("creat", (), "creates or truncates"),
    Watch("truncate", (), "truncates a file by path"),
    *(Watch(n, (), "changes a file's mode or owner by path", tier=Observe.ALL)
      for n in ("chmod", "fchmodat", "fchmodat2", "chown", "lchown", "fchownat")),
    *(Watch(n, (), "changes a file's times by path", tier=Observe.ALL) for n in ("utime", "utimes", "futimesat")),
    Watch("utimensat", (Cond(1, Op.NE, 0),), "changes a file's times by path (NULL: by descriptor, not watched)",
          tier=Observe.ALL),
    *(Watch(n, (), "creates a directory entry") for n in ("mkdir", "mkdirat", "mknod", "mknodat", "link",
                                                          "linkat", "symlink", "symlinkat")),
    *(Watch(n, (), "removes or renames a directory entry") for n in ("rmdir", "unlink", "unlinkat", "rename",
                                                                      "renameat", "renameat2")),
    Watch("execve", (), "runs a file: exec of a masked path", tier=Observe.CALLS),
    Watch("execveat", (), "runs a file: exec of a masked path", tier=Observe.CALLS),
    Watch("connect", (), "unix sockets hidden by the policy; direct network connections", tier=Observe.CALLS),
    *(Watch(n, (), "changes the cwd: the supervisor's cwd cache is refreshed (never reported)",
            tier=Observe.CALLS) for n in ("chdir", "fchdir")),
)
"""CALLS entries are what ``--observe calls`` (the fast mode) watches: calls
a program makes a few of (an exec costs hundreds of microseconds by itself),
never one per file. A watched call costs a round trip to the supervisor
(5-7 µs on a 2-core VM, about 2 µs on an idle machine: two context
switches), so a job that creates 20,000 files pays 0.1-0.2 s whatever the
supervisor does; on tmpfs that is +30-50 % (docs/benchmarks.md). Write-intent
file calls are watched under WRITES (``--observe writes``, the default: a
refused write is explained) and ALL (``--observe all``, the default with
``--audit-log``); CALLS leaves them out for file-heavy jobs on tmpfs.

ALL entries are compiled only under Observe.ALL: every open, and the metadata calls
(chmod, chown, utimes), which Landlock does not restrict and bwrap refuses
only where the create or open before them was refused, and reported, already.
``tar x`` makes one of each per file: watching them by default doubled the
feed's cost (docs/benchmarks.md).

Not watched, on purpose: the descriptor forms (``fchmod``, ``fchown``,
``ftruncate``, ``futimens``) act on a file already opened, whose open was
watched; ``*xattr`` calls; ``bind``/``sendto`` addresses. docs/violations.md
lists what the feed does not see."""


def watched(observe: Observe) -> tuple[Watch, ...]:
    """The watch entries compiled for ``observe``."""
    match observe:
        case Observe.OFF:
            return ()
        case Observe.CALLS:
            return tuple(w for w in WATCH if w.tier is Observe.CALLS)
        case Observe.WRITES:
            return tuple(w for w in WATCH if w.tier is not Observe.ALL)
        case Observe.ALL:
            return WATCH
        case _:  # pragma: no cover
            assert_never(observe)


def notified(rule: Rule, observe: Observe) -> bool:
    """Whether ``rule`` notifies the supervisor (which answers with the
    rule's errno) instead of failing in the kernel. ENOSYS rules (clone3)
    stay in the kernel: glibc tries clone3 at every thread start, and
    "use clone" is not a refusal to explain."""
    return observe is not Observe.OFF and rule.action is Action.EPERM


def applies(rule: Rule, *, allow_unix_sockets: bool, allow_inet: InetMode, unix_seqpacket_only: bool = False) -> bool:
    """True when ``rule`` is part of the program compiled with these options
    (``unix_seqpacket_only``: unix sockets are on for a GPU alone)."""
    match rule.when:
        case When.ALWAYS:
            return True
        case When.UNIX_DENIED:
            return not allow_unix_sockets
        case When.UNIX_SEQPACKET_ONLY:
            return allow_unix_sockets and unix_seqpacket_only
        case When.INET_TCP_ONLY:
            return allow_inet is InetMode.TCP_ONLY
        case When.INET_NONE:
            return allow_inet is InetMode.NONE
        case _:  # pragma: no cover
            assert_never(rule.when)


def active_rules(*, allow_unix_sockets: bool, allow_inet: InetMode,
                 unix_seqpacket_only: bool = False) -> tuple[Rule, ...]:
    """The entries of :data:`RULES` compiled under these options, in order."""
    return tuple(r for r in RULES if applies(r, allow_unix_sockets=allow_unix_sockets, allow_inet=allow_inet,
                                             unix_seqpacket_only=unix_seqpacket_only))


def decide(syscall: str, args: tuple[int, ...] = (), *, allow_unix_sockets: bool,
           allow_inet: InetMode, unix_seqpacket_only: bool = False) -> Action | None:
    """What the table says for one call (``None``: allowed). Pure; no libseccomp.

    Matches what the compiled program does for the native ABI; the unit tests
    check the two against each other with a BPF interpreter.
    """
    padded = tuple(args) + (0,) * (6 - len(args))
    for rule in active_rules(allow_unix_sockets=allow_unix_sockets, allow_inet=allow_inet,
                             unix_seqpacket_only=unix_seqpacket_only):
        if rule.syscall == syscall and all(c.matches(padded) for c in rule.conds):
            return rule.action
    return None
