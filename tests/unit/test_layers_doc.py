"""docs/layers.md quotes helper/main.c's sequence "line by line" (issue 24:
it had drifted: die_with_parent, the observing program and check_observe were
missing, publish_start had the wrong arguments). Every quoted call is in
main.c's numbered block, the same calls in the same order."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CALL = re.compile(r"^\s*(?:st\.\w+\s*\+?=\s*)?(\w+)\((.*?)\);")


def _calls(lines: list[str]) -> list[str]:
    return [f"{m.group(1)}({m.group(2)})" for line in lines if (m := CALL.match(line))]


def test_the_sequence_layers_md_quotes_is_main_cs_call_for_call() -> None:
    main = (ROOT / "helper" / "main.c").read_text()
    block = main[main.index("/* clang-format off */"):main.index("/* clang-format on */")]
    doc = (ROOT / "docs" / "layers.md").read_text()
    quoted = doc[doc.index("```c\n") + 5:doc.index("```\n", doc.index("```c\n"))]
    in_main = [c for c in _calls(block.splitlines()) if not c.startswith(("util_set_status_fd", "close("))]
    assert _calls(quoted.splitlines()) == in_main


def test_the_comparison_sees_a_missing_or_changed_call() -> None:
    assert _calls(["refuse_setuid();  /* 1 */", "st.bridges += publish_start(&pol);"]) == [
        "refuse_setuid()", "publish_start(&pol)"]
    assert _calls(["refuse_setuid();"]) != _calls(["refuse_setuid();", "die_with_parent(parent);"])
