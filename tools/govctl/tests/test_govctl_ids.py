"""ID strategies and slugs for `work new`."""

from __future__ import annotations

import re

import pytest
from govctl._ids import new_id, slugify
from govctl._rules import ID_RE


@pytest.mark.parametrize(
    ("title", "slug"),
    [
        ("Fix the FP8 KV packing!", "fix-the-fp8-kv-packing"),
        ("  --Ünïcode -- title  ", "n-code-title"),
        ("???", "item"),
        ("word " * 30, ("word-" * 12)[:-1]),
    ],
)
def test_slugify(title: str, slug: str) -> None:
    assert slugify(title) == slug
    assert len(slugify(title)) <= 60


def test_sequential_counts_per_day() -> None:
    existing = {"WI-2026-11-29-001", "WI-2026-11-29-007", "WI-2026-11-28-009", "WI-2026-11-29-a3f9"}
    assert new_id("sequential", "2026-11-29", existing) == "WI-2026-11-29-008"
    assert new_id("sequential", "2026-11-30", existing) == "WI-2026-11-30-001"


def test_author_hash_namespaces_by_email() -> None:
    a = new_id("author-hash", "2026-11-29", set(), email="a@example.com")
    b = new_id("author-hash", "2026-11-29", set(), email="b@example.com")
    assert a != b and a.endswith("-001") and b.endswith("-001")
    assert new_id("author-hash", "2026-11-29", {a}, email="A@example.com ") == a[:-3] + "002"


def test_random_avoids_existing_and_matches_upstream_pattern() -> None:
    ids = {new_id("random", "2026-11-29", set()) for _ in range(200)}
    assert all(re.fullmatch(r"WI-2026-11-29-[0-9a-f]{4}", i) for i in ids)
    taken = {f"WI-2026-11-29-{n:04x}" for n in range(65536)} - {"WI-2026-11-29-beef"}
    assert new_id("random", "2026-11-29", taken) == "WI-2026-11-29-beef"


@pytest.mark.parametrize("strategy", ["random", "author-hash", "sequential"])
def test_every_strategy_passes_the_schema_pattern(strategy: str) -> None:
    assert ID_RE.fullmatch(new_id(strategy, "2026-11-29", set(), email="x@y"))
