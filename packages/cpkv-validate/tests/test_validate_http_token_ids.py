"""``cpkv-validate --url`` on SGLang compares token ids (``/generate``), not decoded text.

Found on the GPU box: the tiny GLM-shaped checkpoint's byte-level tokenizer decodes most single
tokens to U+FFFD, and ``/v1/completions`` names tokens by that text. Two different tokens then
read as equal, and a top-two pair of them collapses into one ``top_logprobs`` key, so the
margin at a difference is unknown or taken against the wrong token. A served run showed a
"FAIL" whose reference margin was unknown after 28 identical-looking U+FFFD tokens. CJK text
on a real model gives the same tokens.

The servers are ``_fakes`` stand-ins for SGLang's HTTP server (it cannot run on a CPU machine),
answering ``/generate`` in its shape. Mutation checks: the same server asked through
``--api completions`` hides the swapped token (PASS) and cannot see the tie (unknown margin), so
a test that did not really compare ids would fail here.
"""

from __future__ import annotations

import json

import pytest
from _fakes import ByteTokens, Fake, serve
from cpkv_validate._client import CompletionsClient, ServerError
from cpkv_validate._drift import top2_margin
from cpkv_validate.cli import main
from hostile_cli import run_in_process

N = 8
SGLANG_INFO = {"enable_deterministic_inference": False}


def _run(fake: Fake, tmp_path, *extra: str):
    report = tmp_path / "r.json"
    with serve(fake) as url:
        argv = ["--url", url, "--concurrency", "4", "--max-tokens", str(N), "--no-progress"]
        run = run_in_process(main, [*argv, "--json", str(report), *extra])
    out = json.loads(report.read_text()) if report.exists() else {}
    rows = out["scenarios"][0]["requests"] if out else []
    return run, rows, out.get("config", {})


def test_sglang_is_asked_by_generate_and_its_token_ids_are_compared(tmp_path):
    fake = ByteTokens(swap_at=3, info=SGLANG_INFO, native=True)
    run, rows, cfg = _run(fake, tmp_path)
    assert run.code == 1, run  # the swapped token: a difference at a wide margin
    assert fake.native_calls > 0
    assert cfg["endpoint"] == "/generate" and cfg["api"] == "auto"
    assert cfg["token_source"] == "token ids (SGLang /generate)"
    assert {r["verdict"] for r in rows} == {"FAIL"}
    assert {r["first_bad"] for r in rows} == {3}
    assert all(t.isdigit() for t in rows[0]["detail"]["compared_tokens"]["reference"])
    assert "token ids (SGLang /generate)" in run.out


def test_mutation_the_same_server_through_completions_hides_the_swapped_token(tmp_path):
    fake = ByteTokens(swap_at=3, info=SGLANG_INFO, native=True)
    run, rows, cfg = _run(fake, tmp_path, "--api", "completions")
    assert fake.native_calls == 0 and cfg["endpoint"] == "/v1/completions"
    assert {r["verdict"] for r in rows} == {"PASS"}  # blind: every token reads U+FFFD
    # and every prompt seems to get the same answer, so the run proves nothing (exit 2)
    assert run.code == 2 and "contamination undetectable" in run.err, run


def test_a_tie_between_two_tokens_that_decode_alike_is_drift_by_id(tmp_path):
    fake = ByteTokens(swap_at=3, tie=True, info=SGLANG_INFO, native=True)
    run, rows, _cfg = _run(fake, tmp_path, "--min-compared", "3")  # nothing compared after it
    assert run.code == 0, run
    assert {r["verdict"] for r in rows} == {"DRIFT"}
    assert {r["detail"]["divergence"]["margin_reference"] for r in rows} == {0.0}


def test_mutation_by_text_the_tie_collapses_into_one_key():
    # what /v1/completions returns for the same position: both tokens under one U+FFFD key
    assert top2_margin({"\ufffd": -0.05}) is None
    assert top2_margin([[-0.05, 11, "\ufffd"], [-0.05, 12, "\ufffd"]]) == 0.0


def test_a_server_without_generate_falls_back_to_completions_under_auto(tmp_path):
    run, rows, cfg = _run(Fake(info=SGLANG_INFO), tmp_path)
    assert run.code == 0, run
    assert cfg["endpoint"] == "/v1/completions"
    assert cfg["token_source"] == "logprobs.tokens"
    assert {r["verdict"] for r in rows} == {"PASS"}


def test_api_generate_on_a_server_without_it_is_one_line_and_exit_2(tmp_path):
    run, _rows, _cfg = _run(Fake(info=SGLANG_INFO), tmp_path, "--api", "generate")
    assert run.code == 2, run
    assert run.err.startswith("cpkv-validate: ") and run.err.count("\n") == 1
    assert "/generate answered HTTP 404" in run.err


class _OddGenerate(Fake):
    def generate(self, body: dict) -> dict:
        return {"text": "x", "meta_info": {"output_token_logprobs": [[-0.1, "7", "x"]]}}


def test_a_generate_body_not_shaped_like_sglangs_is_a_server_error_under_api_generate():
    with serve(_OddGenerate(info=SGLANG_INFO, native=True)) as url:
        client = CompletionsClient(url, timeout=10, api="generate")
        with pytest.raises(ServerError, match="is --url SGLang"):
            client.generate("m", "prompt", 4, 0)


def test_under_auto_a_generate_not_shaped_like_sglangs_falls_back_to_completions():
    # a server that answers every path (or another /generate): not SGLang's, so not used
    with serve(_OddGenerate(info=SGLANG_INFO, native=True)) as url:
        client = CompletionsClient(url, timeout=10)
        assert client.server_info() is not None and client.native
        out = client.generate("m", "prompt", 4, 0)
    assert not client.native and out.source == "logprobs"


def test_an_unknown_api_is_refused():
    with pytest.raises(ValueError, match="not one of auto, generate, completions"):
        CompletionsClient("http://127.0.0.1:1", api="grpc")


class _GenerateGoesAway(Fake):
    """Answers ``/generate`` ``n`` times, then 404 (a proxy that lost its SGLang route)."""

    def __init__(self, n: int, **kw) -> None:
        super().__init__(**kw)
        self.n = n

    def post(self, path: str, body: dict) -> tuple[int, dict]:
        if path == "/generate" and self.native_calls >= self.n:
            return 404, {"detail": "Not Found"}
        return super().post(path, body)


def test_after_generate_answered_a_failure_is_an_error_not_a_silent_switch_to_text(tmp_path):
    """Ids from the first runs against text from the later ones would differ everywhere: a false
    contamination report. Before any /generate reply the fallback stands."""
    run, _rows, _cfg = _run(_GenerateGoesAway(3, info=SGLANG_INFO, native=True), tmp_path)
    assert run.code == 2, run
    assert "/generate answered HTTP 404" in run.err and run.err.count("\n") == 1
    run, _rows, cfg = _run(_GenerateGoesAway(0, info=SGLANG_INFO, native=True), tmp_path)
    assert run.code == 0 and cfg["endpoint"] == "/v1/completions", run


class _RefusesLogprobs(Fake):
    def post(self, path: str, body: dict) -> tuple[int, dict]:
        if path == "/generate" and body.get("return_logprob"):
            return 400, {"detail": "logprobs are not enabled"}
        return super().post(path, body)


def test_under_auto_a_generate_that_refuses_the_request_falls_back(tmp_path):
    run, rows, cfg = _run(_RefusesLogprobs(info=SGLANG_INFO, native=True), tmp_path)
    assert run.code == 0, run
    assert cfg["endpoint"] == "/v1/completions" and {r["verdict"] for r in rows} == {"PASS"}


class _IdsOnly(ByteTokens):
    """``/generate`` without logprobs in its answer (only ``output_ids``)."""

    def native_reply(self, prompt: str, n: int, nth: int, others: list[str]) -> dict:
        out = super().native_reply(prompt, n, nth, others)
        return {"text": out["text"], "output_ids": out["output_ids"], "meta_info": {}}


def test_output_ids_alone_are_compared_exactly(tmp_path):
    run, rows, cfg = _run(_IdsOnly(swap_at=3, info=SGLANG_INFO, native=True), tmp_path)
    assert run.code == 1, run  # the swapped id is found; no margins, so the rule is exact
    assert cfg["drift_rule"] == "exact" and {r["first_bad"] for r in rows} == {3}


def test_a_position_without_top_logprobs_has_no_margin():
    assert top2_margin(None) is None
    with serve(ByteTokens(info=SGLANG_INFO, native=True)) as url:
        client = CompletionsClient(url, timeout=10, api="generate")
        body = {"meta_info": {"output_token_logprobs": [[-0.1, 5, "a"], [-0.2, 6, "b"]],
                              "output_top_logprobs": [None, [[-0.2, 6, "b"], [-0.9, 7, "c"]]]},
                "text": "ab"}  # fmt: skip
        out = client._native(body, url)
    assert out.tokens == ["5", "6"] and out.margins == [None, pytest.approx(0.7)]
