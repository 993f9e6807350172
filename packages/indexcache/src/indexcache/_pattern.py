"""Checks of a per-layer pattern, each refusal saying how SGLang 0.5.23 would read the input.

We refuse four kinds of ``index_topk_pattern`` (and of ``indexer_types`` list) that SGLang 0.5.23
accepts, each in its own way. SGLang decides per layer with ``dsa_layer_skips_topk``: layer ``l``
is shared iff ``l < len(entries)`` and ``entries[l]`` is exactly ``"S"`` (``"shared"`` in
``indexer_types``). So there:

- a letter other than ``S`` (``s``, ``f``, ``X``) is full; a GLM config fails earlier, because
  transformers 5.19's ``GlmMoeDsaConfig`` maps each letter through ``{"F", "S"}`` and raises
  ``KeyError`` on the first other one;
- a pattern shorter than the model leaves the layers past its end full;
- a longer one has its extra entries ignored;
- a pattern starting with ``S`` builds layer 0 without an indexer and hands its sparse attention
  no top-k (``topk_indices`` stays None: nothing earlier was carried).

A user who copied a pattern from an SGLang deployment must see the difference, so every refusal
names what SGLang would run (``run it as FFSS...``). The sglang-integration test
``test_upstream_indexcache.py`` runs SGLang's ``dsa_layer_skips_topk`` and transformers'
``GlmMoeDsaConfig`` on the same inputs and holds each message to what they do.
"""

from __future__ import annotations

from collections.abc import Sequence

from indexcache._limits import MAX_LAYERS
from indexcache.errors import ScheduleError

SGLANG = "SGLang 0.5.23"
# source field -> (full entry, shared entry, how the entries are named in messages)
_TOKENS = {
    "index_topk_pattern": ("F", "S", "letter"),
    "indexer_types": ("full", "shared", "entry"),
}


def sglang_reading(entries: Sequence[str], num_layers: int, source: str) -> str:
    """The ``"FFSS..."`` SGLang 0.5.23 runs for ``num_layers`` layers from these raw entries."""
    shared = _TOKENS[source][1]
    return "".join(
        "S" if i < len(entries) and entries[i] == shared else "F" for i in range(num_layers)
    )


def check_entries(
    entries: Sequence[str],
    source: str,
    num_layers: int | None = None,
    *,
    overridden_by: str | None = None,
) -> tuple[str, ...]:
    """Validate a pattern's entries and return them as ``"full"``/``"shared"`` per layer.

    Args:
        entries: the letters of ``index_topk_pattern`` or the ``indexer_types`` list.
        source: ``"index_topk_pattern"`` or ``"indexer_types"``.
        num_layers: the model's layer count, when known (then the length is checked too).
        overridden_by: a higher-priority field that SGLang reads instead of this one (then the
            message says SGLang ignores this field rather than how it reads it).

    Raises:
        ScheduleError: more than ``MAX_LAYERS`` entries (refused before they are read), an entry
            is not one of the two allowed, layer 0 is shared, or the length differs from
            ``num_layers``; the message says what SGLang 0.5.23 would do instead.
    """
    full, shared, noun = _TOKENS[source]
    if len(entries) > MAX_LAYERS:
        raise ScheduleError(
            f"{source} has {len(entries)} entries; a schedule holds at most {MAX_LAYERS} layers "
            f"(52 times GLM-5's 78). Fix: give one {full!r} or {shared!r} per layer of the model."
        )
    n = len(entries) if num_layers is None else num_layers

    def refuse(problem: str, sglang_does: str, fix: str, note: str = "") -> ScheduleError:
        if overridden_by is not None:
            sglang = f"{SGLANG} would ignore it: it reads {overridden_by} first."
        else:
            reading = sglang_reading(entries, n, source)
            sglang = f"{SGLANG} would accept it and run it as {reading} ({sglang_does})."
        return ScheduleError(f"{problem} {sglang}{note} Fix: {fix}")

    bad = [e for e in entries if e not in (full, shared)]
    if bad:
        glm = ""
        if source == "index_topk_pattern" and overridden_by is None:
            glm = (
                f" A GLM config fails earlier: transformers 5.19's GlmMoeDsaConfig raises "
                f"KeyError {bad[0]!r}."
            )
        raise refuse(
            f"{_only(source)}; found [{', '.join(sorted({repr(e) for e in bad}))}] in "
            f"{_show(entries, source)}.",
            f"every {noun} other than {shared!r} read as full",
            f"use one {full!r} or {shared!r} per layer"
            + (" (upper case)." if source == "index_topk_pattern" else "."),
            glm,
        )
    if not entries:
        raise refuse(
            f"{source} is empty; a model has at least one layer.",
            "every layer full",
            f"give one {full!r} or {shared!r} per layer.",
        )
    if entries[0] != full:
        raise refuse(
            f"{source}[0] is {entries[0]!r}; layer 0 must be 'full' (F): a shared layer reuses "
            f"the top-k of an earlier full layer and layer 0 has none.",
            "layer 0 built without an indexer, its sparse attention given no top-k",
            f"make layer 0 {full!r}.",
        )
    if num_layers is not None and len(entries) != num_layers:
        if len(entries) < num_layers:
            does = f"{_count(num_layers - len(entries), 'layer')} past its end full"
        else:
            extra = entries[num_layers:]
            does = f"the last {_count(len(extra), noun)} {_show(extra, source)} ignored"
        raise refuse(
            f"{source} has {len(entries)} entries but num_hidden_layers is {num_layers}.",
            does,
            "give exactly one entry per layer.",
        )
    return tuple("full" if e == full else "shared" for e in entries)


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _only(source: str) -> str:
    if source == "index_topk_pattern":
        return "index_topk_pattern may hold only 'F' (full) and 'S' (shared)"
    return "indexer_types may hold only 'full' and 'shared'"


def _show(entries: Sequence[str], source: str) -> str:
    return repr("".join(entries)) if source == "index_topk_pattern" else repr(list(entries))
