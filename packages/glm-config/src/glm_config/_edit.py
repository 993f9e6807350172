"""``glm-config set``: validated edits of config.json, a timestamped backup, an atomic write.

Nothing is written unless every assignment parses, every value is in range, and indexcache accepts
the resulting schedule. When config.json ships an explicit ``indexer_types`` (GLM-5.2 does), it
takes priority over the fields being set, so it is recomputed from them in the same write.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from indexcache import IndexCacheError, IndexerSchedule, schedule_from_config

from glm_config._settings import fs_pattern, is_dsa
from glm_config.errors import NotDsaError, SettingError

# key -> (accepts null, description); every value must be an int >= 1 unless it is the pattern.
SETTABLE: dict[str, tuple[bool, str]] = {
    "index_topk_freq": (False, "an integer >= 1 (1 = every layer runs its indexer)"),
    "index_skip_topk_offset": (False, "an integer >= 1 (default 2)"),
    "index_topk_pattern": (True, "a string of F/S, one per layer, or null"),
    "index_topk": (False, "an integer >= 1 (tokens the indexer keeps per query)"),
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
            raise SettingError(f"{item!r} is not KEY=VALUE; e.g. index_topk_freq=4.")
        if key in DERIVED:
            raise SettingError(f"{key} cannot be set: {DERIVED[key]}.")
        if key not in SETTABLE:
            raise SettingError(f"unknown key {key!r}; settable keys: {', '.join(SETTABLE)}.")
        if key in out:
            raise SettingError(f"{key} is given twice; give each key once.")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        out[key] = _check_value(key, value, text)
    return out


def _check_value(key: str, value: Any, text: str) -> Any:
    nullable, want = SETTABLE[key]
    if value is None and nullable:
        return None
    if key == "index_topk_pattern":
        ok = isinstance(value, str) and value != ""
    else:
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    if not ok:
        raise SettingError(f"{key}={text!r} is refused: {key} must be {want}.")
    return value


def plan_edits(
    raw: Mapping[str, Any], updates: Mapping[str, Any]
) -> tuple[dict[str, Any], list[Edit]]:
    """Apply ``updates`` to a copy of ``raw``; recompute a shipped ``indexer_types``; validate.

    Returns:
        ``(new config dict, edits)``; edits is empty when nothing changes.

    Raises:
        NotDsaError: the model has no DSA indexer.
        SettingError: the result is not a valid schedule, or a pattern would silently win.
    """
    if not is_dsa(raw):
        raise NotDsaError(
            f"model_type {raw.get('model_type')!r} has no DSA indexer (no index_topk); refusing to "
            f"add IndexCache settings to it."
        )
    new = dict(raw)
    new.update(updates)
    touches_freq = {"index_topk_freq", "index_skip_topk_offset"} & set(updates)
    if touches_freq and new.get("index_topk_pattern") is not None:
        raise SettingError(
            f"index_topk_pattern is set and takes priority over {', '.join(sorted(touches_freq))}, "
            f"so this edit would have no effect. Fix: also set index_topk_pattern=null."
        )
    try:  # the schedule of the fields as edited, ignoring the indexer_types they replace
        schedule = schedule_from_config({k: v for k, v in new.items() if k != "indexer_types"})
        if new.get("index_topk_freq") is not None or new.get("index_skip_topk_offset") is not None:
            # overridden by a pattern or not, the values written must be valid
            IndexerSchedule.from_freq(
                new["num_hidden_layers"],
                new.get("index_topk_freq"),
                new.get("index_skip_topk_offset"),
            )
    except IndexCacheError as exc:
        raise SettingError(f"refused: {exc}") from None
    if "indexer_types" in raw:
        new["indexer_types"] = list(schedule.indexer_types)
    edits = [
        Edit(k, raw.get(k), new[k], derived=k not in updates)
        for k in new
        if k not in raw or raw[k] != new[k]
    ]
    return new, edits


def describe(edit: Edit) -> str:
    def show(v: Any) -> str:
        if (pattern := fs_pattern(v)) is not None:  # the old list may be invalid: not validated
            return f"{pattern[:20]}... ({pattern.count('F')} of {len(pattern)} full)"
        return json.dumps(v)

    tail = " (recomputed: it takes priority over the fields set)" if edit.derived else ""
    return f"{edit.key}: {show(edit.before)} -> {show(edit.after)}{tail}"


def write_config(path: Path, new: Mapping[str, Any], original_text: str) -> Path:
    """Back up ``path`` with a UTC timestamp, then replace it atomically with ``new``.

    Returns:
        The backup path (``config.json.bak-YYYYmmddTHHMMSSZ``, ``-N`` appended if taken).
    """
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    backup = path.with_name(f"{path.name}.bak-{stamp}")
    n = 1
    while backup.exists():
        backup = path.with_name(f"{path.name}.bak-{stamp}-{n}")
        n += 1
    shutil.copy2(path, backup)
    text = json.dumps(new, indent=_indent(original_text), ensure_ascii=False)
    if original_text.endswith("\n"):
        text += "\n"
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        shutil.copymode(path, tmp)
        os.replace(tmp, path)  # atomic on POSIX: readers see the old file or the new one
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        backup.unlink(missing_ok=True)  # the original is untouched, so the backup is redundant
        raise
    return backup


def _indent(text: str) -> int:
    """The indent width of the file (2 when it cannot be told)."""
    for line in text.splitlines()[1:]:
        stripped = line.lstrip(" ")
        if stripped.startswith('"'):
            return len(line) - len(stripped) or 2
    return 2
