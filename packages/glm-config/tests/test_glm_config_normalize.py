"""normalize() against the installed transformers release (CI runs 5.8.1 and 5.19.0).

Each fixture config.json is loaded exactly as the installed transformers loads it; normalize must
repair precisely the fields that release breaks, leave the config equal to config.json's truth, and
be a no-op on a second call and on releases that load it right.
"""

from __future__ import annotations

import pytest

transformers = pytest.importorskip("transformers")
from _glmcfg_fixtures import (  # noqa: E402
    BROKEN_5_6_TO_5_9,
    CONFIGS,
    load,
    raw,
    version_family,
    write_model,
)
from glm_config import defects_for, expected_settings, normalize  # noqa: E402
from indexcache import schedule_from_config  # noqa: E402


@pytest.fixture(params=sorted(CONFIGS))
def loaded(request, tmp_path):
    name = request.param
    return name, load(write_model(tmp_path, name)), raw(name)


def test_repairs_exactly_what_this_release_breaks(loaded):
    name, config, truth = loaded
    family = version_family()
    report = normalize(config, truth)
    assert report.applicable and report.applied
    if family == "broken":
        assert {c.field for c in report.changes} == BROKEN_5_6_TO_5_9[name], str(report)
    elif family == "right":
        assert not report.changed, f"transformers {transformers.__version__}: {report}"
    for change in report.changes:
        assert change.before != change.after and change.reason


def test_after_normalize_the_config_holds_config_json_truth(loaded):
    _, config, truth = loaded
    normalize(config, truth)
    want = expected_settings(truth)
    for key in ("index_topk_freq", "index_skip_topk_offset", "index_topk_pattern"):
        if truth.get(key) is not None:
            assert getattr(config, key) == truth[key], key
    assert config.qk_rope_head_dim == truth["qk_rope_head_dim"]
    assert config.qk_head_dim == truth["qk_nope_head_dim"] + truth["qk_rope_head_dim"]
    if getattr(config, "indexer_types", None) is not None:
        assert list(config.indexer_types) == want.indexer_types
    # what a reader of the repaired config (e.g. SGLang's dsa_layer_skips_topk) derives is right
    assert schedule_from_config(config).indexer_types == want.schedule.indexer_types


def test_second_normalize_is_a_no_op(loaded):
    _, config, truth = loaded
    normalize(config, truth)
    again = normalize(config, truth)
    assert not again.changed, str(again)


def test_dry_run_reports_without_touching(loaded):
    _, config, truth = loaded
    before = {
        k: getattr(config, k, None)
        for k in ("index_topk_freq", "qk_rope_head_dim", "indexer_types")
    }
    report = normalize(config, truth, dry_run=True)
    assert not report.applied
    assert {k: getattr(config, k, None) for k in before} == before
    assert {c.field for c in report.changes} == {c.field for c in normalize(config, truth).changes}


@pytest.mark.skipif(version_family() != "broken", reason="needs a release that drops the fields")
def test_glm52_on_a_broken_release_had_the_wrong_layers():
    """The damage is real: offset 3 checkpoints loaded by 5.6-5.9 mark layer 5 full, 2 shared."""
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        config = load(write_model(Path(d), "glm52_freq4_offset3"))
    assert config.indexer_types[2] == "shared" and config.indexer_types[5] == "full"
    assert not hasattr(config, "index_topk_freq") and config.qk_rope_head_dim == 192
    report = normalize(config, raw("glm52_freq4_offset3"))
    assert config.indexer_types[2] == "full" and config.indexer_types[5] == "shared"
    reasons = " ".join(c.reason for c in report.changes)
    assert f"transformers {transformers.__version__}" in reasons and "(5.6-5.10)" in reasons
    assert {d.name for d in defects_for(transformers.__version__)} >= {
        "drops-fields",
        "ignores-offset",
    }


def test_report_text(tmp_path):
    config = load(write_model(tmp_path, "glm52_freq4_offset3"))
    text = str(normalize(config, raw("glm52_freq4_offset3")))
    assert text.startswith(f"glm-config: transformers {transformers.__version__}")
    again = str(normalize(config, raw("glm52_freq4_offset3")))
    assert "already matches config.json" in again
