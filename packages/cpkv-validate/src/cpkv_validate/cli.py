"""``cpkv-validate``: check that batch size > 1 (with CP) gives every request its own KV.

Exit status: 0 every request matches batch size 1; 1 contamination (or a mismatch) somewhere;
2 bad arguments.

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
from pathlib import Path

from ._compare import TOLERANCE, Report, ScenarioResult
from ._report import print_report, write_json
from ._scenarios import SCENARIOS, scenario_names

__all__ = ["DEFAULT_CP", "build_parser", "main"]

#: CP size of the default run for scenarios that name none of their own.
DEFAULT_CP = 2
SPLITS = ("zigzag", "interleave")
ALLOCATOR_MODES = ("free", "sglang")  # _engine.ALLOCATORS, without importing torch for --help
OFFSET_RULES = ("upstream", "fixed")  # _ragged.RAGGED_RULES (no torch there either)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="cpkv-validate",
        description="Cross-request KV contamination check: every request at batch size N (with "
        "context parallelism) against the same request alone at batch size 1 without CP.",
    )
    p.add_argument(
        "--engine",
        choices=["reference", "http"],
        default=None,
        help="reference: the built-in GlmMoeDsa-shaped engine (default); "
        "http: a live OpenAI-compatible server (implied by --url)",
    )
    p.add_argument(
        "--scenario",
        action="append",
        metavar="NAME",
        help=f"run only this scenario (repeatable; default: all of {', '.join(scenario_names())})",
    )
    p.add_argument("--list-scenarios", action="store_true", help="print the scenarios and exit")
    p.add_argument(
        "--cp",
        type=int,
        default=None,
        help=f"context-parallel ranks (processes) for every scenario; default: {DEFAULT_CP}, or "
        "the CP size a scenario is named for (fresh_prompts_cp4 runs at 4)",
    )
    p.add_argument(
        "--split",
        action="append",
        choices=SPLITS,
        help="how current tokens are spread over CP ranks (repeatable); default: both",
    )
    p.add_argument(
        "--allocator",
        action="append",
        choices=ALLOCATOR_MODES,
        help="page allocator model (repeatable); default: both. free: token-granular prefix "
        "hits, partial pages shared and copied on write (where a value-keyed inverse breaks); "
        "sglang: SGLang's radix cache, hits rounded down to the page, fresh pages from there on",
    )
    p.add_argument(
        "--inverse",
        choices=["per-request", "legacy"],
        default="per-request",
        help="per-request: the fixed (request, page)-keyed inverse; legacy: the old "
        "value-keyed one (must report contamination under --allocator free; under sglang no "
        "page is both shared and written, so there is nothing for it to break)",
    )
    p.add_argument(
        "--sglang-offsets",
        choices=OFFSET_RULES,
        default=None,
        help="model SGLang's RAGGED top-k offsets where its sparse attention reads the gathered "
        "chunk of a batch without prefix under interleave CP (DSA prefill with --cp-strategy "
        "interleave and flashmla_sparse or triton_sparse_mla over fp8 KV, flashmla_sparse_q8, "
        "or flashmla_auto over fp8 KV on Blackwell). upstream: SGLang 0.5.23's per-rank "
        "offsets over the requests the rank holds (fresh_prompts_cp2/cp4 must FAIL and name "
        "the request read); fixed: each request's start in the chunk (must PASS). Runs "
        "--split interleave unless --split is given. Default: no SGLang offsets, every read "
        "goes through the per-request dense layout",
    )
    p.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="cpu (gloo between ranks) or cuda (NCCL, one GPU per rank)",
    )
    p.add_argument(
        "--dtype",
        choices=sorted(TOLERANCE),
        default="float64",
        help=f"reference engine dtype; default float64 (tolerance {TOLERANCE['float64']})",
    )
    p.add_argument(
        "--backend",
        choices=["auto", "torch", "triton", "cuda"],
        default="auto",
        help="cpkv_runtime backend for the KV ops; default auto (cuda > triton > torch)",
    )
    p.add_argument("--seed", type=int, default=0, help="weights and text seed; default 0")
    p.add_argument("--url", help="base URL of an OpenAI-compatible server (http engine)")
    p.add_argument("--model", help="model name for the server (default: the first of /v1/models)")
    p.add_argument(
        "--concurrency",
        type=int,
        default=8,
        help="http engine: concurrent requests in the batch run; default 8",
    )
    p.add_argument(
        "--requests",
        type=int,
        default=None,
        help="http engine: requests per run (default: --concurrency)",
    )
    p.add_argument(
        "--max-tokens", type=int, default=32, help="http engine: tokens to generate; default 32"
    )
    p.add_argument(
        "--compare-tokens",
        type=int,
        default=None,
        metavar="N",
        help="http engine: the first N generated tokens must equal the sequential run exactly "
        "(default: all of --max-tokens)",
    )
    p.add_argument("--timeout", type=float, default=120.0, help="http engine: per-request seconds")
    p.add_argument("--json", metavar="PATH", help="also write the report as JSON to PATH")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def _check(args: argparse.Namespace, p: argparse.ArgumentParser) -> None:
    if args.engine is None:
        args.engine = "http" if args.url else "reference"
    if args.engine == "http":
        if not args.url:
            p.error(
                "--engine http needs --url URL (the server's base URL, e.g. http://127.0.0.1:30000)"
            )
        if not args.url.startswith(("http://", "https://")):
            p.error(f"--url must start with http:// or https://, got {args.url!r}")
        if args.inverse != "per-request":
            p.error("--inverse applies to the reference engine only (a server has its own inverse)")
        if args.sglang_offsets is not None:
            p.error("--sglang-offsets applies to the reference engine only")
        if args.allocator or args.split or args.cp is not None:
            p.error("--cp, --split and --allocator apply to the reference engine only")
        for name in ("concurrency", "max_tokens"):
            if getattr(args, name) < 1:
                p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
        if args.requests is not None and args.requests < 2:
            p.error(f"--requests must be >= 2 (a batch needs two requests), got {args.requests}")
        n = args.compare_tokens
        if n is not None and not 1 <= n <= args.max_tokens:
            p.error(f"--compare-tokens must be in 1..--max-tokens ({args.max_tokens}), got {n}")
    elif args.url:
        p.error("--url is for --engine http; drop --engine reference or --url")
    if args.cp is not None and args.cp < 1:
        p.error(f"--cp must be >= 1, got {args.cp}")
    names = scenario_names()
    unknown = [s for s in args.scenario or [] if s not in names]
    if unknown:
        p.error(f"unknown scenario(s) {', '.join(unknown)}; choose from {', '.join(names)}")
    if args.device == "cuda" and args.engine == "reference":
        import torch

        if not torch.cuda.is_available():
            p.error("--device cuda: no CUDA device is visible here; use --device cpu")
        most = max(_plan(args))
        if most > torch.cuda.device_count():
            p.error(
                f"cp {most} needs {most} GPUs (NCCL: one GPU per rank), "
                f"{torch.cuda.device_count()} visible; fix: pass --cp N or leave out the "
                f"scenarios named for a larger cp"
            )
    if args.json:
        parent = Path(args.json).resolve().parent
        if not parent.is_dir():
            p.error(f"--json {args.json}: directory {parent} does not exist")


def _plan(args: argparse.Namespace) -> dict[int, list[str]]:
    """cp size -> the scenarios that run at it (``--cp``, else each scenario's own, else 2)."""
    plan: dict[int, list[str]] = {}
    for name in args.scenario or scenario_names():
        cp = args.cp if args.cp is not None else (SCENARIOS[name].cp or DEFAULT_CP)
        plan.setdefault(cp, []).append(name)
    return plan


def _reference(args: argparse.Namespace) -> Report:
    from ._dist import run_reference_many
    from ._runner import Options

    backend = None if args.backend == "auto" else args.backend
    default_splits = ("interleave",) if args.sglang_offsets else SPLITS
    splits = list(dict.fromkeys(args.split or default_splits))
    allocators = list(dict.fromkeys(args.allocator or ALLOCATOR_MODES))
    t0 = time.perf_counter()
    results: list[ScenarioResult] = []
    for cp, names in sorted(_plan(args).items()):
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
        for part in run_reference_many(runs, show_progress=not args.no_progress):
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
    """Entry point of ``cpkv-validate``; returns the exit status."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.list_scenarios:
        for name, spec in SCENARIOS.items():
            at = f"[cp {spec.cp}] " if spec.cp else ""
            print(f"{name:28s} {at}{spec.description}")
        return 0
    _check(args, parser)
    try:
        report = _reference(args) if args.engine == "reference" else _http(args)
    except ConnectionError as exc:
        print(f"cpkv-validate: {exc}", file=sys.stderr)
        return 2
    print_report(report)
    if args.json:
        write_json(report, args.json)
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
