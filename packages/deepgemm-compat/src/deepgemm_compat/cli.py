"""``deepgemm-compat``: check the installed sgl-deep-gemm, and plan a CP-aware warmup.

Exit codes: 0 ok, 1 a blocking problem found (doctor), 2 bad input: one line on stderr names the
input, its bound and the fix, before anything is built; 2 also for a stdout that cannot be written
(a full disk: one line says the output is incomplete); 130 interrupted (Ctrl-C, one line). A
reader that closes stdout early (``| head -3``) ends the output quietly; the exit status stays the
command's own. These conventions are ``cpkv_cli``'s, shared by every cpkv console script.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from cpkv_cli import OneLineParser, OutputError, check_environment, emit, refuse, run
from cpkv_cli.environment import READ_BY

from deepgemm_compat._bounds import (
    DSA_PAGE_SIZE,
    INT32_MAX,
    MAX_DSA_CP,
    MAX_MK_ALIGNMENT,
    check_chunked,
    check_int,
)
from deepgemm_compat._glm51 import GLM51
from deepgemm_compat._mlist import SOURCE_ENV, SOURCES
from deepgemm_compat.errors import InputError

if TYPE_CHECKING:
    from deepgemm_compat.warmup import CPSetup, WarmupPlan

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

Bounds (each refused with one line naming it): --chunked is -1 (off; SGLang treats 0 and other
negatives as off in some places and as on in others) or a multiple of 64 (SGLang's DSA page
size) up to 2**31 - 1; --cp 1..8 (SGLang 0.5.23 runs DSA prefill CP within one 8-GPU node);
--ep divides 256, --attn-tp 64, --dense-tp 12288 and --shared-tp 2048 (GLM-5.1's experts,
heads, dense MLP and shared-expert widths); --floor 1..2**31 - 1;
--mk-alignment 1..1024.

example: deepgemm-compat plan --chunked 65536 --cp 8 --split interleave
"""

# flag -> (lowest, highest, why not higher); checked before anything is built
_SHARED_WIDTH = GLM51["moe_intermediate_size"] * GLM51["n_shared_experts"]
_PLAN_BOUNDS = {
    "cp": (
        1,
        MAX_DSA_CP,
        "SGLang 0.5.23 runs DSA prefill CP within one 8-GPU node: it asserts tp_size <= 8 and "
        "that --attn-cp-size divides it",
    ),
    "floor": (1, INT32_MAX, "a GEMM's M is a C int in DeepGEMM"),
    "ep": (1, GLM51["n_routed_experts"], "GLM-5.1 has 256 routed experts"),
    "attn_tp": (1, GLM51["num_attention_heads"], "GLM-5.1 has 64 attention heads"),
    "dense_tp": (1, GLM51["intermediate_size"], "GLM-5.1's dense MLP is 12288 wide"),
    "shared_tp": (1, _SHARED_WIDTH, "GLM-5.1's shared expert is 2048 wide"),
    "mk_alignment": (
        1,
        MAX_MK_ALIGNMENT,
        "DeepGEMM's alignment is its block M, 128 in every sgl-deep-gemm wheel",
    ),
}


def _parser() -> argparse.ArgumentParser:
    ap = OneLineParser(
        prog="deepgemm-compat",
        description=DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        environment=READ_BY["deepgemm-compat"],
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
        "--chunked",
        type=int,
        default=8192,
        help="SGLang's --chunked-prefill-size: -1 (off) or a multiple of 64; 8192",
    )
    plan.add_argument("--cp", type=int, default=1, help="CP size of the prefill ranks, 1..8; 1")
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


def _check_plan_args(args: argparse.Namespace) -> None:
    """Every bound and combination of ``plan``'s flags, first problem first."""
    check_chunked(args.chunked, "--chunked")
    if args.chunked > 0 and args.chunked % DSA_PAGE_SIZE:
        raise InputError(
            f"--chunked {args.chunked} is not a multiple of {DSA_PAGE_SIZE}: SGLang 0.5.23 asserts "
            f"chunked_prefill_size % page_size == 0, and DSA models run with page_size "
            f"{DSA_PAGE_SIZE}; fix: --chunked {-(-args.chunked // DSA_PAGE_SIZE) * DSA_PAGE_SIZE}"
        )
    for name, (low, high, why) in _PLAN_BOUNDS.items():
        check_int(getattr(args, name), "--" + name.replace("_", "-"), low, high, why)
    for name, total, what in (
        ("ep", GLM51["n_routed_experts"], "routed experts"),
        ("attn_tp", GLM51["num_attention_heads"], "attention heads"),
        ("dense_tp", GLM51["intermediate_size"], "dense MLP columns"),
        ("shared_tp", _SHARED_WIDTH, "shared-expert columns"),
    ):
        if total % getattr(args, name):
            flag = "--" + name.replace("_", "-")
            raise InputError(
                f"{flag} must divide {total} (GLM-5.1's {total} {what} are split evenly), got "
                f"{getattr(args, name)}; fix: {flag} {_nearest_divisor(total, getattr(args, name))}"
            )
    if args.draft_cp and not args.draft:
        raise InputError("--draft-cp says the draft model runs under CP; it needs --draft")
    if args.fast_to_chunk and not args.fast:
        raise InputError("--fast-to-chunk continues SGLang's fast M list; it needs --fast")


def _nearest_divisor(total: int, value: int) -> int:
    return max(d for d in range(1, total + 1) if total % d == 0 and d <= value)


def _count(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


def _plan(args: argparse.Namespace) -> int:
    from deepgemm_compat.warmup import CPSetup, glm51_reduced_shapes, glm51_shapes, plan_warmup

    _check_plan_args(args)
    if args.shapes == "glm51":
        shapes = glm51_shapes(
            attn_tp=args.attn_tp, dense_tp=args.dense_tp, shared_tp=args.shared_tp, ep=args.ep,
            moe=args.moe,
        )  # fmt: skip
    else:
        shapes = glm51_reduced_shapes(ep=args.ep)
    cp = CPSetup(args.cp, args.split, args.draft, args.draft_cp)
    try:
        plan = plan_warmup(
            shapes, args.chunked, cp, fast=args.fast, fast_to_chunk=args.fast_to_chunk,
            floor=args.floor, mk_alignment=args.mk_alignment, source=args.m_list,
        )  # fmt: skip
    except ImportError as exc:  # SGLang's list asked for where sglang does not import
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InputError(
            f"SGLang's own M list was asked for (--m-list sglang or ${SOURCE_ENV}=sglang) but "
            f"sglang does not import here ({first}); fix: install sglang, or pass --m-list copy "
            f"(held equal to sglang 0.5.23)"
        ) from None
    if args.format == "json":
        emit(json.dumps(plan.to_dict(), indent=1))
    else:
        emit(_render_plan(plan, cp))
    return 0


def _render_plan(plan: WarmupPlan, cp: CPSetup) -> str:
    head = (
        f"{'shape':<44} {'kernel':<32} {'N':>6} {'K':>6} {'G':>3} {'rows':<8} "
        f"{'Ms before':>10} {'Ms after':>9}  reason"
    )
    lines = [
        f"chunked_prefill_size={plan.chunked_prefill_size} fast={plan.fast} cp={cp.size} "
        f"split={cp.split.value} draft={cp.draft} draft_cp={cp.draft_cp}",
        f"SGLang's M list: {plan.m_list_source}",
    ]
    rows = "" if plan.cap.rows is None else f"; a rank runs at most {_count(plan.cap.rows, 'row')}"
    lines.append(
        f"m_max {plan.m_max} -> dense {plan.dense_m_max} (forwards up to "
        f"{_count(plan.cap.forward_tokens, 'token')}{rows})"
    )
    if plan.fast_to_chunk:
        added = _count(len(plan.fast_to_chunk), "M", "Ms")
        lines.append(f"fast_to_chunk: {added} added up to {plan.fast_to_chunk[-1]}")
    lines += [head, "-" * len(head)]
    for e in plan.entries:
        s = e.shape
        lines.append(
            f"{s.name:<44} {s.kernel.value:<32} {s.n:>6} {s.k:>6} {s.groups:>3} "
            f"{'-' if s.kernel.grouped else s.rows.value:<8} "
            f"{len(e.before):>10} {len(e.after):>9}  {e.reason}"
        )
    lines.append("-" * len(head))
    saved = plan.before_total - plan.after_total
    pct = 100 * saved / plan.before_total if plan.before_total else 0.0
    lines.append(
        f"{'total':<44} {'':<32} {'':>6} {'':>6} {'':>3} {'':<8} {plan.before_total:>10} "
        f"{plan.after_total:>9}  {_count(saved, 'fewer warmup call')} ({pct:.0f}%)"
    )
    return "\n".join(lines)


def _doctor(args: argparse.Namespace) -> int:
    from deepgemm_compat._doctor import render_text, report

    doc = report(do_import=not args.no_import)
    emit(json.dumps(doc, indent=1) if args.format == "json" else render_text(doc))
    return 0 if doc["ok"] else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``deepgemm-compat`` console script; returns the exit code (Ctrl-C:
    one line, 130)."""
    return run("deepgemm-compat", lambda: _main(argv))


def _main(argv: Sequence[str] | None) -> int:
    command = "deepgemm-compat"
    try:
        args = _parser().parse_args(argv)  # --help prints through emit
        check_environment(READ_BY["deepgemm-compat"])
        command += f" {args.command}"
        return _plan(args) if args.command == "plan" else _doctor(args)
    except (ValueError, OutputError) as exc:  # InputError, the library's checks, a full disk
        return refuse(command, str(exc).split("\n")[0])


if __name__ == "__main__":
    sys.exit(main())
