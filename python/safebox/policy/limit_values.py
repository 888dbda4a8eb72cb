"""The values of a policy's ``limits`` keys (processes, memory, tmpSize,
wallTime): their defaults and bounds, the sizes and durations they are
written in, and how they are shown.

The policy language's part of the limits, below the policy model that
checks them (``policy/model.py``), the merge and the diff; how a run
enforces them is ``run/limits.py`` (the plan, and what safebox does while
the command runs). What each limit means, its default and why:
docs/policy-reference.md ("Limits").

Standard library only, cheap to import: ``safebox doctor`` runs it from a
fresh checkout, and ``safebox exec`` on every run.
"""

from __future__ import annotations

import os

#: ``"unlimited"`` in a policy or flag; stored as 0.
UNLIMITED = 0
UNLIMITED_WORD = "unlimited"

KiB, MiB, GiB, TiB = 1 << 10, 1 << 20, 1 << 30, 1 << 40

#: Processes and threads in one sandbox. A ``make -j64`` of rustc and lld
#: jobs (each with a thread per core) peaks near 2,000 tasks, a JVM build at a
#: few hundred, a Node or Python test run at tens: 4096 leaves twice the
#: largest. A fork bomb stopped there costs the host about 64 MiB of kernel
#: stacks (16 KiB each), and stays far below ``pid_max`` (at least 32768):
#: ten such sandboxes on one host still leave it room.
DEFAULT_PROCESSES = 4096
#: The private /tmp (and /dev/shm) is RAM: the default is a quarter of it, at
#: most 4 GiB. Large enough for compilers' and test runners' temporary files,
#: small enough that one sandbox cannot pin half the host's memory in /tmp
#: (the kernel's tmpfs default, which it was before: 2 GiB written were
#: accepted on a 4 GiB machine).
DEFAULT_TMP_CAP = 4 * GiB
#: Memory and wall time: unlimited by default. A fraction of RAM would be
#: wrong both ways (a linker needs most of a small CI runner; ten agents on
#: one host need a tenth each); whoever runs several sandboxes on one host
#: knows the share, and sets it.
DEFAULT_MEMORY = UNLIMITED
DEFAULT_WALL_TIME = UNLIMITED
#: Seconds between the SIGTERM and the SIGKILL at the wall-time limit (as
#: ``timeout -k 5``): long enough to write a report, short enough for CI.
TIMEOUT_GRACE = 5.0

# Bounds: below these nothing starts (bwrap's init, the helper, a shell);
# above them the kernel's own maxima.
MIN_PROCESSES, MAX_PROCESSES = 8, 4_194_304  # PID_MAX_LIMIT
MIN_MEMORY = 16 * MiB
MIN_TMP_SIZE = 1 * MiB
MAX_BYTES = 1 << 62
MAX_WALL_TIME = 365 * 86400.0

# Policy key → (flag, EffectivePolicy field); the order of -v and doctor.
KEYS: dict[str, tuple[str, str]] = {
    "processes": ("--limit-processes", "limit_processes"),
    "memory": ("--limit-memory", "limit_memory"),
    "tmpSize": ("--limit-tmp", "limit_tmp_size"),
    "wallTime": ("--timeout", "limit_wall_time"),
}

_SIZE_UNITS = {"": 1, "b": 1, "k": KiB, "kib": KiB, "m": MiB, "mib": MiB, "g": GiB, "gib": GiB,
               "t": TiB, "tib": TiB, "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4}
_TIME_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}

SIZE_SYNTAX = ('give bytes, or a number with a unit: 512MiB, 2GiB, 1.5G (K, M, G, T and KiB … TiB are '
               f'powers of 1024; KB, MB, GB, TB powers of 1000), or "{UNLIMITED_WORD}"')
TIME_SYNTAX = f'give seconds, or a duration such as 90s, 30m, 2h, 1h30m, or "{UNLIMITED_WORD}"'


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "true/false"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a table/object"
    return f"a {type(value).__name__}"


def _number(text: str) -> float | None:
    """A plain non-negative decimal (``12``, ``1.5``), or None."""
    if not text or text.count(".") > 1 or not text.replace(".", "").isdigit() or text[0] == "." \
            or text[-1] == ".":
        return None
    return float(text)


def parse_size(value: object) -> int:
    """Bytes from ``2GiB``-style text or an integer; 0 for ``"unlimited"``.
    Raises ValueError saying what is wrong (without repeating the value)."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"must be a size, not {_kind(value)}: {SIZE_SYNTAX}")
    if isinstance(value, int):
        n = value
    elif value.strip().lower() == UNLIMITED_WORD:
        return UNLIMITED
    else:
        text = value.strip().lower()
        split = len(text)
        while split and text[split - 1].isalpha():
            split -= 1
        num, unit = _number(text[:split].strip()), text[split:]
        if num is None or unit not in _SIZE_UNITS:
            raise ValueError(f"not a size: {SIZE_SYNTAX}")
        n = int(num * _SIZE_UNITS[unit])
    if n <= 0:
        raise ValueError(f'must be more than 0 (no limit is "{UNLIMITED_WORD}")')
    if n > MAX_BYTES:
        raise ValueError("too large (at most 4 EiB)")
    return n


def parse_duration(value: object) -> float:
    """Seconds from a number or ``1h30m``-style text; 0 for ``"unlimited"``.
    Raises ValueError saying what is wrong."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"must be a duration, not {_kind(value)}: {TIME_SYNTAX}")
    if isinstance(value, (int, float)):
        secs = float(value)
    elif value.strip().lower() == UNLIMITED_WORD:
        return float(UNLIMITED)
    else:
        text = value.strip().lower()
        plain = _number(text)
        if plain is not None:
            secs = plain
        else:
            secs, num, last = 0.0, "", -1
            for ch in text:
                if ch.isdigit() or ch == ".":
                    num += ch
                    continue
                n = _number(num)
                order = "smhd".find(ch)
                # Units largest first, each at most once: "1h30m", not "30m1h".
                if n is None or ch not in _TIME_UNITS or (last != -1 and order >= last):
                    raise ValueError(f"not a duration: {TIME_SYNTAX}")
                secs += n * _TIME_UNITS[ch]
                num, last = "", order
            if num or last == -1:
                raise ValueError(f"not a duration: {TIME_SYNTAX}")
    if not secs > 0:
        raise ValueError(f'must be more than 0 seconds (no limit is "{UNLIMITED_WORD}")')
    if secs > MAX_WALL_TIME:
        raise ValueError("too long (at most 365 days)")
    return secs


def parse_count(value: object) -> int:
    """A process count (int or decimal text); 0 for ``"unlimited"``."""
    syntax = f'give a whole number from {MIN_PROCESSES} to {MAX_PROCESSES}, or "{UNLIMITED_WORD}"'
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"must be a number of processes, not {_kind(value)}: {syntax}")
    if isinstance(value, str):
        if value.strip().lower() == UNLIMITED_WORD:
            return UNLIMITED
        if not value.strip().isdigit():
            raise ValueError(f"not a number of processes: {syntax}")
        value = int(value.strip())
    if not MIN_PROCESSES <= value <= MAX_PROCESSES:
        raise ValueError(f"{value} is out of range: {syntax} (bwrap's init, the helper and the command count too)")
    return value


def check_value(key: str, value: object) -> None:
    """Validate ``limits.KEY = value`` (a policy file's or a flag's); raises ValueError."""
    if key == "processes":
        parse_count(value)
    elif key == "wallTime":
        parse_duration(value)
    else:
        n = parse_size(value)
        low = MIN_MEMORY if key == "memory" else MIN_TMP_SIZE
        if n and n < low:
            raise ValueError(f"too small: at least {human_size(low)} (nothing starts in less)")


def parse_value(key: str, value: object) -> int | float:
    """The normalised value of ``limits.KEY`` (bytes, seconds, a count; 0: unlimited)."""
    check_value(key, value)
    if key == "processes":
        return parse_count(value)
    if key == "wallTime":
        return parse_duration(value)
    return parse_size(value)


def human_size(n: int) -> str:
    """``4 GiB``, ``512 MiB``, ``1.5 GiB``, ``1000 bytes``."""
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if n >= size:
            v = n / size
            return f"{v:.0f} {unit}" if v == int(v) else f"{v:.1f} {unit}"
    return f"{n} bytes"


def human_duration(secs: float) -> str:
    """``30m``, ``1h30m``, ``90s`` → as a policy would spell it."""
    if secs != int(secs) or secs < 60:
        return f"{secs:g}s"
    out, rest = "", int(secs)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            out += f"{rest // size}{unit}"
            rest %= size
    return out


def human(key: str, value: float) -> str:
    """A limit's value for people."""
    if not value:
        return UNLIMITED_WORD
    if key == "processes":
        return str(int(value))
    if key == "wallTime":
        return human_duration(value)
    return human_size(int(value))


def policy_value(key: str, value: float) -> int | float | str:
    """A limit's value as a policy file can spell it (``policy show --json``)."""
    if not value:
        return UNLIMITED_WORD
    return value if key == "wallTime" and value != int(value) else int(value)


def ram_bytes() -> int:
    """Physical memory."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError):
        return 16 * GiB


def default(key: str) -> int | float:
    """The built-in value of ``limits.KEY`` on this host (0: unlimited)."""
    if key == "processes":
        return DEFAULT_PROCESSES
    if key == "tmpSize":
        return min(ram_bytes() // 4, DEFAULT_TMP_CAP)
    return DEFAULT_MEMORY if key == "memory" else DEFAULT_WALL_TIME
