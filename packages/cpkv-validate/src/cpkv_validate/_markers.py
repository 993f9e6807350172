"""Request markers, and the check that no output holds another request's.

Every prompt carries a marker of its own, plain ASCII that survives any tokenizer (a byte-level
one makes each character a token): ``MARK`` + the request's index + ``x`` + four seeded hex
digits, e.g. ``MARK03x1a2b``. The part after ``MARK`` is the marker's *tag* (``03x1a2b``).

An output holds request j's marker when it contains j's tag, or any piece of the tag
:data:`~cpkv_validate._limits.MARKER_PIECE` (6) characters long that is not also in another
request's tag: a leak cut short by ``--max-tokens``, or starting mid-marker, still names its
source. No text of a prompt but the marker has such a piece (the rest is ``w123`` words). A
model echoes its own marker at most, so a foreign one in an output is contamination, whatever
the batch-size-1 reference shows: a server whose prefix cache hands every request the first
request's text leaks in the reference run too, and the two runs then agree.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from ._limits import MARKER_PIECE

__all__ = ["PREFIX", "Found", "foreign_markers", "make_marker", "marker_pieces"]

PREFIX = "MARK"
_CONTEXT = 24  # characters shown either side of a found piece


def make_marker(i: int, rng: random.Random) -> str:
    """Request ``i``'s marker: ``MARK{i:02d}x{4 hex digits}``."""
    return f"{PREFIX}{i:02d}x{rng.randrange(16**4):04x}"


def marker_pieces(markers: list[str]) -> list[set[str]]:
    """Per request: the texts that identify its marker: the marker, and its tag and the tag's
    pieces of :data:`MARKER_PIECE` characters where no other request's marker contains them."""
    tags = [m.removeprefix(PREFIX) for m in markers]
    out = []
    for i, (marker, tag) in enumerate(zip(markers, tags, strict=True)):
        others = [m for j, m in enumerate(markers) if j != i]
        pieces = {tag} | {tag[k : k + MARKER_PIECE] for k in range(len(tag) - MARKER_PIECE + 1)}
        out.append({marker} | {p for p in pieces if not any(p in m for m in others)})
    return out


@dataclass(frozen=True)
class Found:
    """Request ``source``'s marker (``piece`` of it) in another request's output, with the text
    around it (``context``)."""

    source: int
    piece: str
    context: str


def foreign_markers(text: str, own: int, pieces: list[set[str]]) -> list[Found]:
    """The other requests whose marker ``text`` (request ``own``'s output) holds."""
    found = []
    for j, mine in enumerate(pieces):
        if j == own:
            continue
        hits = [(text.find(p), -len(p), p) for p in mine if p in text]
        if hits:
            at, _, piece = min(hits)  # the first, and the longest there
            lo, hi = max(0, at - _CONTEXT), min(len(text), at + len(piece) + _CONTEXT)
            found.append(Found(j, piece, text[lo:hi]))
    return found
