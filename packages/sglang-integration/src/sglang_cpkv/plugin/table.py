"""The hook table: each hook with the signature of its target in sglang 0.5.23.

``SPECS`` are always registered; ``SHARED_KV_SPECS`` only under ``CPKV_SHARED_KV=1`` (what
``cpkv-serve --cpkv-shared-kv`` sets), so a plain ``sglang serve`` keeps SGLang's own sharding.
"""

from __future__ import annotations

from sglang_cpkv.plugin._framework import HookSpec
from sglang_cpkv.plugin.hooks.config_repair import parse_with_repair
from sglang_cpkv.plugin.hooks.deepgemm_warmup import compile_with_cp_plan
from sglang_cpkv.plugin.hooks.dsa_backends import dsa_backend_resolution
from sglang_cpkv.plugin.hooks.indexcache_overrides import (
    get_config_with_indexcache,
    validate_tbo_index_sharing,
)
from sglang_cpkv.plugin.hooks.ragged_offsets import init_forward_metadata_with_chunk_offsets
from sglang_cpkv.plugin.shared_kv._hooks import (
    check_built_pool,
    pool_class,
    prepare_with_request_plan,
    validate_with_cpkv_gate,
)

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

SHARED_KV_SPECS: tuple[HookSpec, ...] = (
    HookSpec(
        name="shared-kv-pool",
        target="sglang.srt.mem_cache.page_interleave_pool.PageInterleaveDSATokenToKVPool",
        kind="replace",
        params=("*args", "shard_spec", "shard_group", "**kwargs"),
        hook=pool_class,
        lazy=True,
        why="the sharded DSA pool's scratch keyed by (request, page): cpkv_runtime layout",
        requires=("cpkv_runtime:plan_layout", "cpkv_runtime:resolve_backend"),
    ),
    HookSpec(
        name="shared-kv-plan",
        target="sglang.srt.layers.attention.kv_shard_hooks.prepare_kv_shard_forward",
        kind="around",
        params=("pool", "req_to_token", "forward_batch"),
        hook=prepare_with_request_plan,
        why="plan the per-request scratch once per forward, from the whole batch",
    ),
    HookSpec(
        name="shared-kv-pool-check",
        target="sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator"
        "._build_token_to_kv_pool",
        kind="after",
        params=("self", "*", "sizes", "is_dsa_model", "is_dsv4_model", "req_to_token_pool"),
        hook=check_built_pool,
        why="stop the scheduler if the sharded DSA pool SGLang built is not cpkv's",
    ),
    HookSpec(
        name="shared-kv-gate",
        target="sglang.srt.arg_groups.kv_shard_hook.validate_kv_shard_attention_backend",
        kind="around",
        params=("server_args", "cfg="),
        hook=validate_with_cpkv_gate,
        why="admit the FlashMLA and Triton DSA backends on SM90/SM100, refuse the rest by name",
    ),
)
