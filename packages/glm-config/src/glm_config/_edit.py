"""``glm-config set``: parse KEY=VALUE assignments and plan the edit of config.json.

Nothing is written unless every assignment parses, every value is within its bound, and the config
as edited has no error it did not already have (``_validate``: indexcache accepts the schedule,
integers in range). When config.json ships an explicit ``indexer_types`` (GLM-5.2 does), it takes
priority over the fields being set, so it is recomputed from them in the same write.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from indexcache import MAX_LAYERS, IndexCacheError, schedule_from_config

from glm_config._jsonedit import same
from glm_config._settings import fs_pattern, is_dsa
from glm_config._validate import INT32_MAX, brief, config_errors, summary
from glm_config.errors import NotDsaError, SettingError

_LAYERS = f"a model has at most {MAX_LAYERS} layers"


@dataclass(frozen=True)
class Key:
    """A settable key: whether null is allowed, its lowest and highest value, and why."""

    nullable: bool
    low_why: str
    high: int
    high_why: str


SETTABLE: dict[str, Key] = {
    "index_topk_freq": Key(
        False,
        "1 = every layer runs its indexer",
        MAX_LAYERS,
        f"a freq at or above the layer count changes nothing, and {_LAYERS}",
    ),
    "index_skip_topk_offset": Key(
        False,
        "an offset <= 0 would make layer 0 shared with nothing to reuse; default 2",
        MAX_LAYERS,
        f"an offset at or above the layer count makes every layer full, and {_LAYERS}",
    ),
    "index_topk_pattern": Key(True, "", MAX_LAYERS, f"one letter per layer, and {_LAYERS}"),
    "index_topk": Key(
        False,
        "the number of keys the indexer keeps per query",
        INT32_MAX,
        "kernels take it as int32; it is also held to max_position_embeddings",
    ),
}
DERIVED = {"indexer_types": "it is derived; set index_topk_pattern or index_topk_freq instead"}


@dataclass(frozen=True)
class Edit:
    """One key of config.json that changes."""

    key: str
    before: Any
    after: Any
    derived: bool = False


def parse_assignments(items: Sequence[str]) -> dict[str, Any]:
    """``["index_topk_freq=4", ...]`` -> ``{"index_topk_freq": 4}``, refusing bad input.

    Values are read as JSON when they parse (``4``, ``null``, ``"FFSS"``), else as a bare string.
    """
    if not items:
        raise SettingError(
            f"nothing to set; give KEY=VALUE pairs, e.g. index_topk_freq=4. "
            f"Keys: {', '.join(SETTABLE)}."
        )
    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise SettingError(f"{brief(item)} is not KEY=VALUE; e.g. index_topk_freq=4.")
        if key in DERIVED:
            raise SettingError(f"{key} cannot be set: {DERIVED[key]}.")
        if key not in SETTABLE:
            raise SettingError(f"unknown key {brief(key)}; settable keys: {', '.join(SETTABLE)}.")
        if key in out:
            raise SettingError(f"{key} is given twice; give each key once.")
        try:
            value = json.loads(text)
        except (ValueError, RecursionError):  # not JSON (or an int of over 4300 digits)
            value = text
        out[key] = _check_value(key, value, text)
    return out


def _check_value(key: str, value: Any, text: str) -> Any:
    spec = SETTABLE[key]
    if value is None and spec.nullable:
        return None
    refused = f"{key}={brief(text)} is refused: {key} must be"
    if key == "index_topk_pattern":
        if not isinstance(value, str) or value == "":
            raise SettingError(f"{refused} a string of F/S, one letter per layer, or null.")
        if len(value) > spec.high:
            raise SettingError(f"{refused} at most {spec.high} letters ({spec.high_why}).")
        return value
    if isinstance(value, str) and value.strip().isdigit():  # an int of over 4300 digits
        raise SettingError(f"{refused} <= {spec.high} ({spec.high_why}).")
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SettingError(f"{refused} an integer >= 1 ({spec.low_why}).")
    if value > spec.high:
        raise SettingError(f"{refused} <= {spec.high} ({spec.high_why}).")
    return value


def plan_edits(
    raw: Mapping[str, Any], updates: Mapping[str, Any], *, allowed: Sequence[str] = ()
) -> tuple[dict[str, Any], list[Edit]]:
    """Apply ``updates`` to a copy of ``raw``; recompute a shipped ``indexer_types``; validate.

    Args:
        raw: config.json as read.
        updates: from :func:`parse_assignments`. A null for a key the file lacks changes nothing
            (readers treat absent and null alike), so it adds no key.
        allowed: errors ``raw`` already has that the caller chose to edit past (``--force``);
            the edited config may keep them, but must not add any.

    Returns:
        ``(new config dict, edits)``; edits is empty when nothing changes.

    Raises:
        NotDsaError: the model has no DSA indexer.
        SettingError: the result has an error ``raw`` did not, or a pattern would silently win.
    """
    if not is_dsa(raw):
        raise NotDsaError(
            f"model_type {raw.get('model_type')!r} has no DSA indexer (no index_topk); refusing to "
            f"add IndexCache settings to it."
        )
    updates = {k: v for k, v in updates.items() if v is not None or raw.get(k) is not None}
    new = dict(raw)
    new.update(updates)
    touches_freq = {"index_topk_freq", "index_skip_topk_offset"} & set(updates)
    if touches_freq and new.get("index_topk_pattern") is not None:
        raise SettingError(
            f"index_topk_pattern is set and takes priority over {', '.join(sorted(touches_freq))}, "
            f"so this edit would have no effect. Fix: also set index_topk_pattern=null."
        )
    if "indexer_types" in raw:  # recompute from the fields as edited, ignoring the old list
        try:
            fields = {k: v for k, v in new.items() if k != "indexer_types"}
            new["indexer_types"] = list(schedule_from_config(fields).indexer_types)
        except IndexCacheError:
            pass  # config_errors(new) reports it below, once
    added = [e for e in config_errors(new) if e not in allowed]
    if added:
        raise SettingError(f"refused: {added[0]}" if len(added) == 1 else summary(added))
    edits = [
        Edit(k, raw.get(k), new[k], derived=k not in updates)
        for k in new
        if k not in raw or not same(raw[k], new[k])
    ]
    return new, edits


def describe(edit: Edit) -> str:
    def show(v: Any) -> str:
        if (pattern := fs_pattern(v)) is not None:  # the old list may be invalid: not validated
            return f"{pattern[:20]}... ({pattern.count('F')} of {len(pattern)} full)"
        text = json.dumps(v)
        return text if len(text) <= 100 else f"{text[:80]}... ({len(text)} characters)"

    tail = " (recomputed: it takes priority over the fields set)" if edit.derived else ""
    return f"{edit.key}: {show(edit.before)} -> {show(edit.after)}{tail}"
