"""The per-layer IndexCache schedule: which layers run their indexer ("full") and which reuse.

Layer ``l`` of the main model is *full* (F: runs its lightning indexer) or *shared* (S: reuses the
top-k of the nearest earlier full layer; its checkpoint carries no indexer weights). The pattern
comes from the first of these config fields that is set (the order transformers 5.19 and
SGLang 0.5.23 use):

1. ``indexer_types``: ``["full", "shared", ...]``, one entry per layer;
2. ``index_topk_pattern``: ``"FFSS..."``, one letter per layer;
3. ``index_topk_freq`` f (default 1) and ``index_skip_topk_offset`` o (default 2):
   layer ``l`` is full iff ``max(l - o + 1, 0) % f == 0``.

``cli_factor`` (LongCat's field, which SGLang reads after 1 and before 2) is refused when it is
on; :func:`schedule_from_config` says why.

f=4, o=2 on 78 layers: full at 0, 1, 5, 9, ..., 77 (21 full); f=4, o=3: full at 0, 1, 2, 6, 10, ...

Every count is bounded before anything of its size is built: at most ``MAX_LAYERS`` (4096) main
layers, NextN layers, ``index_topk_freq`` and ``index_skip_topk_offset`` (``_limits`` says why).

NextN/MTP layers follow the main layers (indices ``num_layers`` to ``num_layers + num_nextn - 1``);
they own indexer weights, reuse a carried top-k when there is one and compute otherwise. A
malformed pattern is refused with a message that says how SGLang would have read it
(``_pattern``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Literal

from indexcache._limits import MAX_LAYERS, show
from indexcache._pattern import SGLANG, check_entries
from indexcache.errors import ScheduleError

FULL = "full"
SHARED = "shared"
NEXTN = "nextn"
DEFAULT_FREQ = 1
DEFAULT_OFFSET = 2

LayerKind = Literal["full", "shared", "nextn"]
ScheduleSource = Literal["indexer_types", "index_topk_pattern", "index_topk_freq"]
_LETTER = {FULL: "F", SHARED: "S"}


@dataclass(frozen=True)
class IndexerSchedule:
    """Which layers run the lightning indexer and which reuse a carried top-k.

    Attributes:
        indexer_types: one of ``"full"``/``"shared"`` per main-model layer; entry 0 is ``"full"``.
        num_nextn_layers: NextN/MTP layers after the main layers (reuse when carried, else compute).
        source: the config field the pattern came from.
    """

    indexer_types: tuple[str, ...]
    num_nextn_layers: int = 0
    source: ScheduleSource = "index_topk_freq"

    def __post_init__(self) -> None:
        check_entries(self.indexer_types, "indexer_types")
        _check_int(self.num_nextn_layers, "num_nextn_layers", minimum=0, maximum=MAX_LAYERS)

    # Constructors -----------------------------------------------------------------------------
    @classmethod
    def from_freq(
        cls,
        num_layers: int,
        freq: int | None = DEFAULT_FREQ,
        offset: int | None = DEFAULT_OFFSET,
        *,
        num_nextn_layers: int = 0,
    ) -> IndexerSchedule:
        """Layer ``l`` is full iff ``max(l - offset + 1, 0) % freq == 0`` (None means default)."""
        _check_int(num_layers, "num_hidden_layers", minimum=1, maximum=MAX_LAYERS)
        freq = DEFAULT_FREQ if freq is None else freq
        offset = DEFAULT_OFFSET if offset is None else offset
        _check_int(freq, "index_topk_freq", minimum=1, maximum=MAX_LAYERS)
        # offset <= 0 would make layer 0 shared with nothing before it to reuse.
        _check_int(offset, "index_skip_topk_offset", minimum=1, maximum=MAX_LAYERS)
        _check_int(num_nextn_layers, "num_nextn_layers", minimum=0, maximum=MAX_LAYERS)
        types = tuple(
            FULL if max(layer - offset + 1, 0) % freq == 0 else SHARED
            for layer in range(num_layers)
        )
        return cls(types, num_nextn_layers, "index_topk_freq")

    @classmethod
    def from_pattern(
        cls, pattern: str, *, num_layers: int | None = None, num_nextn_layers: int = 0
    ) -> IndexerSchedule:
        """Build from ``"FFSS..."`` (one upper-case letter per layer, F = full, S = shared).

        Args:
            pattern: the ``index_topk_pattern`` string.
            num_layers: the model's layer count; when given, the pattern must have that length.
            num_nextn_layers: NextN/MTP layers after the main layers.

        Raises:
            ScheduleError: not a string, a letter other than F/S (lower case included), layer 0
                shared, or a length other than ``num_layers``. Each message says what SGLang
                0.5.23, which accepts all of these, would run instead.
        """
        return _pattern_schedule(pattern, num_layers, num_nextn_layers)

    @classmethod
    def from_indexer_types(
        cls,
        indexer_types: Sequence[str],
        *,
        num_layers: int | None = None,
        num_nextn_layers: int = 0,
    ) -> IndexerSchedule:
        """Build from transformers' ``indexer_types`` list (``"full"``/``"shared"`` per layer).

        Raises:
            ScheduleError: not a list, an entry other than full/shared, layer 0 shared, or a
                length other than ``num_layers`` (when given); the message says what SGLang
                0.5.23 would run instead.
        """
        if isinstance(indexer_types, str) or not isinstance(indexer_types, Sequence):
            raise ScheduleError(
                f"indexer_types must be a list of 'full'/'shared'; got "
                f"{type(indexer_types).__name__} {indexer_types!r}."
            )
        types = check_entries(indexer_types, "indexer_types", num_layers)
        return cls(types, num_nextn_layers, "indexer_types")

    # Queries ----------------------------------------------------------------------------------
    @property
    def num_layers(self) -> int:
        """Main-model layers (NextN layers not counted)."""
        return len(self.indexer_types)

    # Cached: the schedule is immutable, and callers ask per layer (a text map asking for the
    # pattern once per row of 20 layers made 100,000 layers take 19 s).
    @cached_property
    def pattern(self) -> str:
        """The schedule as ``"FFSS..."``."""
        return "".join(_LETTER[t] for t in self.indexer_types)

    @cached_property
    def full_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.indexer_types) if t == FULL)

    @cached_property
    def shared_layers(self) -> tuple[int, ...]:
        return tuple(i for i, t in enumerate(self.indexer_types) if t == SHARED)

    @property
    def num_full(self) -> int:
        return len(self.full_layers)

    @property
    def num_shared(self) -> int:
        return self.num_layers - self.num_full

    @property
    def shares(self) -> bool:
        """True when at least one main layer reuses a carried top-k."""
        return self.num_shared > 0

    def kind(self, layer: int) -> LayerKind:
        """``"full"``, ``"shared"`` or ``"nextn"`` for a main or NextN layer index."""
        self._check_layer(layer)
        return NEXTN if layer >= self.num_layers else self.indexer_types[layer]  # type: ignore[return-value]

    def is_full(self, layer: int) -> bool:
        return self.kind(layer) == FULL

    def is_nextn(self, layer: int) -> bool:
        return self.kind(layer) == NEXTN

    def source_layer(self, layer: int) -> int:
        """The full layer whose top-k main layer ``layer`` uses (itself when it is full)."""
        if self.kind(layer) == NEXTN:
            raise ScheduleError(
                f"layer {layer} is a NextN layer; its top-k comes from the carry at run time, not "
                f"from a fixed layer. Fix: ask source_layer() only for layers < {self.num_layers}."
            )
        while self.indexer_types[layer] != FULL:
            layer -= 1
        return layer

    def next_layer_reuses(self, layer: int) -> bool:
        """Whether a later layer of the same forward pass reuses the top-k ``layer`` computed.

        For main layer ``l < num_layers - 1`` this is whether ``l + 1`` is shared: SGLang 0.5.23's
        ``next_skip_topk``, which decides whether the attention hands its top-k to the next layer.
        For a NextN layer it is whether another NextN layer follows in the same pass.

        **The last main layer: always False.** Nothing in the target's forward pass comes after
        it. SGLang 0.5.23 sets ``next_skip_topk`` there from ``dsa_layer_skips_topk(config,
        num_layers)``: the freq formula (or ``cli_factor``) extended one layer past the model,
        e.g. True for 78 layers, freq 2, offset 2, but False for the same schedule given as
        ``index_topk_pattern`` or ``indexer_types`` (what transformers 5.19 hands SGLang for
        every GLM-5 config). The value has no effect there: the model's forward keeps that top-k
        only until it returns (it is passed on only to a next pipeline stage, which the last
        layer does not have), and the NextN draft model is a separate forward whose carry starts
        empty (its first pass computes) or holds NextN's own previous MTP step's top-k, never the
        target's. Keeping it here would hold a ``[T, index_topk]`` int32 buffer (512 MiB at
        T = 64K, index_topk 2048) for no reader. So the target's last top-k is not carried into
        NextN: NextN computes on its first pass, as in SGLang; a runtime that does hand the
        target's top-k to NextN seeds the carry with it (``TopkCarry.seed``). Later MTP steps
        are new passes too: SGLang carries NextN's own top-k into them when the model sets
        ``index_share_for_mtp_iteration``; here, seed it.
        """
        self._check_layer(layer)
        nxt = layer + 1
        if nxt < self.num_layers:
            return self.indexer_types[nxt] == SHARED
        return self.num_layers < nxt < self.num_layers + self.num_nextn_layers

    def _check_layer(self, layer: int) -> None:
        total = self.num_layers + self.num_nextn_layers
        if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < total:
            raise ScheduleError(
                f"layer must be an int in [0, {total}) ({self.num_layers} main + "
                f"{self.num_nextn_layers} NextN layers); got {layer!r}."
            )


def schedule_from_config(
    config: Mapping[str, Any] | Any, *, strict: bool = False
) -> IndexerSchedule:
    """Build the schedule from a config (a ``config.json`` dict or a transformers config object).

    Reads ``num_hidden_layers``, ``num_nextn_predict_layers`` (default 0) and the first set field of
    ``indexer_types`` > ``index_topk_pattern`` > ``index_topk_freq``/``index_skip_topk_offset``.

    ``cli_factor`` c > 1 is refused by name. SGLang 0.5.23 reads it (LongCat's field) after
    ``indexer_types`` and before the pattern: attention layer ``l`` is full iff ``l % c == 0``.
    On LongCat, the model that ships it, those ids count two MLA sublayers per decoder layer
    (``2 * layer + i``), which a schedule of one indexer per decoder layer cannot describe; on a
    GLM config transformers 5.19 derives ``indexer_types`` without it, so SGLang ignores it; on a
    DeepSeek-V3.2 config it means ``index_topk_freq=c, index_skip_topk_offset=1``, which the
    message offers as the fix. Null and 1 mean off, as in SGLang.

    Args:
        config: a mapping or an object with attributes.
        strict: also require an explicit ``indexer_types`` to equal what the pattern (or else
            freq/offset) gives, catching a stale list next to an edited ``index_topk_freq``. A
            pattern overriding freq/offset is documented behaviour, not a conflict.

    Raises:
        ScheduleError: a field is malformed, lengths disagree, layer 0 is shared, ``cli_factor``
            is on, or (strict) the fields disagree. A pattern is checked even where
            ``indexer_types`` decides.
    """
    num_layers = _get(config, "num_hidden_layers")
    _check_int(num_layers, "num_hidden_layers", minimum=1, maximum=MAX_LAYERS)
    nextn = _get(config, "num_nextn_predict_layers")
    nextn = 0 if nextn is None else nextn
    _check_int(nextn, "num_nextn_predict_layers", minimum=0, maximum=MAX_LAYERS)
    explicit = None
    if (types := _get(config, "indexer_types")) is not None:
        explicit = IndexerSchedule.from_indexer_types(
            types, num_layers=num_layers, num_nextn_layers=nextn
        )
    _refuse_cli_factor(_get(config, "cli_factor"))
    derived = None
    freq, offset = _get(config, "index_topk_freq"), _get(config, "index_skip_topk_offset")
    if (pattern := _get(config, "index_topk_pattern")) is not None:
        first = "indexer_types" if explicit else None
        derived = _pattern_schedule(pattern, num_layers, nextn, overridden_by=first)
    elif explicit is None or strict:
        derived = IndexerSchedule.from_freq(num_layers, freq, offset, num_nextn_layers=nextn)
    stale = strict and explicit is not None and derived is not None
    if stale and explicit.indexer_types != derived.indexer_types:  # type: ignore[union-attr]
        detail = f" (freq={freq}, offset={offset})" if derived.source == "index_topk_freq" else ""
        raise ScheduleError(
            f"indexer_types gives {explicit.pattern} but {derived.source}{detail} gives "
            f"{derived.pattern}; indexer_types takes priority, so one of them is stale. "
            f"Fix: update or remove one of them."
        )
    chosen = explicit or derived
    assert chosen is not None
    return chosen


def _pattern_schedule(
    pattern: Any, num_layers: int | None, nextn: int, *, overridden_by: str | None = None
) -> IndexerSchedule:
    if not isinstance(pattern, str):
        raise ScheduleError(
            f"index_topk_pattern must be a string of 'F'/'S' letters; got "
            f'{type(pattern).__name__} {pattern!r}. Fix: write it as e.g. "FFSSSF...".'
        )
    types = check_entries(pattern, "index_topk_pattern", num_layers, overridden_by=overridden_by)
    return IndexerSchedule(types, nextn, "index_topk_pattern")


def _refuse_cli_factor(value: Any) -> None:
    """Refuse ``cli_factor`` unless it is off (null or 1); see :func:`schedule_from_config`."""
    if value is None or (value == 1 and not isinstance(value, bool)):
        return
    _check_int(value, "cli_factor", minimum=1, maximum=MAX_LAYERS)
    raise ScheduleError(
        f"cli_factor={value} is not supported. {SGLANG} reads it (LongCat's field) ahead of "
        f"index_topk_pattern and index_topk_freq: attention layers 0, {value}, {2 * value}, ... "
        f"run their indexer. On LongCat those ids count two MLA sublayers per decoder layer, "
        f"which this per-layer schedule does not model; on a GLM config transformers 5.19 leaves "
        f"it out of indexer_types, which SGLang reads first. Fix: remove cli_factor (null or 1 "
        f"is off); on a GLM or DeepSeek-V3.2 model index_topk_freq={value} with "
        f"index_skip_topk_offset=1 gives the same full layers."
    )


def _get(config: Mapping[str, Any] | Any, key: str) -> Any:
    if isinstance(config, Mapping):
        return config.get(key)
    return getattr(config, key, None)


# Per-field advice appended to an out-of-range integer's message.
_INT_FIX = {
    "index_topk_freq": " Fix: 1 means every layer runs its indexer.",
    "index_skip_topk_offset": (
        " Fix: offset <= 0 would make layer 0 shared with nothing to reuse; default 2."
    ),
    "cli_factor": " Fix: remove it (null or 1 is off); cli_factor is not supported.",
}
# Why an integer has a ceiling and what to give instead, used when it is above it.
_MAX_WHY = {
    "num_hidden_layers": (
        "a schedule holds at most 4096 layers, 52 times GLM-5's 78",
        "give the model's real layer count",
    ),
    "num_nextn_predict_layers": (
        "real DSA models have 1 NextN layer; the cap is the layer cap",
        "give the model's real NextN layer count",
    ),
    "num_nextn_layers": (
        "real DSA models have 1 NextN layer; the cap is the layer cap",
        "give the model's real NextN layer count",
    ),
    "index_topk_freq": (
        "a freq at or above the layer count gives the same schedule as the layer count, and a "
        "model has at most 4096 layers",
        "give the layer count for 'share everything after the offset'",
    ),
    "index_skip_topk_offset": (
        "an offset at or above the layer count makes every layer full, and a model has at most "
        "4096 layers",
        "give index_topk_freq=1 for 'every layer full'",
    ),
    "cli_factor": ("it counts layers, and a model has at most 4096", "remove cli_factor"),
}
_INT32_DIM = ("kernels take dimensions as int32", "give the model's real value")
_INT32_TOKENS = ("the indexer's key window is int32", "give a real prefill length")
_DIMS = ("hidden_size", "q_lora_rank", "index_n_heads", "index_head_dim")
_MAX_WHY |= dict.fromkeys(_DIMS, _INT32_DIM)
_MAX_WHY |= dict.fromkeys(("num_tokens", "prefix_tokens"), _INT32_TOKENS)


def _check_int(value: Any, name: str, *, minimum: int, maximum: int | None = None) -> None:
    """``value`` is an int in ``[minimum, maximum]``; the message names the bound it breaks."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        sglang = ""
        if name == "cli_factor" and isinstance(value, int) and not isinstance(value, bool):
            sglang = f" {SGLANG} stops on it with AssertionError 'cli_factor must be positive'."
        raise ScheduleError(
            f"{name} must be an integer >= {minimum}; got {show(value)}."
            + sglang
            + _INT_FIX.get(name, "")
        )
    if maximum is not None and value > maximum:
        why, fix = _MAX_WHY.get(name, ("", f"give {name} <= {maximum}"))
        raise ScheduleError(
            f"{name} must be <= {maximum}"
            + (f" ({why})" if why else "")
            + f"; got {show(value)}. Fix: {fix}."
        )
