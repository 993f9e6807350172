"""Which rows each GLM-5.1 GEMM runs on under DSA prefill CP, and with which (N, K), held equal to
sglang 0.5.23; deepgemm_compat's row sources and the warmup hook's identification follow it.

The reference is the installed sglang 0.5.23, called on a CPU under the runtime context of
resolved server arguments (``--tp 8 --enable-prefill-cp --attn-cp-size 8 --cp-strategy
interleave`` on an emulated SM90, plus the FFN placements SGLang offers):

* the layer-boundary stage plan, ``layer_boundary/factories.py`` ``_resolve_stage`` (attention)
  and ``_resolve_ffn`` (dense MLP, MoE with its shared expert) for the ``CONTEXT_PARALLEL`` batch
  variant: whether a stage's input rows are sharded over ``TokenAxis.ATTN_CP``;
* ``layer_boundary/boundary.py`` ``_cp_moves``: under DSA CP the gather into an FFN is
  ``prepare.py`` ``_then_attn_cp_gather``, i.e. ``cp/interleave.py`` ``attn_cp_interleave_gather``,
  which returns ``cp x shard`` rows;
* the modules ``DeepseekV2AttentionMLA``, ``DeepseekV2MLP`` (with the decoder layer's own choice
  of parallel group, ``is_dense_ffn_fully_dp``) and ``DeepseekV2MoE`` built with block-FP8
  weights: a weight's shape is the ``(N, K)`` DeepGEMM compiles for
  (``deep_gemm_wrapper/entrypoint.py`` ``gemm_nt_f8f8bf16``: ``n, k = rhs.shape``).

Replaced here, because they cannot exist on a CPU:

* ranks and the TP and attention-CP process groups: SGLang's own ``get_parallel().override``
  with rank 0 and stand-in group objects carrying ``rank_in_group = 0`` and ``world_size``;
* ``vllm._custom_ops``: the CPU path of SGLang's ``RotaryEmbedding`` imports its rotary kernel
  from there at construction (it is never called here); an empty module stands in;
* the NCCL all-gather inside ``attn_cp_interleave_gather`` (``attn_cp_all_gather_into_tensor``):
  a stand-in that tiles the shard.

Not drivable here: a DeepEP MoE (its dispatcher needs CUDA and DeepGEMM). Its shared expert is
replicated (``models/deepseek_v2.py`` ``_shared_expert_use_tp1``, about line 871) and its stage
reads the rank's rows (checked below through ``_resolve_ffn``).
"""

from __future__ import annotations

import sys
import types

import _sglang_env as env
import pytest
from deepgemm_compat.warmup import Rows, glm51_shapes, rank_rows, sglang_m_max

pytestmark = [
    *env.SGLANG_IMPORT_WARNINGS,
    # why: models/deepseek_v2.py imports the DSA indexer K pool, which subclasses sglang's
    # deprecated MultiPlatformOp at import time
    pytest.mark.filterwarnings("ignore:MultiPlatformOp is deprecated:DeprecationWarning"),
    pytest.mark.slow,
]

CP8 = ("--chunked-prefill-size", "65536", "--enable-prefill-cp", "--attn-cp-size", "8",
       "--cp-strategy", "interleave")  # fmt: skip
DEPLOYMENTS = {  # extra argv -> (dense MLP on CP rows, MoE + shared expert on CP rows)
    "default": ((), (False, False)),
    "deepep": (("--moe-a2a-backend", "deepep"), (False, True)),
    "dense_tp1": (("--moe-dense-tp-size", "1"), (True, False)),
}
RANKS = ("tp_rank", "attn_tp_rank", "attn_cp_rank", "moe_ep_rank", "moe_tp_rank", "moe_dp_rank")
#: SGLang's module names -> ours
NAMES = {
    "fused_qkv_a_proj_with_mqa": "attn.fused_qkv_a_proj",
    "q_b_proj": "attn.q_b_proj",
    "kv_b_proj": "attn.kv_b_proj",
    "o_proj": "attn.o_proj",
    "indexer.wq_b": "indexer.wq_b",
    "indexer.wk": "indexer.wk",
    "gate_up_proj": "mlp.gate_up_proj",
    "down_proj": "mlp.down_proj",
    "shared_experts.gate_up_proj": "shared_expert.gate_up_proj",
    "shared_experts.down_proj": "shared_expert.down_proj",
}


@pytest.fixture(scope="module")
def deployment(plugin):
    """``get(name)``: (server args, hf config) for a deployment, resolved once."""
    from sglang.srt.arg_groups.overrides import model_config_of

    cache: dict[str, tuple] = {}

    def get(name: str):
        if name not in cache:
            sa = env.resolve(env.glm51_argv(*CP8, *DEPLOYMENTS[name][0]), env.SM90)
            cache[name] = (sa, model_config_of(sa).hf_config)
        return cache[name]

    return get


@pytest.fixture
def scheduler(monkeypatch):
    """``enter(server_args)``: SGLang's runtime context of a scheduler process on TP rank 0."""
    from contextlib import ExitStack

    from sglang.srt.layers.moe.utils import initialize_moe_config
    from sglang.srt.runtime_context import create_context, get_parallel, use_context

    rotary = types.ModuleType("vllm._custom_ops")
    rotary.rotary_embedding = None
    monkeypatch.setitem(sys.modules, "vllm", types.ModuleType("vllm"))
    monkeypatch.setitem(sys.modules, "vllm._custom_ops", rotary)
    stack = ExitStack()

    def enter(server_args):
        stack.enter_context(use_context(create_context(server_args, role="scheduler")))
        initialize_moe_config()
        parallel = get_parallel()
        tp = types.SimpleNamespace(rank_in_group=0, world_size=parallel.tp_size)
        cp = types.SimpleNamespace(rank_in_group=0, world_size=parallel.attn_cp_size)
        ranks = dict.fromkeys(RANKS, 0)
        stack.enter_context(parallel.override(**ranks, tp_group=tp, attn_cp_group=cp))
        return parallel

    with stack:
        yield enter


def _cp_sharded(contract) -> bool:
    from sglang.srt.layers.layer_boundary.layout import TokenAxis

    return TokenAxis.ATTN_CP in contract.input.layout.sharded


def stage_rows(variant_name: str = "CONTEXT_PARALLEL") -> dict[str, bool]:
    """SGLang's stage plan: whether attention, dense FFN and MoE read CP-sharded rows."""
    from sglang.srt.layers.layer_boundary import factories
    from sglang.srt.layers.layer_boundary.contracts import BatchVariant

    v = BatchVariant[variant_name]
    attn = factories._resolve_stage(factories.declare_attn(), v, factories._stack_arrival(v))
    return {
        "attention": _cp_sharded(attn.contract),
        "dense": _cp_sharded(factories._resolve_ffn(v, sparse=False)[0]),
        "moe": _cp_sharded(factories._resolve_ffn(v, sparse=True)[0]),
    }


@pytest.mark.parametrize("name", list(DEPLOYMENTS))
def test_stage_rows_under_cp(deployment, scheduler, name):
    """Attention always reads the rank's CP shard; the FFN reads the gathered rows unless it is
    replicated (dense MLP) or behind an all-to-all backend (MoE)."""
    sa, _ = deployment(name)
    scheduler(sa)
    dense_local, moe_local = DEPLOYMENTS[name][1]
    assert stage_rows() == {"attention": True, "dense": dense_local, "moe": moe_local}
    assert not any(stage_rows("ORDINARY").values())  # decode, verify, short extends: no CP


def test_only_cp_local_shapes_are_attention_side(deployment, scheduler):
    """Our row sources never call a stage cp_local that SGLang runs on gathered rows."""
    sa, _ = deployment("default")
    scheduler(sa)
    rows = stage_rows()
    for s in glm51_shapes(dense_tp=8, shared_tp=8):
        if s.rows is Rows.CP_LOCAL:
            assert rows["attention"] and s.name.split(".")[0] in ("attn", "indexer"), s.name
        elif s.name.startswith(("mlp.", "shared_expert.")):
            assert not rows["dense" if s.name.startswith("mlp.") else "moe"], s.name


def test_ffn_gather_is_cp_times_the_padded_shard(deployment, scheduler, monkeypatch):
    import torch
    from sglang.srt.layers.cp import interleave
    from sglang.srt.layers.layer_boundary import boundary, prepare

    sa, _ = deployment("default")
    scheduler(sa)
    assert boundary._cp_moves().gather is prepare._then_attn_cp_gather

    def all_gather(out, shard):  # stand-in for the NCCL all-gather over attention CP
        out.copy_(shard.repeat(out.shape[0] // shard.shape[0], 1))

    monkeypatch.setattr(interleave, "attn_cp_all_gather_into_tensor", all_gather)
    for tokens in (131072, 65536, 20000, 9):
        shard = rank_rows([tokens], 8, "interleave")  # held equal to SGLang's padding elsewhere
        gathered = interleave.attn_cp_interleave_gather(torch.zeros(shard, 4))
        assert gathered.shape[0] == 8 * shard
    # chunked 10000: forwards up to 20000 tokens, SGLang warms Ms up to 20000 for every kernel,
    # but the gathered FFN rows of a 20000-token CP forward are 8 * 2504 = 20032
    assert 8 * rank_rows([20000], 8, "interleave") == 20032 > sglang_m_max(10000) == 20000


def _fp8_weights(module) -> dict[str, tuple[int, int]]:
    import torch

    return {
        name: tuple(mod.weight.shape)
        for name, mod in module.named_modules()
        if getattr(mod, "weight", None) is not None and mod.weight.dtype == torch.float8_e4m3fn
    }


def sglang_gemms(hf) -> dict[str, tuple[int, int]]:
    """(N, K) of every block-FP8 GEMM of a dense layer, an MoE layer's shared expert and the
    attention, as SGLang's modules build them on this rank."""
    from sglang.srt.layers.layer_boundary.layout import is_dense_ffn_fully_dp
    from sglang.srt.layers.quantization.fp8 import Fp8Config
    from sglang.srt.models.deepseek_v2 import DeepseekV2AttentionMLA, DeepseekV2MLP, DeepseekV2MoE

    q = Fp8Config(is_checkpoint_fp8_serialized=True, weight_block_size=[128, 128])
    attn = DeepseekV2AttentionMLA(
        config=hf, hidden_size=hf.hidden_size, num_heads=hf.num_attention_heads,
        qk_nope_head_dim=hf.qk_nope_head_dim, qk_rope_head_dim=hf.qk_rope_head_dim,
        v_head_dim=hf.v_head_dim, q_lora_rank=hf.q_lora_rank, kv_lora_rank=hf.kv_lora_rank,
        rope_theta=hf.rope_parameters["rope_theta"], rope_scaling=None,
        max_position_embeddings=hf.max_position_embeddings, quant_config=q, layer_id=0,
        reduce_results=False, prefix="model.layers.0.self_attn",
    )  # fmt: skip
    group = "replicated" if is_dense_ffn_fully_dp() else "tp"  # the decoder layer's rule
    mlp = DeepseekV2MLP(
        hf.hidden_size, hf.intermediate_size, hf.hidden_act, quant_config=q,
        reduce_results=False, parallel_group=group,
    )  # fmt: skip
    moe = DeepseekV2MoE(config=hf, layer_id=3, quant_config=q, reduce_results=False)
    shapes = {**_fp8_weights(attn), **_fp8_weights(mlp), **_fp8_weights(moe)}
    return {NAMES[name]: nk for name, nk in shapes.items()}


@pytest.mark.parametrize(("name", "dense_tp"), [("default", 8), ("dense_tp1", 1)])
def test_weight_shapes_equal_sglangs_modules(deployment, scheduler, name, dense_tp):
    from sglang_cpkv.plugin.hooks._warmup_shapes import model_shapes

    sa, hf = deployment(name)
    parallel = scheduler(sa)
    attn_tp, tp = parallel.attn_tp_size, parallel.tp_size
    assert (attn_tp, tp) == (1, 8)
    theirs = sglang_gemms(hf)
    ours = glm51_shapes(attn_tp=attn_tp, dense_tp=dense_tp, shared_tp=tp)
    assert {s.name: (s.n, s.k) for s in ours if not s.kernel.grouped} == theirs
    # the hook caps exactly the attention-side GEMMs SGLang runs on CP-sharded rows
    known = model_shapes(hf, attn_tp=attn_tp, tp=tp)
    capped = {n for n, (nn, kk) in theirs.items() if known.identify("GEMM_NT_F8F8BF16", nn, kk)[0]}
    local = {s.name for s in ours if s.rows is Rows.CP_LOCAL}
    assert capped == local == {
        "attn.fused_qkv_a_proj", "attn.q_b_proj", "attn.o_proj", "indexer.wq_b", "indexer.wk",
    }  # fmt: skip
    assert stage_rows()["attention"]
