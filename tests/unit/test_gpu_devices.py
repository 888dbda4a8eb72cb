"""--allow-gpu (builder/devices.py): which nodes are found, and the pure
steps after it: the bwrap argv, the helper's Landlock rules, the environment.

Discovery runs against the stand-in directory of tests/sbx.py (character
devices with /dev/null's numbers); the golden tests need no node at all.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from safebox.builder.bwrap import mount_args
from safebox.builder.devices import TEST_ROOT_VAR, GpuNode, find_gpu_nodes, gpu_env, with_gpu
from safebox.builder.helper_policy import FsAccess, HelperPolicy, NetMode, render
from safebox.builder.resolved import Layers, ResolvedPolicy
from safebox.errors import BuildError
from safebox.policy.gpus import parse_selection
from sbx import gpu_standins

NODES = (GpuNode(("/dev/nvidia0", "/dev/nvidia0")), GpuNode(("/dev/nvidiactl", "/dev/nvidiactl")),
         GpuNode(("/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap1")))


def rp(layers: Layers = Layers.BOTH) -> ResolvedPolicy:
    return ResolvedPolicy(layers=layers, cwd="/w", write_roots=("/w",), read_only=(), sealed_dirs=(),
                          landlock_rules=(("read", "/"), ("dev", "/dev"), ("write", "/w")))


def test_the_nodes_are_dev_bound_right_after_bwraps_own_dev_and_never_plainly_bound() -> None:
    a = mount_args(with_gpu(rp(), NODES))
    assert a[:12] == ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/proc/1",
                      "--tmpfs", "/tmp", "--dev-bind"]
    assert a[11:20] == ["--dev-bind", "/dev/nvidia0", "/dev/nvidia0", "--dev-bind", "/dev/nvidiactl", "/dev/nvidiactl",
                        "--dev-bind", "/dev/nvidia-caps/nvidia-cap1", "/dev/nvidia-caps/nvidia-cap1"]
    assert a.count("--dev-bind") == 3
    # Control: without the flag, nothing of the kind.
    assert "--dev-bind" not in mount_args(rp())


def test_under_bubblewrap_landlock_keeps_its_one_grant_of_the_sandboxs_own_dev() -> None:
    assert with_gpu(rp(), NODES).landlock_rules == rp().landlock_rules


def test_without_bubblewrap_each_node_gets_a_dev_rule_of_its_own_and_nothing_is_bound() -> None:
    got = with_gpu(rp(Layers.HELPER_ONLY), NODES)
    assert got.gpu_nodes == ()
    assert got.landlock_rules[-3:] == (("dev", "/dev/nvidia0"), ("dev", "/dev/nvidiactl"),
                                       ("dev", "/dev/nvidia-caps/nvidia-cap1"))
    text = render(HelperPolicy(fs_rules=tuple((FsAccess(c), p) for c, p in got.landlock_rules), net=NetMode.OFF))
    assert f"fs dev {os.fsencode('/dev/nvidiactl').hex()}\n".encode() in text


def test_every_gpu_node_is_found_and_the_drm_primary_node_never() -> None:
    root = gpu_standins()
    found = find_gpu_nodes(None, environ={TEST_ROOT_VAR: str(root)})
    assert [n.inside for n in found] == [
        "/dev/nvidia0", "/dev/dri/renderD128", "/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools", "/dev/nvidia-caps/nvidia-cap1"]
    assert all(n.host == str(root / n.inside.removeprefix("/dev/")) for n in found)
    assert not any("card" in n.inside for n in found)


def test_a_selection_binds_only_those_gpus_and_numbers_them_from_zero_for_cuda() -> None:
    root = gpu_standins()
    found = find_gpu_nodes((1,), environ={TEST_ROOT_VAR: str(root)})
    assert [n.inside for n in found] == ["/dev/nvidia1", "/dev/nvidiactl", "/dev/nvidia-uvm",
                                         "/dev/nvidia-uvm-tools", "/dev/nvidia-caps/nvidia-cap1"]
    assert gpu_env((1,)) == {"CUDA_VISIBLE_DEVICES": "0"}
    assert gpu_env((0, 1)) == {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert gpu_env(None) == {}
    with pytest.raises(BuildError, match=r"--allow-gpu: no GPU 5 on this host \(GPUs present: 0, 1\)"):
        find_gpu_nodes((5,), environ={TEST_ROOT_VAR: str(root)})


def test_no_gpu_node_is_a_refusal_naming_where_safebox_looked(tmp_path: Path) -> None:
    with pytest.raises(BuildError) as e:
        find_gpu_nodes(None, environ={TEST_ROOT_VAR: str(tmp_path)})
    assert e.value.message == (f"--allow-gpu (devices.gpu): no GPU device node on this host (looked for "
                               f"{tmp_path}/nvidia[0-9]*, {tmp_path}/dri/renderD*)")


def test_a_symlink_or_a_plain_file_under_a_gpu_name_is_an_error_never_a_bind(tmp_path: Path) -> None:
    (tmp_path / "nvidia0").symlink_to("/dev/null")
    with pytest.raises(BuildError, match="nvidia0 is a symlink"):
        find_gpu_nodes(None, environ={TEST_ROOT_VAR: str(tmp_path)})
    (tmp_path / "nvidia0").unlink()
    (tmp_path / "nvidia0").write_text("")
    with pytest.raises(BuildError, match="nvidia0 is not a character device"):
        find_gpu_nodes(None, environ={TEST_ROOT_VAR: str(tmp_path)})


def test_the_test_setting_never_binds_a_real_device(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.fail("this unit test runs as root (build.py test): it makes a device node")
    os.mknod(tmp_path / "nvidia0", 0o600 | stat.S_IFCHR, os.makedev(195, 0))  # a real GPU's numbers
    with pytest.raises(BuildError, match="is not a stand-in node"):
        find_gpu_nodes(None, environ={TEST_ROOT_VAR: str(tmp_path)})


def test_the_test_setting_is_honoured_only_in_a_directory_only_root_can_write(tmp_path: Path) -> None:
    """Found in review: bwrap binds by path after the lstat; a test root the
    caller can change lets a swap bind a real device."""
    if os.geteuid() != 0:
        pytest.fail("this unit test runs as root (build.py test): it hands a directory to another user")
    mine = tmp_path / "mine"
    mine.mkdir()
    os.chown(mine, 65534, 65534)
    with pytest.raises(BuildError, match=r"mine is not a directory of root that only root can write"):
        find_gpu_nodes(None, environ={TEST_ROOT_VAR: str(mine)})
    (tmp_path / "link").symlink_to(gpu_standins())
    with pytest.raises(BuildError, match="link is not a directory of root"):
        find_gpu_nodes(None, environ={TEST_ROOT_VAR: str(tmp_path / "link")})
    assert find_gpu_nodes(None, environ={TEST_ROOT_VAR: str(gpu_standins())})  # control


@pytest.mark.parametrize("value, want", [("all", None), ("", None), ("0", (0,)), ("0,2", (0, 2)), ("2,0,2", (2, 0))])
def test_a_selection_is_parsed(value: str, want: tuple[int, ...] | None) -> None:
    assert parse_selection(value) == want


@pytest.mark.parametrize("value", ["x", "0,", "-1", "64", "0;1", "nvidia0"])
def test_a_bad_selection_is_refused_naming_the_flag(value: str) -> None:
    with pytest.raises(BuildError, match=rf"--allow-gpu={value}: not a list of GPU indices"):
        parse_selection(value)
