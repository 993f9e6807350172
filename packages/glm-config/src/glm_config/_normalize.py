"""Repair a loaded DSA config from its config.json: restore dropped fields, recompute derived ones.

transformers 5.6-5.10 drop ``index_topk_freq``/``index_topk_pattern`` and derive ``indexer_types``
as if the offset were 2; 5.4-5.9 overwrite ``qk_rope_head_dim`` with the file's ``head_dim``
(see ``_releases``). A GLM-5.2 checkpoint (freq 4, offset 3) loaded that way marks layer 5 full
and layer 2 shared, the opposite of its weights. :func:`normalize` puts back what config.json says,
reports every change, and touches nothing that is already right.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from glm_config._releases import Defect, defects_for, transformers_version
from glm_config._settings import INDEXCACHE_FIELDS, expected_settings, fs_pattern, is_dsa

MISSING: Any = type("Missing", (), {"__repr__": lambda self: "<missing>"})()


@dataclass(frozen=True)
class Change:
    """One attribute normalize set (or would set, in a dry run)."""

    field: str
    before: Any
    after: Any
    reason: str

    def __str__(self) -> str:
        return f"{self.field}: {_short(self.before)} -> {_short(self.after)} ({self.reason})"


@dataclass
class NormalizeReport:
    """What :func:`normalize` found and did.

    Attributes:
        applicable: False for non-DSA configs (nothing is checked or changed).
        changes: every attribute that differed from config.json, in the order they were set.
        applied: False for a dry run.
        conflict: set when config.json's own schedule fields disagree (the higher-priority one won).
    """

    model_type: str | None
    transformers_version: str | None
    applicable: bool
    applied: bool
    changes: list[Change] = field(default_factory=list)
    conflict: str | None = None

    @property
    def changed(self) -> bool:
        return bool(self.changes)

    def __str__(self) -> str:
        if not self.applicable:
            return f"glm-config: {self.model_type!r} is not a DSA model; nothing to normalize"
        head = f"glm-config: transformers {self.transformers_version or '(not installed)'}"
        if not self.changes:
            lines = [f"{head}: DSA config already matches config.json"]
        else:
            verb = "repaired" if self.applied else "would repair"
            n = len(self.changes)
            lines = [f"{head}: {verb} {n} field{'' if n == 1 else 's'}"]
            lines += [f"  {c}" for c in self.changes]
        if self.conflict:
            lines.append(f"  warning: {self.conflict}")
        return "\n".join(lines)


def normalize(config: Any, raw: Mapping[str, Any], *, dry_run: bool = False) -> NormalizeReport:
    """Make a loaded DSA config agree with its config.json; report every change.

    Restores ``index_topk_freq``, ``index_topk_pattern``, ``index_skip_topk_offset`` and
    ``qk_rope_head_dim`` where config.json sets them, then recomputes ``qk_head_dim =
    qk_nope_head_dim + qk_rope_head_dim`` and ``indexer_types`` (from the first of indexer_types >
    index_topk_pattern > index_topk_freq/offset in config.json, validated by indexcache) where the
    loaded config has them. ``head_dim`` is left alone.

    Args:
        config: the loaded config (a transformers ``PretrainedConfig`` or any attribute object);
            modified in place unless ``dry_run``.
        raw: the model's config.json as a dict.
        dry_run: report without setting anything.

    Returns:
        A :class:`NormalizeReport`; ``report.changed`` is False when the config was already right.

    Raises:
        ConfigFileError: config.json's schedule fields are invalid.
    """
    version = transformers_version()
    model_type = raw.get("model_type")
    report = NormalizeReport(model_type, version, is_dsa(raw), not dry_run)
    if not report.applicable:
        return report
    want = expected_settings(raw)
    report.conflict = want.conflict
    defects = defects_for(version, getattr(config, "model_type", model_type))

    def check(name: str, expected: Any, *, add_if_missing: bool = True) -> None:
        current = getattr(config, name, MISSING)
        if current is MISSING and not add_if_missing:
            return
        if _same(current, expected):
            return
        report.changes.append(
            Change(name, current, expected, _reason(name, current, defects, version))
        )
        if not dry_run:
            setattr(config, name, expected)

    for name in INDEXCACHE_FIELDS:
        if raw.get(name) is not None:  # null in config.json = unset: nothing to restore
            check(name, raw[name])
    if want.qk_rope_head_dim is not None:
        check("qk_rope_head_dim", want.qk_rope_head_dim)
    nope = want.qk_nope_head_dim or getattr(config, "qk_nope_head_dim", None)
    rope = want.qk_rope_head_dim or getattr(config, "qk_rope_head_dim", None)
    if nope is not None and rope is not None:
        check("qk_head_dim", nope + rope)
    # A config without indexer_types (DeepseekV32Config, transformers < 5.6) is left so: readers
    # (SGLang's dsa_layer_skips_topk) derive it from the fields restored above.
    check("indexer_types", want.indexer_types, add_if_missing=False)
    return report


def _same(current: Any, expected: Any) -> bool:
    if isinstance(expected, list):
        return isinstance(current, (list, tuple)) and list(current) == expected
    return type(current) is type(expected) and current == expected


def _reason(name: str, current: Any, defects: tuple[Defect, ...], version: str | None) -> str:
    for d in defects:
        if name in d.fields:
            return f"transformers {version} {d.summary} ({d.releases})"
    if current is MISSING:
        return "missing from the loaded config"
    return "differs from config.json"


def _short(value: Any) -> str:
    if (pattern := fs_pattern(value)) is not None:
        return f"{pattern[:24]}{'...' if len(pattern) > 24 else ''} ({pattern.count('F')} full)"
    return repr(value)
