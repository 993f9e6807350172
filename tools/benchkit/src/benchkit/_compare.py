"""Proof that a rewritten record still holds every value of the old one.

Re-rendering or converting a record must not change a measurement. :func:`lost_rows` pairs each
old row with a new row that has every one of its fields at an equal value (the new row may carry
more fields) and lists the old rows left without a partner.
"""

from __future__ import annotations

import json
from collections.abc import Sequence


def lost_rows(old: Sequence[dict], new: Sequence[dict]) -> list[str]:
    """One line per old row that no new row preserves; empty when all are preserved.

    Values compare exactly (floats bit for bit, as JSON holds them); each new row preserves at
    most one old row, so dropping a duplicate shows too.
    """
    unused = list(new)
    lost = []
    for i, row in enumerate(old):
        match = next((j for j, n in enumerate(unused) if _preserves(n, row)), None)
        if match is None:
            lost.append(f"old row {i} not preserved: {_closest(row, unused)}")
        else:
            del unused[match]
    return lost


def _preserves(new: dict, old: dict) -> bool:
    return all(k in new and _same(new[k], v) for k, v in old.items())


def _same(a: object, b: object) -> bool:
    # json round trip: a tuple and a list of equal items are the same JSON value
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def _closest(row: dict, candidates: Sequence[dict]) -> str:
    """The fields by which the most similar candidate differs from ``row``."""
    if not candidates:
        return f"{_label(row)} (no new row left)"
    best = max(candidates, key=lambda n: sum(k in n and _same(n[k], v) for k, v in row.items()))
    diff = {k: (v, best.get(k, "<missing>")) for k, v in row.items() if not _same(best.get(k), v)}
    return f"{_label(row)}; nearest new row differs in (old, new) {diff}"


def _label(row: dict) -> str:
    return " ".join(f"{k}={row[k]!r}" for k in ("op", "case", "provider", "mode") if k in row)
