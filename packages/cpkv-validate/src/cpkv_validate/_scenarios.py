"""Named scenarios: batches that have each caught a cross-request KV bug in some public engine.

A scenario is a list of steps; each step admits requests (which match the prefix cache at that
moment), runs one batch of (request, extend length), then finishes and evicts as told. Every
request carries its own *marker* token at every fourth position of its private text, so the
content it contributes to the pool is unique to it and a leak names its source request.

Lengths are in units of the page size ``P`` (16 in the tiny model) so the same shapes (prefixes
ending mid-page, odd extends, 1-token extends) hold at any page size.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

__all__ = ["SCENARIOS", "Scenario", "Step", "build_scenario", "scenario_names"]

MARKER_BASE = 448  # token ids >= this are markers (one per request); text uses [0, MARKER_BASE)


@dataclass
class Step:
    """One engine step: admissions, the batch, then finishes and evictions."""

    admit: list[tuple[str, list[int]]] = field(default_factory=list)
    batch: list[tuple[str, int]] = field(default_factory=list)
    finish: list[str] = field(default_factory=list)
    evict: list[str] = field(default_factory=list)


@dataclass
class Scenario:
    name: str
    description: str
    steps: list[Step]
    markers: dict[str, int]


class _Text:
    """Seeded token text; ``own(name, n)`` is private text with ``name``'s marker every 4th."""

    def __init__(self, seed: int, vocab: int) -> None:
        self.rng = random.Random(seed)
        self.vocab = min(vocab, MARKER_BASE)
        self.markers: dict[str, int] = {}

    def common(self, n: int) -> list[int]:
        return [self.rng.randrange(self.vocab) for _ in range(n)]

    def own(self, name: str, n: int) -> list[int]:
        mk = self.markers.setdefault(name, MARKER_BASE + len(self.markers))
        return [mk if i % 4 == 0 else self.rng.randrange(self.vocab) for i in range(n)]


def _shared_prefix_pages(t: _Text, p: int) -> list[Step]:
    base = t.own("base", 8 * p)
    reqs = {
        "a": base[: 6 * p + 4] + t.own("a", 2 * p + 5),  # hit ends mid-page 6: writes it (CoW)
        "b": base + t.own("b", p + 5),  # hit covers page 6 fully: reads it
        "c": base[: 4 * p] + t.own("c", 3 * p - 3),  # page-aligned hit
        "d": base[: 6 * p + 4] + t.own("d", 2 * p - 2),  # same mid-page hit as a
    }
    return [
        Step(admit=[("base", base)], batch=[("base", 8 * p)], finish=["base"]),
        Step(
            admit=list(reqs.items()),
            batch=[
                (n, len(v) - {"b": 8 * p, "c": 4 * p}.get(n, 6 * p + 4)) for n, v in reqs.items()
            ],
        ),
    ]


def _cache_miss_mixed(t: _Text, p: int) -> list[Step]:
    base = t.own("base", 6 * p)
    a = base[: 5 * p + 10] + t.own("a", 2 * p + 8)
    miss = t.own("miss", 4 * p + 6)
    b = base[: 5 * p + 10] + t.own("b", 2 * p + 1)
    return [
        Step(admit=[("base", base)], batch=[("base", 6 * p)], finish=["base"]),
        Step(
            admit=[("a", a), ("miss", miss), ("b", b)],
            batch=[("a", 2 * p + 8), ("miss", 4 * p + 6), ("b", 2 * p + 1)],
        ),
    ]


def _unaligned_prefix(t: _Text, p: int) -> list[Step]:
    a = t.own("a", 9 * p + 6)
    fork = a[: 2 * p + 5] + t.own("fork", 3 * p + 1)
    return [
        Step(admit=[("a", a)], batch=[("a", 2 * p + 5)]),
        Step(admit=[("fork", fork)], batch=[("a", 2 * p + 9), ("fork", 2 * p - 3)]),
        Step(batch=[("a", 3 * p + 2), ("fork", p + 4)]),
        Step(batch=[("a", p + 6)]),
    ]


def _odd_extends(t: _Text, p: int) -> list[Step]:
    base = t.own("base", 5 * p + 11)
    a = base[: 4 * p + 6] + t.own("a", 24 + 11)
    b = base[: 4 * p + 6] + t.own("b", 7 + 5)
    c = t.own("c", 29 + 3)
    return [
        Step(admit=[("base", base)], batch=[("base", 5 * p + 11)], finish=["base"]),
        Step(admit=[("a", a), ("b", b), ("c", c)], batch=[("a", 13), ("b", 7), ("c", 29)]),
        Step(batch=[("a", 11), ("b", 5), ("c", 3)]),
        Step(batch=[("a", 11)]),
    ]


def _tiny_extends(t: _Text, p: int) -> list[Step]:
    base = t.own("base", 6 * p + 4)
    a = base + t.own("a", 3)  # full hit: 1-token extend on base's partial page
    b = base[:-1] + t.own("b", 5)  # diverges one token early: 2-token extend on the same page
    c = base[: 4 * p] + t.own("c", 3)  # page-aligned hit: 1-token extend on a fresh page
    return [
        Step(admit=[("base", base)], batch=[("base", len(base))], finish=["base"]),
        Step(admit=[("a", a), ("b", b), ("c", c)], batch=[("a", 1), ("b", 2), ("c", 1)]),
        Step(batch=[("a", 1), ("b", 2), ("c", 2)]),
        Step(batch=[("a", 1), ("b", 1)]),
    ]


def _same_step_alloc(t: _Text, p: int) -> list[Step]:
    a, b, c = t.own("a", 4 * p), t.own("b", 3 * p + 3), t.own("c", 4 * p + 2)
    d = a[: 2 * p + 8] + t.own("d", 2 * p + 1)
    return [
        Step(
            admit=[("a", a), ("b", b), ("c", c)],
            batch=[("a", 2 * p + 8), ("b", 2 * p + 1), ("c", 3 * p + 2)],
        ),
        Step(admit=[("d", d)], batch=[("a", p + 8), ("d", 2 * p + 1), ("b", p + 2), ("c", p)]),
    ]


def _eviction_churn(t: _Text, p: int) -> list[Step]:
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
        Step(admit=[("e", e)], batch=[("c", p + 4), ("d", p - 3), ("e", 2 * p + 3)]),
    ]


SCENARIOS = {
    "shared_prefix_pages": (
        _shared_prefix_pages,
        "four requests on one cached prefix: page-aligned and mid-page hits, one page read by one "
        "request and written (copy-on-write) by two others",
    ),
    "cache_miss_mixed": (
        _cache_miss_mixed,
        "two mid-page prefix hits with a cache miss between them in the batch",
    ),
    "unaligned_prefix": (
        _unaligned_prefix,
        "chunked prefill whose chunks end mid-page, plus a fork of its unfinished prefix",
    ),
    "odd_extends": (
        _odd_extends,
        "extend lengths 3..29, none divisible by 2*cp, with a shared mid-page prefix",
    ),
    "tiny_extends": (
        _tiny_extends,
        "1- and 2-token extends on full and near-full prefix hits (mostly CP padding)",
    ),
    "same_step_alloc": (
        _same_step_alloc,
        "pages of several requests allocated in the same step, next to each other in the pool",
    ),
    "eviction_churn": (
        _eviction_churn,
        "evicted pages reused by the next requests while stale KV is still in them",
    ),
}


def scenario_names() -> list[str]:
    """Every registered scenario, in the order the default run reports them."""
    return list(SCENARIOS)


def build_scenario(name: str, page_size: int, seed: int, vocab: int = MARKER_BASE) -> Scenario:
    """Build scenario ``name`` for page size ``page_size`` with seeded text."""
    if name not in SCENARIOS:
        raise ValueError(f"unknown scenario {name!r}; choose from {', '.join(SCENARIOS)}")
    fn, desc = SCENARIOS[name]
    text = _Text(seed, vocab)
    steps = fn(text, page_size)
    return Scenario(name, desc, steps, dict(text.markers))
