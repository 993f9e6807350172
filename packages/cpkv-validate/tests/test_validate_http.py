"""The ``http`` engine against the reference engine served in its own process.

``python -m cpkv_validate.refserver`` puts the reference engine behind ``/v1/completions``
(continuous batching, prefix sharing): with the per-request inverse it must pass, with the legacy
one it must report contamination. A server we did not write, ``transformers serve``, is in
``test_validate_transformers_serve.py``.
"""

from __future__ import annotations

import pytest
from _servers import refserver
from cpkv_validate import CompletionsClient, run_http


def test_compare_tokens_out_of_range_is_a_clear_error():
    with pytest.raises(ValueError, match=r"compare_tokens=9 must be in 1..max_tokens \(8\)"):
        run_http("http://127.0.0.1:1", max_tokens=8, compare_tokens=9, show_progress=False)
    with pytest.raises(ValueError, match="concurrency=1: a batch test needs 2 requests"):
        run_http("http://127.0.0.1:1", concurrency=1, show_progress=False)


@pytest.mark.parametrize("allocator", ["free", "sglang"])
def test_correct_server_passes(tmp_path, allocator):
    with refserver("per-request", tmp_path / "server.log", allocator) as url:
        assert CompletionsClient(url).models() == ["cpkv-reference"]
        report = run_http(
            url,
            concurrency=6,
            requests=6,
            max_tokens=8,
            compare_tokens=6,
            min_compared=6,
            show_progress=False,
        )
    rows = report.scenarios[0].requests
    assert report.ok, [(r.request, r.max_abs_diff, r.detail["reasons"]) for r in rows]
    assert report.config["cache_flush"] == "/flush_cache"
    assert report.config["reference_isolation"].startswith("flushed (/flush_cache) before each")
    assert report.config["token_source"] == "logprobs.tokens"
    assert report.config["compare_tokens"] == 6
    assert report.config["max_in_flight"] >= 2
    assert all(r.rows == 6 and r.verdict == "PASS" for r in rows)


def test_leaky_server_is_caught_within_the_compared_tokens(tmp_path):
    with refserver("legacy", tmp_path / "server.log") as url:
        report = run_http(
            url,
            concurrency=6,
            requests=6,
            max_tokens=8,
            compare_tokens=6,
            min_compared=6,
            show_progress=False,
        )
    assert not report.ok and report.config["max_in_flight"] >= 2
    failed = [r for r in report.scenarios[0].requests if r.verdict == "FAIL"]
    assert failed and all(r.first_bad is not None and r.first_bad < 6 for r in failed)
    assert all(1 <= r.max_abs_diff <= 6 for r in failed)
