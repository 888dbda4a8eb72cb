"""No import runs upward (issue 24, item 4): python/safebox is five layers,
and a module imports only from its own layer or the layers below it.

Every import counts, the lazy ones inside functions too; only ``if
TYPE_CHECKING:`` blocks are left out (they never run): the graph is
test_import_graph.py's. Bottom to top, each layer with the reason it sits
where it does (docs/architecture.md, "Layers of the Python package"):

1. **foundation**: no safebox concept. The error tree, the frozen record and
   the cheap stand-ins for costly stdlib imports, the signal take-over of
   ``safebox exec``, the one safe way to touch a host path a sandboxed
   command could have shaped, the audit log's writer. Everything uses them,
   so they can use nothing of safebox above.
2. **policy**: the policy language: the files, keys and values, their grammar
   (host names, globs, limits, addresses, proxy URLs, GPU selections), the
   merge into one ``EffectivePolicy``, and ``safebox exec``'s option table
   that maps flags onto the keys. Data and checks only: nothing here knows
   how a run enforces a key, so ``safebox policy check`` and the proxy share
   one grammar without either loading the other.
3. **builder | proxy**: the two enforcers of a policy, side by side and
   independent: builder/ turns the policy and what is read from the host into
   bubblewrap's arguments, the helper's policy, Landlock rules and the walks
   of the work tree; proxy/ is the network filter. Each reads the policy;
   neither imports the other (the run joins them), so either can be read,
   tested and changed alone.
4. **run**: one sandboxed run from start to end: the session and command,
   spawn and supervision, its limits, mounts, credentials and network
   set-up, the decisions taken while it runs, and what follows it (the
   review overlay, the violations table, the summary report, learn mode).
   It uses both enforcers.
5. **front**: the entry points: the ``safebox`` command and its
   subcommands (the only place where an error becomes an exit status), the
   public API, ``doctor``, ``mcp wrap``. Nothing below imports them.

A module lies in the layer of the longest prefix listed for it; a module
listed nowhere fails the test (a new module gets a place, and a reason).
The fix for an upward import is to move the shared piece down (as
policy/limit_values.py, policy/glob_syntax.py, policy/gpus.py,
policy/address_entries.py and policy/proxy_url.py were), never to list the
import as an exception.
"""

from __future__ import annotations

from test_import_graph import import_graph

#: Bottom to top: (layer, its independent groups, each a list of module prefixes).
LAYERS: list[tuple[str, list[list[str]]]] = [
    ("foundation", [["safebox.errors", "safebox._record", "safebox._signals", "safebox.hostio", "safebox.audit"]]),
    ("policy", [["safebox.policy", "safebox.exec_options"]]),
    ("builder | proxy", [["safebox.builder"], ["safebox.proxy"]]),
    ("run", [["safebox.run", "safebox.review", "safebox.violations", "safebox.report", "safebox.learn",
              "safebox.runtime", "safebox.ci_job"]]),
    ("front", [["safebox", "safebox.__main__", "safebox.cli", "safebox.api",
                "safebox.doctor", "safebox.mcpwrap", "safebox.jsonc"]]),
]

#: Upward imports not fixed yet: "importer -> imported" with the reason. A
#: ceiling: it may only shrink (none is left).
KNOWN_UPWARD: dict[str, str] = {}


def place(module: str, layers: list[tuple[str, list[list[str]]]] = LAYERS) -> tuple[int, int] | None:
    """(layer index, group index) of ``module``: its longest listed prefix
    (the package itself, ``safebox``, matches only itself)."""
    best: tuple[int, int, int] | None = None
    for i, (_, groups) in enumerate(layers):
        for j, group in enumerate(groups):
            for prefix in group:
                matches = module == prefix or ("." in prefix and module.startswith(prefix + "."))
                if matches and (best is None or len(prefix) > best[2]):
                    best = (i, j, len(prefix))
    return None if best is None else best[:2]


def upward(graph: dict[str, set[str]], layers: list[tuple[str, list[list[str]]]] = LAYERS) -> list[str]:
    """Every import from a layer to a higher one, or between two groups of one layer."""
    out = []
    for importer in sorted(graph):
        a = place(importer, layers)
        for imported in sorted(graph[importer]):
            b = place(imported, layers)
            if a is None or b is None:
                continue
            if b[0] > a[0]:
                out.append(f"{importer} -> {imported}: {layers[a[0]][0]} imports {layers[b[0]][0]}, a layer above it")
            elif b[0] == a[0] and b[1] != a[1]:
                out.append(f"{importer} -> {imported}: the two sides of {layers[a[0]][0]} import each other")
    return out


def test_every_module_of_the_package_has_a_layer_and_every_entry_a_module() -> None:
    graph = import_graph()
    unplaced = sorted(m for m in graph if place(m) is None)
    assert unplaced == [], "give each module a layer in LAYERS (and the docstring a reason): " + ", ".join(unplaced)
    listed = [p for _, groups in LAYERS for group in groups for p in group]
    stale = [p for p in listed if not any(m == p or m.startswith(p + ".") for m in graph)]
    assert stale == [], "LAYERS names modules that are gone (moved or renamed): " + ", ".join(stale)


def test_no_import_runs_upward_or_across_builder_and_proxy() -> None:
    found = [v for v in upward(import_graph()) if v.split(":", 1)[0] not in KNOWN_UPWARD]
    assert found == [], "move the shared piece down a layer:\n" + "\n".join(found)


def test_the_known_upward_imports_are_still_there() -> None:
    # The ceiling only shrinks: a fixed import leaves the list.
    found = {v.split(":", 1)[0] for v in upward(import_graph())}
    assert sorted(set(KNOWN_UPWARD) - found) == []


def test_the_layer_check_catches_an_upward_a_sideways_and_a_lazy_import() -> None:
    # Control: the check can fail, and it passes a downward import.
    layers = [("low", [["p.a"]]), ("mid", [["p.b"], ["p.c"]]), ("high", [["p.d"]])]
    graph = {"p.a": {"p.d"}, "p.b": {"p.c", "p.a"}, "p.c": set(), "p.d": {"p.b"}}
    assert upward(graph, layers) == ["p.a -> p.d: low imports high, a layer above it",
                                     "p.b -> p.c: the two sides of mid import each other"]
    assert place("p.b.x", layers) == (1, 0) and place("q", layers) is None
    assert place("safebox.new_module") is None and place("safebox") == (4, 0)
    # A lazy import inside a function is an edge of the real graph.
    assert "safebox.run.spawn" in import_graph()["safebox.run.mounter"]
