"""The dashboard draws what analyzers return: no module under dashboards/ imports the store."""
from __future__ import annotations

import ast
from pathlib import Path

DASHBOARDS = Path(__file__).resolve().parents[2] / "dashboards"


def _imports(path: Path) -> list[str]:
    """Every module ``path`` imports (``import X``, ``from X import Y`` as ``X`` and ``X.Y``)."""
    names: list[str] = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names += [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
    return names


def test_no_dashboard_module_imports_the_store() -> None:
    modules = sorted(DASHBOARDS.rglob("*.py"))
    assert len(modules) >= 6
    found = {p.name: n for p in modules for n in _imports(p)
             if n == "perfscope.store" or n.startswith("perfscope.store.") or n in ("pyarrow", "pyarrow.parquet")}
    assert found == {}, f"dashboards/ must read runs through analyzers, not the store: {found}"


def test_the_check_sees_a_store_import(tmp_path: Path) -> None:
    bad = tmp_path / "bad.py"
    bad.write_text("from perfscope.store.reader import Run\nimport perfscope.store\nfrom perfscope import store\n")
    store = [n for n in _imports(bad) if n.startswith("perfscope.store")]
    assert store == ["perfscope.store.reader", "perfscope.store.reader.Run", "perfscope.store", "perfscope.store"]
