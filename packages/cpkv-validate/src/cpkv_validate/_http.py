"""The ``http`` engine: check a live OpenAI-compatible server for cross-request contamination.

Every request shares one long prefix (so the server's prefix cache shares its pages) and then
carries its own marker (``_markers``). Three runs, greedy (temperature 0, top_p 1, fixed seed):

1. the reference: each prompt alone, one at a time, after a cache flush where the server has one
   (SGLang ``/flush_cache``, vLLM ``/reset_prefix_cache``) and the shared prefix cached again, so
   no request sees another's state; without a flush the report says the reference may share the
   server's cache (the marker check still catches a cache-wide leak);
2. the batch: every prompt at once on ``--concurrency`` threads, after a flush (so the batch
   shares a freshly cached prefix, not each prompt's own copy), with the overlap measured
   (``_batch``);
3. the reference again, as in 1: where it differs from the first, the server changed under load.

Each request is then judged (``_judge``): foreign markers, the batch against the reference under
the drift rule (``_drift``), the two references against each other, and the evidence count.
"""

from __future__ import annotations

import functools
import random
import time

from ._batch import max_in_flight, run_concurrently
from ._client import Completion, CompletionsClient
from ._compare import Report, ScenarioResult
from ._drift import EXACT, MARGIN
from ._judge import RUNS, SCENARIO, SHORT, Rule, judge
from ._limits import DRIFT_EPSILON, MAX_REPLY_MIB, MIN_COMPARED, PREFIX_WORDS
from ._markers import make_marker, marker_pieces
from ._progress import progress

__all__ = ["CompletionsClient", "make_prompts", "run_http"]


def make_prompts(
    n: int, seed: int, prefix_words: int = PREFIX_WORDS
) -> tuple[str, list[tuple[str, str, str]]]:
    """``n`` prompts: one shared prefix, then a distinct marker and text per request.

    Returns:
        (the shared prefix, [(name, marker, prompt) per request]).
    """
    rng = random.Random(seed)
    prefix = " ".join(f"w{rng.randrange(1000)}" for _ in range(prefix_words))
    out = []
    for i in range(n):
        marker = make_marker(i, rng)
        text = " ".join([marker if k % 4 == 0 else f"w{rng.randrange(1000)}" for k in range(24)])
        prompt = (
            f"{prefix} Request {i} marker {marker} : {text} . Repeat the marker of request {i} :"
        )
        out.append((f"r{i}", marker, prompt))
    return prefix, out


def _check(concurrency: int, max_tokens: int, compare_tokens: int | None, least: int) -> int:
    n_cmp = max_tokens if compare_tokens is None else compare_tokens
    if not 1 <= n_cmp <= max_tokens:
        raise ValueError(
            f"compare_tokens={compare_tokens} must be in 1..max_tokens ({max_tokens}); fix: "
            f"raise max_tokens or compare fewer tokens"
        )
    if concurrency < 2:
        raise ValueError(f"concurrency={concurrency}: a batch test needs 2 requests in flight")
    if not 1 <= least <= n_cmp:
        raise ValueError(f"min_compared={least} must be in 1..compare_tokens ({n_cmp})")
    return n_cmp


def run_http(
    url: str,
    *,
    model: str | None = None,
    concurrency: int = 8,
    requests: int = 8,
    max_tokens: int = 32,
    prefix_words: int = PREFIX_WORDS,
    compare_tokens: int | None = None,
    min_compared: int = MIN_COMPARED,
    drift_epsilon: float = DRIFT_EPSILON,
    seed: int = 0,
    timeout: float = 120.0,
    max_reply_bytes: int = MAX_REPLY_MIB << 20,
    show_progress: bool = True,
    api: str = "auto",
) -> Report:
    """Reference (alone, before and after) vs batch (concurrent) greedy completions.

    Args:
        prefix_words: the shared prefix's length in words (see ``_limits.PREFIX_WORDS``).
        compare_tokens: how many leading generated tokens are compared (default ``max_tokens``).
        min_compared: fewest compared tokens per request that count as evidence.
        drift_epsilon: top-two logprob gap at or below which a first difference is drift
            (0: every difference is a leak).
        timeout: seconds per whole request; ``max_reply_bytes``: largest reply read.
        show_progress: a bar on a terminal stderr, else a line per completion.
        api: ``auto`` (SGLang's ``/generate`` where ``/get_server_info`` answers, token ids
            compared), ``generate`` or ``completions`` (``_client.APIS``).

    Raises:
        ServerError: a transport or protocol failure (one line).
        ValueError: arguments out of range.
    """
    n_cmp = _check(concurrency, max_tokens, compare_tokens, min_compared)
    t0 = time.perf_counter()
    client = CompletionsClient(url, timeout, max_reply_bytes, api)
    if model is None:
        served = client.models()
        model = served[0] if served else "default"
    info = client.server_info()
    deterministic = info is not None and info[1].get("enable_deterministic_inference") is True
    prefix, prompts = make_prompts(requests, seed, prefix_words)
    names, markers, texts = (list(x) for x in zip(*prompts, strict=True))
    # the shared prefix, cached as a system prompt would be: every run reads it from the cache
    warm = f"{prefix} Warmup request"
    n = len(prompts)

    with progress(3 * n, show_progress) as shown:

        def one(phase: str, i: int) -> Completion:
            out = client.generate(model, texts[i], max_tokens, seed)
            shown(phase, names[i], out)
            return out

        def fresh() -> str | None:
            flushed = client.flush_cache()
            client.generate(model, warm, 1, seed)
            return flushed

        def reference(phase: str) -> tuple[list[Completion], list[str | None]]:
            outs, flushes = [], []
            for i in range(n):
                flushes.append(fresh())
                outs.append(one(phase, i))
            return outs, flushes

        before, flushes = reference("reference")
        shown.phase(f"batch (concurrency {concurrency})")
        fresh()
        jobs = [functools.partial(one, "batch", i) for i in range(n)]
        batch, intervals = run_concurrently(jobs, concurrency, wait_s=timeout)
        shown.phase("reference after the batch")
        after, flushes_after = reference("reference after")
    runs = dict(zip(RUNS, (before, batch, after), strict=True))
    how, rule_text = _rule(deterministic, info, drift_epsilon, runs)
    rule = Rule(n_cmp, min_compared, how, drift_epsilon if how == MARGIN else 0.0)
    pieces = marker_pieces(markers)
    results = [judge(i, names, markers, pieces, runs, rule) for i in range(n)]
    t_start = min(s for s, _ in intervals)
    config = {
        "engine": "http",
        "url": url,
        "model": model,
        "concurrency": concurrency,
        "requests": requests,
        "max_tokens": max_tokens,
        "prefix_words": prefix_words,
        "compare_tokens": n_cmp,
        "min_compared": min_compared,
        "seed": seed,
        "timeout_s": timeout,
        "max_reply_bytes": max_reply_bytes,
        "tolerance": 0 if rule.kind == EXACT else f"drift within {rule.epsilon:g} nats",
        "diff_unit": f"differing token positions among the first {n_cmp} generated",
        "evidence_rule": (
            f"at least {min_compared} tokens compared per request, counted from the reply "
            f"(token ids or logprob tokens, else words of the text; never usage), else {SHORT}"
        ),
        "api": api,
        "endpoint": "/generate" if client.native else "/v1/completions",
        "token_source": _token_source(runs),
        "drift_rule": rule.kind,
        "drift_epsilon": rule.epsilon if rule.kind == MARGIN else None,
        "drift_rule_text": rule_text,
        "server_info": info[0] if info else None,
        "deterministic_inference": deterministic,
        "cache_flush": next((f for f in flushes if f), None)
        or "unavailable (the reference may share the server's cache)",
        "reference_isolation": _isolation(flushes + flushes_after),
        "max_in_flight": max_in_flight(intervals),
        # a server that answers every prompt alike cannot show one request reading another's
        # KV (a model whose weights make the prompt irrelevant): the status says so
        "distinct_reference_outputs": len({tuple(c.tokens) for c in before}),
        "batch_intervals_s": [[round(s - t_start, 6), round(e - t_start, 6)] for s, e in intervals],
    }
    description = (
        "shared-prefix prompts with distinct markers: concurrent batch vs batch-size-1 reference "
        f"(greedy, before and after); diff = differing token positions among the first {n_cmp}"
    )
    return Report(
        config, [ScenarioResult(SCENARIO, description, results)], time.perf_counter() - t0
    )


def _rule(
    deterministic: bool,
    info: tuple[str, dict] | None,
    epsilon: float,
    runs: dict[str, list[Completion]],
) -> tuple[str, str]:
    """(the rule, why): exact where the server is deterministic, no margins came or epsilon 0."""
    if deterministic and info is not None:
        return EXACT, (
            f"exact: the server runs SGLang's deterministic inference ({info[0]} says "
            f"enable_deterministic_inference), so a batch cannot change a greedy token"
        )
    if epsilon == 0:
        return EXACT, "exact: --drift-epsilon 0, so every difference is a leak"
    if all(c.margins is None for outs in runs.values() for c in outs):
        return EXACT, (
            "exact: the server gave no top logprobs, so the drift rule could not apply; a "
            "near-tie flipped by the batch would be reported as a leak"
        )
    return MARGIN, (
        f"margin: a first difference where the two runs' top-two logprob gaps add up to at "
        f"most {epsilon:g} nats is DRIFT (numeric, not a leak; a flip moves the two tokens' "
        f"gap by both); tokens after it are not compared"
    )


def _token_source(runs: dict[str, list[Completion]]) -> str:
    sources = {c.source for outs in runs.values() for c in outs}
    names = {
        "ids": "token ids (SGLang /generate)",
        "logprobs": "logprobs.tokens",
        "words": "whitespace-split text",
    }
    return " + ".join(sorted(names[s] for s in sources))


def _isolation(flushes: list[str | None]) -> str:
    done = [f for f in flushes if f]
    if len(done) == len(flushes):
        return f"flushed ({done[0]}) before each of the {len(flushes)} reference requests"
    if not done:
        return (
            "no cache flush offered: the reference may share the server's cache; the marker "
            "check still catches a cache-wide leak"
        )
    return (
        f"flushed before {len(done)} of {len(flushes)} reference requests; the others may "
        f"share the server's cache"
    )
