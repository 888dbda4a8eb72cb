"""The API's side of held runs (docs/review.md): :class:`Reviewing`, the
methods a ``Sandbox(review=True)`` adds, and the checks :class:`~safebox.api.Popen`
makes around a command. Its own module so that the API's stays one concern.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from safebox.run.session import Session


class Reviewing:
    """``Sandbox``'s held-run methods (``review=True``)."""

    _held: str | None
    _session: Session

    @property
    def held_run(self) -> str | None:
        """The id of the held run (``review=True``) whose changes wait, or None."""
        return self._held

    def _held_run(self) -> Any:
        from safebox.errors import RunError
        from safebox.review import store

        if self._held is None:
            raise RunError("no held run: make the Sandbox with review=True and run a command first")
        return store.open_held(self._session.state, self._held)

    def changes(self, *, diff: bool = False) -> list[dict[str, Any]]:
        """The held run's changes: one dict per path (``path``, ``kind``:
        added/modified/deleted, ``type``: file/dir/symlink/other, ``size``,
        ``mode``, ``runs_code``: applied only when named), with ``diff``
        (unified for text) when asked."""
        from safebox.review import layer

        h = self._held_run()
        out = []
        for c in layer.changes(h):
            row: dict[str, Any] = c.as_json()
            if diff:
                row["diff"] = layer.diff(h, c)
            out.append(row)
        return out

    def apply(self, paths: Sequence[str | os.PathLike[str]] | None = None, *, force: bool = False) -> dict[str, Any]:
        """Apply the held run's changes (those at or beneath ``paths``; None:
        all but the code-running ones) as ``safebox changes apply`` does.
        Returns ``applied``, ``conflicts``, ``refused`` and ``code`` (left
        out until named)."""
        from safebox.review import apply as _apply

        h = self._held_run()
        # Relative paths are the work dir's, as the command saw them.
        chosen = None if paths is None else tuple(os.path.join(self._session.cwd, os.fspath(p)) for p in paths)
        out = _apply.apply(h, chosen, force=force)
        return {"applied": list(out.applied), "conflicts": [list(c) for c in out.conflicts],
                "refused": [list(r) for r in out.refused], "code": list(out.code)}

    def discard(self) -> None:
        """Remove the held run: nothing more of it reaches the host."""
        from safebox.review import apply as _apply

        h = self._held_run()
        _apply.discard(h)
        self._held = None



def before_command(review: bool, held: str | None) -> None:
    """Refuse a command while the last one's held run still waits: each
    command's layer lies over the host tree, not over the last one's."""
    if review and held is not None:
        from safebox.errors import RunError

        raise RunError(f"held run {held} still waits: apply() or discard() it before the next "
                       "command (each command's layer lies over the host tree, not over the last one's)")


def prepare(command: Any, review: bool, held: str | None) -> str | None:
    """Prepare ``command`` (refused while the last held run waits); the
    held run from now on."""
    before_command(review, held)
    command.prepare()
    return held_id(command) or held


def held_id(command: Any, *, finished: bool = False) -> str | None:
    """The id of the run ``command`` holds (None: none; once ``finished``,
    also None when it changed nothing)."""
    held = getattr(command, "held", None)
    if held is None or (finished and held.meta.get("status") == "empty"):
        return None
    return str(held.id)
