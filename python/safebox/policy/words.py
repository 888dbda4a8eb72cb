"""How a policy's values are named in safebox's messages, in the words of
the file they came from. Below both load.py (its error translation) and
model.py (its validators), which each use it: neither imports the other."""

from __future__ import annotations

__all__ = ["json_word"]


def json_word(value: object) -> str:
    """A value as the user wrote it in a policy file, in that file's words."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"the number {value}"
    if isinstance(value, str):
        import json

        shown = value if len(value) <= 60 else value[:57] + "..."
        return f"the string {json.dumps(shown)}"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, dict):
        return "a table/object"
    import datetime

    if isinstance(value, (datetime.date, datetime.time)):  # TOML has dates; JSON not
        return "a date/time"
    return f"a {type(value).__name__}"
