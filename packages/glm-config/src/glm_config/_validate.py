"""Every problem of a config.json's DSA fields, one message each.

``glm-config show`` refuses a config with any of them and lists them; ``glm-config set`` refuses to
edit one (``--force`` overrides) and never writes a new one. The bounds, and why:

- ``num_hidden_layers``, ``num_nextn_predict_layers`` and the schedule fields: whatever
  indexcache's ``schedule_from_config`` accepts (layer counts, ``index_topk_freq`` and
  ``index_skip_topk_offset`` at most ``indexcache.MAX_LAYERS`` = 4096).
- ``index_topk``: an integer in ``[1, max_position_embeddings]``. The indexer keeps at most one
  entry per key, so a larger top-k selects nothing more, while SGLang 0.5.23 sizes a
  ``(tokens, index_topk)`` int32 buffer by it (``dsa_indexer.py``; its fused top-k kernels take
  ``0 < topk <= 2048``, ``dsa_topk_backend.py``, and fall back above). Without
  ``max_position_embeddings`` the ceiling is ``2**31 - 1``.
- ``max_position_embeddings``, ``index_n_heads``, ``index_head_dim``, ``qk_nope_head_dim``,
  ``qk_rope_head_dim``: integers in ``[1, 2**31 - 1]``. transformers 5.19's ``@strict`` config
  checks only that they are ``int``; the kernels take them as int32.

A field that is absent or null is not checked here (transformers fills its default).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from indexcache import MAX_LAYERS, IndexCacheError, schedule_from_config

from glm_config._jsonedit import duplicate_keys

INT32_MAX = 2**31 - 1
_INT32_FIELDS = (
    "max_position_embeddings",
    "index_n_heads",
    "index_head_dim",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
)
_INT32_WHY = "kernels take it as int32"
# Checked here, one message each, rather than by the schedule: beside a pattern the schedule
# ignores them, but they are still written to the file and read by whoever drops the pattern.
_SCHEDULE_INTS = {
    "index_topk_freq": "a freq at or above the layer count changes nothing",
    "index_skip_topk_offset": "an offset at or above the layer count makes every layer full",
}


def config_errors(raw: Mapping[str, Any]) -> list[str]:
    """One message per problem of ``raw``'s DSA fields; empty when they are valid.

    A field that breaks a rule is reported once: a schedule error is indexcache's first, and a
    bound that depends on another field (``index_topk`` <= ``max_position_embeddings``) is
    checked only when that field is itself valid.
    """
    errors = []
    for key in _INT32_FIELDS:
        value = raw.get(key)
        if value is not None and (problem := int_problem(value, key, INT32_MAX, _INT32_WHY)):
            errors.append(problem)
    if "index_topk" in raw:
        errors += _topk_problems(raw)
    reported = set()
    for key, why in _SCHEDULE_INTS.items():
        value = raw.get(key)
        why = f"{why}, and a model has at most {MAX_LAYERS} layers"
        if value is not None and (problem := int_problem(value, key, MAX_LAYERS, why)):
            errors.append(problem)
            reported.add(key)
    try:
        schedule_from_config({k: v for k, v in raw.items() if k not in reported})
    except IndexCacheError as exc:
        errors.append(str(exc))
    return errors


def file_errors(raw: Mapping[str, Any], text: str) -> list[str]:
    """:func:`config_errors`, plus each top-level key the text writes more than once."""
    dups = [
        f"{key} is written {n} times in the file; readers keep the last, so the others are dead "
        f"text. Fix: delete all but one."
        for key, n in duplicate_keys(text).items()
    ]
    return config_errors(raw) + dups


def _topk_problems(raw: Mapping[str, Any]) -> list[str]:
    ceiling, why = INT32_MAX, _INT32_WHY
    positions = raw.get("max_position_embeddings")
    if positions is not None and int_problem(positions, "", INT32_MAX, "") is None:
        ceiling = positions
        why = (
            f"max_position_embeddings is {positions}, and the indexer keeps at most one entry "
            f"per key"
        )
    problem = int_problem(raw.get("index_topk"), "index_topk", ceiling, why)
    return [problem] if problem else []


def int_problem(value: Any, name: str, maximum: int, why: str) -> str | None:
    """Why ``value`` is not an int in ``[1, maximum]``, or None."""
    fix = f"Fix: set {name} to an integer in [1, {maximum}]."
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return f"{name} must be an integer >= 1; got {brief(value)}. {fix}"
    if value > maximum:
        return f"{name} must be <= {maximum} ({why}); got {brief(value)}. {fix}"
    return None


def brief(value: Any) -> str:
    """``value`` as JSON for a message: short, and safe for ints too long to print."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    text = json.dumps(value) if _jsonable(value) else repr(value)
    return text if len(text) <= 60 else f"{text[:30]}...{text[-5:]} ({len(text)} characters)"


def _jsonable(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


def summary(errors: list[str]) -> str:
    """``"1 error: ..."`` or ``"2 errors: (1) ... (2) ..."``, on one line."""
    if len(errors) == 1:
        return f"1 error: {errors[0]}"
    return f"{len(errors)} errors: " + " ".join(f"({i}) {e}" for i, e in enumerate(errors, 1))
