"""What each transformers release does to a GlmMoeDsa config (checked in the released sources).

| defect           | releases   | effect on a GLM-5.x config.json                            |
|------------------|------------|------------------------------------------------------------|
| no-indexer-types | 5.2 - 5.5  | no ``indexer_types``: IndexCache unknown, every layer full  |
| head-dim-alias   | 5.4 - 5.9  | ``attribute_map`` maps ``head_dim`` onto                    |
|                  |            | ``qk_rope_head_dim``: the file's 192 overwrites 64          |
| drops-fields     | 5.6 - 5.10 | ``index_topk_freq``/``index_topk_pattern`` popped           |
| ignores-offset   | 5.6 - 5.10 | ``indexer_types`` derived as if the offset were 2           |

5.11 and later (5.19 checked) keep every field and honour the offset. DeepSeek-V3.2 configs
(``deepseek_v32``, or ``deepseek_v3`` classes in releases without it) are not affected.
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass


@dataclass(frozen=True)
class Defect:
    """A config-loading defect of a range of transformers releases (``first <= v < fixed``)."""

    name: str
    summary: str
    first: tuple[int, int]
    fixed: tuple[int, int]
    fields: tuple[str, ...]

    @property
    def releases(self) -> str:
        return f"{self.first[0]}.{self.first[1]}-{self.fixed[0]}.{self.fixed[1] - 1}"


TRANSFORMERS_DEFECTS = (
    Defect(
        "no-indexer-types",
        "has no indexer_types (IndexCache unknown)",
        (5, 2),
        (5, 6),
        ("indexer_types",),
    ),
    Defect(
        "head-dim-alias",
        "aliases head_dim to qk_rope_head_dim (config.json head_dim overwrites qk_rope_head_dim)",
        (5, 4),
        (5, 10),
        ("qk_rope_head_dim", "qk_head_dim"),
    ),
    Defect(
        "drops-fields",
        "drops index_topk_freq and index_topk_pattern",
        (5, 6),
        (5, 11),
        ("index_topk_freq", "index_topk_pattern"),
    ),
    Defect(
        "ignores-offset",
        "derives indexer_types as if index_skip_topk_offset were 2",
        (5, 6),
        (5, 11),
        ("indexer_types",),
    ),
)
AFFECTED_MODEL_TYPES = frozenset({"glm_moe_dsa"})


def transformers_version() -> str | None:
    """The installed transformers version, or None when it is not installed."""
    try:
        return importlib.metadata.version("transformers")
    except importlib.metadata.PackageNotFoundError:
        return None


def parse_version(version: str) -> tuple[int, int]:
    """``"5.8.1"`` -> ``(5, 8)``; suffixes are ignored (``"5.11.0.dev0"`` -> ``(5, 11)``)."""
    parts = version.split(".")
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except (IndexError, ValueError):
        raise ValueError(f"cannot parse a transformers version from {version!r}") from None


def defects_for(version: str | None, model_type: str | None = "glm_moe_dsa") -> tuple[Defect, ...]:
    """The defects a transformers release has for configs of ``model_type``."""
    if version is None or model_type not in AFFECTED_MODEL_TYPES:
        return ()
    v = parse_version(version)
    return tuple(d for d in TRANSFORMERS_DEFECTS if d.first <= v < d.fixed)
