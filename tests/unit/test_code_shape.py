"""The code's shape: module and function sizes, no import cycle, imports that point one way.

One walker reads every module of the installed ``perfscope`` package from its folders
(``perfscope/``, and ``collectors/``, ``analyzers/``, ``dashboards/`` installed as
``perfscope.collectors``, ...).  Every ``import`` statement counts, at the top of a module
or inside a function (a function-level import that closes a cycle is still a cycle, only a
deferred one), except under ``if TYPE_CHECKING:``, which never runs.  An edge goes to the
module named, or for ``from package import name`` to the submodule ``name`` when there is
one.  An import of a module's own package or of a package above it is not an edge, implicit
or written out (``from perfscope import __version__`` in ``perfscope.store.meta``): Python
has run that ``__init__`` before the module, so the import starts nothing, and a package
that imports its submodules would otherwise always form a cycle with them.

Layer rules (docs/architecture.md): ``dashboards/`` imports no store module (it draws what
analyzers return), and ``collectors/`` imports nothing of the recorder that drives them.
"""
from __future__ import annotations

import ast
import functools
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# Installed package -> folder (setup.py's MAPPED).
PACKAGES: dict[str, Path] = {
    "perfscope": ROOT / "perfscope",
    "perfscope.collectors": ROOT / "collectors",
    "perfscope.analyzers": ROOT / "analyzers",
    "perfscope.dashboards": ROOT / "dashboards",
}
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
# Declarative tables (data written as code) may run longer: "module" or "module.function"
# -> why.  Keep this short; a long function that computes something is split instead.
EXEMPT: dict[str, str] = {}
# Over a limit today, in modules another change is rewriting: split them when it lands.
# Each entry must still be over its limit (the test says when one can go).
PENDING: dict[str, str] = {
    "perfscope.store.kineto.importer.import_kineto": "81 lines; the Kineto import-safety and format changes rewrite it",
}
STORE = ("perfscope.store",)
RECORDER = ("perfscope.recorder", "perfscope.profiler", "perfscope.launch", "perfscope.options")


def module_names(packages: Mapping[str, Path]) -> dict[str, Path]:
    """Every module under the folders of ``packages`` (package name -> folder), by dotted name."""
    names = {}
    for package, root in packages.items():
        for path in sorted(root.rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            name = ".".join([package, *parts])
            names.setdefault(name, path)  # perfscope/ has no collectors/ folder: no clash
    return names


def imported_names(path: Path, name: str, modules: Mapping[str, Path]) -> Iterator[str]:
    """The absolute names module ``name`` (at ``path``) imports: ``import X`` gives ``X``;
    ``from X import Y`` gives ``X.Y`` when that is a module of ``modules``, else ``X`` and
    ``X.Y`` (relative imports resolved against ``name``)."""
    is_package = path.name == "__init__.py"
    for node in _runtime_nodes(_parse(path)):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                here = name.split(".") if is_package else name.split(".")[:-1]
                here = here[:len(here) - (node.level - 1)]
                base = ".".join(here + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield from ((full,) if full in modules else (base, full))


def _parse(path: Path) -> ast.Module:
    """``path`` parsed (once per text: the tests walk the tree several times)."""
    return _parse_text(path.read_text(), str(path))


@functools.cache
def _parse_text(text: str, filename: str) -> ast.Module:
    return ast.parse(text, filename)


def _runtime_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of ``tree`` except the bodies of ``if TYPE_CHECKING:`` (never run)."""
    todo = [tree]
    while todo:
        node = todo.pop()
        yield node
        if isinstance(node, ast.If) and _names_type_checking(node.test):
            todo.extend(node.orelse)
        else:
            todo.extend(ast.iter_child_nodes(node))


def _names_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or \
        (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_graph(packages: Mapping[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of ``packages`` it imports (see the module docstring)."""
    modules = module_names(packages)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for target in imported_names(path, name, modules):
            # `import a.b.c` names the module a.b.c (or its nearest known package).
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and not (name + ".").startswith(target + "."):  # itself or an ancestor
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


def oversized(packages: Mapping[str, Path]) -> dict[str, int]:
    """Modules over :data:`MAX_MODULE_LINES` and functions (methods too, as
    ``module.Class.method``) over :data:`MAX_FUNCTION_LINES`, by name -> lines."""
    found: dict[str, int] = {}
    for name, path in module_names(packages).items():
        lines = len(path.read_text().splitlines())
        if lines > MAX_MODULE_LINES:
            found[name] = lines
        found.update(_long_functions(_parse(path), name))
    return found


def _long_functions(node: ast.AST, prefix: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            name = f"{prefix}.{child.name}"
            lines = (child.end_lineno or child.lineno) - child.lineno + 1
            if not isinstance(child, ast.ClassDef) and lines > MAX_FUNCTION_LINES:
                found[name] = lines
            found.update(_long_functions(child, name))
    return found


def layer_violations(packages: Mapping[str, Path], layer: str, forbidden: tuple[str, ...],
                     extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Modules of ``layer`` (a package) that import a ``forbidden`` module (or one of
    ``extra``, third-party names), module -> the first such import."""
    modules = module_names(packages)
    found = {}
    for name, path in modules.items():
        if name != layer and not name.startswith(layer + "."):
            continue
        for target in imported_names(path, name, modules):
            if target in extra or any(target == f or target.startswith(f + ".") for f in forbidden):
                found.setdefault(name, target)
    return found


def test_the_package_has_no_import_cycle() -> None:
    graph = import_graph(PACKAGES)
    # (the walk sees every folder and subpackage)
    assert "perfscope.store.kineto.read" in graph["perfscope.store.kineto.importer"]
    assert {"perfscope.collectors.base", "perfscope.analyzers.analysis", "perfscope.dashboards.app"} <= graph.keys()
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_a_cycle_through_a_function_level_import_is_found(tmp_path: Path) -> None:
    # GIVEN a package whose module a imports b at the top, and b imports a in a function
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.sub import a\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from . import a\n    return a\n")
    # WHEN the graph is walked THEN the cycle is reported, and the parent package is not in it
    graph = import_graph({"pkg": pkg})
    assert graph["pkg"] == {"pkg.sub.a"}
    assert find_cycle(graph) == ["pkg.sub.a", "pkg.sub.b", "pkg.sub.a"]
    # WHEN b's import goes THEN there is none
    (pkg / "sub" / "b.py").write_text("def f():\n    return 1\n")
    assert find_cycle(import_graph({"pkg": pkg})) is None
    # WHEN b imports a for type hints only THEN that is no cycle either
    (pkg / "sub" / "b.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    from pkg.sub import a\n")
    assert find_cycle(import_graph({"pkg": pkg})) is None


def test_a_mapped_folder_joins_the_package(tmp_path: Path) -> None:
    # GIVEN pkg/ and a top-level extra/ installed as pkg.extra, which imports pkg.core
    (tmp_path / "pkg").mkdir()
    (tmp_path / "extra").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "core.py").write_text("def f():\n    from pkg.extra import tool\n")
    (tmp_path / "extra" / "__init__.py").write_text("")
    (tmp_path / "extra" / "tool.py").write_text("from ..core import f\n")
    # THEN the cycle across the two folders is found
    graph = import_graph({"pkg": tmp_path / "pkg", "pkg.extra": tmp_path / "extra"})
    assert find_cycle(graph) == ["pkg.core", "pkg.extra.tool", "pkg.core"]


def test_no_module_or_function_is_over_its_size() -> None:
    over = {name: lines for name, lines in oversized(PACKAGES).items() if name not in EXEMPT and name not in PENDING}
    assert over == {}, (f"over {MAX_MODULE_LINES} lines per module / {MAX_FUNCTION_LINES} per function; "
                        f"split by what each part does: {over}")


@pytest.mark.parametrize("name", sorted({**EXEMPT, **PENDING}))
def test_every_listed_exception_is_still_needed(name: str) -> None:
    assert name in oversized(PACKAGES), f"{name} is within its size now: remove it from EXEMPT/PENDING"


def test_the_size_check_sees_long_functions_and_methods(tmp_path: Path) -> None:
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    (tmp_path / "mod.py").write_text(f"def long():\n{body}\nclass C:\n    def m(self):\n" +
                                     body.replace("    ", "        ") + "\ndef short():\n    return 1\n")
    assert oversized({"pkg": tmp_path}) == {"pkg.mod.long": MAX_FUNCTION_LINES + 1,
                                            "pkg.mod.C.m": MAX_FUNCTION_LINES + 1}


def test_no_dashboard_module_imports_the_store() -> None:
    modules = [m for m in module_names(PACKAGES) if m.startswith("perfscope.dashboards.")]
    assert len(modules) >= 6
    found = layer_violations(PACKAGES, "perfscope.dashboards", STORE, extra=("pyarrow", "pyarrow.parquet"))
    assert found == {}, f"dashboards/ must read runs through analyzers, not the store: {found}"


def test_the_check_sees_a_store_import(tmp_path: Path) -> None:
    (tmp_path / "dashboards").mkdir()
    bad = tmp_path / "dashboards" / "bad.py"
    for text in ("from perfscope.store.reader import Run\n", "import perfscope.store\n",
                 "from perfscope import store\n", "def f():\n    from perfscope.store import open_run\n",
                 "import pyarrow.parquet as pq\n"):
        bad.write_text(text)
        found = layer_violations({"perfscope.dashboards": tmp_path / "dashboards"}, "perfscope.dashboards",
                                 STORE, extra=("pyarrow", "pyarrow.parquet"))
        assert list(found) == ["perfscope.dashboards.bad"], text


def test_no_collector_module_imports_the_recorder() -> None:
    assert len([m for m in module_names(PACKAGES) if m.startswith("perfscope.collectors.")]) >= 10
    found = layer_violations(PACKAGES, "perfscope.collectors", RECORDER)
    assert found == {}, f"collectors/ must not know the recorder that drives them: {found}"


def test_the_check_sees_a_recorder_import(tmp_path: Path) -> None:
    (tmp_path / "collectors").mkdir()
    bad = tmp_path / "collectors" / "bad.py"
    for text in ("from perfscope.options import RecordOptions\n", "import perfscope.recorder.driver\n",
                 "from perfscope import profiler\n", "def f():\n    from perfscope.launch import launch\n"):
        bad.write_text(text)
        found = layer_violations({"perfscope.collectors": tmp_path / "collectors"}, "perfscope.collectors", RECORDER)
        assert list(found) == ["perfscope.collectors.bad"], text
