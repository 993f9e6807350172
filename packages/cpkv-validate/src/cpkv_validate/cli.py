"""``cpkv-validate``: check that batch size > 1 (with CP) gives every request its own KV.

Exit status: 0 every request matches batch size 1; 1 contamination (or a mismatch) somewhere;
2 bad input (one line on stderr names the input and the fix; nothing is run or written), a
server that cannot be used (one line: unreachable, not HTTP, not the OpenAI API), or a server
whose completions are too short to be evidence (the table, then one line). Every number is
bounded before anything is built or started: ``--cp`` by the host (at most 16 CPU ranks, or the
visible GPUs), the http engine's counts by ``_limits``. Arguments are parsed and checked before
torch is imported (``--help`` and a refusal take a fraction of a second; the http engine never
imports torch). A reader that closes stdout early (``| head -1``) ends the output quietly; the
exit status stays the command's own. Ctrl-C, during start-up or the run, ends every rank and
exits 130 with one line; ``--json`` is written through a temporary file renamed into place, so it
is either the whole new report or what was there before.

Examples::

    cpkv-validate              # reference engine, every scenario, both splits, both allocators, CPU
    cpkv-validate --cp 4 --split interleave --allocator sglang --scenario tiny_extends
    cpkv-validate --inverse legacy                 # the old value-keyed inverse: must FAIL
    cpkv-validate --sglang-offsets upstream --scenario fresh_prompts_cp2   # SGLang 0.5.23: FAIL
    cpkv-validate --url http://127.0.0.1:30000 --concurrency 8 --json report.json
"""

from __future__ import annotations

import argparse
import sys
import time

from cpkv_cli import InputError, OneLineParser, quiet_stdout, refuse, run

# Only modules without torch (or rich) at import: the parser and its checks run first.
from . import _limits as lim
from ._cli_checks import DEFAULT_CP, HTTP_ONLY, check_args, plan
from ._compare import TOLERANCE, Report, ScenarioResult
from ._scenarios import SCENARIOS, scenario_names

PROG = "cpkv-validate"

__all__ = ["DEFAULT_CP", "build_parser", "main"]

SPLITS = ("zigzag", "interleave")
ALLOCATOR_MODES = ("free", "sglang")  # _engine.ALLOCATORS, without importing torch for --help
OFFSET_RULES = ("upstream", "fixed")  # _ragged.RAGGED_RULES (no torch there either)


def build_parser() -> argparse.ArgumentParser:
    p = OneLineParser(
        prog=PROG,
        description="Cross-request KV contamination check: every request at batch size N (with "
        "context parallelism) against the same request alone at batch size 1 without CP.",
        epilog="exit status: 0 every request matches batch size 1; 1 contamination or a mismatch; "
        "2 bad input, a server that cannot be used, or completions too short to be evidence "
        "(one line on stderr names it and the fix); 130 interrupted (Ctrl-C; --json is left as "
        "it was, it is only ever replaced whole)",
    )
    p.add_argument(
        "--engine",
        choices=["reference", "http"],
        default=None,
        help="reference: the built-in GlmMoeDsa-shaped engine (default); "
        "http: a live OpenAI-compatible server (implied by --url)",
    )
    p.add_argument("--list-scenarios", action="store_true", help="print the scenarios and exit")
    p.add_argument(
        "--seed", type=int, default=0, help="weights and text seed, 0..2**63-1; default 0"
    )
    p.add_argument("--json", metavar="PATH", help="also write the report as JSON to PATH")
    p.add_argument(
        "--no-progress",
        action="store_true",
        help="no progress on stderr (a bar on a terminal; otherwise, in a pipe or a log, a line "
        "per finished scenario run or completion)",
    )
    ref = p.add_argument_group("reference engine")
    ref.add_argument(
        "--scenario",
        action="append",
        metavar="NAME",
        help=f"run only this scenario (repeatable; default: all of {', '.join(scenario_names())})",
    )
    ref.add_argument(
        "--cp",
        type=int,
        help=f"context-parallel ranks (processes) for every scenario, 1..{lim.MAX_CP_CPU} on CPU "
        f"or up to the visible GPUs; default: {DEFAULT_CP}, or the CP size a scenario is named "
        "for (fresh_prompts_cp4 runs at 4)",
    )
    ref.add_argument(
        "--split",
        action="append",
        choices=SPLITS,
        help="how current tokens are spread over CP ranks (repeatable); default: both",
    )
    ref.add_argument(
        "--allocator",
        action="append",
        choices=ALLOCATOR_MODES,
        help="page allocator model (repeatable); default: both. free: token-granular prefix "
        "hits, partial pages shared and copied on write (where a value-keyed inverse breaks); "
        "sglang: SGLang's radix cache, hits rounded down to the page, fresh pages from there on",
    )
    ref.add_argument(
        "--inverse",
        choices=["per-request", "legacy"],
        help="per-request (default): the fixed (request, page)-keyed inverse; legacy: the old "
        "value-keyed one (must report contamination under --allocator free; under sglang no "
        "page is both shared and written, so there is nothing for it to break)",
    )
    ref.add_argument(
        "--sglang-offsets",
        choices=OFFSET_RULES,
        help="model SGLang's RAGGED top-k offsets where its sparse attention reads the gathered "
        "chunk of a batch without prefix under interleave CP (DSA prefill with --cp-strategy "
        "interleave and flashmla_sparse or triton_sparse_mla over fp8 KV, flashmla_sparse_q8, "
        "or flashmla_auto over fp8 KV on Blackwell). upstream: SGLang 0.5.23's per-rank "
        "offsets over the requests the rank holds (fresh_prompts_cp2/cp4 must FAIL and name "
        "the request read); fixed: each request's start in the chunk (must PASS). Runs "
        "--split interleave unless --split is given. Default: no SGLang offsets, every read "
        "goes through the per-request dense layout",
    )
    ref.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        help="cpu (default; gloo between ranks) or cuda (NCCL, one GPU per rank)",
    )
    ref.add_argument(
        "--dtype",
        choices=sorted(TOLERANCE),
        help=f"reference engine dtype; default float64 (tolerance {TOLERANCE['float64']})",
    )
    ref.add_argument(
        "--backend",
        choices=["auto", "torch", "triton", "cuda"],
        help="cpkv_runtime backend for the KV ops; default auto (cuda > triton > torch); an "
        "explicit one must be available on --device",
    )
    http = p.add_argument_group("http engine")
    http.add_argument("--url", help="base URL of an OpenAI-compatible server (http://host:port)")
    http.add_argument("--model", help="model name (default: the first of /v1/models)")
    http.add_argument(
        "--concurrency",
        type=int,
        help=f"concurrent requests in the batch run, 1..{lim.MAX_CONCURRENCY}; default "
        f"{HTTP_ONLY['concurrency']}",
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
        "--compare-tokens",
        type=int,
        metavar="N",
        help="the first N generated tokens must equal the sequential run exactly "
        "(default: all of --max-tokens)",
    )
    http.add_argument(
        "--timeout",
        type=float,
        help=f"seconds per request, up to {lim.MAX_TIMEOUT_S:.0f}; default "
        f"{HTTP_ONLY['timeout']:.0f}",
    )
    return p


def _reference(args: argparse.Namespace) -> Report:
    from ._dist import run_reference_many
    from ._runner import Options

    backend = None if args.backend == "auto" else args.backend
    default_splits = ("interleave",) if args.sglang_offsets else SPLITS
    splits = list(dict.fromkeys(args.split or default_splits))
    allocators = list(dict.fromkeys(args.allocator or ALLOCATOR_MODES))
    t0 = time.perf_counter()
    results: list[ScenarioResult] = []
    planned = sorted(plan(args).items())
    total = sum(len(names) for _, names in planned) * len(splits) * len(allocators)
    for cp, names in planned:
        runs = [
            Options(
                scenarios=names,
                cp=cp,
                split=split,
                inverse=args.inverse,
                allocator=allocator,
                device=args.device,
                dtype=args.dtype,
                seed=args.seed,
                backend=backend,
                sglang_offsets=args.sglang_offsets,
            )
            for split in splits
            for allocator in allocators
        ]
        count = (len(results), total)
        for part in run_reference_many(runs, not args.no_progress, count):
            results.extend(part)
    order = {n: i for i, n in enumerate(scenario_names())}
    results.sort(
        key=lambda s: (order[s.name], s.cp, splits.index(s.split), allocators.index(s.allocator))
    )
    config = {
        "engine": "reference",
        "cp": args.cp if args.cp is not None else f"per scenario (default {DEFAULT_CP})",
        "splits": splits,
        "allocators": allocators,
        "inverse": args.inverse,
        "sglang_offsets": args.sglang_offsets,
        "device": args.device,
        "dtype": args.dtype,
        "backend": args.backend,
        "seed": args.seed,
        "tolerance": TOLERANCE[args.dtype],
        "model": runs[0].model_config().to_dict(),
    }
    return Report(config, results, time.perf_counter() - t0)


def _http(args: argparse.Namespace) -> Report:
    from ._http import run_http

    return run_http(
        args.url,
        model=args.model,
        concurrency=args.concurrency,
        requests=args.requests or max(args.concurrency, 2),
        max_tokens=args.max_tokens,
        compare_tokens=args.compare_tokens,
        seed=args.seed,
        timeout=args.timeout,
        show_progress=not args.no_progress,
    )


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``cpkv-validate``; returns the exit status.

    Ctrl-C, start-up included, is one line and 130 (``cpkv_cli.run``): the ranks are ended and
    ``--json`` is left as it was, which the line says.
    """
    return run(PROG, lambda: _main(argv), interrupted=lambda: _json_kept(argv))


def _json_kept(argv: list[str] | None) -> str:
    """ "; --json PATH left as it was" when argv names a report file, for the interrupt line."""
    argv = sys.argv[1:] if argv is None else argv
    for i, arg in enumerate(argv):
        if arg == "--json" and i + 1 < len(argv):
            return f"; --json {argv[i + 1]} left as it was"
        if arg.startswith("--json="):
            return f"; --json {arg.split('=', 1)[1]} left as it was"
    return ""


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # --help goes through emit: quiet into a closed pipe
    if args.list_scenarios:
        with quiet_stdout():
            for name, spec in SCENARIOS.items():
                at = f"[cp {spec.cp}] " if spec.cp else ""
                print(f"{name:28s} {at}{spec.description}")
        return 0
    try:
        check_args(args)
    except InputError as exc:
        parser.error(str(exc))
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    """Run the checked ``args``, print the table, write ``--json`` (atomically)."""
    from ._report import print_report, write_json

    try:
        report = _reference(args) if args.engine == "reference" else _http(args)
    except ConnectionError as exc:  # the http engine's ServerError: one line
        return refuse(PROG, exc)
    with quiet_stdout():
        print_report(report)
    if args.json:
        try:
            write_json(report, args.json)
        except OSError as exc:
            return refuse(
                PROG,
                f"cannot write --json {args.json} ({exc.strerror}); the report above is complete",
            )
    if report.ok:
        return 0
    if report.verdicts("FAIL"):
        return 1
    short = report.verdicts("SHORT")
    n = sum(len(s.requests) for s in report.scenarios)
    return refuse(
        PROG,
        f"no evidence: {len(short)} of {n} requests generated fewer than --max-tokens "
        f"{args.max_tokens} tokens without finish reason 'stop' (or nothing to compare), so "
        f"matching outputs prove nothing; the table shows each run's tokens. Fix: check --model "
        f"and the server's generation limits, or lower --max-tokens",
    )


if __name__ == "__main__":
    sys.exit(main())
