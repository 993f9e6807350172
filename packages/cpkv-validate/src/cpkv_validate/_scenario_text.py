"""What a scenario is made of: steps, the scenario itself, and its seeded, marked text.

Every request carries its own *marker* token at every fourth position of its private text, so
the content it contributes to the pool is unique to it and a leak names its source request.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["MARKER_BASE", "REST", "Scenario", "ScenarioSpec", "ScenarioText", "Step"]

MARKER_BASE = 448  # token ids >= this are markers (one per request); text uses [0, MARKER_BASE)

#: An extend length meaning "the rest of the prompt": how much that is depends on how much the
#: allocator model matched (``sglang`` rounds hits down to the page, ``free`` does not).
REST = None


@dataclass
class Step:
    """One engine step: admissions, the batch, then finishes and evictions.

    ``batch`` lists (request, extend length); an extend of :data:`REST` computes whatever of the
    prompt is not cached yet.
    """

    admit: list[tuple[str, list[int]]] = field(default_factory=list)
    batch: list[tuple[str, int | None]] = field(default_factory=list)
    finish: list[str] = field(default_factory=list)
    evict: list[str] = field(default_factory=list)


@dataclass
class Scenario:
    """A built scenario.

    Attributes:
        cp: the CP size whose split the scenario is named for (the default run runs it at that
            size; ``--cp N`` runs it at N like every other scenario), or None.
    """

    name: str
    description: str
    steps: list[Step]
    markers: dict[str, int]
    cp: int | None = None


@dataclass(frozen=True)
class ScenarioSpec:
    """A registered scenario: its builder ``(text, page_size) -> steps`` and what it catches."""

    build: Callable[[ScenarioText, int], list[Step]]
    description: str
    cp: int | None = None


class ScenarioText:
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
