"""The resolved policy: every filesystem fact the builders need, as frozen data.

``builder/resolve.py`` (impure: lstat, realpath, ripgrep, listdir) makes it;
``builder/bwrap.py`` and ``builder/landlock.py`` are pure functions of it.
"""

from __future__ import annotations

from safebox._record import Frozen, StrEnum

TYPE_CHECKING = False
if TYPE_CHECKING:
    from safebox.builder.deepwatch import Baseline

#: The name, in the run dir, of safebox's empty file (ResolvedPolicy.empty_file).
EMPTY_FILE = "empty"


class Layers(StrEnum):
    """Which layers run (``--without``)."""

    BOTH = "both"
    BWRAP_ONLY = "bwrap-only"  # --without helper
    HELPER_ONLY = "helper-only"  # --without bwrap, or a host where bwrap cannot run


class NetKind(StrEnum):
    """What network the command gets."""

    NONE = "none"  # empty net namespace (or Landlock/seccomp deny on helper-only hosts)
    PROXY = "proxy"  # only the filtering proxy, through bridges


class Bridge(Frozen):
    """One proxy endpoint exposed inside the sandbox as 127.0.0.1:port."""

    port: int
    socket_path: str
    scheme: str  # "http" or "socks5h"


class ResolvedPolicy(Frozen):
    """Everything decided, with host paths already looked up."""

    layers: Layers
    cwd: str
    # Read-write binds, shallow first.
    write_roots: tuple[str, ...]
    # Read-only re-binds beneath write roots (mandatory protection, denyWrite, self-protection).
    read_only: tuple[str, ...]
    # Directories that must refuse new entries (a protected child is missing):
    # bound read-only, with each existing unprotected child bound back read-write.
    sealed_dirs: tuple[tuple[str, tuple[str, ...]], ...]
    # Directories bound onto themselves read-write so they cannot be renamed
    # away from the read-only entries beneath them (.git).
    pinned_dirs: tuple[str, ...] = ()
    # Deny-read: directories covered by an empty read-only tmpfs; files by
    # ``empty_file``.
    mask_dirs: tuple[str, ...] = ()
    mask_files: tuple[str, ...] = ()
    # The host unix sockets among ``mask_files`` (allowUnixSockets, a GPU:
    # builder/sockets.py). Listed before the sandbox exists, so one may be
    # gone by its mount: safebox's mounter makes these masks and skips a
    # path that no longer exists (builder/bulk.py ``split_sockets``).
    socket_masks: tuple[str, ...] = ()
    # safebox's own empty file (mode 0200, in the run dir: RunDir) bound
    # read-only over every masked file. Never the host's /dev/null: a host
    # where it had become a regular file (a root `--learn /dev/null` once
    # did that) showed ten thousand "denied" files' new contents.
    empty_file: str = ""
    # credentials.files with mode "mask": (real path, its masked copy in the run dir).
    masked_files: tuple[tuple[str, str], ...] = ()
    # Files covered by another file, read-only: (host copy, path inside). A CI
    # job's .git/config with the runner's token gets a scrubbed copy (ci_job).
    overlays: tuple[tuple[str, str], ...] = ()
    # allowRead carve-outs (builder/regions.py): (path, writable), shallow
    # first, each inside a mask and bound back over it from the host; the
    # mounts beneath one are made again after it (builder/bwrap.py). Also
    # write roots inside a read-only dot entry of $HOME (builder/home_files.py:
    # --allow-write ~/.cache/foo with the work dir at ~), read-write.
    carve_outs: tuple[tuple[str, bool], ...] = ()
    # Allowed unix sockets bound back in (they lie under the private /tmp or a
    # mask; under --review also those in a held write root: review/run.py).
    socket_binds: tuple[str, ...] = ()
    # Every allowed unix socket found at the start (allowUnixSockets).
    sockets_allowed: tuple[str, ...] = ()
    # Directories that get the private /tmp-like tmpfs.
    private_tmp: tuple[str, ...] = ("/tmp",)
    # limits.tmpSize: the size of each private tmpfs and of /dev/shm, in
    # bytes (bwrap --size); 0: the kernel's default (half the RAM), and
    # /dev/shm stays a directory of bwrap's /dev.
    tmp_size: int = 0
    net: NetKind = NetKind.NONE
    bridges: tuple[Bridge, ...] = ()
    # --publish: (port, unix socket in publish_dir); publish_dir is bound read-write.
    publish: tuple[tuple[int, str], ...] = ()
    publish_dir: str = ""
    # Host paths of the helper and its inputs (in the run dir).
    helper_path: str = ""
    policy_path: str = ""
    run_dir: str = ""
    # Protected paths that did not exist when the run started; checked afterwards.
    watch_missing: tuple[str, ...] = ()
    # And compactly, the protected names absent at the top of each write root:
    # (root, their absent first components); see resolve.top_candidates.
    watch_tops: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # Protected symlinks (path, target text): restored after the run if replaced.
    watch_links: tuple[tuple[str, str], ...] = ()
    # New files that run code at any depth (safebox.builder.deepwatch): what the
    # start walk saw of every write root, checked after the run.
    watch_deep: Baseline | None = None
    # (directory, kind, names there at the start): new dot entries of a
    # writable $HOME, new site hooks of a user site (builder/home_files.py).
    watch_new: tuple[tuple[str, str, tuple[str, ...]], ...] = ()
    # Sandbox-private tool caches (presets): bound read-write onto themselves
    # after the read-only re-binds (they lie in safebox's state dir).
    cache_dirs: tuple[str, ...] = ()
    # Landlock rules for the helper: (access class, path).
    landlock_rules: tuple[tuple[str, str], ...] = ()
    # --allow-gpu (builder/devices.py): (host node, path inside /dev), bound
    # with --dev-bind after bwrap's own /dev; empty without bwrap (the
    # helper's Landlock rules grant the host nodes instead).
    gpu_nodes: tuple[tuple[str, str], ...] = ()
    # --review (safebox.review): the held run's layers dir, bound read-write
    # at review_stage (in the sandbox's private /tmp, else the run dir) until
    # the overlays are mounted.
    review_layers: str = ""
    review_stage: str = ""
    notes: tuple[str, ...] = ()  # said with -v
    warnings: tuple[str, ...] = ()  # said on every run: a grant the policy gave does not hold
