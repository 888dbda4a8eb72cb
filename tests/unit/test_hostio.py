"""safebox.hostio: the one way host-side code touches a path a sandboxed
command could have shaped (docs/threat-model.md, "Host-side handling").

Each refusal has its control: the same operation on a plain file of this
user works. The last test reads the package's source and fails on a bare
open/rename of a path outside the list of call sites that have a reason.
"""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pytest

from safebox import hostio
from safebox.hostio import HostFileError

PACKAGE = Path(hostio.__file__).parent


def test_a_plain_file_of_this_user_is_read(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"data")
    assert hostio.read(str(tmp_path / "f")) == b"data"
    assert hostio.read(str(tmp_path / "absent")) is None


def test_a_symlink_planted_at_the_name_is_never_followed_for_reading(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("KEY")
    (tmp_path / "f").symlink_to(tmp_path / "secret")
    assert (tmp_path / "f").read_text() == "KEY"  # control: following it would read the key
    with pytest.raises(HostFileError, match="a symlink; safebox never follows one"):
        hostio.read(str(tmp_path / "f"))


def test_a_symlink_on_the_way_beneath_a_pinned_directory_is_never_followed(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "f").write_text("x")
    (tmp_path / "d").symlink_to(tmp_path / "elsewhere")
    with hostio.pin(str(tmp_path)) as d:
        assert d.read("elsewhere/f") == b"x"  # control: the real directory works
        with pytest.raises(HostFileError, match="'d' on the way is a symlink"):
            d.read("d/f")
        for bad in ("../x", "/etc/passwd", "a//b", "./f"):
            with pytest.raises(HostFileError):
                d.read(bad)


def test_a_hard_link_to_another_file_is_refused(tmp_path: Path) -> None:
    (tmp_path / "secret").write_text("KEY")
    os.link(tmp_path / "secret", tmp_path / "f")
    with pytest.raises(HostFileError, match="has 2 hard links"):
        hostio.read(str(tmp_path / "f"))
    with pytest.raises(HostFileError, match="has 2 hard links"):
        hostio.append(str(tmp_path / "f"), b"more")
    assert (tmp_path / "secret").read_text() == "KEY"


def test_a_fifo_or_directory_is_not_a_file_to_read(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "dir").mkdir()
    for name in ("fifo", "dir"):
        with pytest.raises(HostFileError, match="not a regular file|Is a directory"):
            hostio.read(str(tmp_path / name))


def test_a_file_larger_than_the_bound_is_refused_whole(tmp_path: Path) -> None:
    (tmp_path / "f").write_bytes(b"x" * 101)
    assert hostio.read(str(tmp_path / "f"), max_size=101) == b"x" * 101
    with pytest.raises(HostFileError, match="101 bytes, more than the 100"):
        hostio.read(str(tmp_path / "f"), max_size=100)


def test_a_file_of_another_user_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    if os.geteuid() == 0:
        os.chown(tmp_path / "f", 65534, 65534)
        other, uid = tmp_path / "f", 65534
    else:
        other, uid = Path("/etc/passwd"), 0  # root's, readable by all
    with pytest.raises(HostFileError, match=f"owned by uid {uid}, not by this user"):
        hostio.read(str(other))


def test_append_never_writes_through_a_planted_symlink(tmp_path: Path) -> None:
    rc = tmp_path / ".bashrc"
    rc.write_text("# rc\n")
    (tmp_path / "audit.jsonl").symlink_to(rc)
    with pytest.raises(HostFileError, match="a symlink"):
        hostio.append(str(tmp_path / "audit.jsonl"), b'{"path":"$(id)"}\n')
    assert rc.read_text() == "# rc\n"
    hostio.append(str(tmp_path / "log"), b"a\n")  # control: a new file, then an append
    hostio.append(str(tmp_path / "log"), b"b\n")
    assert (tmp_path / "log").read_text() == "a\nb\n"
    assert stat.S_IMODE((tmp_path / "log").stat().st_mode) == 0o600


def test_replace_writes_a_character_device_in_place_and_never_renames_over_it() -> None:
    dev = Path("/dev/null")
    before = dev.stat()
    hostio.replace(str(dev), b"{}\n")
    after = dev.stat()
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


def test_replace_refuses_a_symlink_a_directory_and_a_linked_file(tmp_path: Path) -> None:
    (tmp_path / "target").write_text("keep")
    (tmp_path / "link").symlink_to(tmp_path / "target")
    (tmp_path / "dir").mkdir()
    os.link(tmp_path / "target", tmp_path / "hard")
    for name, why in (("link", "not a regular file"), ("dir", "not a regular file"), ("hard", "2 hard links")):
        with pytest.raises(HostFileError, match=why):
            hostio.replace(str(tmp_path / name), b"new")
    assert (tmp_path / "target").read_text() == "keep"
    assert (tmp_path / "link").is_symlink()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dir", "hard", "link", "target"]  # no temp left


def test_replace_renames_a_new_file_over_a_plain_one_of_ours(tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text("old")
    hostio.replace(str(tmp_path / "p.json"), b"new", mode=0o644)
    assert (tmp_path / "p.json").read_text() == "new"
    assert stat.S_IMODE((tmp_path / "p.json").stat().st_mode) == 0o644
    hostio.replace(str(tmp_path / "fresh.json"), b"x")
    assert (tmp_path / "fresh.json").read_text() == "x"


def test_a_pinned_directory_keeps_its_identity_when_its_name_is_replaced(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "other").mkdir()
    with hostio.pin(str(tmp_path / "d")) as d:
        (tmp_path / "d").rename(tmp_path / "moved")
        (tmp_path / "d").symlink_to(tmp_path / "other")
        d.append("f", b"x")
    assert (tmp_path / "moved" / "f").read_text() == "x"
    assert not (tmp_path / "other" / "f").exists()


def test_rename_to_moves_a_symlink_as_a_link_and_never_over_an_existing_name(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "dst").mkdir()
    (tmp_path / "src" / "l").symlink_to("/etc/passwd")
    (tmp_path / "dst" / "taken").write_text("x")
    with hostio.pin(str(tmp_path / "src")) as s, hostio.pin(str(tmp_path / "dst")) as d:
        with pytest.raises(HostFileError, match="already exists"):
            s.rename_to("l", d, "taken")
        s.rename_to("l", d, "moved")
    assert os.readlink(tmp_path / "dst" / "moved") == "/etc/passwd"
    assert (tmp_path / "dst" / "taken").read_text() == "x"


# ------------------------------------------------------------------ the rule over the source

#: Call sites in python/safebox that open, rename or replace a path without
#: safebox.hostio, each with why that path is one no sandboxed command could
#: have shaped. "module:function" -> reason. A new site fails the test below:
#: use safebox.hostio, or add it here with its reason.
ALLOWED: dict[str, str] = {
    "_record:rmtree": "O_NOFOLLOW walk by directory descriptors",
    "_record:_rmtree_at": "O_NOFOLLOW walk by directory descriptors",
    "_record:open_to_owner": "an O_PATH|O_NOFOLLOW descriptor of a directory of ours, for its mode",
    "_record:set_mode": "an O_PATH|O_NOFOLLOW descriptor of a directory of ours, for its mode",
    "_record:read_small": ("read before the run to decide what to protect (.git files, git configs): a link "
                           "followed there only widens protection (tests/security/test_planted_links.py)"),
    "api/popen:_stdio_fd": "os.devnull",
    "api/popen:Popen._open_ends": "pipe descriptors safebox made",
    "builder/caches:_level": ("the preset caches: each level opened beneath the one above with "
                              "O_NOFOLLOW|O_DIRECTORY, type and owner checked with fstat"),
    "builder/helper_policy:write_policy_file": "the run dir, safebox's own, O_EXCL|O_NOFOLLOW",
    "builder/bpf_compile:libseccomp_identity": "/proc/self/maps",
    "run/cgroups:*": "/proc and cgroupfs",
    "ci_job/run:CiRun.materialize": "the run dir, safebox's own, O_EXCL",
    "ci_job/secrets:_ancestor_exes": "/proc/PID/stat",
    "ci_job/secrets:git_credentials": "read before the command runs (a scrubbed copy is shown inside)",
    "cli/__init__:_report": "os.devnull (a reader that closed the pipe)",
    "cli/policy:_policy_show": "os.devnull (a reader that closed the pipe)",
    "cli/policy:_policy_diff": "os.devnull (a reader that closed the pipe)",
    "run/credentials:*": "read before the command runs; the fake is created O_EXCL|O_NOFOLLOW in the run dir",
    "builder/deepwatch:*": ("the watch at any depth: candidates read with O_NOFOLLOW, moves by directory "
                            "descriptors opened O_NOFOLLOW from the write root down, EXDEV copied the same way "
                            "(deepwatch.move_out)"),
    "doctor/host:*": "host files doctor inspects; no sandbox has run",
    "run/helper_binary:*": "/proc/self/uid_map",
    "run/limits:*": ("markers in safebox's state (whether this bwrap takes --size); /proc/PID/root of the "
                     "sandbox's init, O_PATH"),
    "run/mounter:*": "/proc/PID/ns/mnt",
    "run/netsetup:*": "the run dir, safebox's own, O_EXCL|O_NOFOLLOW",
    "policy/sources:*": "the policy file the user named, read before the run",
    "runtime/terminal:TerminalPrompt.__call__": "/dev/tty, the controlling terminal, O_NOCTTY; a fixed device path",
    "proxy/tls:*": "certificates safebox generated in its state dir",
    "review/apply:*": ("the held run's apply: every open, mkdir and rename is an *at call beneath a write root "
                       "and a layer pinned by descriptors, each directory opened O_NOFOLLOW (hostio.PinnedDir."
                       "parent_of), the target created O_EXCL beside (tests/security/test_review.py)"),
    "review/cli:*": "os.devnull",
    "review/layer:*": ("the layers are walked by directory descriptors opened O_NOFOLLOW; files read after fstat "
                       "says regular (the host's beneath a pinned root, hostio.PinnedDir)"),
    "review/mounts:*": "/proc/PID/mountinfo and /proc/PID/ns/mnt of the sandbox safebox started",
    "review/store:_take_spare": ("review/.spare to a new held run's name: both in safebox's state dir, which no "
                                 "sandbox can write; what it took is then checked (lstat, owner, mode, empty layers)"),
    "review/store:recycle": ("an empty held run to review/.spare, in safebox's state dir: the run's layers were "
                             "checked empty, the directory is safebox's own"),
    "run/host:*": "/proc/self/mountinfo",
    "run/spawn:*": "/proc",
    "run/protect:*": "the quarantine: parents resolved before the run and re-checked (run/protect.py)",
    "run/rundir:*": "the run dir's lock, safebox's own",
    "violations/observer:*": "the run's events file, created O_EXCL|O_NOFOLLOW in the run dir",
}

_CALLS = {"open", "os.open", "os.rename", "os.replace", "os.renames", "io.open", "shutil.move", "shutil.copy",
          "shutil.copyfile", "shutil.copy2"}
_METHODS = {"write_text", "write_bytes", "read_text", "read_bytes", "rename", "replace", "symlink_to", "hardlink_to"}


def _calls_in(node: ast.AST, mod: str, stack: list[str], out: list[tuple[str, str, int, str]]) -> None:
    named = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    if named:
        stack.append(node.name)  # type: ignore[attr-defined]
    if isinstance(node, ast.Call):
        f = node.func
        name = (f.id if isinstance(f, ast.Name) else
                f"{f.value.id}.{f.attr}" if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name)
                else None)
        method = f.attr if isinstance(f, ast.Attribute) else None
        if name in _CALLS or (method in _METHODS and not (isinstance(f, ast.Attribute)
                                                          and isinstance(f.value, ast.Constant))):
            out.append((mod, ".".join(stack) or "<module>", node.lineno, name or f"*.{method}"))
    for child in ast.iter_child_nodes(node):
        _calls_in(child, mod, stack, out)
    if named:
        stack.pop()


def _sites() -> list[tuple[str, str, int, str]]:
    out: list[tuple[str, str, int, str]] = []
    for path in sorted(PACKAGE.rglob("*.py")):
        mod = path.relative_to(PACKAGE).with_suffix("").as_posix()
        if mod != "hostio":
            _calls_in(ast.parse(path.read_text(), str(path)), mod, [], out)
    return out


def test_every_bare_open_or_rename_in_the_package_is_on_the_list_with_a_reason() -> None:
    unlisted = []
    for mod, func, line, call in _sites():
        if call.endswith(".replace") and call != "os.replace":
            continue  # str.replace and the like; Path.replace is caught by name below
        if f"{mod}:{func}" in ALLOWED or f"{mod}:*" in ALLOWED:
            continue
        unlisted.append(f"python/safebox/{mod}.py:{line} {func}: {call}")
    assert not unlisted, ("a path opened or renamed without safebox.hostio; use it, or add the site to ALLOWED "
                          "with why no sandboxed command could have shaped that path:\n" + "\n".join(unlisted))


def test_the_list_names_no_site_that_is_gone() -> None:
    present = {f"{m}:{f}" for m, f, _, _ in _sites()} | {f"{m}:*" for m, _, _, _ in _sites()}
    stale = sorted(k for k in ALLOWED if k not in present)
    assert not stale, f"ALLOWED names call sites that no longer exist: {stale}"
