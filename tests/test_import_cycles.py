"""The package has no static import cycle: no chain of module-level imports (``TYPE_CHECKING``
blocks aside) leads from a module back to itself, a package's ``__init__`` counted as
imported with any of its modules."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import langgraph_devsched

ROOT = Path(langgraph_devsched.__file__).parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = ["langgraph_devsched", *path.relative_to(ROOT).with_suffix("").parts]
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)

    def parents(name: str) -> list[str]:
        parts = name.split(".")
        return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]

    def add(src: str, target: str) -> None:
        for t in parents(target):
            if t in mods and t != src and not src.startswith(t + "."):
                edges[src].add(t)

    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]

        def walk(body: list[ast.stmt], src: str = name, package: str = package) -> None:
            for st in body:
                if isinstance(st, ast.If):
                    if "TYPE_CHECKING" not in ast.unparse(st.test):
                        walk(st.body)
                    walk(st.orelse)
                elif isinstance(st, ast.Try):
                    walk(st.body)
                elif isinstance(st, ast.Import):
                    for alias in st.names:
                        add(src, alias.name)
                elif isinstance(st, ast.ImportFrom):
                    if st.level:
                        base = package.split(".")
                        base = base[:len(base) - st.level + 1]
                        module = ".".join(base + ([st.module] if st.module else []))
                    else:
                        module = st.module or ""
                    for alias in st.names:
                        full = f"{module}.{alias.name}"
                        add(src, full if full in mods else module)

        walk(ast.parse(path.read_text()).body)
    return edges


def test_no_static_import_cycle() -> None:
    mods = _modules()
    edges = _edges(mods)
    assert len(edges) > 50  # the walk sees the package's imports
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(node: str, path: list[str]) -> bool:
        state[node] = 1
        for nxt in sorted(edges[node]):
            if state.get(nxt) == 1:
                cycle.extend([*path[path.index(nxt):], node, nxt] if nxt in path
                             else [node, nxt])
                return True
            if nxt not in state and visit(nxt, [*path, node]):
                return True
        state[node] = 2
        return False

    for name in sorted(mods):
        if name not in state and visit(name, []):
            break
    assert not cycle, " -> ".join(cycle)
