"""No module of python/safebox over 600 lines and no function over 60
(issue 24 item 2): a module that size does one thing, and a function that
size can be read at once, as helper/main.c's ``main()`` is.

The modules and functions over the limits when the limits came in were
listed below as ceilings that could shrink and not grow; the last of them
were split in issue 24's last round, and the lists are empty. They stay as
the one place to name an exception, with its size, should one ever be
argued for.
"""

from __future__ import annotations

import ast
from pathlib import Path

import safebox

PACKAGE = Path(safebox.__file__).parent
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60

#: module (relative to python/safebox) -> its lines when the limit came in.
MODULES_OVER: dict[str, int] = {
}

#: "module:function" -> its lines when the limit came in.
FUNCTIONS_OVER: dict[str, int] = {
}


def _sizes() -> tuple[dict[str, int], dict[str, int]]:
    modules: dict[str, int] = {}
    functions: dict[str, int] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        text = path.read_text()
        modules[rel] = len(text.splitlines())
        for node in ast.walk(ast.parse(text, rel)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno is not None:
                key = f"{rel}:{node.name}"
                functions[key] = max(functions.get(key, 0), node.end_lineno - node.lineno + 1)
    return modules, functions


def _over(sizes: dict[str, int], limit: int, known: dict[str, int]) -> list[str]:
    out = []
    for name, n in sorted(sizes.items()):
        if n > limit and name not in known:
            out.append(f"{name}: {n} lines (limit {limit})")
        elif name in known and n > known[name]:
            out.append(f"{name}: {n} lines, grown past its ceiling of {known[name]} (limit {limit})")
    return out


def test_no_module_is_over_600_lines_and_none_listed_has_grown() -> None:
    modules, _ = _sizes()
    assert not _over(modules, MAX_MODULE_LINES, MODULES_OVER), "split the module by concern (issue 24)"


def test_no_function_is_over_60_lines_and_none_listed_has_grown() -> None:
    _, functions = _sizes()
    assert not _over(functions, MAX_FUNCTION_LINES, FUNCTIONS_OVER), "split the function into named steps"


def test_the_lists_of_exceptions_only_hold_what_is_still_over_the_limits() -> None:
    """A module or function that now fits comes off its list, and the list
    names nothing that does not exist: the exceptions can only get fewer."""
    modules, functions = _sizes()
    stale = [m for m in MODULES_OVER if modules.get(m, 0) <= MAX_MODULE_LINES]
    stale += [f for f in FUNCTIONS_OVER if functions.get(f, 0) <= MAX_FUNCTION_LINES]
    assert not stale, f"remove from the lists (they fit now): {stale}"


def test_the_size_check_sees_a_module_and_a_function_over_the_limits() -> None:
    """The control: the check counts what it should."""
    long_function = "def f():\n" + "    x = 1\n" * 61
    sizes = {"m.py:f": max(n.end_lineno - n.lineno + 1 for n in ast.walk(ast.parse(long_function))
                           if isinstance(n, ast.FunctionDef) and n.end_lineno is not None)}
    assert _over(sizes, MAX_FUNCTION_LINES, {}) == ["m.py:f: 62 lines (limit 60)"]
    assert _over({"m.py": 601}, MAX_MODULE_LINES, {}) == ["m.py: 601 lines (limit 600)"]
    assert _over({"m.py": 700}, MAX_MODULE_LINES, {"m.py": 650}) == [
        "m.py: 700 lines, grown past its ceiling of 650 (limit 600)"]
