"""The house rules of the layout: one-way dependencies, no import cycles, modules that fit in a room."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("corpus", "eval", "flows")
LAYER = {"corpus": 0, "eval": 1, "flows": 2}


def _modules() -> dict[str, Path]:
    found = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = path
    return found


def _imports(path: Path, modules: dict[str, Path]) -> set[str]:
    """Every project module `path` imports, at module level or inside a function."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        for name in names:
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name:
                out.add(name)
    return out


def test_no_import_cycles_even_through_function_level_imports() -> None:
    modules = _modules()
    graph = {m: _imports(p, modules) - {m} for m, p in modules.items()}
    # A package's __init__ re-exports its children; a child importing a sibling is not a cycle through it.
    for m in graph:
        graph[m] = {d for d in graph[m] if not m.startswith(d + ".")}
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(graph[m]):
            if state.get(d) == 1:
                raise AssertionError("import cycle: " + " -> ".join([*stack[stack.index(d) :], d]))
            if d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(graph):
        if m not in state:
            visit(m)


def test_dependencies_run_one_way() -> None:
    modules = _modules()
    for name, path in modules.items():
        for dep in _imports(path, modules):
            assert LAYER[dep.split(".")[0]] <= LAYER[name.split(".")[0]], f"{name} imports {dep}"


def test_no_module_passes_300_lines_and_sql_stays_in_the_store() -> None:
    for name, path in _modules().items():
        lines = path.read_text().splitlines()
        assert len(lines) <= 300, f"{name}: {len(lines)} lines"
        if not name.startswith("eval.store"):
            text = path.read_text()
            assert not any(kw in text for kw in ("SELECT ", "INSERT INTO", "CREATE TABLE")), f"{name} holds SQL"
