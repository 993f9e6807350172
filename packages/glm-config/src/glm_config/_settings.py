"""The DSA/IndexCache settings a model should have, derived from its config.json alone."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from indexcache import IndexCacheError, IndexerSchedule, schedule_from_config

from glm_config.errors import ConfigFileError, NotDsaError

DSA_MODEL_TYPES = frozenset({"glm_moe_dsa", "deepseek_v32"})
INDEXCACHE_FIELDS = ("index_topk_freq", "index_skip_topk_offset", "index_topk_pattern")
# Shown by `glm-config show`, in this order.
SHOWN_FIELDS = (
    "index_topk",
    "index_n_heads",
    "index_head_dim",
    *INDEXCACHE_FIELDS,
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "qk_head_dim",
    "indexer_types",
)


def fs_pattern(value: Any) -> str | None:
    """``"FFSS..."`` when ``value`` is an indexer_types list ("full"/"shared" entries), else None.

    Nothing is validated, so a stale or malformed list (e.g. one starting with "shared") can still
    be shown next to the value that replaces it.
    """
    if isinstance(value, (list, tuple)) and value and all(v in ("full", "shared") for v in value):
        return "".join("F" if v == "full" else "S" for v in value)
    return None


def is_dsa(raw: Mapping[str, Any]) -> bool:
    """A DSA model: a GLM-5.x / DeepSeek-V3.2 model type, or any config with an indexer top-k."""
    return raw.get("model_type") in DSA_MODEL_TYPES or "index_topk" in raw


@dataclass(frozen=True)
class DsaSettings:
    """What the loaded config should hold, per config.json (the source of truth).

    ``None`` for a field means config.json does not set it (nothing to restore).
    """

    model_type: str | None
    num_hidden_layers: int
    index_topk_freq: int | None
    index_skip_topk_offset: int | None
    index_topk_pattern: str | None
    qk_nope_head_dim: int | None
    qk_rope_head_dim: int | None
    schedule: IndexerSchedule
    conflict: str | None = None
    """Set when a lower-priority schedule field disagrees with the one that wins."""

    @property
    def qk_head_dim(self) -> int | None:
        if self.qk_nope_head_dim is None or self.qk_rope_head_dim is None:
            return None
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    @property
    def indexer_types(self) -> list[str]:
        return list(self.schedule.indexer_types)


def expected_settings(raw: Mapping[str, Any], *, source: str = "config.json") -> DsaSettings:
    """Derive the settings from a config.json dict, validating them through indexcache.

    Raises:
        NotDsaError: the config has no DSA indexer.
        ConfigFileError: the schedule fields are invalid or disagree with each other.
    """
    if not is_dsa(raw):
        raise NotDsaError(
            f"{source}: model_type {raw.get('model_type')!r} has no DSA indexer (no index_topk); "
            f"glm-config handles {', '.join(sorted(DSA_MODEL_TYPES))} models."
        )
    try:
        schedule = schedule_from_config(raw)
    except IndexCacheError as exc:
        raise ConfigFileError(f"{source}: {exc}") from None
    try:  # the priority order decides; a lower-priority field that disagrees is only reported
        schedule_from_config(raw, strict=True)
        conflict = None
    except IndexCacheError as exc:
        conflict = f"{source}: {exc}"
    for key in ("qk_nope_head_dim", "qk_rope_head_dim"):
        value = raw.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or value < 1
        ):
            raise ConfigFileError(f"{source}: {key} must be an integer >= 1; got {value!r}.")
    return DsaSettings(
        model_type=raw.get("model_type"),
        num_hidden_layers=raw["num_hidden_layers"],
        index_topk_freq=raw.get("index_topk_freq"),
        index_skip_topk_offset=raw.get("index_skip_topk_offset"),
        index_topk_pattern=raw.get("index_topk_pattern"),
        qk_nope_head_dim=raw.get("qk_nope_head_dim"),
        qk_rope_head_dim=raw.get("qk_rope_head_dim"),
        schedule=schedule,
        conflict=conflict,
    )
