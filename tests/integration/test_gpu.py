"""--allow-gpu against the real bwrap, helper and kernel, on stand-in nodes
(docs/gpu.md, "Tests"): character devices with /dev/null's numbers laid out
as a GPU's nodes (tests/sbx.py ``gpu_standins``), which safebox takes from
``SAFEBOX_TEST_GPU_DEV_ROOT``. ``ENOTTY`` from an ioctl means the device
itself answered (Landlock let it through); ``EACCES`` means Landlock refused.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator

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


def all_unix(home: FakeHome) -> list[str]:
    """Options for --allow-gpu without bubblewrap, which needs every unix socket allowed (docs/gpu.md)."""
    pol = home.root / "gpu-all-unix.json"
    pol.write_text('{"network": {"allowAllUnixSockets": true}}')
    return ["-p", str(pol), "--allow-gpu"]


def gpu_opts(home: FakeHome, mode: str) -> list[str]:
    return all_unix(home) if mode == HELPER_ONLY else ["--allow-gpu"]


def test_without_bubblewrap_landlock_grants_exactly_the_gpu_nodes_with_their_ioctls(
        shared_home: FakeHome, env: dict[str, str]) -> None:
    root = gpu_standins()
    paths = [str(root / n) for n in GRANTED]
    card = str(root / "dri" / "card0")
    got = probe(shared_home, [*paths, card, f"{card}:ro"], mode=HELPER_ONLY, opts=all_unix(shared_home), env=env)
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
    got = probe(shared_home, [*(f"{d}:ro" for d in others), sysfile], mode=mode, opts=gpu_opts(shared_home, mode),
                env=env)
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


UNIX_PROBE = r"""
import errno, socket, sys
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
except OSError as e:
    print("socket", errno.errorcode[e.errno]); sys.exit()
s.bind("\0cuda-uvmfd-safebox-test"); s.listen(1)
print("abstract listen OK")
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
try:
    c.connect(sys.argv[1]); print("host socket OK")
except OSError as e:
    print("host socket", errno.errorcode[e.errno])
"""


@pytest.fixture
def host_socket() -> Iterator[str]:
    """A listening unix socket of the host's, where the sandbox can see its file."""
    import socket
    import tempfile

    d = tempfile.mkdtemp(prefix="safebox-gpu-sock-", dir="/var/tmp")
    os.chmod(d, 0o755)
    path = os.path.join(d, "daemon.sock")
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o777)
    srv.listen(8)
    yield path
    srv.close()
    os.unlink(path)
    os.rmdir(d)


def test_with_a_gpu_cuda_serves_its_uvm_socket_and_every_host_socket_stays_hidden(
        shared_home: FakeHome, env: dict[str, str], host_socket: str) -> None:
    # CUDA binds an abstract SEQPACKET socket (cuda-uvmfd-NS-PID) in cuInit,
    # and fails with CUDA_ERROR_OPERATING_SYSTEM without it (seen on an H200,
    # docs/benchmarks.md "GPUs"). Before: "socket EPERM".
    r = shared_home.run(["python3", "-c", UNIX_PROBE.replace("SOCK_STREAM", "SOCK_SEQPACKET"), host_socket],
                        opts=["--allow-gpu"], env=env)
    # A SEQPACKET probe (the one type a GPU turns on) meets the mask, not its
    # type: the empty file bound over the socket refuses the connection.
    assert r.stdout.splitlines() == ["abstract listen OK", "host socket ECONNREFUSED"], r.stderr


def test_control_without_the_flag_no_unix_socket_and_on_the_host_the_socket_answers(
        shared_home: FakeHome, host_socket: str) -> None:
    r = shared_home.run(["python3", "-c", UNIX_PROBE, host_socket])
    assert r.stdout.splitlines() == ["socket EPERM"], r.stderr
    outside = host(["python3", "-c", UNIX_PROBE.replace("cuda-uvmfd-", "cuda-uvmfd-host-"), host_socket])
    assert outside.stdout.splitlines() == ["abstract listen OK", "host socket OK"], outside.stderr


def test_without_bubblewrap_a_gpu_is_refused_unless_every_unix_socket_is_allowed(
        shared_home: FakeHome, env: dict[str, str], host_socket: str) -> None:
    r = shared_home.run(["true"], mode=HELPER_ONLY, opts=["--allow-gpu"], env=env)
    assert (r.returncode, r.stdout) == (125, "")
    assert r.stderr.splitlines()[0] == (
        "safebox: --allow-gpu (devices.gpu) without bubblewrap: CUDA needs unix sockets (its UVM descriptor "
        "server), and without bubblewrap's mounts no host socket (docker, dbus, ssh-agent) can be hidden from "
        "the command"), r.stderr
    r = shared_home.run(["python3", "-c", UNIX_PROBE, host_socket], mode=HELPER_ONLY, opts=all_unix(shared_home),
                        env=env)
    assert r.stdout.splitlines() == ["abstract listen OK", "host socket OK"], r.stderr  # what that key accepts


LATE_PROBE = r"""
import errno, os, socket, stat, sys, time
print("started", flush=True)
for _ in range(300):  # the host binds it after the start
    try:
        if stat.S_ISSOCK(os.stat(sys.argv[1]).st_mode):
            break
    except OSError:
        pass
    time.sleep(0.05)
for name, kind in (("stream", socket.SOCK_STREAM), ("seqpacket", socket.SOCK_SEQPACKET)):
    try:
        c = socket.socket(socket.AF_UNIX, kind)
    except OSError as e:
        print(name, "socket", errno.errorcode[e.errno]); continue
    try:
        c.connect(sys.argv[1]); print(name, "host socket OK", c.recv(64).decode())
    except OSError as e:
        print(name, "host socket", errno.errorcode[e.errno])
"""

SERVE = r"""
import os, socket, sys
srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
srv.bind(sys.argv[1]); os.chmod(sys.argv[1], 0o777); srv.listen(8); srv.settimeout(30)
print("bound", flush=True)
try:
    while True:
        c, _ = srv.accept(); c.sendall(b"daemon"); c.close()
except OSError:
    pass
"""


def started(srv: subprocess.Popen[str]) -> None:
    """The daemon has bound its socket (a setup failure is no expected failure)."""
    if srv.stdout is None or srv.stdout.readline() != "bound\n":
        pytest.fail("the daemon did not bind its socket")


@pytest.mark.parametrize("where", ["bound after the start", "in another network namespace"])
def test_with_a_gpu_a_daemons_socket_the_masks_miss_is_still_unreachable_by_its_type(
        shared_home: FakeHome, env: dict[str, str], where: str) -> None:
    d = tempfile.mkdtemp(prefix="safebox-gpu-late-", dir="/var/tmp")
    os.chmod(d, 0o755)
    path = os.path.join(d, "daemon.sock")
    serve = [sys.executable, "-c", SERVE, path]
    if where == "in another network namespace":
        # A daemon of a container, or a service with PrivateNetwork=: its
        # socket's file is on the host's disk, its listener is not in the
        # host's /proc/net/unix, so no mask covers it.
        serve = ["unshare", "-n" if os.geteuid() == 0 else "-rn", *serve]
        if host([*serve[:2], "true"]).returncode != 0:
            pytest.fail("unshare cannot make a network namespace here: the test has shown nothing")
    srv: subprocess.Popen[str] | None = None
    sandbox: subprocess.Popen[str] | None = None
    try:
        if where == "in another network namespace":  # bound before the start: the list just misses it
            srv = subprocess.Popen(serve, stdout=subprocess.PIPE, text=True)
            started(srv)
            sandbox = shared_home.popen(["python3", "-c", LATE_PROBE, path], opts=["--allow-gpu"], env=env)
        else:
            sandbox = shared_home.popen(["python3", "-c", LATE_PROBE, path], opts=["--allow-gpu"], env=env)
            assert sandbox.stdout is not None
            if sandbox.stdout.readline() != "started\n":  # its masks are made before the daemon binds
                pytest.fail("the sandbox did not start")
            srv = subprocess.Popen(serve, stdout=subprocess.PIPE, text=True)
            started(srv)
        out, err = sandbox.communicate(timeout=60)
    finally:
        if sandbox is not None:
            sandbox.kill()
        if srv is not None:
            srv.kill()
            srv.wait()
            if srv.stdout is not None:
                srv.stdout.close()
        shutil.rmtree(d, ignore_errors=True)
    # The masks miss this socket (bound after the start, or listening in
    # another network namespace); the socket type stops it: a GPU alone turns
    # on SOCK_SEQPACKET only, and a STREAM daemon refuses SEQPACKET peers.
    # Before: "stream host socket OK daemon".
    assert out.splitlines()[-2:] == ["stream socket EPERM", "seqpacket host socket EPROTOTYPE"], (out, err)


def test_control_on_the_host_a_daemons_late_socket_answers_a_stream_peer() -> None:
    d = tempfile.mkdtemp(prefix="safebox-gpu-late-", dir="/var/tmp")
    path = os.path.join(d, "daemon.sock")
    srv = subprocess.Popen([sys.executable, "-c", SERVE, path], stdout=subprocess.PIPE, text=True)
    try:
        started(srv)
        out = host(["python3", "-c", LATE_PROBE, path]).stdout
    finally:
        srv.kill()
        srv.wait()
        if srv.stdout is not None:
            srv.stdout.close()
        shutil.rmtree(d, ignore_errors=True)
    assert out.splitlines()[1:] == ["stream host socket OK daemon", "seqpacket host socket EPROTOTYPE"], out
