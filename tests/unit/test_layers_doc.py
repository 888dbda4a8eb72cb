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


# -- the run path (Python) ----------------------------------------------------

STEP = re.compile(r"^\s*#\s*(\d+)\.\s*(.*)$")
ITEM = re.compile(r"^(\d+)\.\s+(.*)$")


def _function(path: Path, qualname: str) -> str:
    """The source of ``Class.method`` or ``function`` in ``path``."""
    import ast

    text = path.read_text()
    nodes: list[ast.AST] = list(ast.parse(text).body)
    *outer, name = qualname.split(".")
    for part in outer:
        nodes = next(n.body for n in nodes if isinstance(n, ast.ClassDef) and n.name == part)
    node = next(n for n in nodes if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == name)
    return ast.get_source_segment(text, node) or ""


def _code_steps(source: str) -> list[tuple[int, str]]:
    """The numbered step comments (``# 3. The policy ...``) of a function,
    a comment's continuation lines joined."""
    steps: list[tuple[int, str]] = []
    lines = source.splitlines()
    for i, line in enumerate(lines):
        m = STEP.match(line)
        if m is None:
            continue
        text = [m.group(2)]
        for more in lines[i + 1:]:
            s = more.strip()
            if not s.startswith("#") or STEP.match(more):
                break
            text.append(s.lstrip("# "))
        steps.append((int(m.group(1)), " ".join(text)))
    return steps


def _doc_steps(section: str, after: str) -> list[tuple[int, str]]:
    """The numbered list that follows ``after`` in ``section``, each item's
    lines joined."""
    lines = section[section.index(after):].splitlines()[1:]
    items: list[tuple[int, str]] = []
    for line in lines:
        m = ITEM.match(line)
        if m:
            items.append((int(m.group(1)), m.group(2)))
        elif items and line.startswith("   ") and line.strip():
            items[-1] = (items[-1][0], f"{items[-1][1]} {line.strip()}")
        elif items and not line.strip():
            break
    return items


def _key(item: str) -> str:
    """What a doc item names, in words a step comment starts with: up to
    its first parenthesis, without the list's punctuation."""
    return " ".join(item.split(" (", 1)[0].rstrip(";.").split()).lower()


def _same_steps(doc: list[tuple[int, str]], code: list[tuple[int, str]]) -> list[str]:
    """Where the doc's numbered steps and the code's differ: the numbers,
    and each doc step's words at the start of the code's comment."""
    out = []
    if [n for n, _ in doc] != [n for n, _ in code]:
        out.append(f"numbers: doc {[n for n, _ in doc]}, code {[n for n, _ in code]}")
    for (n, d), (_, c) in zip(doc, code, strict=False):
        if not " ".join(c.split()).lower().startswith(_key(d)):
            out.append(f"step {n}: doc {_key(d)!r}, code {c!r}")
    return out


def _run_path_section() -> str:
    doc = (ROOT / "docs" / "layers.md").read_text()
    start = doc.index("## The run path (Python)")
    return doc[start:doc.index("\n## ", start + 1)]


def test_the_session_steps_layers_md_lists_are_session_opens() -> None:
    code = _code_steps(_function(ROOT / "python/safebox/run/session.py", "Session._open"))
    doc = _doc_steps(_run_path_section(), "A session (`Session._open`)")
    assert len(doc) == 8
    assert _same_steps(doc, code) == []


def test_the_command_steps_layers_md_lists_are_the_commands() -> None:
    """Steps 1 to 6 are ``Command._prepare``'s numbered comments; 7 to 9 are
    the calls that follow it: ``start``, the launch's ``wait``, ``finish``."""
    command = ROOT / "python/safebox/run/command.py"
    doc = _doc_steps(_run_path_section(), "A command (`Command._prepare`, `start`, `finish`)")
    assert _same_steps(doc[:6], _code_steps(_function(command, "Command._prepare"))) == []
    assert [(n, d.split(" ", 1)[0].rstrip(":")) for n, d in doc[6:]] == [(7, "start"), (8, "wait,"), (9, "finish")]
    assert _function(command, "Command.start") and _function(command, "Command.finish")
    assert _function(ROOT / "python/safebox/run/supervise.py", "Launch.wait")


def test_the_python_block_layers_md_quotes_is_runs_statement_for_statement() -> None:
    """Every statement of the quoted block is a line of ``run.main.run``, in
    order, with the step numbers of its comment."""
    section = _run_path_section()
    block = section[section.index("```python\n") + 10:section.index("```\n", section.index("```python\n"))]
    run = _function(ROOT / "python/safebox/run/main.py", "run").splitlines()
    quoted = [line for line in block.splitlines() if line.strip() and line.strip() != "..."]
    assert _in_order(quoted, run) == []


def _numbers(comment: str) -> list[int]:
    return [int(n) for n in re.findall(r"(?:^|[;,] |and )(\d+)\.", comment.strip())]


def _in_order(quoted: list[str], code: list[str]) -> list[str]:
    """Quoted lines missing from ``code`` (or out of order), or whose step
    numbers differ from the code line's."""
    out = []
    at = 0
    for q in quoted:
        stmt, _, comment = q.partition("#")
        want = stmt.strip()
        hit = next((i for i in range(at, len(code)) if code[i].partition("  #")[0].strip() == want), None)
        if hit is None:
            out.append(f"not in run(), in order: {want}")
            continue
        at = hit + 1
        if _numbers(comment) != _numbers(code[hit].partition("  #")[2]):
            out.append(f"step numbers differ: {q.strip()!r} and {code[hit].strip()!r}")
    return out


def test_the_run_path_comparisons_see_a_changed_step() -> None:
    assert _same_steps([(1, "where: the work dir;")], [(1, "Where: the work dir. More.")]) == []
    assert _same_steps([(1, "the policy (cached)")], [(1, "The limits.")]) != []
    assert _same_steps([(1, "a"), (2, "b")], [(1, "a")]) != []
    code = ["with S() as s:  # 2.", "    t = s.prepare()  # 3.", "    rc = s.start().wait()  # 4. and 5."]
    assert _in_order(["with S() as s: # 2. policy", "rc = s.start().wait() # 4. spawn; 5. wait"], code) == []
    assert _in_order(["t = s.prepare() # 4. build"], code) != []
    assert _in_order(["rc = s.start().wait()", "with S() as s:"], code) != []
