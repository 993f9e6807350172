"""The DSA backend, IndexCache and two-batch-overlap hooks in SGLang 0.5.23's real resolution.

GLM-5.1-FP8 (``fixtures/glm51_fp8/config.json``) resolved for an 8-GPU SM90 or SM100 node with
the plugin active; the GPU is emulated as described in ``_sglang_env``.
"""

from __future__ import annotations

import _sglang_env as env
import pytest
from sglang_cpkv import DsaBackendError
from sglang_cpkv.plugin import _decisions
from sglang_cpkv.serve._flags import merge_model_overrides

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]

FULL_FREQ4 = [0, 1, *range(5, 78, 4)]


def _backends(sa):
    return tuple(
        env.resolved(sa, f) for f in ("kv_cache_dtype", "dsa_prefill_backend", "dsa_decode_backend")
    )


# DSA backends ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("sm", "expected"),
    [
        (env.SM90, ("bfloat16", "flashmla_sparse", "fa3")),
        (env.SM100, ("fp8_e4m3", "trtllm", "trtllm")),
    ],
)
def test_defaults_unchanged(plugin, sm, expected):
    sa = env.resolve(env.glm51_argv(), sm)
    assert _backends(sa) == expected  # SGLang 0.5.23's own defaults
    (d,) = _decisions.decisions("dsa-backends")
    assert "kept" in d.message or "one row layout" in d.reason


@pytest.mark.parametrize(
    ("sm", "extra", "expected"),
    [
        (env.SM100, ["--dsa-prefill-backend", "trtllm", "--dsa-decode-backend", "trtllm"],
         ("fp8_e4m3", "trtllm", "trtllm")),
        (env.SM90, ["--kv-cache-dtype", "fp8_e4m3", "--dsa-prefill-backend", "flashmla_sparse"],
         ("fp8_e4m3", "flashmla_sparse", "flashmla_kv")),
        (env.SM100, ["--kv-cache-dtype", "bfloat16", "--dsa-decode-backend", "flashmla_sparse"],
         ("bfloat16", "flashmla_sparse", "flashmla_sparse")),
        (env.SM100, ["--kv-cache-dtype", "bfloat16", "--dsa-prefill-backend", "trtllm",
                     "--dsa-decode-backend", "flashmla_kv"], ("bfloat16", "trtllm", "flashmla_kv")),
    ],
)  # fmt: skip
def test_user_set_backends_kept(plugin, sm, extra, expected):
    assert _backends(env.resolve(env.glm51_argv(*extra), sm)) == expected


def test_sglang_sm100_autofill_corrected(plugin):
    sa = env.resolve(env.glm51_argv("--dsa-prefill-backend", "flashmla_sparse"), env.SM100)
    assert _backends(sa) == ("fp8_e4m3", "flashmla_sparse", "flashmla_kv")
    (d,) = _decisions.decisions("dsa-backends")
    assert d.message == "decode trtllm -> flashmla_kv"  # trtllm: what SGLang's own pass filled


@pytest.mark.parametrize(
    "pair", [("trtllm", "flashmla_kv"), ("flashmla_sparse", "trtllm"), ("flashmla_auto", "trtllm")]
)
def test_fp8_mix_refused(plugin, pair):
    argv = env.glm51_argv("--dsa-prefill-backend", pair[0], "--dsa-decode-backend", pair[1])
    with pytest.raises(DsaBackendError, match="share one fp8 KV pool") as info:
        env.resolve(argv, env.SM100)
    assert "Fix:" in str(info.value)


def test_trtllm_refused_below_sm100(plugin):
    argv = env.glm51_argv("--kv-cache-dtype", "fp8_e4m3", "--dsa-prefill-backend", "trtllm")
    with pytest.raises(DsaBackendError, match=r"trtllm \(you set it\) but this GPU is SM90"):
        env.resolve(argv, env.SM90)


# IndexCache -----------------------------------------------------------------------------------


@pytest.mark.parametrize("sm", [env.SM90, env.SM100])
def test_indexcache_flags_reach_the_per_layer_schedule(plugin, sm):
    from sglang.srt.arg_groups.overrides import model_config_of
    from sglang.srt.configs.model_config import ModelConfig
    from sglang.srt.utils.hf_transformers.config import get_config

    get_config.cache_clear()  # a config parsed by an earlier test would already be rebuilt
    argv = merge_model_overrides(env.glm51_argv(), {"index_topk_freq": 4})
    sa = env.resolve(argv, sm)
    assert env.full_layers(model_config_of(sa).hf_config) == FULL_FREQ4  # 21 of 78
    # The scheduler builds its own ModelConfig from the server arguments: same schedule.
    assert env.full_layers(ModelConfig.from_server_args(sa).hf_config) == FULL_FREQ4
    (d,) = _decisions.decisions("indexcache")
    assert d.message.startswith("21/78 layers run the indexer (was 78/78)")


def test_indexcache_offset_and_pattern(plugin):
    from sglang.srt.arg_groups.overrides import model_config_of

    sa = env.resolve(
        merge_model_overrides(
            env.glm51_argv(), {"index_topk_freq": 4, "index_skip_topk_offset": 3}
        ),
        env.SM90,
    )
    assert env.full_layers(model_config_of(sa).hf_config) == [0, 1, 2, *range(6, 78, 4)]
    pattern = "FF" + "SSSF" * 19
    sa = env.resolve(
        merge_model_overrides(env.glm51_argv(), {"index_topk_pattern": pattern}), env.SM90
    )
    assert env.full_layers(model_config_of(sa).hf_config) == [
        i for i, c in enumerate(pattern) if c == "F"
    ]


def test_indexcache_pattern_length_checked(plugin):
    from indexcache import ScheduleError

    argv = merge_model_overrides(env.glm51_argv(), {"index_topk_pattern": "FFS"})
    with pytest.raises(
        ScheduleError, match="index_topk_pattern has 3 entries but num_hidden_layers is 78"
    ):
        env.resolve(argv, env.SM90)


def test_tbo_rejected_when_layers_share(plugin):
    from indexcache import IncompatibleOptionError

    argv = merge_model_overrides(
        env.glm51_argv("--enable-two-batch-overlap"), {"index_topk_freq": 4}
    )
    with pytest.raises(IncompatibleOptionError, match="shares 57 of 78 layers"):
        env.resolve(argv, env.SM90)


def test_tbo_allowed_when_no_layer_shares(plugin):
    # index_topk_freq=4 alone makes SGLang's own check refuse; the pattern keeps every layer full.
    overrides = {"index_topk_freq": 4, "index_topk_pattern": "F" * 78}
    sa = env.resolve(
        merge_model_overrides(env.glm51_argv("--enable-two-batch-overlap"), overrides), env.SM90
    )
    assert env.resolved(sa, "enable_two_batch_overlap")
    (d,) = _decisions.decisions("tbo")
    assert "78/78 full" in d.reason and "would have rejected index_topk_freq=4" in d.reason


def test_tbo_without_indexcache_allowed(plugin):
    sa = env.resolve(env.glm51_argv("--enable-two-batch-overlap"), env.SM90)
    assert env.resolved(sa, "enable_two_batch_overlap")
