"""The hook table: each hook with its target, the signature it wraps, its needs and its way out.

``SPECS`` are always registered; ``SHARED_KV_SPECS`` only under ``CPKV_SHARED_KV=1`` (what
``cpkv-serve --cpkv-shared-kv`` sets), so a plain ``sglang serve`` keeps SGLang's own sharding.
``FAULT_SPECS`` are debug faults, not fixes: registered only when ``CPKV_DEBUG_FAULT`` names one
with its acknowledgement (``plugin._debug``), and in neither the README's table nor the dry run's.

This module composes the table and imports each hook; no hook imports it. Beside ``why``, each
entry says which process runs it, the SGLang releases its signature is checked against
(``since`` onwards in ``_releases.TESTED``), the upstream behaviour it corrects (SGLang file and
function) and the upstream change that would delete it: ``cpkv-serve --dry-run`` prints these, and
the package README's table is generated from them (``tests/test_hook_table.py`` holds it equal).
"""

from __future__ import annotations

from sglang_cpkv.plugin._framework import HookSpec
from sglang_cpkv.plugin._releases import SHARED_KV_FIRST
from sglang_cpkv.plugin.hooks.config_repair import parse_with_repair
from sglang_cpkv.plugin.hooks.deepgemm_warmup import compile_with_cp_plan
from sglang_cpkv.plugin.hooks.dsa_backends import dsa_backend_resolution
from sglang_cpkv.plugin.hooks.indexcache_overrides import (
    get_config_with_indexcache,
    validate_tbo_index_sharing,
)
from sglang_cpkv.plugin.hooks.ragged_offsets import init_forward_metadata_with_chunk_offsets
from sglang_cpkv.plugin.hooks.swap_kv_pages import (
    init_forward_metadata_swapped,
    out_graph_metadata_swapped,
)
from sglang_cpkv.plugin.shared_kv._hooks import (
    check_built_pool,
    pool_class,
    prepare_with_request_plan,
    validate_with_cpkv_gate,
)

_HF = "sglang.srt.utils.hf_transformers.config"
#: where each target runs: argument resolution runs in the launcher (and in ``cpkv-serve
#: --dry-run``); the model config is read there and again by each scheduler
RESOLUTION = "launcher (argument resolution)"
CONFIG = "launcher and each scheduler (model config)"
SCHEDULER = "each scheduler (TP/CP worker)"
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
        runs_in=CONFIG,
        corrects=(
            "sglang/srt/utils/hf_transformers/config.py HfModelConfigParser.parse: keeps the "
            "GlmMoeDsaConfig transformers 5.6-5.10 build without index_topk_freq/pattern, with "
            "qk_rope_head_dim clobbered and indexer_types without the offset"
        ),
        delete_when=(
            "every supported SGLang requires a transformers that builds GlmMoeDsaConfig whole (5.19"
            " does), or parse reads those fields from config.json"
        ),
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
        runs_in=CONFIG,
        corrects=(
            "sglang/srt/utils/hf_transformers/config.py get_config: applies "
            "--json-model-override-args after indexer_types was derived, so an "
            "index_topk_freq/offset/pattern override changes no layer"
        ),
        delete_when=(
            "get_config re-derives indexer_types after the model overrides (or dsa_layer_skips_topk"
            " reads the overridden fields)"
        ),
    ),
    HookSpec(
        name="tbo-index-sharing",
        target="sglang.srt.arg_groups.model_hook._validate_dsa_tbo_index_sharing",
        kind="replace",
        params=("server_args", "hf_config"),
        hook=validate_tbo_index_sharing,
        why="reject two-batch overlap only when some layer shares the indexer top-k",
        requires=("indexcache:check_two_batch_overlap", "indexcache:IndexerSchedule"),
        runs_in=RESOLUTION,
        corrects=(
            "sglang/srt/arg_groups/model_hook.py _validate_dsa_tbo_index_sharing: refuses two-batch"
            " overlap on index_topk_freq > 1 or a pattern, not on whether a layer of the schedule "
            "the model runs shares"
        ),
        delete_when=(
            "the check asks the per-layer schedule (dsa_layer_skips_topk) whether any layer shares"
        ),
    ),
    HookSpec(
        name="dsa-backends",
        target="sglang.srt.arg_groups.overrides._dsa_split_backend_resolution",
        kind="around",
        params=("view",),
        hook=dsa_backend_resolution,
        why="keep user-set DSA backends, one fp8 KV layout family, no trtllm below SM100",
        runs_in=RESOLUTION,
        corrects=(
            "sglang/srt/arg_groups/overrides.py _dsa_split_backend_resolution: fills one side with "
            "trtllm (raw fp8 rows) beside a FlashMLA side (packed rows) that then asserts on the "
            "pool; accepts trtllm below SM100"
        ),
        delete_when=(
            "the resolution keeps an fp8 KV pool's prefill and decode backends in one layout family"
            " and refuses trtllm below SM100"
        ),
    ),
    HookSpec(
        name="deepgemm-warmup",
        target="sglang.srt.layers.deep_gemm_wrapper.compile_utils._compile_deep_gemm_one_type_all",
        kind="around",
        params=("kernel_type", "n", "k", "num_groups", "m_list"),
        hook=compile_with_cp_plan,
        why="SGLang's own DeepGEMM warmup list, attention-side kernels capped at a CP rank's rows",
        requires=tuple(f"deepgemm_compat.warmup:{name}" for name in _WARMUP_NEEDS),
        runs_in=SCHEDULER,
        corrects=(
            "sglang/srt/layers/deep_gemm_wrapper/compile_utils.py _compile_deep_gemm_one_type_all: "
            "warms every kernel for one M list up to 2x the chunk, also attention-side GEMMs that "
            "run one CP rank's rows"
        ),
        delete_when=(
            "SGLang sizes each kernel's M list by the rows its layer runs under prefill CP"
        ),
    ),
    HookSpec(
        name="ragged-offsets",
        target="sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend"
        ".init_forward_metadata",
        kind="around",
        params=("self", "forward_batch"),
        hook=init_forward_metadata_with_chunk_offsets,
        why="interleave CP + RAGGED top-k without prefix: offsets into the whole gathered chunk",
        runs_in=SCHEDULER,
        corrects=(
            "sglang/srt/layers/attention/dsa_backend.py "
            "DeepseekSparseAttnBackend.init_forward_metadata: under interleave CP, RAGGED top-k and"
            " no prefix, bases offsets on this rank's requests while attention reads the whole "
            "gathered chunk"
        ),
        delete_when=(
            "upstream bases topk_indices_offset on each request's start in the gathered chunk "
            "(docs/upstream/ragged-topk-offsets-interleave-cp.md)"
        ),
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
        runs_in=SCHEDULER,
        since=SHARED_KV_FIRST,
        corrects=(
            "sglang/srt/mem_cache/page_interleave_pool.py PageInterleaveDSATokenToKVPool: the "
            "per-batch scratch map _page_pos has one slot per page value, so requests sharing a "
            "page in one batch share its slot"
        ),
        delete_when=(
            "SGLang keys the sharded pool's scratch by (request, page) and plans it from the "
            "forward batch"
        ),
    ),
    HookSpec(
        name="shared-kv-plan",
        target="sglang.srt.layers.attention.kv_shard_hooks.prepare_kv_shard_forward",
        kind="around",
        params=("pool", "req_to_token", "forward_batch"),
        hook=prepare_with_request_plan,
        why="plan the per-request scratch once per forward, from the whole batch",
        runs_in=SCHEDULER,
        since=SHARED_KV_FIRST,
        corrects=(
            "sglang/srt/layers/attention/kv_shard_hooks.py prepare_kv_shard_forward: calls "
            "begin_shard_extend with request indices and lengths only, not the ForwardBatch "
            "(out_cache_loc, CP split) a per-request plan needs"
        ),
        delete_when=("goes with shared-kv-pool: SGLang's pool plans per (request, page) itself"),
    ),
    HookSpec(
        name="shared-kv-pool-check",
        target="sglang.srt.mem_cache.kv_cache_configurator.KVCacheConfigurator"
        "._build_token_to_kv_pool",
        kind="after",
        params=("self", "*", "sizes", "is_dsa_model", "is_dsv4_model", "req_to_token_pool"),
        hook=check_built_pool,
        why="stop the scheduler if the sharded DSA pool SGLang built is not cpkv's",
        runs_in=SCHEDULER,
        since=SHARED_KV_FIRST,
        corrects=(
            "sglang/srt/mem_cache/kv_cache_configurator.py "
            "KVCacheConfigurator._build_token_to_kv_pool: builds SGLang's own pool when "
            "HookRegistry.apply_hooks logged and skipped the class replacement"
        ),
        delete_when=(
            "goes with shared-kv-pool (or HookRegistry.apply_hooks raises on a hook it cannot "
            "apply)"
        ),
    ),
    HookSpec(
        name="shared-kv-gate",
        target="sglang.srt.arg_groups.kv_shard_hook.validate_kv_shard_attention_backend",
        kind="around",
        params=("server_args", "cfg="),
        hook=validate_with_cpkv_gate,
        why="admit the FlashMLA and Triton DSA backends on SM90/SM100, refuse the rest by name",
        runs_in=RESOLUTION,
        since=SHARED_KV_FIRST,
        corrects=(
            "sglang/srt/arg_groups/kv_shard_hook.py validate_kv_shard_attention_backend: admits DSA"
            " KV sharding only with trtllm prefill and decode, fp8 KV and the mooncake transfer "
            "backend"
        ),
        delete_when=(
            "goes with shared-kv-pool: SGLang admits the FlashMLA and Triton DSA backends over a "
            "(request, page) scratch"
        ),
    ),
)

_DSA_BACKEND = "sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend"
_WRONG_ON_PURPOSE = "DEBUG FAULT, wrong answers on purpose: "

#: fault name (``CPKV_DEBUG_FAULT``) -> its hooks. Registered after ``SPECS``, so on
#: ``init_forward_metadata`` the fault wraps the ``ragged-offsets`` fix and both see the swap.
FAULT_SPECS: dict[str, tuple[HookSpec, ...]] = {
    "swap-kv-pages": (
        HookSpec(
            name="fault-swap-kv-pages",
            target=f"{_DSA_BACKEND}.init_forward_metadata",
            kind="around",
            params=("self", "forward_batch"),
            hook=init_forward_metadata_swapped,
            why=_WRONG_ON_PURPOSE + "eager DSA metadata built with requests 0 and 1 swapped",
            runs_in=SCHEDULER,
        ),
        HookSpec(
            name="fault-swap-kv-pages-graph",
            target=f"{_DSA_BACKEND}.init_forward_metadata_out_graph",
            kind="around",
            params=("self", "forward_batch", "in_capture="),
            hook=out_graph_metadata_swapped,
            why=_WRONG_ON_PURPOSE + "CUDA-graph replay metadata built with requests 0 and 1 "
            "swapped",
            runs_in=SCHEDULER,
        ),
    ),
}
