"""``cpkv-validate``: check that batch size > 1 (with CP) gives every request its own KV.

Exit status: 0 every request matches batch size 1 (http: or drifts at a near-tie); 1
contamination, and nothing else; 2 bad input (one line on stderr names the input and the fix;
nothing is run or written), a server that cannot be used (one line: unreachable, too slow, a
reply too large, not HTTP, not the OpenAI API), not enough evidence or not a batch test (http:
the table, then one line; see ``_cli_http``), or a report that cannot be written (a full disk,
a closed stdout: one line). Every number is bounded before anything is built or started:
``--cp`` by the host (at most 16 CPU ranks, or the visible GPUs), the http engine's counts by
``_limits``. Arguments are parsed and checked before torch is imported (``--help`` and a refusal
take a fraction of a second; the http engine never imports torch). A reader that closes stdout
early (``| head -1``) ends the output quietly; the exit status stays the command's own. Ctrl-C,
during start-up or the run, ends every rank and exits 130 with one line; ``--json`` is written
through a temporary file renamed into place, so it is either the whole new report or what was
there before (``--json -``: to stdout, with the table on stderr).

Examples::

    cpkv-validate              # reference engine, every scenario, both splits, both allocators, CPU
    cpkv-validate --cp 4 --split interleave --allocator sglang --scenario tiny_extends
    cpkv-validate --inverse legacy                 # the old value-keyed inverse: must FAIL
    cpkv-validate --sglang-offsets upstream --scenario fresh_prompts_cp2   # SGLang 0.5.23: FAIL
    cpkv-validate --url http://127.0.0.1:30000 --concurrency 8 --json report.json
    cpkv-validate --url http://127.0.0.1:30000 --json - | jq .config.max_in_flight
"""

from __future__ import annotations

import argparse
import sys
import time

from cpkv_cli import InputError, OneLineParser, OutputError, check_environment, emit, refuse, run
from cpkv_cli.environment import READ_BY

# Only modules without torch (or rich) at import: the parser and its checks run first.
from . import _limits as lim
from ._cli_checks import DEFAULT_CP, check_args, plan
from ._cli_http import EPILOG, add_http_arguments, http_status, run_http_args
from ._compare import TOLERANCE, Report, ScenarioResult
from ._scenario_text import ScenarioSpec
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
        epilog=EPILOG + "Exit status: 0 every request matches batch size 1 (or drifts at a "
        "near-tie); 1 contamination, and nothing else; 2 bad input, a server that cannot be "
        "used, not enough evidence (fewer than --min-compared tokens compared), every prompt "
        "answered alike (no leak could show), not a batch test "
        "(requests did not overlap), or output that cannot be written (one line on stderr names "
        "it and the fix); 130 interrupted (Ctrl-C; --json is left as it was, it is only ever "
        "replaced whole). --json - writes the JSON to stdout and the table to stderr.",
        environment=READ_BY[PROG],
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
    p.add_argument(
        "--json",
        metavar="PATH",
        help="also write the report as JSON to PATH (-: to stdout, the table then to stderr)",
    )
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
    add_http_arguments(p)
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


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``cpkv-validate``; returns the exit status.

    Ctrl-C, start-up included, is one line and 130 (``cpkv_cli.run``): the ranks are ended and
    ``--json`` is left as it was, which the line says.
    """
    return run(PROG, lambda: _main(argv), interrupted=lambda: _json_kept(argv))


def _json_kept(argv: list[str] | None) -> str:
    """ "; --json PATH left as it was" when argv names a report file, for the interrupt line."""
    argv = sys.argv[1:] if argv is None else argv
    path = None
    for i, arg in enumerate(argv):
        if arg == "--json" and i + 1 < len(argv):
            path = argv[i + 1]
        elif arg.startswith("--json="):
            path = arg.split("=", 1)[1]
    return "" if path in (None, "-") else f"; --json {path} left as it was"


def _main(argv: list[str] | None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # --help goes through emit: quiet into a closed pipe
    check_environment(READ_BY[PROG])  # here, not in a rank: one line, exit 2
    if args.list_scenarios:  # through emit: > /dev/full or >&- is one line and exit 2
        emit("\n".join(_scenario_line(name, spec) for name, spec in SCENARIOS.items()))
        return 0
    try:
        check_args(args)
    except InputError as exc:
        parser.error(str(exc))
    return _run(args)


def _scenario_line(name: str, spec: ScenarioSpec) -> str:
    at = f"[cp {spec.cp}] " if spec.cp else ""
    return f"{name:28s} {at}{spec.description}"


def _run(args: argparse.Namespace) -> int:
    """Run the checked ``args``, print the table, write ``--json`` (atomically, or to stdout)."""
    from ._report import layout, render_report, write_json

    try:
        report = _reference(args) if args.engine == "reference" else run_http_args(args)
    except ConnectionError as exc:  # the http engine's ServerError: one line
        return refuse(PROG, exc)
    target = args.json_target
    to_stderr = target is not None and target.kind == "stdout"  # stdout carries the JSON
    stream = sys.stderr if to_stderr else sys.stdout
    text = render_report(report, **layout(stream)).rstrip("\n")
    verdict = "contamination found" if report.verdicts("FAIL") else "no contamination"
    try:
        if to_stderr:
            print(text, file=sys.stderr, flush=True)
        else:
            emit(text)
        if target is not None:
            write_json(report, target)
    except OutputError as exc:  # a full disk or a closed stdout: the report is lost
        raise OutputError(f"{exc} (the run's verdict: {verdict})") from None
    except OSError as exc:
        return refuse(
            PROG,
            f"cannot write --json {args.json} ({exc.strerror}); the report above is complete "
            f"(the run's verdict: {verdict})",
        )
    if args.engine == "http":
        return http_status(PROG, report)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
