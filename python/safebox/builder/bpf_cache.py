"""The seccomp program cache (the only one).

``builder/seccomp.py`` owns the rule table and ``builder/bpf_compile.py``
compiles it; importing them costs ~20 ms (dataclasses, typing, hashlib,
platform). This cache answers the common case — nothing changed — from
entries keyed on the safebox version, the identity of those two files
(size and mtime, as Python's own .pyc cache does) and the options, with the
identity of the libseccomp file the entry was compiled with checked on read
(one stat: an upgraded library is a miss), and imports them only on a miss
(``bpf_compile.compile_with_id``).

An entry's digest is its own: it catches a torn or corrupt file, not a
forgery (a writer could recompute it, as the review's forged allow-all
programs did). What the entry is checked against is where it lives: out of
every sandbox's reach (issue 22).

1. The state dir is read-only inside, whatever the policy: a write root at
   or inside it is refused, and one above it is bound before the state
   dir's read-only bind, in bubblewrap's argv and in the mounter's plan
   (builder/resolve.py ``_state_masks``, builder/bulk.py).
2. Under bubblewrap ``STATE/cache`` is masked in every sandbox, an empty
   read-only tmpfs made after every write bind: the command can neither
   read nor write an entry, even through a mount mistake in (1).
3. On a helper-only host Landlock keeps the state dir out of every write
   grant (builder/resolve.py ``landlock_rules``, ``write_exclude``).

Chosen over recomputing the digest, which needs the compile this cache
exists to skip (~20 ms a start), and over an HMAC, whose key would have to
be hidden from every sandbox the same way (a mask) to mean anything, and
then adds nothing to (2). Entries are still checked on read: ours, 0600,
magic, digest, size a non-zero multiple of 8, the same libseccomp.
"""

from __future__ import annotations

import os

from safebox import __version__
from safebox._record import sha256_hex

_MAGIC = b"safebox-bpf-fast 2 "


#: The files a program is made from: the rule table and its compiler.
_SOURCES = ("seccomp.py", "bpf_compile.py")


def _source_identity() -> list[int]:
    """(size, mtime, inode) of each of :data:`_SOURCES`."""
    here = os.path.dirname(os.path.realpath(__file__))
    out: list[int] = []
    for name in _SOURCES:
        st = os.stat(os.path.join(here, name))
        out += (st.st_size, st.st_mtime_ns, st.st_ino)
    return out


def fast_key(*, allow_unix_sockets: bool, inet: str, observe: str = "off", unix_seqpacket_only: bool = False) -> str:
    """Key from cheap facts only: no import of the rule table."""
    material = repr((__version__, *_source_identity(), os.uname().machine,
                     allow_unix_sockets, inet) + ((observe,) if observe != "off" else ())
                    + (("unix_seqpacket_only",) if unix_seqpacket_only else ()))
    return sha256_hex(material.encode())[:32]


def _read(path: str) -> tuple[bytes, str] | None:
    from safebox.hostio import HostFileError, open_read

    try:
        # hostio: no link followed, a regular file of ours with one link.
        fd = open_read(path, max_size=1 << 16)
    except HostFileError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_mode & 0o077:
            return None
        data = os.read(fd, st.st_size + 1)
    finally:
        os.close(fd)
    if not data.startswith(_MAGIC):
        return None
    header, sep, program = data[len(_MAGIC):].partition(b"\n")
    if not sep or not program or len(program) % 8:
        return None
    fid, digest, lib = (header.decode("ascii", "replace").split(" ") + ["", ""])[:3]
    if sha256_hex(program) != digest or not _same_library(lib):
        return None
    return program, fid


def _same_library(lib_hex: str) -> bool:
    """Whether the libseccomp the entry was compiled with is still the file
    at its path (size, mtime, inode): an upgraded library is a miss, and the
    slow path recompiles, its filter id naming the new version (bpf_compile.compile_with_id)."""
    try:
        path, size, mtime, ino = bytes.fromhex(lib_hex).decode().rsplit(" ", 3)
        st = os.stat(path)
    except (ValueError, OSError):
        return False
    return (str(st.st_size), str(st.st_mtime_ns), str(st.st_ino)) == (size, mtime, ino)


def load(*, cache_dir: str, allow_unix_sockets: bool, inet: str, observe: str = "off",
         unix_seqpacket_only: bool = False) -> tuple[bytes, str]:
    """(BPF program, filter id) for these options (``observe``: a
    ``seccomp.Observe`` value; "off" is the plain denylist;
    ``unix_seqpacket_only``: unix sockets on for a GPU alone)."""
    key = fast_key(allow_unix_sockets=allow_unix_sockets, inet=inet, observe=observe,
                   unix_seqpacket_only=unix_seqpacket_only)
    path = os.path.join(cache_dir, f"bpf-{key}.bin")
    hit = _read(path)
    if hit is not None:
        return hit
    from safebox.builder.bpf_compile import compile_with_id
    from safebox.builder.seccomp import InetMode, Observe

    program, fid, lib = compile_with_id(allow_unix_sockets=allow_unix_sockets, allow_inet=InetMode(inet),
                                        observe=Observe(observe), unix_seqpacket_only=unix_seqpacket_only)
    from safebox.hostio import HostFileError, replace

    try:
        os.makedirs(cache_dir, mode=0o700, exist_ok=True)
        blob = _MAGIC + f"{fid} {sha256_hex(program)} {lib.encode().hex()}\n".encode() + program
        replace(path, blob, mode=0o600)
    except (OSError, HostFileError):
        pass  # an unwritable cache only costs speed
    return program, fid
