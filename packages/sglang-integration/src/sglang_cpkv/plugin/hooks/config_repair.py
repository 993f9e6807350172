"""Repair DSA config fields after SGLang parses the HF config (``glm_config``).

transformers 5.6-5.8 build ``GlmMoeDsaConfig`` without ``index_topk_freq`` /
``index_topk_pattern``, with ``qk_rope_head_dim`` clobbered by ``head_dim`` and with
``indexer_types`` derived without the offset; 5.19 builds it right. This AROUND hook on
``HfModelConfigParser.parse`` lets SGLang parse as usual, reads the raw ``config.json`` (the
source of truth) and hands both to ``glm_config.normalize``, which restores what was lost and
does nothing where the loaded config is already right (transformers 5.19: a no-op, recorded as
such). It runs before ``--json-model-override-args`` are applied, so command-line overrides
still win.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any

from sglang_cpkv.plugin._decisions import record


def raw_config_dict(model: Any, revision: str | None, kwargs: dict[str, Any]) -> dict | None:
    """The checkpoint's ``config.json`` as a dict (local directory or hub cache), or None."""
    from transformers import PretrainedConfig

    passthrough = {k: v for k, v in kwargs.items() if k in ("_configuration_file", "gguf_file")}
    try:
        raw, _ = PretrainedConfig.get_config_dict(str(model), revision=revision, **passthrough)
    except (OSError, ValueError):
        return None
    return raw


def repair(config: Any, raw: dict) -> Any:
    """Run ``glm_config.normalize(config, raw)`` and record each change (or that there was none).

    Returns:
        glm_config's ``NormalizeReport``.
    """
    from glm_config import normalize

    report = normalize(config, raw)
    if not report.applicable:
        return report
    for change in report.changes:
        record(
            "config",
            f"{change.field}: {change.before!r} -> {change.after!r}"
            if change.field != "indexer_types"
            else f"indexer_types rebuilt from config.json ({change.after.count('full')} full)",
            change.reason,
        )
    if not report.changes:
        record(
            "config",
            "DSA config already matches config.json",
            f"transformers {report.transformers_version} loaded every DSA field",
        )
    if report.conflict:
        record(
            "config", "config.json disagrees with itself", report.conflict, level=logging.WARNING
        )
    return report


def parse_with_repair(original: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND hook on ``HfModelConfigParser.parse(self, model, trust_remote_code, ...)``."""
    from sglang.srt.configs.model_config import is_deepseek_dsa

    config = original(*args, **kwargs)
    if not is_deepseek_dsa(config):
        return config
    bound = inspect.signature(original).bind(*args, **kwargs)
    raw = raw_config_dict(
        bound.arguments["model"], bound.arguments.get("revision"), bound.arguments.get("kwargs", {})
    )
    if raw is not None:
        repair(config, raw)
    return config
