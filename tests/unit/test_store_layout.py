"""The store's modules import one another without a cycle.

Every ``import`` statement counts, at the top of a module or inside a function (a
function-level import that closes a cycle is still a cycle, only a deferred one).  An
edge goes to the module named, or for ``from package import name`` to the submodule
``name`` when there is one; the implicit import of a parent package is not an edge
(Python runs ``__init__`` first, and a package that imports its submodules would
otherwise always form a cycle with them).
"""
from __future__ import annotations

import ast
from pathlib import Path

import perfscope.store

STORE = Path(perfscope.store.__file__).resolve().parent


def module_names(root: Path, package: str) -> dict[str, Path]:
    """Every module under ``root`` (the folder of ``package``), by dotted name."""
    names = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        names[".".join([package, *parts])] = path
    return names


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """module -> the modules of ``package`` it imports (see the module docstring)."""
    modules = module_names(root, package)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_package = path.name == "__init__.py"
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    here = name.split(".") if is_package else name.split(".")[:-1]
                    here = here[:len(here) - (node.level - 1)]
                    base = ".".join(here + ([base] if base else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in targets:
                # `import a.b.c` names the module a.b.c (or its nearest known package).
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """A cycle of ``graph`` as a list of modules (first one repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_store_has_no_import_cycle() -> None:
    graph = import_graph(STORE, "perfscope.store")
    assert "perfscope.store.kineto.importer" in graph  # (the walk sees subpackages)
    assert "perfscope.store.kineto.read" in graph["perfscope.store.kineto.importer"]
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle in perfscope/store: " + " -> ".join(cycle or [])


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    # GIVEN a package whose module a imports b at the top, and b imports a in a function
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.sub import a\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    # WHEN the graph is walked THEN the cycle is reported, and the parent package is not in it
    graph = import_graph(pkg, "pkg")
    assert graph["pkg"] == {"pkg.sub.a"}
    assert find_cycle(graph) == ["pkg.sub.a", "pkg.sub.b", "pkg.sub.a"]
    # WHEN b's import goes THEN there is none
    (pkg / "sub" / "b.py").write_text("def f():\n    return 1\n")
    assert find_cycle(import_graph(pkg, "pkg")) is None
