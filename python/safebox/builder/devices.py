"""GPU device nodes for ``--allow-gpu`` (policy key ``devices.gpu``).

Two steps, as the rest of the builder: :func:`find_gpu_nodes` looks at the
host (``lstat`` of ``/dev``), :func:`with_gpu` is a pure function of what it
found and the resolved policy.

What is bound, and why only that (docs/gpu.md):

* NVIDIA's nodes: ``nvidiaN`` (one per GPU), ``nvidiactl``, ``nvidia-uvm``,
  ``nvidia-uvm-tools``, ``nvidia-modeset``, ``nvidia-caps/nvidia-capN``:
  the list the NVIDIA container toolkit gives a container
  (nvidia-container-toolkit's ``internal/discover``), and what CUDA opens.
* DRI render nodes, ``dri/renderD*``: compute and rendering without
  modesetting (Mesa, ROCm, Vulkan, VA-API).
* **Never** the DRM primary nodes (``dri/card*``: modesetting, the
  display), nor any other node: ``/dev/mem``, disks, input and the rest keep
  today's rule (absent under bubblewrap, refused by Landlock without it).

Each node must be a character device reached without a symlink (``lstat``);
anything else under a GPU name is an error, never a bind.

Landlock: under bubblewrap the sandbox's ``/dev`` is its own minimal one
plus these binds, and the helper's ``dev`` grant on it (read, write, and
``LANDLOCK_ACCESS_FS_IOCTL_DEV``, ABI 5) covers exactly them. Without
bubblewrap each node gets a ``dev`` rule of its own; every other device of
the host stays outside the grant. bubblewrap binds them with ``--dev-bind``:
a plain ``--bind`` is ``nodev``, and opening the node would fail with
EACCES.
"""

from __future__ import annotations

import os
import re
import stat

from safebox.builder.resolved import Layers, ResolvedPolicy
from safebox.errors import BuildError

__all__ = ["DEV_ROOT", "GpuNode", "find_gpu_nodes", "gpu_env", "with_gpu"]

DEV_ROOT = "/dev"
#: The test suite's stand-in nodes (tests/integration/test_gpu.py): a
#: directory of character devices with /dev/null's or /dev/zero's numbers,
#: laid out as /dev would be. Honoured only for such harmless nodes, so the
#: setting cannot hand a real device to a sandbox.
TEST_ROOT_VAR = "SAFEBOX_TEST_GPU_DEV_ROOT"
_HARMLESS = {(1, 3), (1, 5)}  # /dev/null, /dev/zero

_PER_GPU = re.compile(r"nvidia([0-9]+)\Z")
_RENDER = re.compile(r"renderD([0-9]+)\Z")
_SHARED = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
_CAP = re.compile(r"nvidia-cap[0-9]+\Z")
#: renderD128 is the first render node (drm's DRM_MINOR_RENDER base).
_RENDER_BASE = 128
class GpuNode(tuple[str, str]):
    """(host path, path inside the sandbox)."""

    __slots__ = ()

    @property
    def host(self) -> str:
        """Where the node is on the host."""
        return self[0]

    @property
    def inside(self) -> str:
        """Where the command sees it (under the sandbox's /dev)."""
        return self[1]


def _chr(path: str, *, harmless_only: bool) -> bool:
    """Whether ``path`` is a character device (never through a symlink)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise BuildError(f"devices.gpu: {path} is a symlink; a GPU node is bound only as the device itself")
    if not stat.S_ISCHR(st.st_mode):
        raise BuildError(f"devices.gpu: {path} is not a character device; nothing under a GPU name is bound "
                         "unless it is one")
    if harmless_only and (os.major(st.st_rdev), os.minor(st.st_rdev)) not in _HARMLESS:
        raise BuildError(f"{TEST_ROOT_VAR}: {path} is not a stand-in node (/dev/null's or /dev/zero's numbers); "
                         "the test setting never binds a real device")
    return True


def _check_test_root(root: str) -> None:
    """The test root and its two subdirectories: real directories of root,
    writable by root alone. bwrap binds a node by its path, after the lstat
    here: in a directory anyone else could change, a swap between the two
    would bind a real device (found in review)."""
    for d in (root, os.path.join(root, "dri"), os.path.join(root, "nvidia-caps")):
        try:
            st = os.lstat(d)
        except FileNotFoundError:
            continue
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != 0 or st.st_mode & 0o022:
            raise BuildError(f"{TEST_ROOT_VAR}: {d} is not a directory of root that only root can write; the test "
                             "setting is honoured only there")
    if os.path.realpath(root) != os.path.abspath(root):
        raise BuildError(f"{TEST_ROOT_VAR}: {root} has a symlink on the way")


def _listdir(path: str) -> list[str]:
    try:
        return sorted(os.listdir(path))
    except (FileNotFoundError, NotADirectoryError):
        return []


def find_gpu_nodes(select: tuple[int, ...] | None, *, environ: dict[str, str] | None = None) -> tuple[GpuNode, ...]:
    """The GPU nodes present, for ``select`` (None: every GPU). Raises
    BuildError when there is none, or when a selected index has no node."""
    test_root = (environ or {}).get(TEST_ROOT_VAR)
    root = test_root or DEV_ROOT
    harmless = bool(test_root)
    if test_root:
        _check_test_root(test_root)
    found: list[tuple[str, str]] = []
    per_gpu: dict[int, list[tuple[str, str]]] = {}
    names = _listdir(root)
    for name in names:
        m = _PER_GPU.match(name)
        if m and _chr(os.path.join(root, name), harmless_only=harmless):
            per_gpu.setdefault(int(m.group(1)), []).append((name, name))
    for name in _listdir(os.path.join(root, "dri")):
        m = _RENDER.match(name)
        if m and int(m.group(1)) >= _RENDER_BASE and _chr(os.path.join(root, "dri", name), harmless_only=harmless):
            per_gpu.setdefault(int(m.group(1)) - _RENDER_BASE, []).append((f"dri/{name}", f"dri/{name}"))
    if not per_gpu:
        raise BuildError("--allow-gpu (devices.gpu): no GPU device node on this host (looked for "
                         f"{root}/nvidia[0-9]*, {root}/dri/renderD*)",
                         hint="`safebox doctor` says what its gpu check finds; is the driver loaded "
                              "(nvidia-smi, lsmod)?")
    wanted = sorted(per_gpu) if select is None else list(select)
    missing = [i for i in wanted if i not in per_gpu]
    if missing:
        have = ", ".join(str(i) for i in sorted(per_gpu))
        raise BuildError(f"--allow-gpu: no GPU {', '.join(map(str, missing))} on this host (GPUs present: {have})")
    for i in wanted:
        found += per_gpu[i]
    if any(n.startswith("nvidia") for n, _ in found):
        for name in _SHARED:
            if name in names and _chr(os.path.join(root, name), harmless_only=harmless):
                found.append((name, name))
        for name in _listdir(os.path.join(root, "nvidia-caps")):
            if _CAP.match(name) and _chr(os.path.join(root, "nvidia-caps", name), harmless_only=harmless):
                found.append((f"nvidia-caps/{name}", f"nvidia-caps/{name}"))
    return tuple(GpuNode((os.path.join(root, rel), os.path.join(DEV_ROOT, inside))) for rel, inside in found)


def with_gpu(rp: ResolvedPolicy, nodes: tuple[GpuNode, ...]) -> ResolvedPolicy:
    """``rp`` with the nodes bound (bubblewrap) and granted (Landlock, helper alone)."""
    if not nodes:
        return rp
    if rp.layers is Layers.HELPER_ONLY:
        # No mounts: the command opens the host's nodes, each granted alone.
        return rp.replace(gpu_nodes=(), landlock_rules=(*rp.landlock_rules, *(("dev", n.host) for n in nodes)))
    return rp.replace(gpu_nodes=tuple((n.host, n.inside) for n in nodes))


def gpu_env(select: tuple[int, ...] | None) -> dict[str, str]:
    """``CUDA_VISIBLE_DEVICES`` to match a selection. The driver shows a
    process only the GPUs whose ``/dev/nvidiaN`` it can open and numbers
    them from 0 (as in a container given some GPUs: NVIDIA/nvidia-docker
    #907), so the selection's GPUs are 0..k-1 inside; a value the caller's
    environment carried (``CUDA_VISIBLE_DEVICES=2`` for the host's
    numbering) would name a GPU that is not there. Without a selection the
    caller's value is left as it is."""
    if select is None:
        return {}
    return {"CUDA_VISIBLE_DEVICES": ",".join(str(i) for i in range(len(select)))}
