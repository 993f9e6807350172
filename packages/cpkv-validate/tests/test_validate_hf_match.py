"""The reference engine's batch-size-1, no-CP path against transformers' GlmMoeDsa (fp32).

Same weights (our state dict uses HF's parameter names), eager attention. Tolerance: atol 1e-5
in fp32 — the engine uses the absorbed MLA form (``W_UK`` folded into q), HF the expanded one, so
rows agree to rounding (~3e-6 observed), not bitwise. The top-k selections must agree exactly.
"""

from __future__ import annotations

import pytest
import torch
from cpkv_validate import Engine, ModelConfig, init_weights
from cpkv_validate import _model as m

hf = pytest.importorskip("transformers.models.glm_moe_dsa.modeling_glm_moe_dsa")
from transformers import GlmMoeDsaConfig  # noqa: E402

ATOL = 1e-5  # fp32, absorbed vs expanded MLA


def _hf_config(cfg: ModelConfig) -> GlmMoeDsaConfig:
    hc = GlmMoeDsaConfig(**cfg.hf_kwargs())
    hc._attn_implementation = "eager"
    return hc


@pytest.fixture(scope="module")
def setup():
    cfg = ModelConfig()
    w = init_weights(cfg, seed=3, dtype=torch.float32)
    model = hf.GlmMoeDsaModel(_hf_config(cfg)).eval()
    state = {k: v for k, v in w.items() if k != "lm_head.weight"}
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not missing and not unexpected, (missing, unexpected)
    tokens = torch.randint(0, 448, (80,), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = model(input_ids=tokens[None]).last_hidden_state[0]
    return cfg, w, model, tokens, ref


def test_indexcache_schedule_matches_transformers(setup):
    cfg = setup[0]
    assert (
        list(cfg.indexer_types)
        == _hf_config(cfg).indexer_types
        == [
            "full",
            "full",
            "shared",
            "full",
        ]
    )


@pytest.mark.parametrize("chunks", [[80], [37, 43], [16, 1, 2, 61]], ids=["one", "two", "ragged"])
def test_engine_batch1_no_cp_matches_glm_moe_dsa_model(setup, chunks):
    cfg, w, _, tokens, ref = setup
    eng = Engine(cfg, w, num_pages=16)
    eng.admit("r", tokens.tolist())
    got = torch.cat([eng.step([("r", c)]).hidden["r"] for c in chunks])
    torch.testing.assert_close(got, ref, atol=ATOL, rtol=0)


def test_attention_math_matches_glm_moe_dsa_attention(setup):
    """Layer 0 (a full indexer layer) on the same input: outputs and top-k sets agree."""
    cfg, w, model, _, _ = setup
    n = 50
    x = torch.randn(1, n, cfg.hidden_size, generator=torch.Generator().manual_seed(1))
    attn = model.layers[0].self_attn
    pos = torch.arange(n)
    cos_sin = model.rotary_emb(x, pos[None])
    mask = torch.full((n, n), torch.finfo(torch.float32).min).triu(1)[None, None]
    with torch.no_grad():
        want, _, hf_topk = attn(x, cos_sin, mask)

    ai = m.attention_inputs(w, cfg, 0, x[0], pos)
    scores = m.index_scores(ai.idx_q, ai.idx_w, ai.idx_k, cfg)
    causal = pos[None, :] <= pos[:, None]
    sel = m.select_topk(scores, causal, cfg.index_topk)
    rows = ai.latent[sel.clamp_min(0)]
    o = m.absorbed_attention(ai.q_abs, ai.q_rot, rows, sel >= 0, cfg)
    got = m.attention_output(w, cfg, 0, o)
    torch.testing.assert_close(got, want[0], atol=ATOL, rtol=0)
    for i in range(n):
        theirs = {int(j) for j in hf_topk[0, i] if j <= i}
        ours = {int(j) for j in sel[i] if j >= 0}
        assert ours == theirs, f"query {i}: top-k differs ({sorted(ours ^ theirs)})"


def test_indexer_scores_match_indexcache_reference(setup):
    """Our fp32 index scores equal ``indexcache.indexer_logits`` (transformers' arithmetic)."""
    from indexcache import indexer_logits

    cfg, w, _, _, _ = setup
    n = 40
    x = torch.randn(n, cfg.hidden_size, generator=torch.Generator().manual_seed(2))
    ai = m.attention_inputs(w, cfg, 1, x, torch.arange(n))
    want = indexer_logits(ai.idx_q, ai.idx_k, ai.idx_w)
    got = m.index_scores(ai.idx_q, ai.idx_w, ai.idx_k, cfg)
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    torch.testing.assert_close(got[causal], want[causal], atol=1e-6, rtol=1e-6)
    assert torch.isinf(want[~causal]).all()
