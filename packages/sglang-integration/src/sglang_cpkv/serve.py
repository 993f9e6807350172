"""``cpkv-serve``: ``sglang serve`` with the cpkv plugin active, plus a GPU-free dry run.

Usage::

    cpkv-serve [sglang serve args] [--cpkv-index-topk-freq F] [--cpkv-index-skip-topk-offset O]
               [--cpkv-index-topk-pattern FS...] [--cpkv-shared-kv] [--dry-run [--gpu sm90|sm100]
               [--dry-run-format text|json] [--cpkv-scratch-batch BxPREFIX+EXTEND]
               [--cpkv-gpu-mem-gib GIB]]

Example (a laptop, a directory holding only GLM-5.1's config.json)::

    cpkv-serve --model-path ./glm51 --tp 8 --enable-prefill-cp --attn-cp-size 8 \\
        --cp-strategy interleave --cpkv-index-topk-freq 4 --dry-run --gpu sm100

Exit status: 0 served/printed, 1 refused (unsupported sglang, hook drift), 2 bad arguments or
a resolution error (the message names the fix).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence

from sglang_cpkv._flags import (
    GPUS,
    CpkvArgs,
    build_parser,
    merge_model_overrides,
    parse_cpkv_args,
    with_sharding,
)
from sglang_cpkv._version_guard import check_sglang_version
from sglang_cpkv.errors import CpkvSGLangError, PluginRefused


def dry_run(
    sglang_argv: Sequence[str], gpu: str | None, fmt: str = "text", args: CpkvArgs | None = None
) -> int:
    """Resolve ``sglang_argv`` for ``gpu`` (default: the local one), print the report.

    Returns:
        0 on success, 2 when resolution refuses the arguments.
    """
    from sglang_cpkv._dry_run import local_capability, resolve
    from sglang_cpkv._report import build_report, render_text

    capability = GPUS[gpu] if gpu else None
    if capability is None and local_capability() is None:
        print(
            "cpkv-serve --dry-run: no CUDA GPU on this machine; pass --gpu sm90 or --gpu sm100 "
            "to resolve for one.",
            file=sys.stderr,
        )
        return 2
    try:
        server_args = resolve(sglang_argv, capability)
    except Exception as err:  # SGLang's resolution raises ValueError, AssertionError, ...
        print(
            f"cpkv-serve --dry-run: SGLang refused these arguments: {type(err).__name__}: {err}",
            file=sys.stderr,
        )
        return 2
    report = build_report(server_args, capability)
    if args is not None and args.shared_kv:
        from sglang_cpkv.shared_kv._report import shared_kv_section

        report["shared_kv"] = shared_kv_section(server_args, capability, args)
    if fmt == "json":
        print(json.dumps(report, indent=2, default=str))
    else:
        print(render_text(report), end="")
        if "shared_kv" in report:
            from sglang_cpkv.shared_kv._report import render_shared_kv

            print(render_shared_kv(report["shared_kv"]), end="")
    return 0


def serve(sglang_argv: Sequence[str]) -> int:
    """Load the plugin the way SGLang does, then run ``sglang serve`` with ``sglang_argv``."""
    from sglang.cli.serve import serve as sglang_serve

    from sglang_cpkv.plugin import activate

    activate()
    sglang_serve(None, list(sglang_argv))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``cpkv-serve``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        # cpkv's own flags first; `sglang serve --help` (below, from SGLang) lists the rest
        print(build_parser().format_help())
        print("--- sglang serve ---", flush=True)
    args = parse_cpkv_args(argv)
    try:
        check_sglang_version()
        sglang_argv = merge_model_overrides(args.sglang_argv, args.index_overrides)
    except CpkvSGLangError as err:
        raise PluginRefused(str(err)) from err
    except ValueError as err:
        print(f"cpkv-serve: {err}", file=sys.stderr)
        return 2
    if args.shared_kv:
        # Inherited by every SGLang process: their plugin load installs the shared-KV hooks.
        os.environ["CPKV_SHARED_KV"] = "1"
        sglang_argv = with_sharding(sglang_argv)
    if args.dry_run:
        return dry_run(sglang_argv, args.gpu, args.dry_run_format, args)
    return serve(sglang_argv)


if __name__ == "__main__":
    sys.exit(main())
