"""``cpkv-validate --url``: the http engine's flags, its run, and its exit status.

Exit status: 0 no contamination, every request compared on enough tokens, and requests really
overlapped; 1 contamination only (a foreign marker in any output, a difference from the
reference beyond drift, a reference that changed under load); 2 everything else, each one line:
not enough evidence (a request compared on fewer than ``--min-compared`` tokens), every prompt
answered alike (nothing could show a leak), not a batch
test (at most one request in flight), a server that cannot be used (``ServerError``).
"""

from __future__ import annotations

import argparse

from cpkv_cli import refuse

from . import _limits as lim
from ._cli_checks import HTTP_ONLY
from ._client import APIS
from ._compare import Report

__all__ = ["EPILOG", "add_http_arguments", "http_status", "run_http_args"]

EPILOG = (
    "http engine: every prompt carries a marker (MARK03x1a2b); an output holding another "
    "request's marker (or 6 characters of its tag) is contamination whatever the reference "
    "shows. The batch-size-1 reference runs before and after the batch, each request after a "
    "cache flush where the server has one (SGLang /flush_cache). A first difference where "
    "the two runs' top-two logprob gaps add up to at most --drift-epsilon is DRIFT, not a leak "
    "(exact equality under SGLang's deterministic inference or without logprobs). "
)


def add_http_arguments(p: argparse.ArgumentParser) -> None:
    """The http engine's flags, as an argument group of ``p``."""
    http = p.add_argument_group("http engine")
    http.add_argument("--url", help="base URL of an OpenAI-compatible server (http://host:port)")
    http.add_argument("--model", help="model name (default: the first of /v1/models)")
    http.add_argument(
        "--concurrency",
        type=int,
        help=f"concurrent requests in the batch run, {lim.MIN_CONCURRENCY}..{lim.MAX_CONCURRENCY} "
        f"(1 is no batch test); default {HTTP_ONLY['concurrency']}",
    )
    http.add_argument(
        "--requests",
        type=int,
        help=f"requests per run, 2..{lim.MAX_REQUESTS} (default: --concurrency)",
    )
    http.add_argument(
        "--max-tokens",
        type=int,
        help=f"tokens to generate, 1..{lim.MAX_TOKENS}; default {HTTP_ONLY['max_tokens']}",
    )
    http.add_argument(
        "--prefix-words",
        type=int,
        metavar="N",
        help=f"words in the prompts' shared prefix, 0..{lim.MAX_PREFIX_WORDS} (a word is about "
        "5 bytes: 5 tokens for a byte-level tokenizer, a few for a BPE one); for a DSA model give "
        "a prefix of more tokens than its top-k (2048), or every key is selected; default "
        f"{lim.PREFIX_WORDS}",
    )
    http.add_argument(
        "--compare-tokens",
        type=int,
        metavar="N",
        help="compare the first N generated tokens with the reference (default: all of "
        "--max-tokens)",
    )
    http.add_argument(
        "--min-compared",
        type=int,
        metavar="N",
        help="fewest tokens compared per request that count as evidence, counted from the reply "
        f"(logprob tokens, else words of the text), never from usage; default {lim.MIN_COMPARED}",
    )
    http.add_argument(
        "--drift-epsilon",
        type=float,
        metavar="NATS",
        help="a first difference where the two runs' top-two logprob gaps add up to at most "
        f"this is DRIFT (numeric), not a leak; 0..{lim.MAX_DRIFT_EPSILON:g}, 0 for exact "
        f"equality; default {lim.DRIFT_EPSILON:g}",
    )
    http.add_argument(
        "--api",
        choices=APIS,
        help="how completions are asked for: generate (SGLang's /generate: token ids and top "
        "logprobs by id), completions (/v1/completions: tokens by their text, so different byte "
        "tokens that decode alike, U+FFFD, compare equal), auto (generate where "
        "/get_server_info answers, i.e. SGLang, else completions); default "
        f"{HTTP_ONLY['api']}",
    )
    http.add_argument(
        "--timeout",
        type=float,
        help=f"seconds per whole request, connect to last byte, up to {lim.MAX_TIMEOUT_S:.0f}; "
        f"default {HTTP_ONLY['timeout']:.0f}",
    )
    http.add_argument(
        "--max-reply-mib",
        type=int,
        metavar="MIB",
        help=f"largest reply read, 1..{lim.MAX_REPLY_MIB_LIMIT} MiB; a larger one is refused; "
        f"default {lim.MAX_REPLY_MIB}",
    )


def run_http_args(args: argparse.Namespace) -> Report:
    """:func:`run_http` with the checked ``args``."""
    from ._http import run_http

    return run_http(
        args.url,
        model=args.model,
        concurrency=args.concurrency,
        requests=args.requests or max(args.concurrency, 2),
        max_tokens=args.max_tokens,
        prefix_words=args.prefix_words,
        compare_tokens=args.compare_tokens,
        min_compared=args.min_compared,
        drift_epsilon=args.drift_epsilon,
        seed=args.seed,
        timeout=args.timeout,
        max_reply_bytes=args.max_reply_mib << 20,
        show_progress=not args.no_progress,
        api=args.api,
    )


def http_status(prog: str, report: Report) -> int:
    """The exit status of a finished http run; one line on stderr for each refusal."""
    rows = [r for s in report.scenarios for r in s.requests]
    if any(r.verdict == "FAIL" for r in rows):
        return 1
    cfg = report.config
    short = [r for r in rows if r.verdict == "SHORT"]
    if short:
        return refuse(
            prog,
            f"not enough evidence: {len(short)} of {len(rows)} requests compared fewer than "
            f"--min-compared {cfg['min_compared']} tokens (counted from the replies, not usage), "
            f"so matching outputs prove little; the table shows each run's tokens. Fix: check "
            f"--model and the server's generation limits, raise --max-tokens, or lower "
            f"--min-compared",
        )
    distinct = cfg.get("distinct_reference_outputs")
    if distinct is not None and distinct < 2 <= len(rows):
        return refuse(
            prog,
            f"contamination undetectable: the server answered all {len(rows)} prompts alone with "
            f"the same tokens, so a request reading another's KV would look the same; serve a "
            f"model whose output depends on its prompt (random weights of a realistic scale, "
            f"not near-zero ones)",
        )
    in_flight = int(cfg.get("max_in_flight") or 0)
    if in_flight < lim.MIN_CONCURRENCY:
        return refuse(
            prog,
            f"not a batch test: at most {in_flight} request was in flight at once (--concurrency "
            f"{cfg['concurrency']}), so nothing was batched; check that the server takes "
            f"concurrent requests",
        )
    return 0
