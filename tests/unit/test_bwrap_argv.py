"""Golden argv lists for the pure bwrap builder, and the ordering it depends on."""

from __future__ import annotations

import pytest

from safebox.builder.bwrap import build_argv, command_args, mount_args
from safebox.builder.resolved import Bridge, Layers, NetKind, ResolvedPolicy


def policy(**kw) -> ResolvedPolicy:
    base = dict(layers=Layers.BOTH, cwd="/home/u/proj", write_roots=("/home/u/proj",), read_only=(),
                sealed_dirs=(), helper_path="/opt/sb/safebox-helper", policy_path="/run/sb/1/policy",
                run_dir="/run/sb/1", empty_file="/run/sb/1/empty")
    base.update(kw)
    return ResolvedPolicy(**base)


def test_minimal_policy_produces_the_golden_argv() -> None:
    argv = build_argv(policy(), ["make", "test"], status_fd=5, bwrap_status_fd=6)
    assert argv == [
        "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/proc/1",
        "--tmpfs", "/tmp",
        "--bind", "/home/u/proj", "/home/u/proj",
        "--ro-bind", "/run/sb/1", "/run/sb/1",
        "--remount-ro", "/proc/1",
        "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL",
        "--hostname", "safebox", "--chdir", "/home/u/proj", "--json-status-fd", "6",
        "--", "/opt/sb/safebox-helper", "--policy-file", "/run/sb/1/policy", "--status-fd", "5",
        "--", "make", "test",
    ]


def test_full_policy_produces_the_golden_argv() -> None:
    rp = policy(
        write_roots=("/home/u", "/home/u/proj"),
        pinned_dirs=("/home/u/proj/.git",),
        sealed_dirs=(("/home/u/other/.git", ("/home/u/other/.git/objects", "/home/u/other/.git/HEAD")),),
        read_only=("/home/u/.bashrc", "/home/u/proj/.git/config", "/home/u/proj/.git/hooks"),
        mask_dirs=("/home/u/.ssh", "/mnt/c/Users/u/.aws", "/tmp/secret"),
        mask_files=("/home/u/.netrc", "/etc/shadow"),
    )
    assert mount_args(rp) == [
        "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/proc/1",
        "--tmpfs", "/tmp",
        "--bind", "/home/u", "/home/u",
        "--bind", "/home/u/proj", "/home/u/proj",
        "--bind", "/home/u/proj/.git", "/home/u/proj/.git",
        "--ro-bind", "/home/u/other/.git", "/home/u/other/.git",
        "--bind", "/home/u/other/.git/objects", "/home/u/other/.git/objects",
        "--bind", "/home/u/other/.git/HEAD", "/home/u/other/.git/HEAD",
        "--ro-bind", "/home/u/.bashrc", "/home/u/.bashrc",
        "--ro-bind", "/home/u/proj/.git/config", "/home/u/proj/.git/config",
        "--ro-bind", "/home/u/proj/.git/hooks", "/home/u/proj/.git/hooks",
        "--tmpfs", "/home/u/.ssh",
        "--tmpfs", "/mnt/c/Users/u/.aws",
        "--ro-bind", "/run/sb/1/empty", "/home/u/.netrc",
        "--ro-bind", "/run/sb/1/empty", "/etc/shadow",
        "--ro-bind", "/run/sb/1", "/run/sb/1",
        "--remount-ro", "/proc/1",
        "--remount-ro", "/home/u/.ssh",
        "--remount-ro", "/mnt/c/Users/u/.aws",
    ]


def test_masks_come_after_every_write_bind_so_a_write_root_cannot_uncover_them() -> None:
    rp = policy(write_roots=("/home/u",), mask_dirs=("/home/u/.ssh",), mask_files=("/home/u/.netrc",))
    a = mount_args(rp)
    assert a.index("/home/u/.ssh") > a.index("--bind")
    assert a.index("/home/u/.netrc") > a.index("--bind")


def test_deny_read_tmpfs_is_remounted_read_only_after_everything_else() -> None:
    a = mount_args(policy(mask_dirs=("/home/u/.aws",)))
    assert a[-2:] == ["--remount-ro", "/home/u/.aws"]


def test_masks_inside_the_private_tmp_are_not_mounted_where_nothing_brings_the_host_path_back() -> None:
    a = mount_args(policy(mask_dirs=("/tmp/x",), mask_files=("/tmp/y",)))
    assert "/tmp/x" not in a and "/tmp/y" not in a


def test_a_work_dir_under_tmp_keeps_its_masks_in_the_golden_argv() -> None:
    """Issue 11 item 1: masks under the private /tmp were skipped even beneath
    a work dir (or $HOME) bound back into it."""
    rp = policy(cwd="/tmp/task", write_roots=("/tmp/task",), read_only=("/tmp/task/.bashrc",),
                mask_dirs=("/tmp/task/.ssh", "/tmp/other/.ssh"),
                mask_files=("/tmp/task/s", "/tmp/other/s", "/home/u/.netrc"))
    assert mount_args(rp) == [
        "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/proc/1",
        "--tmpfs", "/tmp",
        "--bind", "/tmp/task", "/tmp/task",
        "--ro-bind", "/tmp/task/.bashrc", "/tmp/task/.bashrc",
        "--tmpfs", "/tmp/task/.ssh",
        "--ro-bind", "/run/sb/1/empty", "/tmp/task/s",
        "--ro-bind", "/run/sb/1/empty", "/home/u/.netrc",
        "--ro-bind", "/run/sb/1", "/run/sb/1",
        "--remount-ro", "/proc/1",
        "--remount-ro", "/tmp/task/.ssh",
    ]


@pytest.mark.parametrize("bind", ["write_roots", "pinned_dirs", "read_only", "sealed"])
def test_a_mask_under_the_private_tmp_comes_after_the_tmpfs_and_the_bind_that_brings_it_back(bind: str) -> None:
    kw: dict[str, object] = {"write_roots": ("/tmp/w",)}
    match bind:
        case "write_roots":
            kw["write_roots"] = ("/tmp/w", "/tmp/w2")
        case "pinned_dirs":
            kw["pinned_dirs"] = ("/tmp/w2",)
        case "read_only":
            kw["read_only"] = ("/tmp/w2",)
        case "sealed":
            kw["sealed_dirs"] = (("/tmp/w2", ("/tmp/w2/objects",)),)
    a = mount_args(policy(mask_dirs=("/tmp/w2/d",), mask_files=("/tmp/w/f",), **kw))
    tmpfs_tmp = a.index("/tmp") if a[a.index("/tmp") - 1] == "--tmpfs" else -1
    assert tmpfs_tmp > 0
    d, f = a.index("/tmp/w2/d"), a.index("/tmp/w/f")
    assert a[d - 1] == "--tmpfs" and a[f - 2:f] == ["--ro-bind", "/run/sb/1/empty"]
    assert tmpfs_tmp < a.index("/tmp/w") < f
    assert tmpfs_tmp < a.index("/tmp/w2") < d
    assert a[-2:] == ["--remount-ro", "/tmp/w2/d"]


def test_without_helper_the_command_runs_behind_the_launcher_shell() -> None:
    argv = build_argv(policy(layers=Layers.BWRAP_ONLY), ["id"], status_fd=5)
    tail = argv[argv.index("--"):]
    assert tail[:3] == ["--", "/bin/sh", "-c"]
    assert tail[-2:] == ["safebox-launcher", "id"]
    assert ">&5" in tail[3]


def test_with_the_helper_the_mounters_handshake_is_the_helpers_own_with_no_shell_in_front() -> None:
    # --review: held at the handshake, then the working directory entered again (the overlay's).
    tail = command_args(policy(review_layers="/s/review/x/layers"), ["id"], status_fd=3, socat="socat", sync_fd=6)
    assert tail == ["--", "/opt/sb/safebox-helper", "--policy-file", "/run/sb/1/policy", "--status-fd", "3",
                    "--sync-fd", "6", "--enter-cwd", "/home/u/proj", "--", "id"]
    # A big policy's mounts only: held, and the directory bubblewrap entered is the right one.
    assert command_args(policy(), ["id"], status_fd=3, socat="socat", sync_fd=6)[4:8] == ["--status-fd", "3",
                                                                                          "--sync-fd", "6"]
    # Control: without the helper the launcher shell holds the command, as before.
    shell = command_args(policy(layers=Layers.BWRAP_ONLY, review_layers="/s"), ["id"], status_fd=3, socat="socat",
                         sync_fd=6)
    assert shell[:3] == ["--", "/bin/sh", "-c"] and "printf R >&6" in shell[3] and "cd -- '/home/u/proj'" in shell[3]


def test_bridges_are_started_by_the_launcher_when_there_is_no_helper() -> None:
    rp = policy(layers=Layers.BWRAP_ONLY, net=NetKind.PROXY,
                bridges=(Bridge(port=3128, socket_path="/run/sb/1/http.sock", scheme="http"),))
    argv = build_argv(rp, ["true"], status_fd=None, socat="/usr/bin/socat")
    script = argv[argv.index("-c") + 1]
    assert "TCP-LISTEN:3128,bind=127.0.0.1" in script
    assert "UNIX-CONNECT:/run/sb/1/http.sock" in script


def test_helper_only_runs_have_no_bwrap_argv() -> None:
    with pytest.raises(ValueError):
        build_argv(policy(layers=Layers.HELPER_ONLY), ["true"], status_fd=5)


def test_every_namespace_is_unshared_and_the_session_is_new() -> None:
    argv = build_argv(policy(), ["true"], status_fd=None)
    for flag in ("--unshare-all", "--new-session", "--die-with-parent"):
        assert flag in argv
    assert "--share-net" not in argv


def test_a_helper_installed_under_tmp_is_bound_into_the_private_tmp() -> None:
    a = mount_args(policy(helper_path="/tmp/x/.venv/safebox-helper"))
    i = a.index("--tmpfs")
    j = a.index("/tmp/x/.venv/safebox-helper")
    assert a[j - 1] == "--ro-bind" and j > i


def test_a_ci_jobs_scrubbed_git_config_covers_the_read_only_original_after_the_masks() -> None:
    rp = policy(read_only=("/home/u/proj/.git/config",), mask_files=("/home/u/.npmrc",),
                overlays=(("/run/sb/1/git-config-0", "/home/u/proj/.git/config"),))
    a = mount_args(rp)
    cover = a.index("/run/sb/1/git-config-0")
    assert a[cover - 1:cover + 2] == ["--ro-bind", "/run/sb/1/git-config-0", "/home/u/proj/.git/config"]
    assert cover > a.index("/home/u/.npmrc") > a.index("/home/u/proj/.git/config")  # last: nothing uncovers it


def test_a_scrubbed_copy_is_not_mounted_where_the_private_tmp_hides_the_original() -> None:
    rp = policy(overlays=(("/run/sb/1/git-config-0", "/tmp/other/.git/config"),))
    assert "/run/sb/1/git-config-0" not in mount_args(rp)
    brought_back = policy(write_roots=("/home/u/proj", "/tmp/other"),
                          overlays=(("/run/sb/1/git-config-0", "/tmp/other/.git/config"),))
    assert "/run/sb/1/git-config-0" in mount_args(brought_back)


def test_a_carve_out_is_bound_back_over_its_mask_and_the_mounts_beneath_it_come_after() -> None:
    # denyRead ~, allowRead ~/proj (a write root, so writable), denyRead ~/proj/secrets;
    # a protected file and a pinned .git in the work tree; the default ~/.ssh mask is redundant.
    rp = policy(write_roots=("/home/u/proj",), pinned_dirs=("/home/u/proj/.git",),
                read_only=("/home/u/proj/.git/config", "/usr/x"),
                mask_dirs=("/home/u", "/home/u/proj/secrets"), mask_files=("/etc/shadow",),
                carve_outs=(("/home/u/proj", True),))
    assert mount_args(rp) == [
        "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/proc/1",
        "--tmpfs", "/tmp",
        "--ro-bind", "/usr/x", "/usr/x",
        "--tmpfs", "/home/u",
        "--ro-bind", "/run/sb/1/empty", "/etc/shadow",
        "--bind", "/home/u/proj", "/home/u/proj",
        "--bind", "/home/u/proj/.git", "/home/u/proj/.git",
        "--ro-bind", "/home/u/proj/.git/config", "/home/u/proj/.git/config",
        "--tmpfs", "/home/u/proj/secrets",
        "--ro-bind", "/run/sb/1", "/run/sb/1",
        "--remount-ro", "/proc/1", "--remount-ro", "/home/u", "--remount-ro", "/home/u/proj/secrets",
    ]


def test_nested_carve_outs_are_bound_shallow_first_each_after_its_own_mask() -> None:
    rp = policy(write_roots=(), mask_dirs=("/home/u", "/home/u/p/vendor"),
                carve_outs=(("/home/u/p", False), ("/home/u/p/vendor/x", False)))
    a = mount_args(rp)
    order = [a.index(x) for x in ("/home/u", "/home/u/p", "/home/u/p/vendor", "/home/u/p/vendor/x")]
    assert order == sorted(order)
    assert a[a.index("/home/u/p") - 1] == "--ro-bind" and a[a.index("/home/u/p/vendor/x") - 1] == "--ro-bind"
    assert a[-4:] == ["--remount-ro", "/home/u", "--remount-ro", "/home/u/p/vendor"]


def test_a_masked_file_is_covered_by_safeboxs_own_empty_file_never_the_hosts_dev_null() -> None:
    """Issue 22: a host whose /dev/null had become a regular file showed
    every masked file's contents; the mask no longer depends on it."""
    a = mount_args(policy(mask_files=("/home/u/.netrc",)))
    assert "/dev/null" not in a
    f = a.index("/home/u/.netrc")
    assert a[f - 2:f] == ["--ro-bind", "/run/sb/1/empty"]


def test_a_masked_file_without_an_empty_file_is_an_error_never_a_dev_null_bind() -> None:
    with pytest.raises(ValueError, match="no empty file to mask /home/u/.netrc"):
        mount_args(policy(mask_files=("/home/u/.netrc",), empty_file=""))


def test_the_state_dirs_read_only_bind_comes_after_every_write_bind_above_it() -> None:
    """Self-protection beneath a write root: read-only after read-write, in
    every carve-out region too (issue 22)."""
    state = "/home/u/.cache/safebox"
    rp = policy(write_roots=("/home/u", "/home/u/.cache"), read_only=(state,), mask_dirs=(f"{state}/cache",),
                carve_outs=(("/home/u/.cache", True),))
    a = mount_args(rp)
    ro = [i for i in range(len(a)) if a[i] == "--ro-bind" and a[i + 1] == state]
    rw = [i for i in range(len(a)) if a[i] == "--bind" and a[i + 1] in ("/home/u", "/home/u/.cache")]
    assert ro and rw and min(ro) > max(rw), a
    assert a.index(f"{state}/cache") > min(ro)
