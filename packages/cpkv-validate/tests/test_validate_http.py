"""The ``http`` engine against the reference engine served in its own process.

``python -m cpkv_validate.refserver`` puts the reference engine behind ``/v1/completions``
(continuous batching, prefix sharing): with the per-request inverse it must pass, with the legacy
one it must report contamination. A server we did not write, ``transformers serve``, is in
``test_validate_transformers_serve.py``.
"""

from __future__ import annotations

import pytest
from _servers import refserver
from cpkv_validate import CompletionsClient, make_prompts, run_http
from cpkv_validate._http import token_diff


def test_prompts_share_a_prefix_and_carry_distinct_markers():
    prefix, prompts = make_prompts(5, seed=1)
    markers = [mk for _, mk, _ in prompts]
    assert len(set(markers)) == 5
    for i, (_, mk, text) in enumerate(prompts):
        assert text.startswith(prefix + f" Request {i} ")
        assert all(other not in text for other in markers if other != mk)


def test_token_diff():
    assert token_diff(["a", "b"], ["a", "b"]) == (0, None)
    assert token_diff(["a", "x", "c"], ["a", "b", "c"]) == (1, 1)
    assert token_diff(["a"], ["a", "b", "c"]) == (2, 1)
    assert token_diff(["a", "b", "x"], ["a", "b", "c"], first_n=2) == (0, None)
    assert token_diff(["a"], ["a", "b", "c"], first_n=2) == (1, 1)


def test_compare_tokens_out_of_range_is_a_clear_error():
    with pytest.raises(ValueError, match=r"compare_tokens=9 must be in 1..max_tokens \(8\)"):
        run_http("http://127.0.0.1:1", max_tokens=8, compare_tokens=9, show_progress=False)


@pytest.mark.parametrize("allocator", ["free", "sglang"])
def test_correct_server_passes(tmp_path, allocator):
    with refserver("per-request", tmp_path / "server.log", allocator) as url:
        assert CompletionsClient(url).models() == ["cpkv-reference"]
        report = run_http(
            url, concurrency=6, requests=6, max_tokens=8, compare_tokens=6, show_progress=False
        )
    assert report.ok, [(r.request, r.max_abs_diff) for r in report.scenarios[0].requests]
    assert report.config["cache_flush"] == "/flush_cache"
    assert report.config["token_source"] == "logprobs.tokens"
    assert report.config["compare_tokens"] == 6
    assert all(r.rows == 6 for r in report.scenarios[0].requests)


def test_leaky_server_is_caught_within_the_compared_tokens(tmp_path):
    with refserver("legacy", tmp_path / "server.log") as url:
        report = run_http(
            url, concurrency=6, requests=6, max_tokens=8, compare_tokens=6, show_progress=False
        )
    assert not report.ok
    failed = [r for r in report.scenarios[0].requests if r.verdict == "FAIL"]
    assert failed and all(r.first_bad is not None and r.first_bad < 6 for r in failed)
    assert all(1 <= r.max_abs_diff <= 6 for r in failed)
