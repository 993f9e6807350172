"""``cpkv-serve``: ``sglang serve`` with the cpkv plugin active, plus a GPU-free dry run.

Usage::

    cpkv-serve [sglang serve args] [--cpkv-index-topk-freq F] [--cpkv-index-skip-topk-offset O]
               [--cpkv-index-topk-pattern FS...] [--cpkv-shared-kv [--cpkv-scratch-batch ...]
               [--cpkv-gpu-mem-gib G]] [--dry-run [--gpu sm90|sm100] [--dry-run-format text|json]]

Example (a laptop, a directory holding only GLM-5.1's config.json)::

    cpkv-serve --model-path ./glm51 --tp 8 --enable-prefill-cp --attn-cp-size 8 \\
        --cp-strategy interleave --cpkv-index-topk-freq 4 --dry-run --gpu sm100

Before SGLang is imported (about 30 s), ``_preflight`` checks the arguments, the model path and
its config.json (a repo id that cannot be resolved offline within seconds included), and the
machine (a launch needs a CUDA GPU): a bad input is one line on stderr, naming the input and the
fix, within a second or two. Then a dry run and a launch alike resolve the arguments with
SGLang's own code and run SGLang's ``check_server_args()`` and cpkv's check of the DSA backends
against the GPU (``_resolve_check``) before anything is printed or SGLang's server starts.
``--help`` prints cpkv's flags, then SGLang's.

Exit status: 0 served/printed, 1 refused by the plugin as it loads (unsupported sglang, hook
drift, a hook target that fails to import, a hook that did not take, an exception inside its
``load()``: one line naming the cause), 2 bad arguments (cpkv's, and SGLang's names and choices
where the installed release is the one ``_sglang_options`` was read from; ``--cpkv-shared-kv``
at attention CP size 1 or before 0.5.22; a debug plant asked for wrongly), a bad model, no CUDA
GPU for a launch, or a refusal of the resolved arguments by SGLang or by cpkv (one line that says
whose and names the fix), 130 interrupted (Ctrl-C, one line, also during SGLang's import). A
closed stdout (``| head``) ends the output quietly.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import warnings
from collections.abc import Iterator, Sequence

from cpkv_cli import emit, refuse, run
from cpkv_cli.environment import READ_BY, check_environment

from sglang_cpkv.errors import CpkvSGLangError, PluginRefused
from sglang_cpkv.plugin._version_guard import check_sglang_version
from sglang_cpkv.serve._flags import (
    GPUS,
    CpkvArgs,
    build_parser,
    merge_model_overrides,
    parse_cpkv_args,
    with_sharding,
)

PROG = "cpkv-serve"

#: SGLang 0.5.23's quantization modules warn at import on a machine without CUDA/HIP/XPU/NPU
#: (``awq/awq.py``: "Only CUDA, HIP and XPU support AWQ currently.", ``gguf.py``: "Only CUDA,
#: MUSA and NPU support GGUF quantization currently."): every dry run on a laptop. A GPU host
#: never sees them.
SGLANG_NO_CUDA_WARNINGS = (
    (r"Only CUDA, .* support (AWQ|GGUF)", r"sglang\.srt\.layers\.quantization\."),
)


@contextlib.contextmanager
def sglang_import_warnings_filtered() -> Iterator[None]:
    """Inside the block, ignore :data:`SGLANG_NO_CUDA_WARNINGS`; the filters are restored after.

    Scoped by message and by the warning module, so nothing else is hidden, and only here: a
    program importing SGLang itself still sees them.
    """
    with warnings.catch_warnings():
        for message, module in SGLANG_NO_CUDA_WARNINGS:
            warnings.filterwarnings("ignore", message, UserWarning, module)
        yield


def dry_run(
    sglang_argv: Sequence[str], gpu: str | None, fmt: str = "text", args: CpkvArgs | None = None
) -> int:
    """Resolve ``sglang_argv`` for ``gpu`` (default: the local one), check it as SGLang's launcher
    does, print the report.

    SGLang's log lines of the resolution show at ``--log-level warning`` or ``info`` only (the
    report says what they say). A refusal is one line, SGLang's named as SGLang's and cpkv's
    (the plugin's, raised during SGLang's resolution, or the report's bounds) as cpkv's.

    Returns:
        0 on success, 2 when SGLang or cpkv refuses the arguments.
    """
    from sglang_cpkv.serve._dry_run import local_capability
    from sglang_cpkv.serve._report import build_report, render_text
    from sglang_cpkv.serve._report_plugin import resolved_notes
    from sglang_cpkv.serve._resolve_check import (
        DRY_RUN_LOG_LEVEL,
        SGLangRefused,
        own_errors,
        resolve_checked,
        with_log_level,
    )
    from sglang_cpkv.serve._sglang_argv import read_sglang_args

    capability = GPUS[gpu] if gpu else None
    if capability is not None:
        emulated_gpu_arch_quiet()
    if capability is None and local_capability() is None:
        print(
            "cpkv-serve --dry-run: no CUDA GPU on this machine; pass --gpu sm90 or --gpu sm100 "
            "to resolve for one.",
            file=sys.stderr,
        )
        return 2
    try:
        server_args = resolve_checked(
            with_log_level(sglang_argv, DRY_RUN_LOG_LEVEL, keep_users=True), capability
        )
        report = build_report(server_args, capability)
        report["notes"] = resolved_notes(read_sglang_args(sglang_argv), report["resolved"])
        if args is not None and args.shared_kv:
            from sglang_cpkv.serve._report_shared_kv import shared_kv_section

            report["shared_kv"] = shared_kv_section(server_args, capability, args)
    except SGLangRefused as err:
        print(f"cpkv-serve --dry-run: SGLang refused these arguments: {err}", file=sys.stderr)
        return 2
    except own_errors() as err:  # the plugin's refusal, a bound of the report's planners
        return refuse(PROG, err)
    if fmt == "json":
        print(json.dumps(report, indent=2, default=str))
    else:
        print(render_text(report), end="")
        if "shared_kv" in report:
            from sglang_cpkv.serve._report_shared_kv import render_shared_kv

            print(render_shared_kv(report["shared_kv"]), end="")
    return 0


#: SGLang's JIT kernels probe the local GPU's architecture as they import and warn where there
#: is none; a dry run for ``--gpu`` describes another machine, so the warning is not about it.
_ARCH_LOGGER, _ARCH_WARNING = "sglang.kernels.jit.utils.arch", "Cannot detect CUDA architecture"


def emulated_gpu_arch_quiet() -> None:
    """Drop SGLang's "Cannot detect CUDA architecture." from this process (``--gpu`` runs).

    It came first on every ``--dry-run --gpu`` on a machine without a GPU, about a machine the
    report is not about. Only that record of that logger is dropped.
    """
    import logging

    logging.getLogger(_ARCH_LOGGER).addFilter(
        lambda record: not record.getMessage().startswith(_ARCH_WARNING)
    )


def serve(sglang_argv: Sequence[str]) -> int:
    """Load the plugin the way SGLang does, check the arguments on this GPU, then run ``sglang
    serve`` with ``sglang_argv``.

    The plugin loads before SGLang's CLI is imported: that import configures SGLang's logging,
    after which a refusal would be logged and then printed again by its ``SystemExit``. The check
    (:func:`launch_refusal`) resolves the arguments on this GPU before SGLang's server starts, so
    SGLang's refusal of them, or the plugin's, is one line and exit 2, not a traceback.
    """
    from sglang_cpkv.plugin.entry import activate

    activate()
    if (refused := launch_refusal(sglang_argv)) is not None:
        return refused
    from sglang.cli.serve import serve as sglang_serve

    sglang_serve(None, list(sglang_argv))
    return 0


def launch_refusal(sglang_argv: Sequence[str]) -> int | None:
    """Resolve and check ``sglang_argv`` on this GPU as a dry run does
    (``_resolve_check.resolve_checked``), quietly; the refusal's exit status (2, after one line),
    or None when SGLang may start.

    Another serve backend (``--model-type`` other than ``llm``) is SGLang's alone. The plugin's
    decisions are forgotten after the check, so SGLang's own resolution logs them again.
    """
    from sglang_cpkv.plugin import _decisions
    from sglang_cpkv.serve._resolve_check import (
        SGLangRefused,
        own_errors,
        resolve_checked,
        root_logging_restored,
        with_log_level,
    )
    from sglang_cpkv.serve._sglang_options import strip_model_type

    argv, kind = strip_model_type(list(sglang_argv))
    if kind not in ("auto", "llm"):
        return None
    try:
        with root_logging_restored():
            resolve_checked(with_log_level(argv, "error", keep_users=False), None)
    except SGLangRefused as err:
        return refuse(PROG, f"SGLang refused these arguments: {err}")
    except own_errors() as err:
        return refuse(PROG, err)
    finally:
        _decisions.clear()
    return None


def print_help(*, from_sglang: bool = False) -> int:
    """cpkv-serve's own flags, then ``sglang serve``'s: listed from ``_sglang_options``' table when
    the installed sglang is the release it was read from (no import), else (or with
    ``--help-sglang``) SGLang's own help, which imports SGLang."""
    from sglang_cpkv.plugin._version_guard import installed_sglang_version
    from sglang_cpkv.serve._sglang_options import print_sglang_help

    emit(build_parser().format_help())  # > /dev/full, >&-: one line, exit 2
    print("--- sglang serve ---", flush=True)  # ours is out before SGLang's slow import
    if not from_sglang and print_sglang_help(installed_sglang_version()):
        return 0
    from sglang.cli.serve import serve as sglang_serve

    try:
        sglang_serve(None, ["--help"])
    except SystemExit as exc:  # argparse's --help exits 0
        return exc.code if isinstance(exc.code, int) else 0
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``cpkv-serve``; Ctrl-C (also while SGLang imports) is one line, 130."""
    argv = list(sys.argv[1:] if argv is None else argv)
    return run(PROG, lambda: _main(argv))


def _main(argv: list[str]) -> int:
    from sglang_cpkv.serve._machine import check_machine
    from sglang_cpkv.serve._preflight import preflight
    from sglang_cpkv.serve._sglang_argv import positional_model_path

    if "--help-sglang" in argv:
        with sglang_import_warnings_filtered():
            return print_help(from_sglang=True)
    if "-h" in argv or "--help" in argv:
        with sglang_import_warnings_filtered():
            return print_help()
    args = parse_cpkv_args(argv)
    check_environment(READ_BY[PROG])  # here, not in SGLang's processes: one line, exit 2
    try:
        check_sglang_version()
    except CpkvSGLangError as err:
        raise PluginRefused(str(err)) from err
    known = [s for a in build_parser()._actions for s in a.option_strings]
    try:
        checked = preflight(args.index_overrides, args.sglang_argv, known, shared_kv=args.shared_kv)
        check_machine(checked.args, args.dry_run, args.gpu)
        sglang_argv = merge_model_overrides(
            positional_model_path(args.sglang_argv), args.index_overrides
        )
    except ValueError as err:  # InputError, and SGLang-free checks of the library packages
        return refuse(PROG, err)
    if args.shared_kv:
        # Inherited by every SGLang process: their plugin load installs the shared-KV hooks.
        os.environ["CPKV_SHARED_KV"] = "1"
        sglang_argv = with_sharding(sglang_argv)
    with sglang_import_warnings_filtered():
        if args.dry_run:
            return dry_run(sglang_argv, args.gpu, args.dry_run_format, args)
        return serve(sglang_argv)


if __name__ == "__main__":
    sys.exit(main())
