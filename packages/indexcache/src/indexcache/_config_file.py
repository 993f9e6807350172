"""``indexcache schedule --config``: a model directory or its config.json, as a JSON object.

The read itself is ``cpkv_cli.read_json_object`` (bounded, never blocking on a FIFO, one
:class:`cpkv_cli.InputError` line per failure); this module resolves the directory, and says
when the config is not a DSA model's (:func:`not_dsa_problem`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from cpkv_cli import InputError, read_json_object


def read_config(path: Path) -> tuple[Path, dict[str, Any]]:
    """``(config.json path, object)`` for ``path``, a model directory or its config.json.

    Raises:
        InputError: as ``cpkv_cli.read_json_object``.
    """
    try:
        file = path / "config.json" if path.is_dir() else path
    except OSError as exc:  # e.g. a name too long to stat
        raise InputError(f"cannot open {path}: {exc.strerror}; give a model directory") from None
    _, raw = read_json_object(file, fix="give a model directory or its config.json")
    return file, raw


#: Model types with a DSA lightning indexer (GLM-5.x, DeepSeek-V3.2), as ``glm-config`` and
#: ``cpkv-serve`` know them.
DSA_MODEL_TYPES = frozenset({"glm_moe_dsa", "deepseek_v32"})
#: Fields only a DSA model's config (or one written for a schedule) sets.
INDEXER_FIELDS = (
    "index_topk",
    "index_n_heads",
    "index_head_dim",
    "index_topk_freq",
    "index_skip_topk_offset",
    "index_topk_pattern",
    "indexer_types",
)


def not_dsa_problem(file: Path, raw: dict[str, Any]) -> str | None:
    """Why ``raw`` has no IndexCache schedule (a model without a DSA indexer, e.g. Llama), or
    None: its ``model_type`` is a DSA one or it sets an indexer field.

    A config with none of them used to print an all-full schedule, exit 0, where ``glm-config``
    and ``cpkv-serve`` refuse the model.
    """
    if raw.get("model_type") in DSA_MODEL_TYPES or any(f in raw for f in INDEXER_FIELDS):
        return None
    archs = raw.get("architectures")
    name = archs[0] if isinstance(archs, list) and archs and isinstance(archs[0], str) else None
    what = f"model_type {raw.get('model_type')!r}" + (f" ({name})" if name else "")
    return (
        f"{file}: {what} has no DSA lightning indexer (no index_topk and no IndexCache field), "
        f"so it has no IndexCache schedule; give a DSA model's config (GLM-5.x, DeepSeek-V3.2), "
        f"or --layers with --freq/--offset or --pattern"
    )
