"""Against the real reference: transformers' GlmMoeDsa, which implements shared-indexer layers.

A tiny ``GlmMoeDsaForCausalLM`` (8 layers, random seeded weights, no download) runs a forward with
hooks; our schedule must equal its ``indexer_types`` and its layer structure, and our reference
indexer threaded through our carry must reproduce, layer by layer, the top-k its attention used.
"""

from __future__ import annotations

import pytest
import torch

transformers = pytest.importorskip("transformers")
from _indexcache_helpers import (  # noqa: E402
    EXAMPLES,
    build_tiny,
    project_indexer_inputs,
    run_tiny,
    tiny_config,
    transformers_version,
)
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from indexcache import (  # noqa: E402
    CarryError,
    IndexerSchedule,
    ScheduleError,
    TopkCarry,
    lightning_indexer,
    schedule_from_config,
)

pytestmark = pytest.mark.skipif(
    transformers_version() < (5, 11),
    reason="transformers < 5.11 derives indexer_types without index_skip_topk_offset (glm-config "
    "repairs that); the shared-indexer reference is 5.11+",
)

SCHEDULES = {
    "freq4_offset2": {"index_topk_freq": 4, "index_skip_topk_offset": 2},
    "freq4_offset3": {"index_topk_freq": 4, "index_skip_topk_offset": 3},
    "freq3_offset1": {"index_topk_freq": 3, "index_skip_topk_offset": 1},
    "pattern": {"index_topk_pattern": "FSFFSSSF"},
    "freq1": {"index_topk_freq": 1},
}


# Schedule ----------------------------------------------------------------------------------------
@given(layers=st.integers(1, 100), freq=st.integers(1, 8), offset=st.integers(1, 8))
@settings(max_examples=EXAMPLES, deadline=None)
def test_schedule_equals_transformers_indexer_types(layers, freq, offset):
    cfg = transformers.GlmMoeDsaConfig(
        num_hidden_layers=layers, index_topk_freq=freq, index_skip_topk_offset=offset
    )
    ours = IndexerSchedule.from_freq(layers, freq, offset)
    assert list(ours.indexer_types) == cfg.indexer_types
    assert schedule_from_config(cfg, strict=True) == IndexerSchedule.from_indexer_types(
        cfg.indexer_types
    )


@given(tail=st.text(alphabet="FS", max_size=40))
@settings(max_examples=EXAMPLES, deadline=None)
def test_pattern_equals_transformers(tail):
    pattern = "F" + tail
    cfg = transformers.GlmMoeDsaConfig(num_hidden_layers=len(pattern), index_topk_pattern=pattern)
    assert list(IndexerSchedule.from_pattern(pattern).indexer_types) == cfg.indexer_types


def test_glm5_facts_in_transformers():
    c2 = transformers.GlmMoeDsaConfig(index_topk_freq=4, index_skip_topk_offset=2)
    c3 = transformers.GlmMoeDsaConfig(index_topk_freq=4, index_skip_topk_offset=3)
    assert [i for i, t in enumerate(c2.indexer_types) if t == "full"][:4] == [0, 1, 5, 9]
    assert c2.indexer_types.count("full") == 21 and c2.num_hidden_layers == 78
    assert [i for i, t in enumerate(c3.indexer_types) if t == "full"][:5] == [0, 1, 2, 6, 10]


# Malformed patterns: transformers accepts some, fails on others; we refuse all and say why ------
MALFORMED = {  # name: (num_hidden_layers, pattern)
    "lowercase": (4, "FFss"),
    "lowercase_first": (4, "fFSS"),
    "mixed_case_and_junk": (5, "FSsxF"),
    "starts_with_s": (4, "SFSF"),
    "short": (6, "FFS"),
    "long": (3, "FFSSS"),
    "empty": (3, ""),
}


def _transformers_types(layers, pattern):
    """transformers' indexer_types for the pattern, or the KeyError it raises."""
    try:
        cfg = transformers.GlmMoeDsaConfig(num_hidden_layers=layers, index_topk_pattern=pattern)
    except KeyError as exc:
        return exc
    return cfg.indexer_types


def _assert_refusal_matches_transformers(layers, pattern):
    theirs = _transformers_types(layers, pattern)
    with pytest.raises(ScheduleError) as info:
        schedule_from_config({"num_hidden_layers": layers, "index_topk_pattern": pattern})
    message = str(info.value)
    assert "SGLang 0.5.23 would accept it and run it as " in message
    if isinstance(theirs, KeyError):
        # the letter transformers fails on is the one our message names
        assert f"GlmMoeDsaConfig raises KeyError {theirs.args[0]!r}" in message
    else:
        assert "KeyError" not in message
        assert theirs == [{"F": "full", "S": "shared"}[c] for c in pattern]


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_pattern_refused_where_transformers_differs(case):
    _assert_refusal_matches_transformers(*MALFORMED[case])


@given(layers=st.integers(1, 12), pattern=st.text(alphabet="FSfsx", max_size=14))
@settings(max_examples=EXAMPLES, deadline=None)
def test_any_pattern_agrees_with_transformers_or_is_refused(layers, pattern):
    theirs = _transformers_types(layers, pattern)
    well_formed = not isinstance(theirs, KeyError) and len(theirs) == layers and theirs[0] == "full"
    if well_formed:
        ours = schedule_from_config({"num_hidden_layers": layers, "index_topk_pattern": pattern})
        assert list(ours.indexer_types) == theirs
    else:
        _assert_refusal_matches_transformers(layers, pattern)


def test_cli_factor_transformers_leaves_it_out_of_indexer_types():
    """transformers 5.19 keeps cli_factor as a bare attribute and derives indexer_types without
    it (the message of our refusal says so)."""
    cfg = transformers.GlmMoeDsaConfig(num_hidden_layers=8, cli_factor=3)
    assert cfg.cli_factor == 3 and cfg.indexer_types == ["full"] * 8
    with pytest.raises(ScheduleError, match=r"transformers 5\.19 leaves it out of indexer_types"):
        schedule_from_config(cfg)


def test_offset_zero_transformers_accepts_we_reject():
    """transformers builds layer 0 as shared (its forward then fails); we refuse up front."""
    cfg = transformers.GlmMoeDsaConfig(
        num_hidden_layers=4, index_topk_freq=2, index_skip_topk_offset=0
    )
    assert cfg.indexer_types[0] == "shared"
    with pytest.raises(ScheduleError, match="offset <= 0"):
        schedule_from_config(
            {"num_hidden_layers": 4, "index_topk_freq": 2, "index_skip_topk_offset": 0}
        )


@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_indexer_modules_exist_exactly_on_full_layers(name):
    model = build_tiny(**SCHEDULES[name])
    ours = schedule_from_config(model.config)
    has_indexer = tuple(
        i for i, layer in enumerate(model.model.layers) if layer.self_attn.indexer is not None
    )
    assert has_indexer == ours.full_layers


# Top-k, layer by layer -------------------------------------------------------------------------
def _replay(model, run, schedule):
    """Thread our reference indexer through our carry over the layers the model ran."""
    carry, ours, computed = TopkCarry(schedule), {}, []
    for layer in range(schedule.num_layers):

        def compute(layer=layer):
            if layer not in run.indexer_inputs:
                raise AssertionError(f"we computed layer {layer}; transformers did not")
            computed.append(layer)
            q, k, w, scale = project_indexer_inputs(run.indexer_inputs[layer])
            topk = model.config.index_topk
            return torch.stack(
                [
                    lightning_indexer(q[b], k[b], w[b], topk, softmax_scale=scale)
                    for b in range(q.shape[0])
                ]
            )

        ours[layer] = carry.step(layer, compute, num_rows=run.topk[layer].shape[0])
    return ours, computed


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("name", sorted(SCHEDULES))
def test_reference_and_carry_reproduce_transformers_topk(name, attn):
    model = build_tiny(attn=attn, **SCHEDULES[name])
    run = run_tiny(model, torch.randint(0, 128, (2, 24)))
    schedule = schedule_from_config(model.config)
    ours, computed = _replay(model, run, schedule)
    assert computed == sorted(run.indexer_inputs) == list(schedule.full_layers)
    for layer in range(schedule.num_layers):
        theirs = run.topk[layer]
        assert theirs.shape == (2, 24, 8) and theirs.dtype == torch.int32
        diff = (ours[layer] != theirs).nonzero()
        assert diff.numel() == 0, (
            f"layer {layer}: first mismatch at (b, row, slot) {diff[0].tolist()}"
        )
        # a shared layer attends with exactly its source layer's tensor
        assert torch.equal(theirs, run.topk[schedule.source_layer(layer)])


def test_freq1_equals_the_unshared_run():
    """freq 1 (explicit) = no IndexCache fields at all = our reference at every layer, no carry."""
    explicit, default = build_tiny(index_topk_freq=1), build_tiny()
    ids = torch.randint(0, 128, (2, 24))
    a, b = run_tiny(explicit, ids), run_tiny(default, ids)
    assert torch.equal(a.logits, b.logits)
    schedule = schedule_from_config(explicit.config)
    assert schedule.num_full == 8
    ours, computed = _replay(explicit, a, schedule)
    assert computed == list(range(8))
    for layer in range(8):
        assert torch.equal(a.topk[layer], b.topk[layer])
        q, k, w, scale = project_indexer_inputs(a.indexer_inputs[layer])
        plain = torch.stack(
            [lightning_indexer(q[i], k[i], w[i], 8, softmax_scale=scale) for i in range(2)]
        )
        assert torch.equal(plain, a.topk[layer]) and torch.equal(ours[layer], plain)


def test_sharing_changes_what_shared_layers_attend_to():
    """Sanity: the shared run really differs from the unshared one from the first shared layer."""
    ids = torch.randint(0, 128, (1, 24))
    shared = run_tiny(build_tiny(index_topk_freq=4, index_skip_topk_offset=2), ids)
    assert not torch.equal(shared.topk[2], shared.topk[5])
    assert torch.equal(shared.topk[2], shared.topk[1])


def test_our_gate_refuses_what_transformers_refuses():
    """A shared layer with nothing carried: transformers raises in forward, we raise in the gate."""
    model = build_tiny(num_layers=4, index_topk_freq=2, index_skip_topk_offset=2)
    with pytest.raises(ValueError, match="Shared DSA layers require top-k indices"):
        model.model.layers[2](
            torch.zeros(1, 3, 64),
            attention_mask=torch.zeros(1, 1, 3, 3),
            position_embeddings=model.model.rotary_emb(
                torch.zeros(1, 3, 64), torch.arange(3)[None]
            ),
            prev_topk_indices=None,
        )
    with pytest.raises(CarryError, match="layer 2 is shared"):
        TopkCarry(schedule_from_config(model.config)).step(2, lambda: pytest.fail("computed"))


def test_tiny_config_is_small():
    cfg = tiny_config()
    assert cfg.num_hidden_layers == 8 and cfg.index_topk == 8 and cfg.hidden_size == 64
