"""JSON-lines audit log: one event per line, appended.

The file is opened ``O_APPEND`` (mode 0600 when created) through
:mod:`safebox.hostio`: never through a symlink (an earlier run may have
planted ``audit.jsonl -> ~/.bashrc``), and only a regular file of this user
with one link. Every event is a
single ``write(2)`` of one complete line, so concurrent writers — threads here,
or several safebox runs sharing a log — never interleave within a line.
"""

from __future__ import annotations

import datetime
import json
import os
import pathlib
import threading
from typing import Any

__all__ = ["SCHEMA", "AuditLog"]

#: Version of the log's events (docs/audit-log.md), written in each run's
#: ``start`` event. 2: ``start``/``stop`` are run records (run id, command,
#: layers, exit, duration, destinations, quarantined files) and every event
#: carries the ``run`` id.
SCHEMA = 2


class AuditLog:
    """Append-only JSON-lines writer; thread-safe.

    Each line is ``{"time": <UTC ISO 8601>, "event": kind, "run": run, **fields}``
    (``run`` only when given). Values that JSON cannot encode are written
    with ``str()``.
    """

    def __init__(self, path: str | os.PathLike[str], *, run: str | None = None) -> None:
        self.path = pathlib.Path(path)
        self.run = run
        self._lock = threading.Lock()
        from safebox.hostio import open_append

        # HostFileError (a SafeboxError) names the path and what is wrong with it.
        self._fd: int | None = open_append(os.fspath(path), mode=0o600)

    def event(self, kind: str, /, **fields: Any) -> None:
        """Append one event line; silently dropped after :meth:`close`."""
        record: dict[str, Any] = {
            "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="milliseconds"),
            "event": kind,
        }
        if self.run is not None:
            record["run"] = self.run
        record.update(fields)
        line = (json.dumps(record, default=str, separators=(",", ":")) + "\n").encode()
        with self._lock:
            if self._fd is None:
                return
            view = memoryview(line)
            while view:  # a regular-file append writes it all at once; loop for safety
                written = os.write(self._fd, view)
                view = view[written:]

    def close(self) -> None:
        """Close the file; idempotent."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> AuditLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
