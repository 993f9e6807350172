"""The schedule: docs/design.md's facts, source priority, validation, next_layer_reuses, NextN."""

from __future__ import annotations

import pytest
from _indexcache_helpers import EXAMPLES
from hypothesis import given, settings
from hypothesis import strategies as st
from indexcache import IndexerSchedule, ScheduleError, schedule_from_config


def _formula(num_layers, freq, offset):
    return tuple(max(i - offset + 1, 0) % freq == 0 for i in range(num_layers))


# Facts -------------------------------------------------------------------------------------------
def test_glm5_freq4_offset2_has_21_full_layers():
    s = IndexerSchedule.from_freq(78, 4, 2)
    assert s.full_layers == (0, 1, *range(5, 78, 4))
    assert s.full_layers[-1] == 77
    assert (s.num_full, s.num_shared) == (21, 57)
    assert s.pattern.startswith("FFSSSFSSSF")


def test_glm52_freq4_offset3():
    s = IndexerSchedule.from_freq(78, 4, 3)
    assert s.full_layers[:6] == (0, 1, 2, 6, 10, 14)
    assert s.num_full == 21


def test_defaults_are_freq1_offset2_all_full():
    s = IndexerSchedule.from_freq(78)
    assert s.num_full == 78 and not s.shares
    assert schedule_from_config({"num_hidden_layers": 78}) == s
    assert schedule_from_config({"num_hidden_layers": 5, "index_topk_freq": None}).num_full == 5


@given(num_layers=st.integers(1, 120), freq=st.integers(1, 9), offset=st.integers(1, 9))
@settings(max_examples=EXAMPLES, deadline=None)
def test_from_freq_is_the_formula(num_layers, freq, offset):
    s = IndexerSchedule.from_freq(num_layers, freq, offset)
    assert tuple(t == "full" for t in s.indexer_types) == _formula(num_layers, freq, offset)
    assert s.indexer_types[0] == "full"
    for layer in range(num_layers):
        src = s.source_layer(layer)
        assert s.is_full(src) and src <= layer
        assert all(not s.is_full(j) for j in range(src + 1, layer + 1))


# Sources and priority ----------------------------------------------------------------------------
def test_pattern_and_indexer_types_round_trip():
    s = IndexerSchedule.from_pattern("FSFFS")
    assert s.indexer_types == ("full", "shared", "full", "full", "shared")
    assert IndexerSchedule.from_indexer_types(list(s.indexer_types)).pattern == "FSFFS"


def test_priority_indexer_types_then_pattern_then_freq():
    cfg = {
        "num_hidden_layers": 4,
        "index_topk_freq": 2,
        "index_topk_pattern": "FFSF",
        "indexer_types": ["full", "shared", "shared", "shared"],
    }
    assert schedule_from_config(cfg).source == "indexer_types"
    assert schedule_from_config(cfg).pattern == "FSSS"
    del cfg["indexer_types"]
    assert schedule_from_config(cfg).pattern == "FFSF"
    del cfg["index_topk_pattern"]
    assert schedule_from_config(cfg).pattern == "FFSF"  # freq 2, offset 2: 0, 1, 3 full
    assert schedule_from_config(cfg).source == "index_topk_freq"


# cli_factor (LongCat's field): refused by name unless off ---------------------------------------
@pytest.mark.parametrize("off", [None, 1])
def test_cli_factor_off_is_accepted(off):
    cfg = {"num_hidden_layers": 6, "cli_factor": off, "index_topk_freq": 2}
    assert schedule_from_config(cfg).pattern == "FFSFSF"  # freq 2, offset 2


def test_cli_factor_on_is_refused_by_name_with_the_equivalent_fields():
    cfg = {"num_hidden_layers": 6, "cli_factor": 3, "index_topk_pattern": "FFFFFF"}
    with pytest.raises(ScheduleError) as info:
        schedule_from_config(cfg)
    message = str(info.value)
    assert message.startswith("cli_factor=3 is not supported. SGLang 0.5.23 reads it")
    assert "attention layers 0, 3, 6, ... run their indexer" in message
    assert "two MLA sublayers per decoder layer" in message
    assert "index_topk_freq=3 with index_skip_topk_offset=1" in message
    # the fix it offers: layers 0, 3 full on 6 layers (worked out from max(l - 1 + 1, 0) % 3)
    fixed = {"num_hidden_layers": 6, "index_topk_freq": 3, "index_skip_topk_offset": 1}
    assert schedule_from_config(fixed).full_layers == (0, 3)


def test_config_object_and_nextn():
    class Cfg:
        num_hidden_layers = 6
        index_topk_freq = 2
        index_skip_topk_offset = 1
        num_nextn_predict_layers = 1

    s = schedule_from_config(Cfg())
    assert s.pattern == "FSFSFS" and s.num_nextn_layers == 1


def test_strict_catches_a_stale_indexer_types():
    # transformers 5.6-5.10 derive indexer_types with offset 2 whatever index_skip_topk_offset says.
    stale = IndexerSchedule.from_freq(10, 4, 2).indexer_types
    cfg = {
        "num_hidden_layers": 10,
        "index_topk_freq": 4,
        "index_skip_topk_offset": 3,
        "indexer_types": list(stale),
    }
    assert schedule_from_config(cfg).indexer_types == stale  # priority: not strict
    with pytest.raises(ScheduleError, match=r"takes priority.*stale"):
        schedule_from_config(cfg, strict=True)
    cfg["index_skip_topk_offset"] = 2
    assert schedule_from_config(cfg, strict=True).indexer_types == stale


# Validation: every bad input, by name -----------------------------------------------------------
BAD = {
    "freq_zero": (
        {"num_hidden_layers": 8, "index_topk_freq": 0},
        r"index_topk_freq must be an integer >= 1",
    ),
    "freq_negative": ({"num_hidden_layers": 8, "index_topk_freq": -4}, r"index_topk_freq.*-4"),
    "freq_float": ({"num_hidden_layers": 8, "index_topk_freq": 4.0}, r"index_topk_freq.*float"),
    "freq_bool": ({"num_hidden_layers": 8, "index_topk_freq": True}, r"index_topk_freq.*bool"),
    "freq_string": ({"num_hidden_layers": 8, "index_topk_freq": "4"}, r"index_topk_freq.*str"),
    "offset_zero": (
        {"num_hidden_layers": 8, "index_skip_topk_offset": 0},
        r"offset <= 0 would make layer 0 shared",
    ),
    "offset_negative": (
        {"num_hidden_layers": 8, "index_skip_topk_offset": -1},
        r"index_skip_topk_offset",
    ),
    "layers_missing": (
        {"index_topk_freq": 4},
        r"num_hidden_layers must be an integer >= 1; got NoneType",
    ),
    "layers_zero": ({"num_hidden_layers": 0}, r"num_hidden_layers must be an integer >= 1"),
    "nextn_negative": (
        {"num_hidden_layers": 4, "num_nextn_predict_layers": -1},
        r"num_nextn_predict_layers",
    ),
    # Each pattern refusal says what SGLang 0.5.23 runs instead: layer l is shared there iff
    # l < len(pattern) and pattern[l] == "S" (expected readings below worked out by hand from
    # that rule; test_upstream_indexcache.py in sglang-integration runs SGLang's own code).
    "pattern_short": (
        {"num_hidden_layers": 8, "index_topk_pattern": "FFSS"},
        r"index_topk_pattern has 4 entries but num_hidden_layers is 8\. SGLang 0\.5\.23 would "
        r"accept it and run it as FFSSFFFF \(4 layers past its end full\)",
    ),
    "pattern_long": (
        {"num_hidden_layers": 2, "index_topk_pattern": "FFS"},
        r"has 3 entries.*run it as FF \(the last 1 letter 'S' ignored\)",
    ),
    "pattern_alphabet": (
        {"num_hidden_layers": 4, "index_topk_pattern": "FfSX"},
        r"only 'F' \(full\) and 'S'.*\['X', 'f'\].*run it as FFSF .*KeyError 'f'",
    ),
    "pattern_lowercase": (
        {"num_hidden_layers": 4, "index_topk_pattern": "ffss"},
        r"\['f', 's'\] in 'ffss'\. SGLang 0\.5\.23 would accept it and run it as FFFF \(every "
        r"letter other than 'S' read as full\)\. A GLM config fails earlier: transformers 5\.19's "
        r"GlmMoeDsaConfig raises KeyError 'f'\.",
    ),
    "pattern_lowercase_beside_indexer_types": (
        {"num_hidden_layers": 2, "index_topk_pattern": "Fs", "indexer_types": ["full"] * 2},
        r"found \['s'\].*SGLang 0\.5\.23 would ignore it: it reads indexer_types first\.",
    ),
    "pattern_layer0_shared": (
        {"num_hidden_layers": 3, "index_topk_pattern": "SFF"},
        r"index_topk_pattern\[0\] is 'S'; layer 0 must be 'full'.*run it as SFF \(layer 0 built "
        r"without an indexer",
    ),
    "pattern_layer0_shared_and_short": (
        {"num_hidden_layers": 5, "index_topk_pattern": "SF"},
        r"index_topk_pattern\[0\] is 'S'.*run it as SFFFF",
    ),
    "pattern_list": (
        {"num_hidden_layers": 2, "index_topk_pattern": ["F", "S"]},
        r"must be a string",
    ),
    "pattern_empty": (
        {"num_hidden_layers": 2, "index_topk_pattern": ""},
        r"index_topk_pattern is empty.*run it as FF \(every layer full\)",
    ),
    "cli_factor_zero": (
        {"num_hidden_layers": 8, "cli_factor": 0},
        r"cli_factor must be an integer >= 1; got int 0\. SGLang 0\.5\.23 stops on it with "
        r"AssertionError",
    ),
    "cli_factor_string": ({"num_hidden_layers": 8, "cli_factor": "4"}, r"cli_factor.*str '4'"),
    "cli_factor_bool": ({"num_hidden_layers": 8, "cli_factor": True}, r"cli_factor.*bool"),
    "cli_factor_on": ({"num_hidden_layers": 8, "cli_factor": 2}, r"cli_factor=2 is not supported"),
    "types_alphabet": (
        {"num_hidden_layers": 2, "indexer_types": ["full", "dense"]},
        r"only 'full' and 'shared'; found \['dense'\]",
    ),
    "types_layer0_shared": (
        {"num_hidden_layers": 2, "indexer_types": ["shared", "full"]},
        r"indexer_types\[0\] is 'shared'",
    ),
    "types_length": (
        {"num_hidden_layers": 3, "indexer_types": ["full", "shared"]},
        r"indexer_types has 2 entries but num_hidden_layers is 3.*run it as FSF",
    ),
    "types_string": (
        {"num_hidden_layers": 2, "indexer_types": "FS"},
        r"indexer_types must be a list",
    ),
    # bounds: refused before anything of the size is built (test_indexcache_hostile.py measures)
    "layers_huge": (
        {"num_hidden_layers": 100_000_000},
        r"num_hidden_layers must be <= 4096 \(a schedule holds at most 4096 layers, 52 times "
        r"GLM-5's 78\); got int 100000000\. Fix: give the model's real layer count\.",
    ),
    "nextn_huge": (
        {"num_hidden_layers": 8, "num_nextn_predict_layers": 4097},
        r"num_nextn_predict_layers must be <= 4096 \(real DSA models have 1 NextN layer",
    ),
    "freq_huge": (
        {"num_hidden_layers": 78, "index_topk_freq": 99999999999999999999999},
        r"index_topk_freq must be <= 4096 \(a freq at or above the layer count gives the same "
        r"schedule.*; got int 99999999999999999999999\.",
    ),
    "freq_beyond_printable": (  # Python prints no int of over 4300 digits; the message still can
        {"num_hidden_layers": 78, "index_topk_freq": 10**5000},
        r"index_topk_freq must be <= 4096 .*; got int of 16610 bits \(about 10\^5000\)",
    ),
    "offset_huge": (
        {"num_hidden_layers": 78, "index_skip_topk_offset": 4097},
        r"index_skip_topk_offset must be <= 4096 \(an offset at or above the layer count makes "
        r"every layer full",
    ),
    "cli_factor_huge": (
        {"num_hidden_layers": 8, "cli_factor": 10**30},
        r"cli_factor must be <= 4096",
    ),
    "types_huge": (
        {"num_hidden_layers": 8, "indexer_types": ["full"] * 5000},
        r"indexer_types has 5000 entries; a schedule holds at most 4096 layers",
    ),
    "pattern_huge": (
        {"num_hidden_layers": 8, "index_topk_pattern": "F" * 5000},
        r"index_topk_pattern has 5000 entries; a schedule holds at most 4096 layers",
    ),
}


@given(layers=st.integers(1, 64), freq=st.integers(1, 4096), offset=st.integers(1, 4096))
@settings(max_examples=EXAMPLES, deadline=None)
def test_a_freq_or_offset_past_the_layer_count_changes_nothing(layers, freq, offset):
    """Why freq and offset share the layer cap: past the layer count they add nothing."""
    capped = _formula(layers, min(freq, layers), min(offset, layers))
    assert _formula(layers, freq, offset) == capped


def test_the_largest_schedule_is_allowed():
    s = IndexerSchedule.from_freq(4096, 4096, 4096, num_nextn_layers=4096)
    assert s.num_full == 4096 and s.num_nextn_layers == 4096
    assert schedule_from_config({"num_hidden_layers": 4096, "index_topk_freq": 4}).num_full == 1025


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_settings_raise_clear_errors(case):
    cfg, message = BAD[case]
    with pytest.raises(ScheduleError, match=message):
        schedule_from_config(cfg)


def test_schedule_errors_are_value_errors():
    with pytest.raises(ValueError, match="Fix:"):
        IndexerSchedule.from_freq(8, freq=0)


# next_layer_reuses, kinds, NextN ----------------------------------------------------------------
def test_next_layer_reuses_each_layer():
    s = IndexerSchedule.from_freq(10, 4, 2)  # FFSSSFSSSF
    assert [s.next_layer_reuses(i) for i in range(10)] == [
        False,
        True,
        True,
        True,
        False,
        True,
        True,
        True,
        False,
        False,
    ]


def test_nextn_layer_kind_and_reuse():
    s = IndexerSchedule.from_freq(6, 2, 2, num_nextn_layers=2)
    assert [s.kind(i) for i in range(8)] == [
        "full",
        "full",
        "shared",
        "full",
        "shared",
        "full",
        "nextn",
        "nextn",
    ]
    assert not s.next_layer_reuses(5)  # nothing in the target's pass reads its last top-k
    assert s.next_layer_reuses(6) and not s.next_layer_reuses(7)
    assert s.is_nextn(6) and not s.is_full(6)
    with pytest.raises(ScheduleError, match="NextN layer"):
        s.source_layer(6)


@given(
    layers=st.integers(1, 100),
    freq=st.integers(1, 8),
    offset=st.integers(1, 8),
    nextn=st.integers(0, 3),
)
@settings(max_examples=EXAMPLES, deadline=None)
def test_next_layer_reuses_is_next_shared_and_false_at_the_last_main_layer(
    layers, freq, offset, nextn
):
    s = IndexerSchedule.from_freq(layers, freq, offset, num_nextn_layers=nextn)
    shared = [not f for f in _formula(layers, freq, offset)]
    assert [s.next_layer_reuses(i) for i in range(layers)] == [*shared[1:], False]
    assert [s.next_layer_reuses(layers + j) for j in range(nextn)] == [
        j + 1 < nextn for j in range(nextn)
    ]


@pytest.mark.parametrize("layer", [-1, 8, True, 1.0])
def test_layer_out_of_range(layer):
    s = IndexerSchedule.from_freq(6, 2, 2, num_nextn_layers=2)
    with pytest.raises(ScheduleError, match=r"layer must be an int in \[0, 8\)"):
        s.kind(layer)
