"""Which GPUs a run may use: the value of ``--allow-gpu`` and of the
policy's GPU selection (``all``, or indices such as ``0,2``).

Part of the policy language, checked when a policy is read
(policy/sources.py); finding the device nodes on the host and binding them
is ``builder/devices.py``. Standard library only.
"""

from __future__ import annotations

from safebox.errors import BuildError

#: At most this many GPUs named in a selection (--allow-gpu=0,2).
MAX_INDEX = 63


def parse_selection(value: str, *, key: str = "--allow-gpu") -> tuple[int, ...] | None:
    """``all`` → None (every GPU); ``0,2`` → (0, 2): the N of ``/dev/nvidiaN``
    (the device minor, which is nvidia-smi's index on most hosts but not all)
    and of ``/dev/dri/renderD(128+N)``. Raises BuildError naming ``key``."""
    if value in ("", "all"):
        return None
    out: list[int] = []
    for part in value.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) > MAX_INDEX:
            raise BuildError(f"{key}={value}: not a list of GPU indices (0 to {MAX_INDEX}, comma-separated, "
                             "e.g. --allow-gpu=0,2), nor 'all'")
        if int(part) not in out:
            out.append(int(part))
    return tuple(out)
