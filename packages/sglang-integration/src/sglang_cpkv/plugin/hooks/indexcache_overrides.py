"""IndexCache settings from the command line that reach the per-layer schedule.

SGLang decides per layer whether the indexer runs with
``configs.model_config.dsa_layer_skips_topk(config, layer)``, which reads ``indexer_types``
first. transformers computes ``indexer_types`` when the config is built, before
``--json-model-override-args`` is applied, so overriding ``index_topk_freq`` changes the
attribute and nothing else: all 78 GLM-5.1 layers keep their indexer. And SGLang's two-batch
overlap check rejects ``index_topk_freq > 1`` even when no layer shares.

Two hooks fix both:

- ``get_config`` (AROUND): when the model overrides set ``index_topk_freq``,
  ``index_skip_topk_offset`` or ``index_topk_pattern`` (``cpkv-serve --cpkv-index-*`` writes
  them there, so they travel with the server arguments to every process), rebuild
  ``indexer_types`` from them with :mod:`indexcache`, which validates them.
- ``_validate_dsa_tbo_index_sharing`` (REPLACE): reject two-batch overlap only when some layer
  of the schedule the model will run actually shares.
"""

from __future__ import annotations

import inspect
from typing import Any

from sglang_cpkv.plugin._decisions import record

INDEXCACHE_KEYS = ("index_topk_freq", "index_skip_topk_offset", "index_topk_pattern")


def effective_schedule(hf_config: Any) -> Any:
    """The ``indexcache.IndexerSchedule`` the SGLang model will run for ``hf_config``.

    Built from SGLang's own per-layer rule (``dsa_layer_skips_topk``, what
    ``DeepseekV2AttentionMLA`` calls per layer) and validated by ``indexcache``.
    """
    from indexcache import IndexerSchedule
    from sglang.srt.configs.model_config import dsa_layer_skips_topk

    n = hf_config.num_hidden_layers
    types = ["shared" if dsa_layer_skips_topk(hf_config, i) else "full" for i in range(n)]
    nextn = getattr(hf_config, "num_nextn_predict_layers", 0) or 0
    return IndexerSchedule.from_indexer_types(types, num_nextn_layers=nextn)


def apply_indexcache_overrides(config: Any, overrides: dict[str, Any]) -> Any | None:
    """Rebuild ``config.indexer_types`` from the IndexCache keys in ``overrides``.

    Returns:
        The new schedule, or None when ``overrides`` holds no IndexCache key, sets
        ``indexer_types`` itself (then it is the source of truth), or the model is not DSA.

    Raises:
        indexcache.ScheduleError: a value is invalid or the pattern length differs from the
            model's layer count.
    """
    from indexcache import schedule_from_config
    from sglang.srt.configs.model_config import is_deepseek_dsa

    given = {k: overrides[k] for k in INDEXCACHE_KEYS if k in overrides}
    if not given or "indexer_types" in overrides:
        return None
    if not is_deepseek_dsa(config):
        record("indexcache", f"ignored {given}", "the model is not a DSA model")
        return None
    before = effective_schedule(config)
    fields = {
        "num_hidden_layers": config.num_hidden_layers,
        "num_nextn_predict_layers": getattr(config, "num_nextn_predict_layers", 0) or 0,
        # A pattern on the command line wins over freq/offset; freq/offset fall back to the
        # checkpoint's own values where only one of them was given.
        "index_topk_pattern": given.get("index_topk_pattern"),
        "index_topk_freq": given.get("index_topk_freq", getattr(config, "index_topk_freq", None)),
        "index_skip_topk_offset": given.get(
            "index_skip_topk_offset", getattr(config, "index_skip_topk_offset", None)
        ),
    }
    schedule = schedule_from_config(fields)
    if list(getattr(config, "indexer_types", None) or ()) == list(schedule.indexer_types):
        return schedule  # already applied (get_config returns one cached object per arguments)
    config.indexer_types = list(schedule.indexer_types)
    record(
        "indexcache",
        f"{schedule.num_full}/{schedule.num_layers} layers run the indexer "
        f"(was {before.num_full}/{before.num_layers}): full at {list(schedule.full_layers)}",
        f"overrides {given} rebuilt indexer_types, which transformers computed before the "
        f"overrides applied",
    )
    return schedule


def get_config_with_indexcache(original: Any, *args: Any, **kwargs: Any) -> Any:
    """AROUND hook on ``sglang.srt.utils.hf_transformers.config.get_config``."""
    config = original(*args, **kwargs)
    bound = inspect.signature(original).bind(*args, **kwargs)
    overrides = bound.arguments.get("model_override_args") or {}
    apply_indexcache_overrides(config, overrides)
    return config


def validate_tbo_index_sharing(server_args: Any, hf_config: Any) -> None:
    """REPLACE hook on ``arg_groups.model_hook._validate_dsa_tbo_index_sharing``.

    Raises:
        indexcache.IncompatibleOptionError: two-batch overlap is on and some layer shares.
    """
    from indexcache import check_two_batch_overlap
    from sglang.srt.arg_groups.overrides import resolving_view

    if not resolving_view(server_args).enable_two_batch_overlap:
        return
    schedule = effective_schedule(hf_config)
    check_two_batch_overlap(schedule, True)
    freq = getattr(hf_config, "index_topk_freq", 1) or 1
    pattern = getattr(hf_config, "index_topk_pattern", None)
    record(
        "tbo",
        "two-batch overlap allowed",
        f"no layer shares the indexer top-k ({schedule.num_full}/{schedule.num_layers} full)"
        + (
            f"; SGLang's check would have rejected index_topk_freq={freq}"
            if freq > 1 or (pattern and "S" in pattern)
            else ""
        ),
    )
