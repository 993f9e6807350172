"""The package's imports run one way: the command (``sglang_cpkv.serve``) may import what runs
inside SGLang (``sglang_cpkv.plugin``), never the reverse, and no import closes a circle.

Read from the source with ``ast`` (every ``import``, module level or inside a function, since a
lazy import still runs in the process that reaches it), so the test needs neither sglang nor torch.
The checks are run against small planted graphs first, so each of them is known to fail.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping
from pathlib import Path

import pytest
from govctl._graph import strongly_connected

SRC = Path(__file__).parents[1] / "src"
PACKAGE = "sglang_cpkv"
COMMAND = f"{PACKAGE}.serve"
IN_SGLANG = f"{PACKAGE}.plugin"
#: modules of neither part that both may import (the exception tree)
GROUND = (f"{PACKAGE}.errors",)
#: the hook modules: they know neither the table nor the entry point (``plugin._registered`` is
#: where they read which hooks are on)
HOOKS = (f"{IN_SGLANG}.hooks", f"{IN_SGLANG}.shared_kv")
TABLE_AND_ENTRY = (f"{IN_SGLANG}.table", f"{IN_SGLANG}.entry")


def module_name(path: Path) -> str:
    parts = path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


def imports_of(name: str, path: Path, known: Iterable[str]) -> set[str]:
    """The package's modules that ``name`` imports (``from pkg import sub`` names ``pkg.sub``)."""
    known = set(known)
    is_package = path.name == "__init__.py"
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".") if is_package else name.split(".")[:-1]
                anchor = anchor[: len(anchor) - node.level + 1]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in known else base)
    return {m for m in out if m in known and m != name}


def graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(name, path, found) for name, path in found.items()}


def circles(edges: Mapping[str, set[str]]) -> list[list[str]]:
    """Every strongly connected set of two or more modules, each sorted (govctl's Tarjan, which
    also guards the work items' dependency graph)."""
    return sorted(sorted(c) for c in strongly_connected(edges) if len(c) > 1)


def within(name: str, parts: Iterable[str]) -> bool:
    return any(name == p or name.startswith(p + ".") for p in parts)


def crossings(edges: Mapping[str, set[str]], src: Iterable[str], dst: Iterable[str]) -> list[str]:
    """``"a -> b"`` for every import from a module under ``src`` to one under ``dst``."""
    src, dst = tuple(src), tuple(dst)
    return sorted(
        f"{a} -> {b}" for a, bs in edges.items() if within(a, src) for b in bs if within(b, dst)
    )


def test_the_checks_see_a_planted_circle_and_a_planted_upward_import():
    planted = {
        f"{IN_SGLANG}.entry": {f"{IN_SGLANG}.table"},
        f"{IN_SGLANG}.table": {f"{IN_SGLANG}.hooks.x"},
        f"{IN_SGLANG}.hooks.x": {f"{IN_SGLANG}.entry", f"{COMMAND}._flags"},
        f"{COMMAND}._flags": set(),
    }
    assert circles(planted) == [sorted(planted)[:3]]
    assert crossings(planted, [IN_SGLANG], [COMMAND]) == [
        f"{IN_SGLANG}.hooks.x -> {COMMAND}._flags"
    ]
    assert crossings(planted, HOOKS, TABLE_AND_ENTRY) == [
        f"{IN_SGLANG}.hooks.x -> {IN_SGLANG}.entry"
    ]


def test_the_walk_reads_every_module_and_sees_the_known_arrows():
    edges = graph()
    assert f"{COMMAND}.cli" in edges and f"{IN_SGLANG}.shared_kv._pool" in edges
    assert f"{IN_SGLANG}.entry" in edges[f"{COMMAND}.cli"]  # a lazy import, inside serve()
    assert f"{IN_SGLANG}._decisions" in edges[f"{COMMAND}._report"]  # from pkg import module
    assert f"{IN_SGLANG}.hooks.ragged_offsets" in edges[f"{IN_SGLANG}.table"]


def test_no_import_circle():
    assert circles(graph()) == []


def test_what_runs_in_sglang_never_imports_the_command():
    assert crossings(graph(), [IN_SGLANG], [COMMAND]) == []


def test_the_ground_imports_neither_part():
    assert crossings(graph(), GROUND, [IN_SGLANG, COMMAND]) == []


def test_hooks_import_neither_the_table_nor_the_entry_point():
    assert crossings(graph(), HOOKS, TABLE_AND_ENTRY) == []


@pytest.mark.parametrize("part", [IN_SGLANG, COMMAND])
def test_nothing_inside_imports_the_package_face(part):
    """``from sglang_cpkv import x`` inside the package would tie a module to everything the
    face imports (the entry point, the version guard)."""
    assert [a for a, bs in graph().items() if within(a, [part]) and PACKAGE in bs] == []
