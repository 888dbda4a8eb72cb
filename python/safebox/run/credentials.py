"""``credentials`` (srt): secrets a command may use but never see.

* ``credentials.envVars`` entry, ``mode: "deny"``: the variable is removed
  from the command's environment (whatever ``env.allow`` says).
* ``mode: "mask"``: when the variable is set on the host, the command sees a
  per-run sentinel instead (``proxy/inject.py: mint_sentinel``); a variable
  that is unset is skipped (nothing to protect), as srt does.
* ``credentials.files`` entry, ``mode: "deny"``: the path joins
  ``filesystem.denyRead``.
* ``mode: "mask"``: the command reads a copy of the file holding the
  sentinel, bound read-only over the real path (resolved: a symlink's
  target is masked). The whole content is the credential (srt's whole-file
  masking) except one trailing line ending, which the copy keeps, so that
  ``$(cat file)`` yields the sentinel exactly and the proxy substitutes the
  value without the newline (a newline may not go into a header). A missing
  file is skipped; a directory is an error (use ``deny``). Without
  bubblewrap nothing can be bound over a file: the file is denied instead
  (as srt does on macOS), and safebox says so.

The proxy puts the real value back only in requests to the entry's
``injectHosts`` (default: ``network.allowedDomains``), on TLS-terminated
connections (``network.tlsTerminate``) or, with
``credentials.allowPlaintextInject``, on plain ``http://``.
"""

from __future__ import annotations

import os
import stat

from safebox.errors import PolicyError
from safebox.proxy.inject import Credential, mint_sentinel

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from safebox.policy.effective import EffectivePolicy

__all__ = ["CredentialPlan", "plan_credentials"]

#: A masked file is read whole into safebox's memory: credential files are small.
MAX_MASKED_FILE = 1 << 20


class CredentialPlan:
    """What the ``credentials`` keys change in one run."""

    def __init__(self) -> None:
        self.credentials: list[Credential] = []
        self.env_set: list[tuple[str, str]] = []
        self.env_unset: list[str] = []
        self.deny_read: list[str] = []
        self.masked_files: list[tuple[str, str]] = []
        self.notes: list[str] = []
        self.warnings: list[str] = []


def _line_ending(data: bytes) -> bytes:
    if data.endswith(b"\r\n"):
        return b"\r\n"
    if data.endswith(b"\n"):
        return b"\n"
    return b""


def plan_credentials(policy: EffectivePolicy, *, environ: Mapping[str, str], run_dir: str | None,
                     can_bind: bool) -> CredentialPlan:
    """The plan; masked copies are written into ``run_dir`` (None: a dry run,
    nothing written). Raises PolicyError naming the entry."""
    plan = CredentialPlan()
    _env_vars(plan, policy, environ)
    masked = 0
    for path, mode, hosts in policy.credential_files:
        if mode == "deny":
            plan.deny_read.append(path)
            continue
        if not can_bind:
            plan.deny_read.append(path)
            plan.warnings.append(f"credentials.files {path}: without bubblewrap a masked copy cannot be shown; the "
                              "file is unreadable instead (mode \"deny\")")
            continue
        found = _read_masked(plan, path)
        if found is None:
            continue
        real_path, secret, ending = found
        sentinel = mint_sentinel(secret)
        plan.credentials.append(Credential(f"file:{path}", sentinel, secret,
                                           tuple(hosts) if hosts is not None else policy.allowed_domains))
        fake = os.path.join(run_dir, f"credmask-{masked}") if run_dir is not None else f"<run dir>/credmask-{masked}"
        masked += 1
        if run_dir is not None:
            fd = os.open(fake, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o400)
            try:
                os.write(fd, sentinel + ending)
            finally:
                os.close(fd)
        plan.masked_files.append((real_path, fake))
    return plan


def _env_vars(plan: CredentialPlan, policy: EffectivePolicy, environ: Mapping[str, str]) -> None:
    """``credentials.envVars``: removed (mode "deny") or replaced by a sentinel."""
    for name, mode, hosts in policy.credential_env_vars:
        if mode == "deny":
            plan.env_unset.append(name)
            continue
        real = environ.get(name)
        if not real:
            plan.notes.append(f"credentials.envVars {name}: not set here, nothing to mask")
            continue
        sentinel = mint_sentinel(real.encode("utf-8", "surrogateescape"))
        plan.env_set.append((name, sentinel.decode("ascii")))
        plan.credentials.append(Credential(name, sentinel, real.encode("utf-8", "surrogateescape"),
                                           tuple(hosts) if hosts is not None else policy.allowed_domains))


def _read_masked(plan: CredentialPlan, path: str) -> tuple[str, bytes, bytes] | None:
    """The file a ``credentials.files`` entry masks: (its real path, the
    secret, its line ending), or None (noted) when there is nothing to mask.
    Raises PolicyError for a file that cannot be masked."""
    real_path = os.path.realpath(path)
    try:
        st = os.stat(real_path)
    except FileNotFoundError:
        plan.notes.append(f"credentials.files {path}: does not exist, nothing to mask")
        return None
    except OSError as exc:
        raise PolicyError(f"credentials.files {path}: cannot inspect it: {exc.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise PolicyError(f"credentials.files {path}: a directory cannot be masked (one value replaces a file's "
                          "content)", hint='use mode "deny" for a directory')
    if not stat.S_ISREG(st.st_mode):
        raise PolicyError(f"credentials.files {path}: not a regular file; only files can be masked")
    if st.st_size > MAX_MASKED_FILE:
        raise PolicyError(f"credentials.files {path}: larger than {MAX_MASKED_FILE} bytes; mask works on "
                          "credential files", hint='use mode "deny"')
    try:
        with open(real_path, "rb") as f:
            data = f.read(MAX_MASKED_FILE + 1)
    except OSError as exc:
        raise PolicyError(f"credentials.files {path}: cannot read it: {exc.strerror}") from None
    ending = _line_ending(data)
    secret = data[: len(data) - len(ending)]
    if not secret:
        plan.notes.append(f"credentials.files {path}: empty, nothing to mask")
        return None
    return real_path, secret, ending
