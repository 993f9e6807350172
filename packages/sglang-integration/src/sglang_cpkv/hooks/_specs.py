"""The hook table: each hook with the signature of its target in sglang 0.5.23."""

from __future__ import annotations

from sglang_cpkv.hooks._framework import HookSpec
from sglang_cpkv.hooks.config_repair import parse_with_repair
from sglang_cpkv.hooks.deepgemm_warmup import compile_with_cp_plan
from sglang_cpkv.hooks.dsa_backends import dsa_backend_resolution
from sglang_cpkv.hooks.indexcache_overrides import (
    get_config_with_indexcache,
    validate_tbo_index_sharing,
)
from sglang_cpkv.hooks.ragged_offsets import init_forward_metadata_with_chunk_offsets

_HF = "sglang.srt.utils.hf_transformers.config"
_WARMUP_NEEDS = (
    "CPSetup", "dense_cap", "fast_to_chunk_ms", "shape_m_list", "sglang_m_max", "GLM51", "Rows",
    "dsa_attention_shapes", "dsa_ffn_shapes",
)  # fmt: skip

SPECS: tuple[HookSpec, ...] = (
    HookSpec(
        name="config-repair",
        target=f"{_HF}.HfModelConfigParser.parse",
        kind="around",
        params=("self", "model", "trust_remote_code", "revision=", "**kwargs"),
        hook=parse_with_repair,
        why="restore DSA/IndexCache fields some transformers releases drop (glm_config)",
        requires=("glm_config:normalize",),
    ),
    HookSpec(
        name="indexcache-overrides",
        target=f"{_HF}.get_config",
        kind="around",
        params=(
            "model",
            "trust_remote_code",
            "revision=",
            "model_override_args=",
            "model_config_parser=",
            "**kwargs",
        ),
        hook=get_config_with_indexcache,
        why="IndexCache overrides rebuild the per-layer indexer schedule",
        requires=("indexcache:schedule_from_config", "indexcache:IndexerSchedule"),
    ),
    HookSpec(
        name="tbo-index-sharing",
        target="sglang.srt.arg_groups.model_hook._validate_dsa_tbo_index_sharing",
        kind="replace",
        params=("server_args", "hf_config"),
        hook=validate_tbo_index_sharing,
        why="reject two-batch overlap only when some layer shares the indexer top-k",
        requires=("indexcache:check_two_batch_overlap", "indexcache:IndexerSchedule"),
    ),
    HookSpec(
        name="dsa-backends",
        target="sglang.srt.arg_groups.overrides._dsa_split_backend_resolution",
        kind="around",
        params=("view",),
        hook=dsa_backend_resolution,
        why="keep user-set DSA backends, one fp8 KV layout family, no trtllm below SM100",
    ),
    HookSpec(
        name="deepgemm-warmup",
        target="sglang.srt.layers.deep_gemm_wrapper.compile_utils._compile_deep_gemm_one_type_all",
        kind="around",
        params=("kernel_type", "n", "k", "num_groups", "m_list"),
        hook=compile_with_cp_plan,
        why="SGLang's own DeepGEMM warmup list, attention-side kernels capped at a CP rank's rows",
        requires=tuple(f"deepgemm_compat.warmup:{name}" for name in _WARMUP_NEEDS),
    ),
    HookSpec(
        name="ragged-offsets",
        target="sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend"
        ".init_forward_metadata",
        kind="around",
        params=("self", "forward_batch"),
        hook=init_forward_metadata_with_chunk_offsets,
        why="interleave CP + RAGGED top-k without prefix: offsets into the whole gathered chunk",
    ),
)
