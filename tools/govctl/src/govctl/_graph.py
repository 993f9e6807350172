"""Elementary cycles of a directed graph: Tarjan SCCs, then Johnson's algorithm per SCC.

`depends_on` must be acyclic; `check` reports every elementary cycle (not just "there is a
cycle"), so each can be broken deliberately. Johnson (1975) lists each elementary cycle once in
O((V + E)(C + 1)); the number of cycles C can grow exponentially, hence `limit`. As in
networkx's `simple_cycles`, components are re-split after removing each start node, so a
single long cycle costs O(V + E) rather than Johnson's O(V * (V + E)) re-scans.
Reference oracle: `tests/test_govctl_graph.py` enumerates cycles by brute force.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping

Graph = Mapping[Hashable, Iterable[Hashable]]


def strongly_connected(graph: Graph) -> list[list[Hashable]]:
    """Tarjan's SCCs (iterative, so deep chains do not hit the recursion limit)."""
    index: dict[Hashable, int] = {}
    low: dict[Hashable, int] = {}
    on_stack: set[Hashable] = set()
    stack: list[Hashable] = []
    out: list[list[Hashable]] = []
    counter = 0
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(graph.get(root, ())))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in graph:
                    continue
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph.get(w, ()))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    out.append(comp)
    return out


def elementary_cycles(graph: Graph, limit: int = 1000) -> list[list[Hashable]]:
    """Every elementary cycle, each rotated to start at its smallest node, sorted.

    Args:
        graph: node -> successors; successors that are not keys are ignored.
        limit: stop after this many cycles.

    Returns:
        cycles as node lists without the closing repeat: [a, b] means a -> b -> a.
    """
    try:
        order = sorted(graph)
    except TypeError:  # mixed node types: any fixed order will do
        order = sorted(graph, key=repr)
    rank = {v: i for i, v in enumerate(order)}
    succ = {v: sorted({w for w in graph[v] if w in rank}, key=rank.__getitem__) for v in order}
    cycles: list[list[Hashable]] = []

    def nontrivial(adj: dict) -> list[list[Hashable]]:
        return [c for c in strongly_connected(adj) if len(c) > 1 or c[0] in adj[c[0]]]

    # An acyclic graph (the normal case) has only trivial SCCs and costs one Tarjan pass.
    # Each step takes a component, lists the cycles through its smallest node s, removes s
    # and splits the rest into components again; each cycle is found exactly once.
    work = nontrivial(succ)
    while work and len(cycles) < limit:
        comp = set(work.pop())
        s = min(comp, key=rank.__getitem__)
        adj = {v: [w for w in succ[v] if w in comp] for v in comp}
        _circuits(s, adj, cycles, limit)
        comp.discard(s)
        work.extend(nontrivial({v: [w for w in succ[v] if w in comp] for v in comp}))
    return sorted(cycles, key=lambda c: [rank[v] for v in c])[:limit]


def _circuits(s: Hashable, adj: dict, cycles: list, limit: int) -> None:
    """Johnson's CIRCUIT(s), iterative."""
    blocked: set[Hashable] = {s}
    bmap: dict[Hashable, set[Hashable]] = {v: set() for v in adj}
    path = [s]
    stack = [(s, iter(adj[s]))]
    found_at: list[bool] = [False]

    def unblock(u: Hashable) -> None:
        todo = [u]
        while todo:
            x = todo.pop()
            if x in blocked:
                blocked.discard(x)
                todo.extend(bmap[x])
                bmap[x].clear()

    while stack:
        v, it = stack[-1]
        for w in it:
            if w == s:
                cycles.append(list(path))
                found_at[-1] = True
                if len(cycles) >= limit:
                    return
            elif w not in blocked:
                blocked.add(w)
                path.append(w)
                stack.append((w, iter(adj[w])))
                found_at.append(False)
                break
        else:
            stack.pop()
            path.pop()
            found = found_at.pop()
            if found:
                unblock(v)
            else:
                for w in adj[v]:
                    bmap[w].add(v)
            if found_at and found:
                found_at[-1] = True
