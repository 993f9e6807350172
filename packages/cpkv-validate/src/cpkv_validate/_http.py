"""The ``http`` engine: check a live OpenAI-compatible server for cross-request contamination.

Every request shares one long prefix (so the server's prefix cache shares its pages) and then
carries its own marker. Each prompt is first completed alone, one at a time (the batch-size-1
golden, which also warms the prefix cache), then all of them at once with ``--concurrency``
threads (the batch). Decoding is greedy (temperature 0, top_p 1) with a fixed seed.

The comparison rule: the first ``compare_tokens`` generated tokens of each request must equal its
golden exactly (tolerance: 0 differing tokens). A server whose arithmetic depends on the batch
can still flip a greedy choice where the top two logits are closer than that noise, and after a
flip everything differs; comparing only the first N tokens keeps that window short, and a model
whose greedy choices have wide margins (the test's, checked offline) leaves no room for it. A
leak is attributed to request j when j's marker shows up in the diverged output, or when the
diverged tokens continue j's own golden output.
"""

from __future__ import annotations

import json
import random
import re
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor

from ._compare import Report, RequestResult, ScenarioResult

__all__ = ["CompletionsClient", "make_prompts", "run_http", "token_diff"]

_WORD = re.compile(r"\S+")


class CompletionsClient:
    """A minimal ``/v1/completions`` client on the standard library (one request per thread).

    Args:
        url: server base URL (``http://host:port`` or ``http://host:port/v1``).
        timeout: seconds per request.
    """

    def __init__(self, url: str, timeout: float = 120.0) -> None:
        base = url.rstrip("/")
        self.base = base if base.endswith("/v1") else base + "/v1"
        self.timeout = timeout
        self.logprobs = True  # ask for per-token output; dropped if the server refuses it
        self.token_sources: set[str] = set()  # where the compared tokens came from

    def _call(self, path: str, body: dict | None = None) -> dict:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.base + path, data=data, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError:
            raise
        except (urllib.error.URLError, OSError) as exc:
            raise ConnectionError(f"cannot reach {self.base}{path}: {exc}") from exc
        try:
            return json.loads(raw)
        except ValueError:  # not JSON, or not UTF-8
            raise ConnectionError(
                f"{self.base}{path} did not answer JSON (it began {raw[:40]!r}); is --url an "
                f"OpenAI-compatible server?"
            ) from None

    def _refused(self, path: str, exc: urllib.error.HTTPError) -> ConnectionError:
        return ConnectionError(
            f"{self.base}{path} answered HTTP {exc.code} {exc.reason}; is --url an "
            f"OpenAI-compatible server (and --model one it serves)?"
        )

    def flush_cache(self) -> str | None:
        """Drop the server's prefix cache (SGLang ``/flush_cache``, vLLM ``/reset_prefix_cache``).

        Returns:
            The endpoint that worked, or None when the server has neither.
        """
        root = self.base[: -len("/v1")]
        for path in ("/flush_cache", "/reset_prefix_cache"):
            req = urllib.request.Request(root + path, data=b"", method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout):
                    return path
            except urllib.error.HTTPError:
                continue
            except (urllib.error.URLError, OSError) as exc:
                raise ConnectionError(f"cannot reach {root}{path}: {exc}") from exc
        return None

    def models(self) -> list[str]:
        try:
            out = self._call("/models")
        except urllib.error.HTTPError as exc:
            raise self._refused("/models", exc) from None
        data = out.get("data") if isinstance(out, dict) else None
        if not isinstance(data, list) or not all(isinstance(m, dict) and "id" in m for m in data):
            raise ConnectionError(
                f"{self.base}/models did not list models as {{'data': [{{'id': ...}}]}}; pass "
                f"--model NAME"
            )
        return [str(m["id"]) for m in data]

    def complete(self, model: str, prompt: str, max_tokens: int, seed: int) -> list[str]:
        """Greedy completion of ``prompt``; returns the generated tokens (strings)."""
        body = {
            "model": model,
            "prompt": prompt,
            "max_tokens": max_tokens,
            "temperature": 0,
            "top_p": 1,
            "seed": seed,
        }
        try:
            if self.logprobs:
                try:
                    out = self._call("/completions", {**body, "logprobs": 1})
                except urllib.error.HTTPError as exc:
                    if exc.code not in (400, 422, 501):
                        raise
                    self.logprobs = False
                    return self.complete(model, prompt, max_tokens, seed)
            else:
                out = self._call("/completions", body)
        except urllib.error.HTTPError as exc:
            raise self._refused("/completions", exc) from None
        try:
            choice = out["choices"][0]
            choice.get("text")
        except (KeyError, IndexError, TypeError, AttributeError):
            raise ConnectionError(
                f"{self.base}/completions answered without choices[0] (got {str(out)[:60]}); is "
                f"--url an OpenAI-compatible server?"
            ) from None
        toks = (choice.get("logprobs") or {}).get("tokens")
        # a server may accept logprobs and still not return them (transformers serve)
        self.token_sources.add("logprobs.tokens" if toks else "whitespace-split text")
        return list(toks) if toks else _WORD.findall(choice.get("text", ""))


def make_prompts(
    n: int, seed: int, prefix_words: int = 200
) -> tuple[str, list[tuple[str, str, str]]]:
    """``n`` prompts: one shared prefix, then a distinct marker and text per request.

    Returns:
        (the shared prefix, [(name, marker, prompt) per request]).
    """
    rng = random.Random(seed)
    prefix = " ".join(f"w{rng.randrange(1000)}" for _ in range(prefix_words))
    out = []
    for i in range(n):
        marker = f"MARK{i:02d}x{rng.randrange(16**4):04x}"
        text = " ".join([marker if k % 4 == 0 else f"w{rng.randrange(1000)}" for k in range(24)])
        prompt = (
            f"{prefix} Request {i} marker {marker} : {text} . Repeat the marker of request {i} :"
        )
        out.append((f"r{i}", marker, prompt))
    return prefix, out


def token_diff(
    got: list[str], want: list[str], first_n: int | None = None
) -> tuple[int, int | None]:
    """(number of differing token positions, first differing index or None).

    Only the first ``first_n`` positions count (all when None); a position one side lacks differs.
    """
    if first_n is not None:
        got, want = got[:first_n], want[:first_n]
    n = max(len(got), len(want))
    bad = [i for i in range(n) if i >= len(got) or i >= len(want) or got[i] != want[i]]
    return len(bad), (bad[0] if bad else None)


def _attribute(
    i: int, got: list[str], golden: list[list[str]], markers: list[str], first: int
) -> list[str]:
    text = " ".join(got[first:])
    found = [f"r{j}" for j, mk in enumerate(markers) if j != i and mk in text]
    if found:
        return found
    tail = got[first : first + 3]
    for j, g in enumerate(golden):
        if j != i and len(tail) == 3 and any(g[k : k + 3] == tail for k in range(len(g))):
            found.append(f"r{j}")
    return found


def run_http(
    url: str,
    *,
    model: str | None = None,
    concurrency: int = 8,
    requests: int = 8,
    max_tokens: int = 32,
    compare_tokens: int | None = None,
    seed: int = 0,
    timeout: float = 120.0,
    show_progress: bool = True,
) -> Report:
    """Golden (sequential) vs batch (concurrent) greedy completions; one result per request.

    Args:
        compare_tokens: how many leading generated tokens must match (default ``max_tokens``).
    """
    from rich.console import Console
    from rich.progress import Progress

    n_cmp = max_tokens if compare_tokens is None else compare_tokens
    if not 1 <= n_cmp <= max_tokens:
        raise ValueError(
            f"compare_tokens={compare_tokens} must be in 1..max_tokens ({max_tokens}); fix: "
            f"raise max_tokens or compare fewer tokens"
        )
    t0 = time.perf_counter()
    client = CompletionsClient(url, timeout)
    if model is None:
        names = client.models()
        model = names[0] if names else "default"
    prefix, prompts = make_prompts(requests, seed)
    warm = f"{prefix} Warmup request"  # caches the shared prefix, as a system prompt would be
    bar_console = Console(stderr=True)  # stdout carries the report (and may be a pipe)
    show = show_progress and bar_console.is_terminal  # a bar in a log file is noise
    with Progress(transient=True, disable=not show, console=bar_console) as bar:
        task = bar.add_task("golden (sequential)", total=2 * len(prompts))
        client.complete(model, warm, 1, seed)
        golden = []
        for _, _, text in prompts:
            golden.append(client.complete(model, text, max_tokens, seed))
            bar.advance(task)
        # Without a flush the batch would hit each prompt's own cached copy from its golden run
        # and never share a partially filled prefix page with another request.
        flushed = client.flush_cache()
        client.complete(model, warm, 1, seed)
        bar.update(task, description=f"batch (concurrency {concurrency})")

        def one(text: str) -> list[str]:
            out = client.complete(model, text, max_tokens, seed)
            bar.advance(task)
            return out

        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            batch = list(pool.map(one, [t for _, _, t in prompts]))
    markers = [mk for _, mk, _ in prompts]
    results = []
    for i, (name, marker, _) in enumerate(prompts):
        n_bad, first = token_diff(batch[i], golden[i], n_cmp)
        sources = _attribute(i, batch[i], golden, markers, first) if first is not None else []
        results.append(
            RequestResult(
                scenario="http_shared_prefix",
                request=name,
                marker=marker,
                rows=min(len(golden[i]), n_cmp),
                max_abs_diff=float(n_bad),
                first_bad=first,
                verdict="FAIL" if n_bad else "PASS",
                leak_sources=sources,
            )
        )
    sc = ScenarioResult(
        "http_shared_prefix",
        "shared-prefix prompts with distinct markers: concurrent batch vs sequential golden "
        f"(greedy); diff = differing tokens among the first {n_cmp} generated",
        results,
    )
    config = {
        "engine": "http",
        "url": url,
        "model": model,
        "concurrency": concurrency,
        "requests": requests,
        "max_tokens": max_tokens,
        "compare_tokens": n_cmp,
        "seed": seed,
        "tolerance": 0,
        "diff_unit": f"differing tokens among the first {n_cmp} generated",
        "token_source": " + ".join(sorted(client.token_sources)),
        "cache_flush": flushed or "unavailable (the batch may reuse the golden runs' cache)",
    }
    return Report(config, [sc], time.perf_counter() - t0)
