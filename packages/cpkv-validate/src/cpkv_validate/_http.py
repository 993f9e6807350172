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

The evidence rule: equal outputs prove nothing when there is nothing to compare. A request whose
alone or batch run generated fewer than ``max_tokens`` tokens without the server saying it
stopped (finish reason ``"stop"``), or that has no token to compare at all, is ``SHORT``, not
``PASS``: a server that generates nothing (or one token of 32) would otherwise look clean.
Columns: ``compared`` is the token positions looked at (the first ``compare_tokens`` positions
either run produced); ``differing`` counts those whose tokens differ or that one run lacks, so it
never exceeds ``compared``.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from ._client import Completion, CompletionsClient
from ._compare import Report, RequestResult, ScenarioResult

__all__ = ["CompletionsClient", "evidence_short", "make_prompts", "run_http", "token_diff"]

#: Verdict of a request whose runs are too short to be evidence (see the module docstring).
SHORT = "SHORT"


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


def evidence_short(run: Completion, max_tokens: int) -> bool:
    """Whether ``run`` is too short to be evidence: fewer than ``max_tokens`` generated tokens
    while the server did not say it stopped by itself (finish reason ``"stop"``)."""
    return run.generated < max_tokens and run.finish_reason != "stop"


def _evidence(run: Completion) -> str:
    return f"{run.generated} ({run.finish_reason or 'no finish reason'})"


def _result(
    i: int,
    prompts: list[tuple[str, str, str]],
    alone: list[Completion],
    batch: list[Completion],
    n_cmp: int,
    max_tokens: int,
) -> RequestResult:
    """Request ``i``: FAIL on a differing token, else SHORT without evidence, else PASS."""
    name, marker, _ = prompts[i]
    got, want = batch[i].tokens, alone[i].tokens
    n_bad, first = token_diff(got, want, n_cmp)
    compared = max(len(got[:n_cmp]), len(want[:n_cmp]))
    golden = [c.tokens for c in alone]
    markers = [mk for _, mk, _ in prompts]
    sources = _attribute(i, got, golden, markers, first) if first is not None else []
    short = compared == 0 or any(evidence_short(r, max_tokens) for r in (alone[i], batch[i]))
    verdict = "FAIL" if n_bad else SHORT if short else "PASS"
    return RequestResult(
        scenario="http_shared_prefix",
        request=name,
        marker=marker,
        rows=compared,
        max_abs_diff=float(n_bad),
        first_bad=first,
        verdict=verdict,
        leak_sources=sources,
        evidence={"alone": _evidence(alone[i]), "batch": _evidence(batch[i])},
    )


class _Lines:
    """Progress as plain lines on stderr, one per finished completion (for pipes and logs).

    A rich bar redraws one line on a terminal; in a pipe or a log it is noise and was disabled,
    which left the command silent until the whole table came out.
    """

    def __init__(self, total: int) -> None:
        self.total, self.done = total, 0

    def __call__(self, phase: str, name: str, run: Completion) -> None:
        self.done += 1
        print(
            f"cpkv-validate: {self.done}/{self.total} {phase} {name}: {_evidence(run)} tokens",
            file=sys.stderr,
            flush=True,
        )


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
        show_progress: a bar on a terminal stderr, else a line per completion.

    Raises:
        ServerError: a transport or protocol failure (one line).
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
    lines: Callable[[str, str, Completion], None] | None = None
    if show_progress and not show:
        lines = _Lines(2 * len(prompts))
    with Progress(transient=True, disable=not show, console=bar_console) as bar:
        task = bar.add_task("golden (sequential)", total=2 * len(prompts))

        def one(phase: str, name: str, text: str) -> Completion:
            out = client.generate(model, text, max_tokens, seed)
            bar.advance(task)
            if lines:
                lines(phase, name, out)
            return out

        client.generate(model, warm, 1, seed)
        alone = [one("alone", name, text) for name, _, text in prompts]
        # Without a flush the batch would hit each prompt's own cached copy from its golden run
        # and never share a partially filled prefix page with another request.
        flushed = client.flush_cache()
        client.generate(model, warm, 1, seed)
        bar.update(task, description=f"batch (concurrency {concurrency})")
        with ThreadPoolExecutor(max_workers=concurrency) as pool:
            batch = list(pool.map(lambda p: one("batch", p[0], p[2]), prompts))
    results = [_result(i, prompts, alone, batch, n_cmp, max_tokens) for i in range(len(prompts))]
    sc = ScenarioResult(
        "http_shared_prefix",
        "shared-prefix prompts with distinct markers: concurrent batch vs sequential golden "
        f"(greedy); diff = differing token positions among the first {n_cmp} generated",
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
        "diff_unit": f"differing token positions among the first {n_cmp} generated",
        "evidence_rule": (
            f"each run generates {max_tokens} tokens or ends with finish reason 'stop'; a "
            f"request with less, or with nothing to compare, is {SHORT}"
        ),
        "token_source": " + ".join(sorted(client.token_sources)),
        "cache_flush": flushed or "unavailable (the batch may reuse the golden runs' cache)",
    }
    return Report(config, [sc], time.perf_counter() - t0)
