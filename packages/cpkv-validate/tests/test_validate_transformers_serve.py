"""The ``http`` engine against a server we did not write: ``transformers serve``.

A tiny random Llama and a word-level tokenizer are created at test time (nothing downloaded) and
served on loopback with continuous batching (paged KV, prefix-block sharing, chunked prefill:
``--cb-max-batch-tokens 256`` makes a batch of eight ~230-token prompts span several steps that
mix requests). The KV cache is sized explicitly: left to itself, continuous batching on a CPU
reserves most of the machine's memory (21 GB of 23 measured).

The comparison rule of the engine (the first N greedy tokens of every request must equal its
sequential run) is only sound if a correct server cannot flip a greedy choice through batch-
dependent arithmetic; ``test_greedy_choices_have_wide_margins`` checks, offline with the same
weights, that every compared step's top-two logit gap is far above float32 noise. A server that
answers a request with another request's content must fail: the leaking proxy proves it.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from _servers import free_port, server
from cpkv_validate import CompletionsClient, make_prompts, run_http

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("accelerate") is None,
        reason="transformers serve loads models with a device_map, which needs accelerate "
        "(in the dev group: uv sync --frozen)",
    ),
]

REQUESTS = 8  # concurrency too: every request of the batch in flight at once
N = 16  # tokens generated and compared
#: Measured: this model's float32 logits (magnitude ~7) move by ~2e-5 between two ways of
#: computing the same step (full forward vs KV-cached decode), and transformers serve did flip a
#: greedy choice whose top two logits were 8e-6 apart. A compared step whose gap is 50x that
#: noise cannot flip.
MIN_MARGIN = 1e-3


def _tiny_model(path) -> None:
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
        # why: at the default 0.02 the greedy output hardly depends on the prompt (8 prompts gave
        # 2 distinct answers), so reading another request's KV would change nothing visible; at
        # 0.3 all 8 differ in >= 15 of 16 tokens and every top-two gap is > 1e-2.
        initializer_range=0.3,
    )
    LlamaForCausalLM(cfg).save_pretrained(path)


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("tiny-llama")
    _tiny_model(path)
    return str(path)


@pytest.fixture(scope="module")
def served(model_path, tmp_path_factory):
    """``transformers serve`` with continuous batching, for every test of this module."""
    port = free_port()
    cmd = ["transformers", "serve", model_path, "--device", "cpu", "--continuous-batching"]
    cmd += ["--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--cb-block-size", "16", "--cb-num-blocks", "512", "--cb-max-batch-tokens", "256"]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    log = tmp_path_factory.mktemp("serve") / "server.log"
    # Startup imports the serving stack: ~30 s on an idle 2-core box, minutes on a loaded one.
    with server(cmd, port, log, timeout=600, env=env) as url:
        yield url


def _check(url, model_path):
    return run_http(
        url,
        model=model_path,
        concurrency=REQUESTS,
        requests=REQUESTS,
        max_tokens=N,
        compare_tokens=N,
        timeout=300,
        show_progress=False,
    )


def test_continuous_batching_returns_every_request_its_own_tokens(served, model_path):
    report = _check(served, model_path)
    rows = report.scenarios[0].requests
    assert report.ok, [(r.request, r.first_bad, r.leak_sources) for r in rows]
    assert len(rows) == REQUESTS and all(r.rows == N for r in rows)
    # transformers serve ignores logprobs and has no cache flush: say so in the report
    assert report.config["token_source"] == "whitespace-split text"
    assert report.config["cache_flush"].startswith("unavailable")
    assert report.config["reference_isolation"].startswith("no cache flush offered")
    assert "the drift rule could not apply" in report.config["drift_rule_text"]
    assert report.config["max_in_flight"] >= 2


# Runs in its own interpreter: loading the tokenizer and generating inside the pytest process
# made that process die with SIGSEGV at exit (exit 139 after every test passed).
_GREEDY = """
import json, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
path, n = sys.argv[1], int(sys.argv[2])
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path).eval()
out = []
for prompt in json.load(sys.stdin):
    ids = tok(prompt, return_tensors="pt").input_ids
    with torch.no_grad():
        g = model.generate(ids, max_new_tokens=n, do_sample=False, output_logits=True,
                           return_dict_in_generate=True)
    new = g.sequences[0, ids.shape[1]:].tolist()
    gaps = [float(v[0] - v[1]) for v in (torch.topk(lg[0], 2).values for lg in g.logits)]
    out.append({"ids": new, "min_gap": min(gaps), "special": len(tok.all_special_ids),
                "words": tok.decode(new, skip_special_tokens=True).split()})
print(json.dumps(out))
"""


def _offline_greedy(model_path: str, prompts: list[str]) -> list[dict]:
    """Greedy N steps of each prompt at batch size 1, in a fresh interpreter."""
    proc = subprocess.run(
        [sys.executable, "-c", _GREEDY, model_path, str(N)],
        input=json.dumps(prompts),
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_greedy_choices_have_wide_margins(served, model_path):
    """Offline with the same weights: the compared steps leave batch noise no tie to break, and
    the server's sequential answer is what the model computes alone."""
    client = CompletionsClient(served, timeout=300)
    _, prompts = make_prompts(REQUESTS, seed=0)
    answers = set()
    for (name, _, prompt), alone in zip(
        prompts, _offline_greedy(model_path, [t for _, _, t in prompts]), strict=True
    ):
        assert alone["min_gap"] > MIN_MARGIN, f"{name}: top-two gap {alone['min_gap']:.2e}"
        assert len(alone["ids"]) == N and min(alone["ids"]) >= alone["special"], name
        assert client.complete(model_path, prompt, N, seed=0) == alone["words"], name
        answers.add(tuple(alone["words"]))
    assert len(answers) == REQUESTS  # a leak would show: no two requests answer alike


class _LeakingProxy(ThreadingHTTPServer):
    """Forwards everything to ``upstream``; in the batch (after the engine's flush before it:
    one flush per reference request comes first), each completion is sent upstream with the
    prompt of the completion before it: the real server's output for another request. The
    reference runs, before and after, go through untouched."""

    def __init__(self, upstream: str) -> None:
        self.upstream, self.flushes, self.prev = upstream, 0, None
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _ProxyHandler)

    @property
    def in_batch(self) -> bool:
        return self.flushes == REQUESTS + 1


class _ProxyHandler(BaseHTTPRequestHandler):
    server: _LeakingProxy

    def log_message(self, *args: object) -> None:
        return None

    def _relay(self, body: bytes | None) -> None:
        req = urllib.request.Request(
            self.server.upstream + self.path, data=body, method=self.command
        )
        req.add_header("Content-Type", "application/json")
        try:
            with urllib.request.urlopen(req, timeout=300) as resp:
                code, data = resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            code, data = exc.code, exc.read()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._relay(None)

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        proxy = self.server
        if self.path.rstrip("/") == "/flush_cache":  # the engine tries it first, then vLLM's
            with proxy.lock:
                proxy.flushes += 1
        elif self.path.rstrip("/") == "/v1/completions" and proxy.in_batch:
            req = json.loads(body)
            with proxy.lock:
                swap, proxy.prev = proxy.prev, req["prompt"]
            if swap is not None:
                body = json.dumps({**req, "prompt": swap}).encode()
        self._relay(body)


def test_a_server_answering_with_another_requests_content_fails(served, model_path):
    proxy = _LeakingProxy(served)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    try:
        report = _check(f"http://127.0.0.1:{proxy.server_address[1]}", model_path)
    finally:
        proxy.shutdown()
        proxy.server_close()
    assert not report.ok
    failed = [r for r in report.scenarios[0].requests if r.verdict == "FAIL"]
    assert len(failed) == REQUESTS  # every batch request got some other prompt's answer
    assert all(r.first_bad is not None and r.first_bad < N for r in failed)
    named = [r for r in failed if r.leak_sources]
    assert len(named) >= REQUESTS - 1  # the one that got the warm-up prompt has no golden
    assert all(r.request not in r.leak_sources for r in named)
