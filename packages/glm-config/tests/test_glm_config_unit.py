"""normalize/expected_settings/releases on plain attribute objects (no transformers needed)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from _glmcfg_fixtures import raw
from glm_config import (
    TRANSFORMERS_DEFECTS,
    ConfigFileError,
    NotDsaError,
    defects_for,
    expected_settings,
    is_dsa,
    normalize,
)
from glm_config._releases import parse_version


def _as_loaded_by_5_8(truth):
    """The attributes transformers 5.6-5.9 leave for a GLM config.json (see _releases)."""
    cfg = SimpleNamespace(
        **{k: v for k, v in truth.items() if k not in ("index_topk_freq", "index_topk_pattern")}
    )
    cfg.qk_rope_head_dim = truth.get("head_dim", truth["qk_rope_head_dim"])
    cfg.indexer_types = [
        "full" if max(i - 1, 0) % truth.get("index_topk_freq", 1) == 0 else "shared"
        for i in range(truth["num_hidden_layers"])
    ]
    return cfg


def test_repairs_a_simulated_broken_load():
    truth = raw("glm52_freq4_offset3")
    cfg = _as_loaded_by_5_8(truth)
    report = normalize(cfg, truth)
    assert [c.field for c in report.changes] == [
        "index_topk_freq",
        "qk_rope_head_dim",
        "indexer_types",
    ]
    assert cfg.index_topk_freq == 4 and cfg.qk_rope_head_dim == 64
    assert cfg.indexer_types[:7] == ["full", "full", "full", "shared", "shared", "shared", "full"]
    assert not normalize(cfg, truth).changed


def test_non_dsa_is_left_alone():
    cfg = SimpleNamespace(model_type="llama", num_hidden_layers=4)
    report = normalize(cfg, {"model_type": "llama", "num_hidden_layers": 4})
    assert not report.applicable and not report.changed
    assert "not a DSA model" in str(report)
    with pytest.raises(NotDsaError, match="has no DSA indexer"):
        expected_settings({"model_type": "llama", "num_hidden_layers": 4})


def test_null_pattern_in_config_json_is_unset():
    truth = raw("glm52_shipped")
    cfg = SimpleNamespace(**{k: v for k, v in truth.items() if k != "index_topk_pattern"})
    assert not normalize(cfg, truth).changed


def test_conflicting_config_json_is_reported_and_priority_wins():
    truth = raw("glm52_shipped")
    truth["index_skip_topk_offset"] = 2  # stale next to the shipped indexer_types (offset 3)
    cfg = SimpleNamespace(**truth)
    report = normalize(cfg, truth)
    assert not report.changed and report.conflict and "takes priority" in report.conflict
    assert "warning:" in str(report)


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("index_topk_freq", 0, "index_topk_freq must be an integer >= 1"),
        ("index_skip_topk_offset", 0, "offset <= 0"),
        ("index_topk_pattern", "SFF", "layer 0 must be 'full'"),
        ("index_topk_pattern", "FF", "has 2 entries but num_hidden_layers is 78"),
        ("qk_rope_head_dim", "64", "qk_rope_head_dim must be an integer >= 1"),
    ],
)
def test_invalid_config_json_raises(field, value, message):
    truth = raw("glm5_plain")
    truth[field] = value
    with pytest.raises(ConfigFileError, match=message):
        normalize(SimpleNamespace(**raw("glm5_plain")), truth)


def test_is_dsa():
    assert is_dsa({"model_type": "deepseek_v32"}) and is_dsa({"index_topk": 2048})
    assert not is_dsa({"model_type": "qwen3"})


def test_release_table():
    names = lambda v: {d.name for d in defects_for(v)}  # noqa: E731
    assert names("5.5.4") == {"no-indexer-types", "head-dim-alias"}
    assert names("5.8.1") == {"head-dim-alias", "drops-fields", "ignores-offset"}
    assert names("5.10.4") == {"drops-fields", "ignores-offset"}
    assert names("5.11.0") == names("5.19.0") == names("6.0.0") == set()
    assert defects_for("5.8.1", "deepseek_v32") == () and defects_for(None) == ()
    assert parse_version("5.11.0.dev0") == (5, 11)
    assert {d.releases for d in TRANSFORMERS_DEFECTS} == {"5.2-5.5", "5.4-5.9", "5.6-5.10"}
    with pytest.raises(ValueError, match="cannot parse"):
        parse_version("five")


# config_errors: one problem, one message -------------------------------------------------------
ERRORS = {
    "valid": ({}, []),
    "freq_zero": ({"index_topk_freq": 0}, ["index_topk_freq must be an integer >= 1"]),
    "freq_huge": ({"index_topk_freq": 10**23}, ["index_topk_freq must be <= 4096"]),
    "freq_huge_under_a_pattern": (  # the schedule ignores it; the file still carries it
        {"index_topk_freq": 10**23, "index_topk_pattern": "F" * 78},
        ["index_topk_freq must be <= 4096"],
    ),
    "offset_zero": ({"index_skip_topk_offset": 0}, ["index_skip_topk_offset must be an integer"]),
    "layers_huge": ({"num_hidden_layers": 10**8}, ["num_hidden_layers must be <= 4096"]),
    "topk_past_positions": (
        {"index_topk": 202753},
        ["index_topk must be <= 202752 (max_position_embeddings is 202752"],
    ),
    "topk_without_positions": (
        {"index_topk": 2**31, "max_position_embeddings": None},
        ["index_topk must be <= 2147483647 (kernels take it as int32)"],
    ),
    "topk_beside_bad_positions": (  # the positions are reported; the top-k is held to int32 only
        {"index_topk": 300000, "max_position_embeddings": 0},
        ["max_position_embeddings must be an integer >= 1"],
    ),
    "dims": (
        {"index_head_dim": 2**31, "qk_nope_head_dim": True},
        ["index_head_dim must be <= 2147483647", "qk_nope_head_dim must be an integer >= 1"],
    ),
    "pattern": ({"index_topk_pattern": "SFF"}, ["index_topk_pattern[0] is 'S'"]),
    "three": (
        {"index_topk": 0, "index_topk_freq": 5000, "index_topk_pattern": "FF"},
        ["index_topk must be", "index_topk_freq must be <= 4096", "has 2 entries"],
    ),
}


@pytest.mark.parametrize("case", sorted(ERRORS))
def test_config_errors_names_each_problem_once(case):
    from glm_config import config_errors

    changes, wanted = ERRORS[case]
    errors = config_errors(raw("glm5_plain") | changes)
    assert len(errors) == len(wanted), errors
    for error, fragment in zip(errors, wanted, strict=True):
        assert fragment in error and "Fix:" in error
