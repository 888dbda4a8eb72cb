"""The import graph of python/safebox has no cycle (issue 24): every
import counts, the lazy ones inside functions too; only ``if
TYPE_CHECKING:`` blocks are left out (they never run). A cycle means two
modules that cannot be understood, tested or loaded one without the other;
the fix is a module below both (as run/spawn.py, policy/words.py,
proxy/wire.py and proxy/listeners.py are)."""

from __future__ import annotations

import ast
from pathlib import Path

import safebox

PACKAGE = Path(safebox.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = p
    return out


def _targets(mods: dict[str, Path], current: str, node: ast.Import | ast.ImportFrom) -> set[str]:
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            pkg = current.split(".")
            if mods[current].name != "__init__.py":
                pkg = pkg[:-1]
            pkg = pkg[:len(pkg) - node.level + 1]
            base = ".".join([*pkg, base] if base else pkg)
        names = [base, *(f"{base}.{a.name}" for a in node.names)]
    return {n for n in names if n in mods}


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        deps: set[str] = set()
        stack: list[ast.AST] = [ast.parse(path.read_text(), str(path))]
        while stack:
            node = stack.pop()
            if isinstance(node, ast.If) and _is_type_checking(node.test):
                stack.extend(node.orelse)
                continue
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                deps |= _targets(mods, name, node)
            stack.extend(ast.iter_child_nodes(node))
        # A package's own submodules importing it (or it them) is how a package works.
        graph[name] = {d for d in deps if d != name and not name.startswith(d + ".")}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_package_has_no_import_cycle() -> None:
    found = cycles(import_graph())
    assert found == [], "import cycles (lazy imports count too): " + "; ".join(" <-> ".join(c) for c in found)


def test_the_cycle_finder_finds_a_lazy_cycle_and_ignores_type_checking() -> None:
    # Control: the check can fail.
    assert cycles({"a": {"b"}, "b": {"a"}, "c": set()}) == [["a", "b"]]
    tree = ast.parse("TYPE_CHECKING = False\nif TYPE_CHECKING:\n    import x\nelse:\n    import y\n")
    found = [n for n in ast.walk(tree) if isinstance(n, ast.If) and _is_type_checking(n.test)]
    assert found and isinstance(found[0].orelse[0], ast.Import)
    graph = import_graph()
    assert "safebox.run.spawn" in graph["safebox.run.mounter"]  # a lazy import inside a function is an edge
