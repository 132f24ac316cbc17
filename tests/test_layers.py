"""The imports of src/ctxkeep/ point down the floors docs/layers.md draws, and no two modules import each
other (lazy and TYPE_CHECKING imports included, the package root aside), as httpx's exported-members
test keeps `__all__` honest."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path

from tests.conftest import ROOT

SRC = ROOT / "src"
PACKAGE = "ctxkeep"
LAYERS = ROOT / "docs" / "layers.md"

# The imports that still point up, each named with the part of an issue that removes it (docs/layers.md lists
# them too). A new one fails the test; so does one that is gone: drop it here.
KNOWN_UPWARD: set[tuple[str, str]] = set()  # none left: any upward import fails
KNOWN_CYCLES: set[frozenset[str]] = set()  # none left: any cycle fails


def floors(text: str) -> dict[str, int]:
    """Each module prefix of the floors table of docs/layers.md, and its floor (0 the top one)."""
    table = text.split("| floor | modules |", 1)[1].split("\n\n", 1)[0]
    rows = [line for line in table.splitlines()[2:] if line.startswith("|")]
    return {
        f"{PACKAGE}.{name}": depth
        for depth, row in enumerate(rows)
        for name in re.findall(r"`([\w.]+)`", row.split("|")[2])
    }


def modules() -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name)."""
    out: dict[str, Path] = {}
    for path in sorted((SRC / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imports(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """The package's modules that `name` imports anywhere in its file: at the top, inside functions, under
    TYPE_CHECKING. ``from a import b`` is module ``a.b`` when there is one, else ``a``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
        else:
            continue
        for target in targets:
            if target == PACKAGE or target.startswith(PACKAGE + "."):
                yield target


@cache
def graph() -> dict[str, frozenset[str]]:
    """What each module imports of the package; the root, the public face of every floor, stands aside."""
    found = modules()
    known = set(found)
    return {
        name: frozenset(t for t in imports(name, path, known) if t != name and t != PACKAGE)
        for name, path in found.items()
        if name != PACKAGE
    }


def floor_of(module: str, table: dict[str, int]) -> int | None:
    """The floor of the longest table name `module` starts with."""
    names = [n for n in table if module == n or module.startswith(n + ".")]
    return table[max(names, key=len)] if names else None


def upward(table: dict[str, int], edges: dict[str, frozenset[str]]) -> set[tuple[str, str]]:
    """Every import of `edges` from a module to one on a higher floor."""
    out: set[tuple[str, str]] = set()
    for module, targets in edges.items():
        mine = floor_of(module, table)
        for target in targets:
            theirs = floor_of(target, table)
            if mine is not None and theirs is not None and theirs < mine:
                out.add((module, target))
    return out


def cycles(edges: dict[str, frozenset[str]]) -> set[frozenset[str]]:
    """The modules of each import cycle of `edges` (a strongly connected group of more than one module), apart from
    a package and its own modules: a package's face importing what it holds is no cycle of the design."""

    def face_only(group: set[str]) -> bool:
        return any(all(m == p or m.startswith(p + ".") for m in group) and p in group for p in group)

    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    out: set[frozenset[str]] = set()

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group: set[str] = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1 and not face_only(group):
                out.add(frozenset(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return out


def test_every_module_has_a_floor() -> None:
    table = floors(LAYERS.read_text(encoding="utf-8"))
    assert [m for m in graph() if floor_of(m, table) is None] == []
    assert len(set(table.values())) >= 10  # the table was read, not an empty match


def test_no_import_points_up_the_layers() -> None:
    found = upward(floors(LAYERS.read_text(encoding="utf-8")), graph())
    assert sorted(found - KNOWN_UPWARD) == [], "an import points up the floors of docs/layers.md"
    assert sorted(KNOWN_UPWARD - found) == [], "a known violation is gone: drop it from KNOWN_UPWARD and docs"


def test_no_import_cycle() -> None:
    found = cycles(graph())
    assert sorted(map(sorted, found - KNOWN_CYCLES)) == [], "modules that import each other"
    assert sorted(map(sorted, KNOWN_CYCLES - found)) == [], "a known cycle is gone: drop it from KNOWN_CYCLES"


def test_an_upward_import_and_a_cycle_are_found(tmp_path: Path) -> None:
    table = floors("| floor | modules |\n|---|---|\n| top | `a` |\n| bottom | `b` |\n\n")
    assert table == {"ctxkeep.a": 0, "ctxkeep.b": 1}
    (tmp_path / "m.py").write_text("def f():\n    from .b import x\n    import ctxkeep.a.c\n")
    assert list(imports("ctxkeep.m", tmp_path / "m.py", {"ctxkeep.a.c"})) == ["ctxkeep.b", "ctxkeep.a.c"]
    assert floor_of("ctxkeep.a.c", table) == 0 and floor_of("ctxkeep.bz", table) is None
    edges = {"ctxkeep.a": frozenset({"ctxkeep.b"}), "ctxkeep.b": frozenset({"ctxkeep.a.c"}), "ctxkeep.a.c": frozenset()}
    assert upward(table, edges) == {("ctxkeep.b", "ctxkeep.a.c")}
    assert cycles(edges) == set()
    edges["ctxkeep.a.c"] = frozenset({"ctxkeep.b"})
    assert cycles(edges) == {frozenset({"ctxkeep.b", "ctxkeep.a.c"})}
    edges = {"ctxkeep.a": frozenset({"ctxkeep.a.c"}), "ctxkeep.a.c": frozenset({"ctxkeep.a"})}
    assert cycles(edges) == set()  # a package's face and what it holds
