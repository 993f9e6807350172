"""Named scenarios: batches that have each caught a cross-request KV bug in some public engine.

A scenario is a list of steps; each step admits requests (which match the prefix cache at that
moment), runs one batch of (request, extend length), then finishes and evicts as told. Every
request carries its own marker (``_scenario_text``), so a leak names its source request.

Lengths are in units of the page size ``P`` (16 in the tiny model) so the same shapes (prefixes
ending mid-page, odd extends, 1-token extends) hold at any page size. The scenarios below share
partial pages when the allocator lets them (``--allocator free``); the SGLang-shaped ones
(``_scenarios_sglang``) follow how SGLang builds batches.
"""

from __future__ import annotations

from ._scenario_text import MARKER_BASE, REST, Scenario, ScenarioSpec, ScenarioText, Step
from ._scenarios_sglang import SGLANG_SCENARIOS

__all__ = ["MARKER_BASE", "SCENARIOS", "Scenario", "Step", "build_scenario", "scenario_names"]


def _shared_prefix_pages(t: ScenarioText, p: int) -> list[Step]:
    base = t.own("base", 8 * p)
    reqs = {
        "a": base[: 6 * p + 4] + t.own("a", 2 * p + 5),  # hit ends mid-page 6: writes it (CoW)
        "b": base + t.own("b", p + 5),  # hit covers page 6 fully: reads it
        "c": base[: 4 * p] + t.own("c", 3 * p - 3),  # page-aligned hit
        "d": base[: 6 * p + 4] + t.own("d", 2 * p - 2),  # same mid-page hit as a
    }
    return [
        Step(admit=[("base", base)], batch=[("base", REST)], finish=["base"]),
        Step(
            admit=list(reqs.items()),
            batch=[(n, REST) for n in reqs],
        ),
    ]


def _cache_miss_mixed(t: ScenarioText, p: int) -> list[Step]:
    base = t.own("base", 6 * p)
    a = base[: 5 * p + 10] + t.own("a", 2 * p + 8)
    miss = t.own("miss", 4 * p + 6)
    b = base[: 5 * p + 10] + t.own("b", 2 * p + 1)
    return [
        Step(admit=[("base", base)], batch=[("base", REST)], finish=["base"]),
        Step(
            admit=[("a", a), ("miss", miss), ("b", b)],
            batch=[("a", REST), ("miss", REST), ("b", REST)],
        ),
    ]


def _unaligned_prefix(t: ScenarioText, p: int) -> list[Step]:
    a = t.own("a", 9 * p + 6)
    fork = a[: 2 * p + 5] + t.own("fork", 3 * p + 1)
    return [
        Step(admit=[("a", a)], batch=[("a", 2 * p + 5)]),
        Step(admit=[("fork", fork)], batch=[("a", 2 * p + 9), ("fork", 2 * p - 3)]),
        Step(batch=[("a", 3 * p + 2), ("fork", REST)]),
        Step(batch=[("a", REST)]),
    ]


def _odd_extends(t: ScenarioText, p: int) -> list[Step]:
    base = t.own("base", 5 * p + 11)
    a = base[: 4 * p + 6] + t.own("a", 24 + 11)
    b = base[: 4 * p + 6] + t.own("b", 7 + 5)
    c = t.own("c", 29 + 3)
    return [
        Step(admit=[("base", base)], batch=[("base", REST)], finish=["base"]),
        Step(admit=[("a", a), ("b", b), ("c", c)], batch=[("a", 13), ("b", 7), ("c", 29)]),
        Step(batch=[("a", 11), ("b", REST), ("c", REST)]),
        Step(batch=[("a", REST)]),
    ]


def _tiny_extends(t: ScenarioText, p: int) -> list[Step]:
    base = t.own("base", 6 * p + 4)
    a = base + t.own("a", 3)  # full hit: 1-token extend on base's partial page
    b = base[:-1] + t.own("b", 5)  # diverges one token early: 2-token extend on the same page
    c = base[: 4 * p] + t.own("c", 3)  # page-aligned hit: 1-token extend on a fresh page
    return [
        Step(admit=[("base", base)], batch=[("base", REST)], finish=["base"]),
        Step(admit=[("a", a), ("b", b), ("c", c)], batch=[("a", 1), ("b", 2), ("c", 1)]),
        Step(batch=[("a", 1), ("b", 2), ("c", 2)]),
        Step(batch=[("a", 1), ("b", 1)]),
    ]


def _same_step_alloc(t: ScenarioText, p: int) -> list[Step]:
    a, b, c = t.own("a", 4 * p), t.own("b", 3 * p + 3), t.own("c", 4 * p + 2)
    d = a[: 2 * p + 8] + t.own("d", 2 * p + 1)
    return [
        Step(
            admit=[("a", a), ("b", b), ("c", c)],
            batch=[("a", 2 * p + 8), ("b", 2 * p + 1), ("c", 3 * p + 2)],
        ),
        Step(admit=[("d", d)], batch=[("a", REST), ("d", REST), ("b", REST), ("c", REST)]),
    ]


def _eviction_churn(t: ScenarioText, p: int) -> list[Step]:
    a, b = t.own("a", 3 * p + 2), t.own("b", 5 * p + 4)
    c = t.own("c", 5 * p)
    d = b[: 2 * p + 13] + t.own("d", 3 * p)
    e = c[: 3 * p + 12] + t.own("e", 2 * p + 3)
    return [
        Step(
            admit=[("a", a), ("b", b)],
            batch=[("a", 3 * p + 2), ("b", 2 * p + 13)],
            finish=["a"],
            evict=["a"],
        ),
        Step(
            admit=[("c", c), ("d", d)],  # a's freed pages (LIFO) go straight to c, stale KV inside
            batch=[("b", 2 * p + 7), ("c", 3 * p + 12), ("d", 2 * p + 3)],
            finish=["b"],
            evict=["b"],
        ),
        Step(admit=[("e", e)], batch=[("c", REST), ("d", REST), ("e", REST)]),
    ]


SCENARIOS: dict[str, ScenarioSpec] = {
    "shared_prefix_pages": ScenarioSpec(
        _shared_prefix_pages,
        "four requests on one cached prefix: page-aligned and mid-page hits, one page read by one "
        "request and written (copy-on-write) by two others",
    ),
    "cache_miss_mixed": ScenarioSpec(
        _cache_miss_mixed,
        "two mid-page prefix hits with a cache miss between them in the batch",
    ),
    "unaligned_prefix": ScenarioSpec(
        _unaligned_prefix,
        "chunked prefill whose chunks end mid-page, plus a fork of its unfinished prefix",
    ),
    "odd_extends": ScenarioSpec(
        _odd_extends,
        "extend lengths 3..29, none divisible by 2*cp, with a shared mid-page prefix",
    ),
    "tiny_extends": ScenarioSpec(
        _tiny_extends,
        "1- and 2-token extends on full and near-full prefix hits (mostly CP padding)",
    ),
    "same_step_alloc": ScenarioSpec(
        _same_step_alloc,
        "pages of several requests allocated in the same step, next to each other in the pool",
    ),
    "eviction_churn": ScenarioSpec(
        _eviction_churn,
        "evicted pages reused by the next requests while stale KV is still in them",
    ),
    **SGLANG_SCENARIOS,
}


def scenario_names() -> list[str]:
    """Every registered scenario, in the order the default run reports them."""
    return list(SCENARIOS)


def build_scenario(name: str, page_size: int, seed: int, vocab: int = MARKER_BASE) -> Scenario:
    """Build scenario ``name`` for page size ``page_size`` with seeded text."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")
    spec = SCENARIOS[name]
    text = ScenarioText(seed, vocab)
    steps = spec.build(text, page_size)
    return Scenario(name, spec.description, steps, dict(text.markers), spec.cp)
