"""The ``http`` engine against OpenAI-compatible server processes on loopback.

The real-server target here is ``transformers serve`` (continuous batching, a tiny random Llama
and a word-level tokenizer built offline); it needs ``accelerate``, which the dev environment
does not install, so that test skips without it. The engine is therefore also tested against
the reference engine served behind the same ``/v1/completions`` API in its own process
(``python -m cpkv_validate.refserver``): once with the per-request inverse (must pass)
and once with the legacy one (must report contamination).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest
from cpkv_validate import CompletionsClient, make_prompts, run_http
from cpkv_validate._http import token_diff


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def _process(cmd: list[str], url: str, timeout: float = 120.0, env: dict | None = None):
    proc = subprocess.Popen(
        cmd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                pytest.fail(f"server exited with {proc.returncode}: {proc.stdout.read()}")
            try:
                with urllib.request.urlopen(url + "/health", timeout=2):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"server at {url} did not come up in {timeout}s")
                time.sleep(0.5)
        yield url
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()


def _refserver(inverse: str):
    port = _free_port()
    cmd = [
        sys.executable,
        "-m",
        "cpkv_validate.refserver",
        "--port",
        str(port),
        "--inverse",
        inverse,
    ]
    return _process(cmd, f"http://127.0.0.1:{port}")


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


def test_correct_server_passes():
    with _refserver("per-request") as url:
        assert CompletionsClient(url).models() == ["cpkv-reference"]
        report = run_http(url, concurrency=6, requests=6, max_tokens=6, show_progress=False)
    assert report.ok, [(r.request, r.max_abs_diff) for r in report.scenarios[0].requests]
    assert report.config["cache_flush"] == "/flush_cache"
    assert report.config["token_source"] == "logprobs.tokens"
    assert all(r.rows == 6 for r in report.scenarios[0].requests)


def test_leaky_server_is_caught():
    with _refserver("legacy") as url:
        report = run_http(url, concurrency=6, requests=6, max_tokens=6, show_progress=False)
    assert not report.ok
    failed = [r for r in report.scenarios[0].requests if r.verdict == "FAIL"]
    assert failed and all(r.first_bad is not None and r.max_abs_diff >= 1 for r in failed)


def _tiny_hf_model(path) -> None:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = ["<unk>", "<s>", "</s>", "Request", "marker", "Repeat", "the", "of", ":", "."]
    words += [f"w{i}" for i in range(1000)] + [str(i) for i in range(100)]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>"
    )
    fast.save_pretrained(path)
    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=len(words),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        bos_token_id=1,
        eos_token_id=2,
    )
    LlamaForCausalLM(cfg).save_pretrained(path)


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("accelerate") is None or shutil.which("transformers") is None,
    reason="transformers serve loads models with a device_map, which needs accelerate",
)
def test_transformers_serve_with_continuous_batching_passes(tmp_path):
    _tiny_hf_model(tmp_path / "tiny")
    port = _free_port()
    cmd = [
        "transformers",
        "serve",
        str(tmp_path / "tiny"),
        "--device",
        "cpu",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--continuous-batching",
    ]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    with _process(cmd, f"http://127.0.0.1:{port}", timeout=240, env=env) as url:
        report = run_http(
            url,
            model=str(tmp_path / "tiny"),
            concurrency=4,
            requests=4,
            max_tokens=8,
            show_progress=False,
        )
    assert report.ok, [(r.request, r.max_abs_diff) for r in report.scenarios[0].requests]
