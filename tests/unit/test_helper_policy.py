"""Golden helper policy bytes (format v2, docs/helper-protocol.md)."""

from __future__ import annotations

import os
import stat

import pytest

from safebox.builder.helper_policy import FsAccess, HelperPolicy, NetMode, Scope, render, write_policy_file


def test_policy_renders_to_the_golden_bytes() -> None:
    hp = HelperPolicy(fs_rules=((FsAccess.READ, "/"), (FsAccess.WRITE, "/home/u/p q\n")),
                      net=NetMode.PROXY, connect_ports=(3128, 1080), seccomp_path="/r/s.bpf",
                      listens=(3128, 1080), publishes=((8080, "/r/pub/8080.sock"),),
                      socat_path="/usr/bin/socat", strict=True)
    assert render(hp) == (
        b"safebox-policy 3\n"
        b"strict 1\n"
        b"landlock on\n"
        b"fs read 2f\n"
        b"fs write 2f686f6d652f752f7020710a\n"
        b"net proxy\n"
        b"connect_port 3128\n"
        b"connect_port 1080\n"
        b"bind none\n"
        b"scope abstract_unix\n"
        b"scope signal\n"
        b"seccomp 2f722f732e627066\n"
        b"listen 3128\n"
        b"listen 1080\n"
        b"socat 2f7573722f62696e2f736f636174\n"
        b"publish 8080 " + b"/r/pub/8080.sock".hex().encode() + b"\n"
        b"end\n"
    )


def test_paths_with_newlines_and_spaces_cannot_inject_a_record() -> None:
    hp = HelperPolicy(fs_rules=((FsAccess.WRITE, "/x\nfs write /"),), net=NetMode.OFF, scopes=(Scope.SIGNAL,))
    lines = render(hp).decode().splitlines()
    assert [ln for ln in lines if ln.startswith("fs ")] == ["fs write " + b"/x\nfs write /".hex()]


def test_published_ports_without_socat_are_rejected() -> None:
    with pytest.raises(ValueError):
        render(HelperPolicy(fs_rules=(), net=NetMode.PROXY, publishes=((1, "/s"),)))


def test_proxy_ports_need_no_socat() -> None:
    out = render(HelperPolicy(fs_rules=(), net=NetMode.PROXY, listens=(3128,)))
    assert b"listen 3128\n" in out and b"socat" not in out


def test_policy_file_is_created_0600_and_never_through_a_symlink(tmp_path) -> None:
    p = tmp_path / "policy"
    write_policy_file(p, b"data")
    assert stat.S_IMODE(os.stat(p).st_mode) == 0o600
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "target")
    with pytest.raises(FileExistsError):
        write_policy_file(link, b"x")
    assert not (tmp_path / "target").exists()


def test_the_dry_run_view_decodes_every_hex_path_and_changes_nothing_else() -> None:
    from safebox.builder.helper_policy import readable

    hp = HelperPolicy(fs_rules=((FsAccess.READ, "/"), (FsAccess.WRITE, "/home/u/p q"),
                                (FsAccess.WRITE, os.fsdecode(b"/home/u/\xff\n"))),
                      net=NetMode.PROXY, connect_ports=(3128,), seccomp_path="/r/s.bpf",
                      listens=(3128,), publishes=((8080, "/r/pub/8080.sock"),), socat_path="/usr/bin/socat")
    raw = render(hp)
    shown = readable(raw)
    assert shown.splitlines() == [
        "safebox-policy 3", "strict 0", "landlock on",
        "fs read /",
        "fs write '/home/u/p q'",
        "fs write b'/home/u/\\xff\\n'",  # not printable: a bytes literal, still one line
        "net proxy", "connect_port 3128", "bind none", "scope abstract_unix", "scope signal",
        "seccomp /r/s.bpf", "listen 3128", "socat /usr/bin/socat", "publish 8080 /r/pub/8080.sock", "end"]
    # Control: the file itself keeps hex.
    assert b"fs write " + b"/home/u/p q".hex().encode() + b"\n" in raw
