"""The dry run's "KV tokens per rank" against SGLang's own pool configurator.

``cpkv-serve --dry-run --cpkv-shared-kv`` restates SGLang 0.5.23's sizing
(``DefaultPoolConfigurator``, ``model_executor/pool_configurator.py``): per-token bytes over the
target's layers plus, under EAGLE, the draft's (GLM's NextN layer), the scratch charged once per
pool SGLang builds (``compute_page_shard_scratch_bytes(..., include_mtp=True)``), whole pages.
Here SGLang's configurator itself sizes the GLM-5.1 fixture from the same resolved arguments and
budget, with and without EAGLE; only what needs a launched server is stood in (the runtime
context's parallel, schedule, memory and spec bags, the KV-shard group, and the
``KVCacheConfigurator`` the model runner would build).
"""

from __future__ import annotations

from types import SimpleNamespace
from unittest import mock

import _sglang_env as env
import pytest
import torch

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]

PREFILL = [
    "--enable-prefill-cp", "--attn-cp-size", "8", "--cp-strategy", "interleave",
    "--disaggregation-mode", "prefill", "--disaggregation-transfer-backend", "mooncake",
    "--chunked-prefill-size", "65536", "--dsa-prefill-backend", "flashmla_kv",
    "--dsa-decode-backend", "flashmla_kv", "--kv-cache-dtype", "fp8_e4m3", "--page-size", "64",
]  # fmt: skip
EAGLE = [
    "--speculative-algorithm", "EAGLE", "--speculative-num-steps", "1",
    "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "2",
]  # fmt: skip
WEIGHTS = 700 * (1 << 30)  # bytes of the checkpoint (the fixture has no weights index)
GPU_GIB = 141.0


def _ours(server_args) -> dict:
    from sglang_cpkv.serve import _report_shared_kv as report

    args = SimpleNamespace(gpu_mem_gib=GPU_GIB, scratch_batch=(8, 65536, 2048))
    with mock.patch.object(report, "_weights_bytes", lambda _: WEIGHTS):
        return report.shared_kv_section(server_args, (9, 0), args)


def _sglang_tokens(server_args, available: int, *, sharded: bool) -> int:
    """``DefaultPoolConfigurator(kvc).calculate_pool_sizes(available, page)`` of SGLang."""
    import sglang.srt.layers.cp.utils as cp_utils
    import sglang.srt.mem_cache.kv_cache_configurator as kv_conf
    import sglang.srt.mem_cache.page_interleave as page_interleave
    import sglang.srt.model_executor.pool_configurator as pool_conf
    from sglang.srt.arg_groups.overrides import model_config_of, resolution_result
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    def get(name):
        return resolution_result(server_args, name)

    model_config = model_config_of(server_args)
    hf = model_config.hf_config
    layers = int(hf.num_hidden_layers)
    algorithm = SpeculativeAlgorithm.from_string(get("speculative_algorithm"))
    kvc = SimpleNamespace(
        kv_cache_dtype_str=str(get("kv_cache_dtype")),
        kv_cache_dtype=torch.float8_e4m3fn,
        model_config=model_config,
        layer_info=SimpleNamespace(num_effective_layers=layers, start_layer=0, end_layer=layers),
        is_draft_worker=False,
        spec_algorithm=algorithm,
        # model_runner_components/spec_aux_hidden_state.py: a path-less MTP draft
        spec_aux_config=SimpleNamespace(eagle_draft_num_layers=hf.num_nextn_predict_layers),
        fused_entry_bytes=lambda kind: None,
        use_mla_backend=True,
        server_args=SimpleNamespace(enable_hisparse=False),
        page_size=int(get("page_size")),
        pp_size=1,
        mambaish_config=None,
    )
    parallel = SimpleNamespace(attn_dcp_size=1, attn_tp_size=1, enable_kv_cache_sharding=sharded)
    memory = SimpleNamespace(
        enable_hisparse=False, enable_hierarchical_cache=False,
        enable_unified_cache_external_linker=False,
    )  # fmt: skip
    schedule = SimpleNamespace(
        max_total_tokens=None, chunked_prefill_size=int(get("chunked_prefill_size"))
    )
    shard = (0, int(get("attn_cp_size"))) if sharded else (None, 1)
    disagg = SimpleNamespace(disaggregation_mode=get("disaggregation_mode"))
    kernel = SimpleNamespace(
        dsa_prefill_backend=get("dsa_prefill_backend"),
        dsa_decode_backend=get("dsa_decode_backend"),
    )
    with (
        mock.patch.object(pool_conf, "get_parallel", lambda: parallel),
        mock.patch.object(pool_conf, "get_memory", lambda: memory),
        mock.patch.object(pool_conf, "get_schedule", lambda: schedule),
        mock.patch.object(kv_conf, "get_memory", lambda: memory),
        mock.patch.object(kv_conf, "get_disagg", lambda: disagg),
        mock.patch.object(kv_conf, "get_exec", lambda: SimpleNamespace(kernel=kernel)),
        mock.patch.object(page_interleave, "get_parallel", lambda: parallel),
        mock.patch.object(page_interleave, "get_schedule", lambda: schedule),
        mock.patch.object(
            page_interleave, "get_spec", lambda: SimpleNamespace(enable_multi_layer_eagle=False)
        ),  # fmt: skip
        mock.patch.object(page_interleave, "get_kv_shard_group_info", lambda _: shard),
        mock.patch.object(cp_utils, "is_glm_dsa_cache_layer_split_enabled", lambda _: False),
    ):
        configurator = pool_conf.DefaultPoolConfigurator(kvc)
        return configurator.calculate_pool_sizes(available, kvc.page_size).max_total_num_tokens


@pytest.mark.parametrize("eagle", [False, True], ids=["no-eagle", "eagle"])
def test_tokens_per_rank_equal_sglangs_configurator(eagle):
    server_args = env.resolve(env.glm51_argv(*PREFILL, *(EAGLE if eagle else ())), (9, 0))
    ours = _ours(server_args)
    assert ours["draft_layers"] == (1 if eagle else 0)
    budget = ours["kv_budget_bytes"]
    tokens = ours["tokens"]
    assert tokens["sharded_rows_per_rank"] == _sglang_tokens(server_args, budget, sharded=True)
    assert tokens["replicated_rows_per_rank"] == _sglang_tokens(server_args, budget, sharded=False)
