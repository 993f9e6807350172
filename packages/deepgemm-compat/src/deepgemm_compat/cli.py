"""``deepgemm-compat``: check the installed sgl-deep-gemm, and plan a CP-aware warmup.

Exit codes: 0 ok, 1 a blocking problem found (doctor), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys

from deepgemm_compat._mlist import SOURCE_ENV, SOURCES

DESCRIPTION = """\
Check and plan sgl-deep-gemm for SGLang deployments.

  doctor  what is installed (sgl-deep-gemm, torch, apache-tvm-ffi, sglang-kernel), whether
          the wheel's _C.so pairs with this torch (read from the ELF symbol tables, before
          importing it), which deep_gemm symbol serves each facade op, and one fix per problem.
  plan    the DeepGEMM JIT warmup grid per GEMM shape (GLM-5.1 built in), as SGLang builds
          it and after the CP-aware shrink, side by side.
"""

PLAN_EPILOG = """\
SGLang's list: taken from SGLang's own update_deep_gemm_config when sglang is importable
(--m-list auto), else from the copy held equal to it (see README).
The shrink: under CP with a sequence split, the attention-side dense GEMMs (rows cp_local) stop
at the most rows one rank can run for a forward of up to m_max tokens (m_max = the top of
SGLang's full list, e.g. 2 * chunked up to 131072), and never below --floor. Interleave:
roundup(ceil(m_max / cp), cp). Zigzag: no shrink, because a batch with an extend shorter than
2 * cp runs without CP. The dense MLP and shared expert (rows gathered: SGLang all-gathers the
FFN input over attention CP) and grouped MoE GEMMs keep SGLang's list. With a draft model
outside CP (--draft without --draft-cp) nothing shrinks.

example: deepgemm-compat plan --chunked 65536 --cp 8 --split interleave
"""


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="deepgemm-compat",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = ap.add_subparsers(dest="command", required=True)
    doc = sub.add_parser(
        "doctor",
        help="report the installation and one fix per problem",
        description="Report the sgl-deep-gemm installation; exit 1 on a blocking problem.",
    )
    doc.add_argument("--format", choices=("text", "json"), default="text")
    doc.add_argument("--no-import", action="store_true", help="skip the trial `import deep_gemm`")
    plan = sub.add_parser(
        "plan",
        help="print the warmup M grid before/after the CP shrink",
        description="Plan the DeepGEMM warmup for GLM-5.1 shapes.",
        epilog=PLAN_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    plan.add_argument(
        "--chunked", type=int, default=8192, help="--chunked-prefill-size (-1 = off); 8192"
    )
    plan.add_argument("--cp", type=int, default=1, help="CP size of the prefill ranks; 1")
    plan.add_argument(
        "--split",
        choices=("zigzag", "interleave", "none"),
        default="interleave",
        help="how CP splits a sequence (SGLang's --cp-strategy); interleave",
    )
    plan.add_argument("--draft", action="store_true", help="a draft (EAGLE/MTP) model runs")
    plan.add_argument("--draft-cp", action="store_true", help="the draft model runs under CP too")
    plan.add_argument("--fast", action="store_true", help="model SGLANG_JIT_DEEPGEMM_FAST_WARMUP=1")
    plan.add_argument(
        "--fast-to-chunk",
        action="store_true",
        help="with --fast, also warm SGLang's fast sample continued up to --chunked",
    )
    plan.add_argument(
        "--m-list",
        choices=SOURCES,
        default=None,
        help="SGLang's list from sglang itself, the copy, or auto (sglang when importable); "
        f"default ${SOURCE_ENV} or auto",
    )
    plan.add_argument(
        "--floor", type=int, default=2048, help="smallest dense m_max after shrink; 2048"
    )
    plan.add_argument("--ep", type=int, default=8, help="expert parallelism; 8 (32 experts a rank)")
    plan.add_argument("--attn-tp", type=int, default=1, help="TP over attention heads; 1")
    plan.add_argument(
        "--dense-tp", type=int, default=8, help="TP of the dense MLP (1 = replicated); 8"
    )
    plan.add_argument(
        "--shared-tp", type=int, default=1, help="TP of the shared expert (1 with DeepEP); 1"
    )
    plan.add_argument("--moe", choices=("contiguous", "masked", "both"), default="contiguous")
    plan.add_argument(
        "--mk-alignment", type=int, default=128, help="contiguous-layout M alignment; 128"
    )
    plan.add_argument("--shapes", choices=("glm51", "glm51-reduced"), default="glm51")
    plan.add_argument("--format", choices=("text", "json"), default="text")
    return ap


def _plan(args: argparse.Namespace) -> int:
    from deepgemm_compat.warmup import CPSetup, glm51_reduced_shapes, glm51_shapes, plan_warmup

    if args.shapes == "glm51":
        shapes = glm51_shapes(
            attn_tp=args.attn_tp, dense_tp=args.dense_tp, shared_tp=args.shared_tp, ep=args.ep,
            moe=args.moe,
        )  # fmt: skip
    else:
        shapes = glm51_reduced_shapes(ep=args.ep)
    cp = CPSetup(args.cp, args.split, args.draft, args.draft_cp)
    plan = plan_warmup(
        shapes, args.chunked, cp, fast=args.fast, fast_to_chunk=args.fast_to_chunk,
        floor=args.floor, mk_alignment=args.mk_alignment, source=args.m_list,
    )  # fmt: skip
    if args.format == "json":
        print(json.dumps(plan.to_dict(), indent=1))
        return 0
    head = (
        f"{'shape':<44} {'kernel':<32} {'N':>6} {'K':>6} {'G':>3} {'rows':<8} "
        f"{'Ms before':>10} {'Ms after':>9}  reason"
    )
    print(
        f"chunked_prefill_size={plan.chunked_prefill_size} fast={plan.fast} cp={cp.size} "
        f"split={cp.split.value} draft={cp.draft} draft_cp={cp.draft_cp}"
    )
    print(f"SGLang's M list: {plan.m_list_source}")
    rows = "" if plan.cap.rows is None else f"; a rank runs at most {plan.cap.rows} rows"
    print(
        f"m_max {plan.m_max} -> dense {plan.dense_m_max} (forwards up to "
        f"{plan.cap.forward_tokens} tokens{rows})"
    )
    if plan.fast_to_chunk:
        print(f"fast_to_chunk: {len(plan.fast_to_chunk)} Ms added up to {plan.fast_to_chunk[-1]}")
    print(head)
    print("-" * len(head))
    for e in plan.entries:
        s = e.shape
        print(
            f"{s.name:<44} {s.kernel.value:<32} {s.n:>6} {s.k:>6} {s.groups:>3} "
            f"{'-' if s.kernel.grouped else s.rows.value:<8} "
            f"{len(e.before):>10} {len(e.after):>9}  {e.reason}"
        )
    print("-" * len(head))
    saved = plan.before_total - plan.after_total
    pct = 100 * saved / plan.before_total if plan.before_total else 0.0
    print(
        f"{'total':<44} {'':<32} {'':>6} {'':>6} {'':>3} {'':<8} {plan.before_total:>10} "
        f"{plan.after_total:>9}  {saved} fewer warmup calls ({pct:.0f}%)"
    )
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from deepgemm_compat._doctor import render_text, report

    doc = report(do_import=not args.no_import)
    print(json.dumps(doc, indent=1) if args.format == "json" else render_text(doc))
    return 0 if doc["ok"] else 1


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``deepgemm-compat`` console script."""
    args = _parser().parse_args(argv)
    try:
        return _plan(args) if args.command == "plan" else _doctor(args)
    except ValueError as exc:
        print(f"deepgemm-compat {args.command}: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
