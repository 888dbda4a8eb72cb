"""The seccomp rule table and its compiled program, without installing anything.

A small classic-BPF interpreter runs the compiled program on made-up
``seccomp_data`` so the tests can check that what libseccomp emitted agrees
with the table (``seccomp.decide``), including the junk-in-the-upper-32-bits
cases the masks exist for.
"""

from __future__ import annotations

import errno
import os
import stat
import struct
import subprocess
import sys
from pathlib import Path

import pyseccomp  # noqa: E402  (a runtime dependency: missing is a failure, not a skip)
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safebox.builder import bpf_compile, seccomp
from safebox.builder.seccomp import Action, InetMode, Op

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_I386 = 0x40000003
RET_ALLOW = 0x7FFF0000
RET_KILL_PROCESS = 0x80000000
X32_SYSCALL_BIT = 0x4000_0000

ALL_OPTIONS = [(u, m) for u in (True, False) for m in InetMode]
U64 = st.integers(min_value=0, max_value=2**64 - 1)

def run_bpf(program: bytes, *, nr: int, args: tuple[int, ...] = (), arch: int = AUDIT_ARCH_X86_64) -> int:
    """Run a seccomp classic-BPF program on one seccomp_data; return the RET value."""
    padded = tuple(args) + (0,) * (6 - len(args))
    data = struct.pack("<iIQ6Q", nr, arch, 0, *padded)
    insns = bpf_compile.instructions(program)
    acc = 0
    pc = 0
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x54:  # BPF_ALU | BPF_AND | BPF_K
            acc &= k
        elif code == 0x05:  # BPF_JMP | BPF_JA
            pc += k
        elif code in (0x15, 0x25, 0x35, 0x45):  # JEQ, JGT, JGE, JSET (K)
            cond = {0x15: acc == k, 0x25: acc > k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if cond else jf
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        else:
            raise AssertionError(f"opcode {code:#x} not modelled")


def nr_of(name: str) -> int:
    nr = pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name)
    return nr if nr >= 0 else bpf_compile._FALLBACK_NUMBERS.get(os.uname().machine, {}).get(name, nr)


def expected_ret(action: Action | None) -> int:
    if action is None:
        return RET_ALLOW
    return 0x00050000 | {Action.EPERM: errno.EPERM, Action.ENOSYS: errno.ENOSYS}[action]


@pytest.fixture(scope="module")
def programs() -> dict[tuple[bool, InetMode], bytes]:
    return {opt: bpf_compile.compile_program(allow_unix_sockets=opt[0], allow_inet=opt[1]) for opt in ALL_OPTIONS}


def deny(name: str, *args: int, unix: bool = True, inet: InetMode = InetMode.ANY) -> Action | None:
    return seccomp.decide(name, args, allow_unix_sockets=unix, allow_inet=inet)


# ------------------------------------------------------------ table contents


def test_every_entry_documents_why_and_names_a_syscall_libseccomp_or_the_fallback_knows() -> None:
    for rule in seccomp.RULES:
        assert rule.why.strip(), rule
        assert nr_of(rule.syscall) != -1, rule.syscall


@pytest.mark.parametrize("name", ["io_uring_setup", "io_uring_enter", "io_uring_register", "ptrace",
                                  "process_vm_readv", "process_vm_writev", "bpf", "perf_event_open",
                                  "keyctl", "add_key", "request_key", "userfaultfd", "mount", "umount2",
                                  "move_mount", "open_tree", "fsopen", "fsconfig", "fsmount", "fspick",
                                  "mount_setattr", "pivot_root", "chroot", "setns", "kexec_load",
                                  "kexec_file_load", "init_module", "finit_module", "delete_module",
                                  "open_by_handle_at", "acct", "quotactl", "swapon", "swapoff", "reboot",
                                  "syslog", "ioperm", "iopl", "uselib", "pidfd_getfd"])
@pytest.mark.parametrize(("unix", "inet"), ALL_OPTIONS)
def test_dangerous_syscalls_are_denied_with_eperm_under_every_option(name: str, unix: bool, inet: InetMode) -> None:
    assert deny(name, unix=unix, inet=inet) is Action.EPERM


def test_clone3_gets_enosys_so_glibc_falls_back_to_clone() -> None:
    assert deny("clone3") is Action.ENOSYS


@pytest.mark.parametrize("name", ["socketpair", "read", "openat", "name_to_handle_at", "adjtimex", "seccomp"])
def test_ordinary_calls_are_allowed(name: str) -> None:
    assert deny(name, 0, 0, 0) is None


def test_tiocsti_and_tioclinux_are_matched_on_the_low_32_bits_only() -> None:
    conds = {r.conds for r in seccomp.RULES if r.syscall == "ioctl"}
    assert conds == {
        (seccomp.Cond(1, Op.MASKED_EQ, seccomp.TIOCSTI, 0xFFFF_FFFF),),
        (seccomp.Cond(1, Op.MASKED_EQ, seccomp.TIOCLINUX, 0xFFFF_FFFF),),
    }
    assert deny("ioctl", 0, 0x5412) is Action.EPERM
    assert deny("ioctl", 0, 0xDEAD_BEEF_0000_5412) is Action.EPERM
    assert deny("ioctl", 0, 0x5413) is None  # TIOCGWINSZ


@pytest.mark.parametrize("flag", list(seccomp._CLONE_NS_FLAGS.values()))
def test_clone_and_unshare_with_any_namespace_flag_are_denied(flag: int) -> None:
    assert deny("clone", flag | 17) is Action.EPERM  # 17: SIGCHLD in the exit-signal byte
    assert deny("unshare", flag) is Action.EPERM


def test_clone_without_namespace_flags_and_harmless_unshare_are_allowed() -> None:
    assert deny("clone", 0x3D0F00) is None  # pthread_create's flags
    assert deny("clone", 17) is None  # fork
    assert deny("unshare", 0x400) is None  # CLONE_FILES
    assert deny("unshare", seccomp.CLONE_NEWTIME) is Action.EPERM


def test_af_unix_toggles_with_allow_unix_sockets_and_socketpair_never_does() -> None:
    assert deny("socket", seccomp.AF_UNIX, 1, 0, unix=False) is Action.EPERM
    assert deny("socket", seccomp.AF_UNIX, 1, 0, unix=True) is None
    assert deny("socketpair", seccomp.AF_UNIX, 1, 0, unix=False) is None


@pytest.mark.parametrize(("unix", "inet"), ALL_OPTIONS)
def test_vsock_packet_and_exotic_families_are_always_denied(unix: bool, inet: InetMode) -> None:
    for family in (seccomp.AF_VSOCK, seccomp.AF_PACKET, 38, 44, 0, 15, 2**32 + 2):  # 38 ALG, 44 XDP
        assert deny("socket", family, 1, 0, unix=unix, inet=inet) is Action.EPERM, family


def test_netlink_is_limited_to_netlink_route() -> None:
    assert deny("socket", seccomp.AF_NETLINK, 3, seccomp.NETLINK_ROUTE) is None
    assert deny("socket", seccomp.AF_NETLINK, 3, 4) is Action.EPERM  # NETLINK_SOCK_DIAG


SOCK_NONBLOCK, SOCK_CLOEXEC = 0o4000, 0o2000000


@pytest.mark.parametrize("family", [seccomp.AF_INET, seccomp.AF_INET6])
def test_inet_modes(family: int) -> None:
    udp = (family, 2 | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)
    tcp = (family, 1 | SOCK_CLOEXEC, 0)
    tcp6 = (family, 1, 6)
    sctp = (family, 1, 132)
    mptcp = (family, 1, 262)
    raw = (family, 3, 1)
    for args in (udp, tcp, tcp6, sctp, mptcp, raw):
        assert deny("socket", *args, inet=InetMode.ANY) is None
        assert deny("socket", *args, inet=InetMode.NONE) is Action.EPERM
    for args in (tcp, tcp6):
        assert deny("socket", *args, inet=InetMode.TCP_ONLY) is None
    for args in (udp, sctp, mptcp, raw):
        assert deny("socket", *args, inet=InetMode.TCP_ONLY) is Action.EPERM, args


def test_tcp_fast_open_is_denied_only_in_tcp_only_mode() -> None:
    assert deny("sendto", 3, 0, 0, seccomp.MSG_FASTOPEN, inet=InetMode.TCP_ONLY) is Action.EPERM
    assert deny("sendmsg", 3, 0, seccomp.MSG_FASTOPEN, inet=InetMode.TCP_ONLY) is Action.EPERM
    assert deny("sendto", 3, 0, 0, 0x40, inet=InetMode.TCP_ONLY) is None  # MSG_DONTWAIT
    assert deny("sendto", 3, 0, 0, seccomp.MSG_FASTOPEN, inet=InetMode.ANY) is None


def test_personality_only_per_linux() -> None:
    assert deny("personality", 0) is None
    assert deny("personality", 0x0040000) is Action.EPERM  # ADDR_NO_RANDOMIZE
    assert deny("personality", 0xFFFF_FFFF) is Action.EPERM  # the query, as flatpak


# ----------------------------------------------------------- compiled program


@pytest.mark.parametrize(("unix", "inet"), ALL_OPTIONS)
def test_compiled_program_is_a_non_empty_multiple_of_8_bytes(programs, unix: bool, inet: InetMode) -> None:
    program = programs[(unix, inet)]
    assert len(program) > 0
    assert len(program) % 8 == 0
    assert len(program) // 8 <= bpf_compile.MAX_INSTRUCTIONS


def test_options_change_the_program(programs) -> None:
    assert len(set(programs.values())) == len(ALL_OPTIONS)


@pytest.mark.parametrize(("unix", "inet"), ALL_OPTIONS)
def test_compiled_program_agrees_with_the_table_for_every_entry(programs, unix: bool, inet: InetMode) -> None:
    program = programs[(unix, inet)]
    for rule in seccomp.RULES:
        nr = nr_of(rule.syscall)
        if nr < 0:
            continue  # not a native syscall (vm86): unreachable
        # Arguments that satisfy every condition of this rule.
        args = [0] * 6
        for c in rule.conds:
            args[c.arg] = {Op.EQ: c.value, Op.NE: c.value + 1, Op.GT: c.value + 1, Op.GE: c.value,
                           Op.MASKED_EQ: c.value}[c.op]
        want = seccomp.decide(rule.syscall, tuple(args), allow_unix_sockets=unix, allow_inet=inet)
        assert run_bpf(program, nr=nr, args=tuple(args)) == expected_ret(want), rule


@settings(max_examples=300, deadline=None, database=None)  # no .hypothesis/ in the repo
@given(name=st.sampled_from(["socket", "ioctl", "clone", "unshare", "personality", "sendto", "sendmsg",
                             "getpid", "clone3"]),
       args=st.tuples(*(st.one_of(U64, st.integers(0, 64), st.sampled_from([0x5412, 0x541C, 1 << 32 | 0x5412,
                                                                            2, 10, 16, 40, 0x2000_0000]))
                        for _ in range(6))),
       opt=st.sampled_from(ALL_OPTIONS))
def test_compiled_program_agrees_with_the_table_on_arbitrary_arguments(name, args, opt) -> None:
    program = bpf_compile.compile_program(allow_unix_sockets=opt[0], allow_inet=opt[1])
    want = seccomp.decide(name, args, allow_unix_sockets=opt[0], allow_inet=opt[1])
    assert run_bpf(program, nr=nr_of(name), args=args) == expected_ret(want)


def test_junk_in_the_upper_32_bits_still_matches(programs) -> None:
    program = programs[(False, InetMode.TCP_ONLY)]
    eperm = expected_ret(Action.EPERM)
    assert run_bpf(program, nr=nr_of("ioctl"), args=(0, 0xFFFF_FFFF_0000_5412)) == eperm
    assert run_bpf(program, nr=nr_of("socket"), args=(1 << 32 | seccomp.AF_UNIX, 1, 0)) == eperm
    assert run_bpf(program, nr=nr_of("socket"), args=(seccomp.AF_INET, 1 << 32 | 2, 0)) == eperm
    assert run_bpf(program, nr=nr_of("clone"), args=(1 << 32 | seccomp.CLONE_NEWUSER,)) == eperm


def test_other_abis_are_killed(programs) -> None:
    program = programs[(True, InetMode.ANY)]
    # int 0x80 from a 64-bit process is AUDIT_ARCH_I386: not in the filter.
    assert run_bpf(program, nr=20, arch=AUDIT_ARCH_I386) == RET_KILL_PROCESS
    # x32: AUDIT_ARCH_X86_64 with bit 30 set in nr; libseccomp sends it to ACT_BADARCH.
    assert run_bpf(program, nr=X32_SYSCALL_BIT | 39, arch=AUDIT_ARCH_X86_64) == RET_KILL_PROCESS
    assert run_bpf(program, nr=X32_SYSCALL_BIT | nr_of("ptrace")) == RET_KILL_PROCESS
    assert run_bpf(program, nr=39) == RET_ALLOW  # getpid
    assert run_bpf(program, nr=-1) == RET_ALLOW  # libseccomp lets nr -1 through (ENOSYS)


# ------------------------------------------------------------------- caching


def test_cache_key_changes_with_options_and_is_stable() -> None:
    keys = {bpf_compile.cache_key(allow_unix_sockets=u, allow_inet=m, libseccomp="2.5.4") for u, m in ALL_OPTIONS}
    assert len(keys) == len(ALL_OPTIONS)
    assert bpf_compile.cache_key(allow_unix_sockets=True, allow_inet=InetMode.ANY, libseccomp="2.5.4") == \
        bpf_compile.cache_key(allow_unix_sockets=True, allow_inet=InetMode.ANY, libseccomp="2.5.4")
    fid = bpf_compile.filter_id(allow_unix_sockets=True, allow_inet=InetMode.ANY, libseccomp="2.5.4")
    assert len(fid) == 16 and int(fid, 16) >= 0


def test_cache_key_changes_with_the_rule_table(monkeypatch: pytest.MonkeyPatch) -> None:
    before = bpf_compile.cache_key(allow_unix_sockets=True, allow_inet=InetMode.ANY, libseccomp="2.5.4")
    monkeypatch.setattr(seccomp, "RULES", seccomp.RULES[1:])
    assert bpf_compile.cache_key(allow_unix_sockets=True, allow_inet=InetMode.ANY, libseccomp="2.5.4") != before


def test_cache_key_changes_with_the_libseccomp_version() -> None:
    """libseccomp's output is not only a layout (CVE-2019-9893: wrong 64-bit
    argument comparisons before 2.4): an upgrade must recompile."""
    a = bpf_compile.cache_key(allow_unix_sockets=True, allow_inet=InetMode.ANY, libseccomp="2.3.3")
    assert a != bpf_compile.cache_key(allow_unix_sockets=True, allow_inet=InetMode.ANY, libseccomp="2.5.4")


def test_the_loaded_libseccomp_is_identified_by_its_file() -> None:
    version, ident = bpf_compile.libseccomp_identity()
    path, size, mtime, ino = ident.rsplit(" ", 3)
    st = os.stat(path)
    assert os.path.basename(path).startswith("libseccomp.so") and version.count(".") == 2
    assert (int(size), int(mtime), int(ino)) == (st.st_size, st.st_mtime_ns, st.st_ino)


def test_the_cache_writes_a_0600_entry_and_returns_the_same_program(tmp_path: Path) -> None:
    from safebox.builder import bpf_cache

    cache = tmp_path / "cache"
    program, fid = bpf_cache.load(cache_dir=str(cache), allow_unix_sockets=False, inet="none")
    assert program == bpf_compile.compile_program(allow_unix_sockets=False, allow_inet=InetMode.NONE)
    assert fid == bpf_compile.filter_id(allow_unix_sockets=False, allow_inet=InetMode.NONE,
                                        libseccomp=bpf_compile.libseccomp_version())
    (entry,) = cache.iterdir()  # one entry, no temp file left behind: the only cache
    assert entry.name.startswith("bpf-") and stat.S_IMODE(entry.stat().st_mode) == 0o600
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    assert bpf_cache.load(cache_dir=str(cache), allow_unix_sockets=False, inet="none") == (program, fid)


def test_corrupted_cache_entry_is_recompiled(tmp_path: Path) -> None:
    from safebox.builder import bpf_cache

    program, _ = bpf_cache.load(cache_dir=str(tmp_path), allow_unix_sockets=True, inet="any")
    (entry,) = tmp_path.glob("bpf-*.bin")
    entry.write_bytes(entry.read_bytes()[:-8] + b"\x06\x00\x00\x00\x00\x00\xff\x7f")  # last insn: RET ALLOW
    assert bpf_cache._read(str(entry)) is None  # the program no longer matches its digest
    again, _ = bpf_cache.load(cache_dir=str(tmp_path), allow_unix_sockets=True, inet="any")
    assert again == program


def test_unwritable_cache_dir_still_returns_the_program(tmp_path: Path) -> None:
    from safebox.builder import bpf_cache

    blocker = tmp_path / "file"
    blocker.write_bytes(b"")
    program, _ = bpf_cache.load(cache_dir=str(blocker / "sub"), allow_unix_sockets=True, inet="any")
    assert len(program) % 8 == 0 and program


_HIT_SCRIPT = """
import sys
from safebox.builder import bpf_cache
program, fid = bpf_cache.load(cache_dir=sys.argv[1], allow_unix_sockets=False, inet="tcp_only")
print(fid, len(program), "pyseccomp" in sys.modules, "safebox.builder.seccomp" in sys.modules,
      "safebox.builder.bpf_compile" in sys.modules)
"""


def test_cache_hit_does_not_import_pyseccomp(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    cmd = [sys.executable, "-c", _HIT_SCRIPT, str(tmp_path)]
    miss = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.split()
    hit = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout.split()
    assert miss[2] == "True"  # the first run compiled
    assert hit[:2] == miss[:2]
    assert hit[2:] == ["False", "False", "False"]  # the exec hot path: no pyseccomp, not even the rule table


def test_a_fast_entry_whose_libseccomp_file_changed_is_a_miss(tmp_path: Path) -> None:
    from safebox.builder import bpf_cache

    program, fid = bpf_cache.load(cache_dir=str(tmp_path), allow_unix_sockets=False, inet="none")
    (entry,) = tmp_path.glob("bpf-*.bin")
    head, sep, body = entry.read_bytes().partition(b"\n")
    *fields, lib = head.split(b" ")
    path, size, mtime, ino = bytes.fromhex(lib.decode()).decode().rsplit(" ", 3)
    assert bpf_cache._read(str(entry)) == (program, fid)  # control: the recorded file is the one loaded
    upgraded = f"{path} {size} {int(mtime) + 1} {ino}".encode().hex().encode()  # same path, another mtime
    entry.write_bytes(b" ".join([*fields, upgraded]) + sep + body)
    assert bpf_cache._read(str(entry)) is None


@pytest.mark.parametrize("inet", [InetMode.NONE, InetMode.ANY])
def test_a_gpu_alone_turns_on_seqpacket_unix_sockets_only_and_the_program_agrees(inet: InetMode) -> None:
    # CUDA's UVM descriptor server is SOCK_SEQPACKET (docs/gpu.md, "Unix
    # sockets"); every other type stays refused, with the flags in any bits
    # above the type (SOCK_NONBLOCK|SOCK_CLOEXEC) or junk in the upper 32.
    program = bpf_compile.compile_program(allow_unix_sockets=True, allow_inet=inet, unix_seqpacket_only=True)
    cloexec = 0o2000000
    for sock_type, want in ((5, None), (5 | cloexec, None), (1, Action.EPERM), (2, Action.EPERM),
                            (1 | cloexec, Action.EPERM), (1 << 32 | 1, Action.EPERM), (0, Action.EPERM),
                            (15, Action.EPERM)):
        args = (seccomp.AF_UNIX, sock_type, 0)
        got = seccomp.decide("socket", args, allow_unix_sockets=True, allow_inet=inet, unix_seqpacket_only=True)
        assert got == want, sock_type
        assert run_bpf(program, nr=nr_of("socket"), args=args) == expected_ret(want), sock_type
    # socketpair (pipes between the command's own processes) stays as it was.
    assert seccomp.decide("socketpair", (seccomp.AF_UNIX, 1, 0), allow_unix_sockets=True, allow_inet=inet,
                          unix_seqpacket_only=True) is None
    # With the policy's own unix sockets (allowUnixSockets) every type is on.
    assert seccomp.decide("socket", (seccomp.AF_UNIX, 1, 0), allow_unix_sockets=True, allow_inet=inet) is None


def test_the_seqpacket_only_program_has_its_own_cache_key() -> None:
    a = bpf_compile.cache_key(allow_unix_sockets=True, allow_inet=InetMode.ANY, libseccomp="2.5.4")
    b = bpf_compile.cache_key(allow_unix_sockets=True, allow_inet=InetMode.ANY, libseccomp="2.5.4",
                              unix_seqpacket_only=True)
    assert a != b
