"""Cycle enumeration (Tarjan + Johnson) against a brute-force oracle on small graphs."""

from __future__ import annotations

from itertools import permutations

from _govctl_support import MAX_EXAMPLES
from govctl._graph import elementary_cycles, strongly_connected
from hypothesis import given, settings
from hypothesis import strategies as st


def brute_force_cycles(graph: dict[int, list[int]]) -> list[list[int]]:
    """Every sequence of distinct nodes, smallest first, whose consecutive edges close a loop."""
    nodes = sorted(graph)
    edges = {(a, b) for a, succ in graph.items() for b in succ if b in graph}
    out = []
    for k in range(1, len(nodes) + 1):
        for perm in permutations(nodes, k):
            if perm[0] != min(perm):
                continue
            if all((perm[i], perm[(i + 1) % k]) in edges for i in range(k)):
                out.append(list(perm))
    return sorted(out)


def reachable(graph: dict[int, list[int]], a: int) -> set[int]:
    seen, todo = {a}, [a]
    while todo:
        for b in graph[todo.pop()]:
            if b in graph and b not in seen:
                seen.add(b)
                todo.append(b)
    return seen


graphs = st.integers(1, 6).flatmap(
    lambda n: st.fixed_dictionaries({i: st.lists(st.integers(0, n), max_size=4) for i in range(n)})
)  # successor n is not a node: edges to unknown IDs are ignored


@settings(max_examples=MAX_EXAMPLES * 3, deadline=None)
@given(graphs)
def test_cycles_match_brute_force(graph: dict[int, list[int]]) -> None:
    assert elementary_cycles(graph) == brute_force_cycles(graph)


@settings(max_examples=MAX_EXAMPLES * 3, deadline=None)
@given(graphs)
def test_sccs_are_mutual_reachability_classes(graph: dict[int, list[int]]) -> None:
    comps = strongly_connected(graph)
    assert sorted(v for c in comps for v in c) == sorted(graph)
    for comp in comps:
        for a in comp:
            cls = {b for b in graph if b in reachable(graph, a) and a in reachable(graph, b)}
            assert cls == set(comp)


def test_named_cases() -> None:
    assert elementary_cycles({"a": ["a"]}) == [["a"]]
    assert elementary_cycles({"a": ["b"], "b": ["c"], "c": []}) == []
    assert elementary_cycles({"b": ["a"], "a": ["b", "c"], "c": ["a"]}) == [["a", "b"], ["a", "c"]]


def test_long_chain_does_not_recurse() -> None:
    n = 20_000
    chain = {i: [i + 1] for i in range(n)}
    chain[n] = [0]
    assert elementary_cycles(chain) == [list(range(n + 1))]


def test_limit_caps_the_count() -> None:
    complete = {i: [j for j in range(7) if j != i] for i in range(7)}  # 1,172 cycles
    assert len(elementary_cycles(complete, limit=50)) == 50
