"""What can be decided about the supervisor's records without importing
``feed`` (whose imports, with pyseccomp's syscall table, cost about 50 ms):
whether there is anything to say at all.

Nearly every run that looks a user up (git, ``ls -l``, ``id``) ends with
glibc's name-service probes, ``socket(AF_UNIX)`` refused without an address,
which the summary leaves out on purpose (``Feed.summary``). A run with only
those, no audit log and no ``-v`` prints and records nothing: the records
are not explained at all.
"""

from __future__ import annotations

AF_UNIX = 1


def only_quiet(records: list[bytes]) -> bool:
    """True when every record is a refused ``socket(AF_UNIX)`` (the
    supervisor names ``socket`` in its record; docs/violations.md,
    "Records"). Anything else, a malformed line or ``dropped N`` included,
    is False: then ``feed`` decides. Never raises."""
    for line in records:
        f = line.split(b" ")
        if len(f) != 13 or f[0] != b"ev" or f[1] != b"s" or f[2] != b"socket":
            return False
        try:
            family = int(f[9].split(b",", 1)[0], 16)
        except ValueError:
            return False
        if family & 0xFFFF_FFFF != AF_UNIX:
            return False
    return True
