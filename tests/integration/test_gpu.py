"""--allow-gpu against the real bwrap, helper and kernel, on stand-in nodes
(docs/gpu.md, "Tests"): character devices with /dev/null's numbers laid out
as a GPU's nodes (tests/sbx.py ``gpu_standins``), which safebox takes from
``SAFEBOX_TEST_GPU_DEV_ROOT``. ``ENOTTY`` from an ioctl means the device
itself answered (Landlock let it through); ``EACCES`` means Landlock refused.
"""

from __future__ import annotations

import os

import pytest

from sbx import BOTH, BWRAP_ONLY, GPU_NO_NODES, HELPER_ONLY, FakeHome, gpu_standins, host

pytestmark = pytest.mark.needs_bwrap

GRANTED = ("nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-caps/nvidia-cap1",
           "dri/renderD128")

# Open each path read-write (or read-only with :ro), then try an ioctl on it.
PROBE = r"""
import errno, fcntl, os, sys, termios
for arg in sys.argv[1:]:
    path, _, how = arg.partition(":")
    try:
        fd = os.open(path, os.O_RDONLY if how == "ro" else os.O_RDWR)
    except OSError as e:
        print(arg, "open", errno.errorcode[e.errno]); continue
    try:
        fcntl.ioctl(fd, termios.TCGETS, bytes(64)); print(arg, "ioctl", "OK")
    except OSError as e:
        print(arg, "ioctl", errno.errorcode[e.errno])
    os.close(fd)
"""


def probe(home: FakeHome, paths: list[str], *, mode: str, opts: list[str], env: dict[str, str]) -> dict[str, str]:
    r = home.run(["python3", "-c", PROBE, *paths], mode=mode, opts=opts, env=env)
    assert r.returncode == 0, r.stderr
    return {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in r.stdout.splitlines()}


@pytest.fixture
def env() -> dict[str, str]:
    return {"SAFEBOX_TEST_GPU_DEV_ROOT": str(gpu_standins())}


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
def test_with_bubblewrap_exactly_the_gpu_nodes_appear_in_dev_and_answer_ioctls(
        shared_home: FakeHome, env: dict[str, str], mode: str) -> None:
    got = probe(shared_home, [f"/dev/{n}" for n in (*GRANTED, "dri/card0")] + ["/dev/mem"], mode=mode,
                opts=["--allow-gpu"], env=env)
    assert {f"/dev/{n}": "ioctl ENOTTY" for n in GRANTED}.items() <= got.items(), got
    assert got["/dev/dri/card0"] == "open ENOENT"  # a DRM primary node is never bound
    assert got["/dev/mem"] == "open ENOENT"


@pytest.mark.parametrize("mode", [BOTH, BWRAP_ONLY])
def test_control_without_the_flag_no_gpu_node_is_in_the_sandboxs_dev(
        shared_home: FakeHome, env: dict[str, str], mode: str) -> None:
    got = probe(shared_home, [f"/dev/{n}" for n in GRANTED], mode=mode, opts=[], env=env)
    assert set(got.values()) == {"open ENOENT"}, got


def test_without_bubblewrap_landlock_grants_exactly_the_gpu_nodes_with_their_ioctls(
        shared_home: FakeHome, env: dict[str, str]) -> None:
    root = gpu_standins()
    paths = [str(root / n) for n in GRANTED]
    card = str(root / "dri" / "card0")
    got = probe(shared_home, [*paths, card, f"{card}:ro"], mode=HELPER_ONLY, opts=["--allow-gpu"], env=env)
    assert {p: "ioctl ENOTTY" for p in paths}.items() <= got.items(), got
    assert got[card] == "open EACCES"  # not granted: no write
    assert got[f"{card}:ro"] == "ioctl EACCES"  # readable under /, but no device ioctl (IOCTL_DEV)


def test_control_without_bubblewrap_or_the_flag_the_nodes_are_refused_and_on_the_host_they_answer(
        shared_home: FakeHome, env: dict[str, str]) -> None:
    root = gpu_standins()
    paths = [str(root / n) for n in GRANTED]
    got = probe(shared_home, paths, mode=HELPER_ONLY, opts=[], env=env)
    assert set(got.values()) == {"open EACCES"}, got
    outside = host(["python3", "-c", PROBE, *paths, str(root / "dri" / "card0")])
    assert set(line.split(" ", 1)[1] for line in outside.stdout.splitlines()) == {"ioctl ENOTTY"}, outside


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
def test_the_gpu_opens_nothing_else_no_write_to_sys_and_no_other_device(
        shared_home: FakeHome, env: dict[str, str], mode: str) -> None:
    others = [d for d in ("/dev/vda", "/dev/sda", "/dev/nvme0n1", "/dev/kmsg", "/dev/mem", "/dev/loop0")
              if os.path.exists(d)]
    assert others, "no block or kernel device on this host to show refused"
    sysfile = "/sys/kernel/mm/transparent_hugepage/enabled"
    got = probe(shared_home, [*(f"{d}:ro" for d in others), sysfile], mode=mode, opts=["--allow-gpu"], env=env)
    refused = "open ENOENT" if mode == BOTH else "open EACCES"  # not in bwrap's /dev; outside Landlock's grant
    assert {f"{d}:ro": refused for d in others}.items() <= got.items(), got
    assert got[sysfile] in ("open EROFS", "open EACCES"), got  # read-only / under bwrap; Landlock without it
    if os.geteuid() == 0:  # control: root opens some of them on the host
        outside = host(["python3", "-c", PROBE, *(f"{d}:ro" for d in others)])
        assert any(line.split(" ")[1] == "ioctl" for line in outside.stdout.splitlines()), outside.stdout


def test_a_selection_binds_only_that_gpu_and_cuda_numbers_it_zero(shared_home: FakeHome,
                                                                 env: dict[str, str]) -> None:
    got = probe(shared_home, ["/dev/nvidia0", "/dev/nvidia1"], mode=BOTH, opts=["--allow-gpu=1"], env=env)
    assert got == {"/dev/nvidia0": "open ENOENT", "/dev/nvidia1": "ioctl ENOTTY"}
    r = shared_home.run(["sh", "-c", "echo $CUDA_VISIBLE_DEVICES"], opts=["--allow-gpu=1"],
                        env={**env, "CUDA_VISIBLE_DEVICES": "1"})
    assert r.stdout == "0\n", r.stderr


def test_the_policy_key_and_the_api_bind_the_same_nodes(shared_home: FakeHome, env: dict[str, str],
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    pol = shared_home.root / "gpu.json"
    pol.write_text('{"devices": {"gpu": [0]}}')
    got = probe(shared_home, ["/dev/nvidia0", "/dev/nvidia1"], mode=BOTH, opts=["-p", str(pol)], env=env)
    assert got == {"/dev/nvidia0": "ioctl ENOTTY", "/dev/nvidia1": "open ENOENT"}
    from safebox import Sandbox

    monkeypatch.setenv("HOME", str(shared_home.root))
    with Sandbox(policy={"devices": {"gpu": True}}, env={**os.environ, **env}) as sb:
        r = sb.run(["python3", "-c", PROBE, "/dev/nvidiactl"], capture_output=True, cwd=str(shared_home.work))
    assert r.stdout == b"/dev/nvidiactl ioctl ENOTTY\n", r.stderr


def test_without_any_gpu_node_the_flag_is_a_refusal_not_ignored(shared_home: FakeHome) -> None:
    gpu_standins()
    empty = GPU_NO_NODES
    r = shared_home.run(["true"], opts=["--allow-gpu"], env={"SAFEBOX_TEST_GPU_DEV_ROOT": str(empty)})
    assert (r.returncode, r.stdout) == (125, "")
    assert r.stderr.splitlines()[0] == (f"safebox: --allow-gpu (devices.gpu): no GPU device node on this host "
                                        f"(looked for {empty}/nvidia[0-9]*, {empty}/dri/renderD*)")


@pytest.mark.parametrize("mode", [BOTH, HELPER_ONLY])
@pytest.mark.parametrize("path", ["/dev/null", "/dev/shm"])
def test_a_device_node_as_a_write_root_is_refused_with_a_pointer_to_allow_gpu(shared_home: FakeHome,
                                                                             mode: str, path: str) -> None:
    r = shared_home.run(["true"], opts=["--allow-write", path], mode=mode)
    assert (r.returncode, r.stdout) == (125, "")
    assert r.stderr.splitlines() == [
        f"safebox: filesystem.allowWrite {path}: a device node or a directory of /dev; the sandbox's /dev is its "
        "own and devices are never write roots",
        "hint: the sandbox has a /dev/shm of its own (sized by limits.tmpSize); share files through the work dir"
        if path == "/dev/shm" else "hint: for a GPU use --allow-gpu (devices.gpu, docs/gpu.md)"]
