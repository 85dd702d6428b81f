"""Layers only look down: no pgrpo module imports, even lazily inside a function, a module that imports it back.

The embedded default's cache key hashes the pretraining code, so a cycle through it (the loader importing
how the embedded model is built, which imported the loader) also made unrelated edits rebuild the base."""

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "pgrpo"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph: dict[str, set[str]] = {m: set() for m in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.module in modules:
                submodules = [f"{node.module}.{a.name}" for a in node.names if f"{node.module}.{a.name}" in modules]
                # `from pgrpo.env import sandbox` imports the submodule, not the package's own names
                targets = submodules if len(submodules) == len(node.names) else [node.module, *submodules]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name in modules]
            else:
                continue
            graph[name] |= {t for t in targets if t != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    done, path = set(), []

    def visit(node: str) -> list[str] | None:
        if node in path:
            return path[path.index(node):] + [node]
        if node in done:
            return None
        path.append(node)
        for nxt in sorted(graph[node]):
            if cycle := visit(nxt):
                return cycle
        path.pop()
        done.add(node)
        return None

    for start in sorted(graph):
        if cycle := visit(start):
            return cycle
    return None


def test_the_import_graph_has_no_cycle():
    graph = import_graph()
    assert {"pgrpo.model.load", "pgrpo.model.embedded", "pgrpo.model.pretrain", "pgrpo.evaluation.base_eval"} <= graph.keys()
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph))


def test_the_cycle_finder_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]


def test_the_library_never_imports_a_command():
    # two storeys: commands (pgrpo/commands/, and the dispatcher pgrpo/cli.py) sit on the library, never under it
    upstairs = {m for m in import_graph() if m == "pgrpo.cli" or m.startswith("pgrpo.commands")}
    climbing = {m: sorted(targets & upstairs) for m, targets in import_graph().items()
                if m not in upstairs and targets & upstairs}
    assert climbing == {}
