"""SGLang's resolution of the arguments, then the checks SGLang and cpkv make before weights load.

SGLang's launcher (``Engine._launch_subprocesses``, sglang 0.5.20 to 0.5.23) resolves the record
(``resolve_once``) and then runs ``ServerArgs.check_server_args()`` before it starts a process.
The dry run used to stop after the resolution, so it approved what the launch refused
(``--chunked-prefill-size 100`` with DSA's page size 64). :func:`resolve_checked` runs both, as
SGLang's own code called at run time (each accepted release checks with its own rules), and then
cpkv's check of the resolved DSA backends against the GPU (:func:`check_gpu_fits`). The dry run
calls it for the emulated or local GPU; a real launch calls it for the local GPU before SGLang's
server starts, so a refusal is one line either way.

A refusal says whose it is: :class:`SGLangRefused` carries what SGLang's code raised
(``ValueError``, ``AssertionError``...) as one line; an error of cpkv's own packages
(:func:`own_errors`: the plugin's ``DsaBackendError`` and ``SharedKVError``, raised inside
SGLang's resolution, an ``InputError``...) passes unchanged, to be reported as cpkv's.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator, Sequence
from typing import Any

from cpkv_cli import InputError, one_line

#: The level a dry run's resolution logs at unless ``--log-level`` says otherwise: SGLang logs
#: about 12 INFO and WARNING lines while it resolves (page size, KV dtype, backends...), which the
#: report states itself.
DRY_RUN_LOG_LEVEL = "error"
LOG_LEVEL_FLAG = "--log-level"

#: CUDA DSA backends built on FlashMLA, whose kernels exist for SM90 (Hopper, the ``flash_mla``
#: wheel's legacy half) and SM100 (Blackwell, its current half) only. SGLang 0.5.23 still picks
#: ``flashmla_sparse`` on an SM80 or SM89 GPU; the kernel load would fail after the weights.
#: (``trtllm`` below SM100 is the plugin's ``dsa-backends`` rule, refused during resolution.)
FLASHMLA_BACKENDS = frozenset(
    {"flashmla_sparse", "flashmla_sparse_q8", "flashmla_kv", "flashmla_auto"}
)
FLASHMLA_MAJORS = (9, 10)


class SGLangRefused(Exception):
    """SGLang's resolution or ``check_server_args()`` refused the arguments (its message, one
    line, with the exception's class name)."""


def own_errors() -> tuple[type[Exception], ...]:
    """The error classes of this repository's packages: a refusal of cpkv's, not SGLang's."""
    from deepgemm_compat.errors import DeepGemmCompatError
    from glm_config.errors import GlmConfigError
    from indexcache.errors import IndexCacheError

    from sglang_cpkv.errors import CpkvSGLangError

    return (InputError, CpkvSGLangError, DeepGemmCompatError, IndexCacheError, GlmConfigError)


def has_log_level(argv: Sequence[str]) -> bool:
    """Whether ``argv`` sets SGLang's ``--log-level`` (argparse takes no abbreviation of it:
    ``--log-level-http`` shares every prefix)."""
    return any(a == LOG_LEVEL_FLAG or a.startswith(LOG_LEVEL_FLAG + "=") for a in argv)


def with_log_level(argv: Sequence[str], level: str, *, keep_users: bool) -> list[str]:
    """``argv`` with ``--log-level level`` appended (the last occurrence wins in argparse);
    unchanged when ``keep_users`` and the user set one."""
    if keep_users and has_log_level(argv):
        return list(argv)
    return [*argv, LOG_LEVEL_FLAG, level]


@contextlib.contextmanager
def root_logging_restored() -> Iterator[None]:
    """Put the root logger's level and handlers back after the block (``prepare_server_args``
    reconfigures them with ``basicConfig(force=True)``): a launch's check must not change how
    SGLang's launch logs."""
    root = logging.getLogger()
    level, handlers = root.level, root.handlers[:]
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def resolve_checked(argv: Sequence[str], capability: tuple[int, int] | None) -> Any:
    """Resolve ``argv`` as ``sglang serve`` does, with the plugin active, then check it as
    SGLang's launcher does before any process starts, then :func:`check_gpu_fits`.

    Args:
        argv: SGLang server arguments (cpkv flags already translated).
        capability: GPU to emulate; None resolves and checks on the local GPU.

    Returns:
        The resolved ``ServerArgs`` record.

    Raises:
        SGLangRefused: SGLang's resolution or ``check_server_args()`` refused.
        Exception: one of :func:`own_errors`, cpkv's refusal (the plugin's, raised during
            SGLang's resolution, or :func:`check_gpu_fits`'s).
    """
    from sglang_cpkv.serve._dry_run import emulated_gpu, local_capability, resolve

    ours = own_errors()
    emulation = emulated_gpu(capability) if capability else contextlib.nullcontext()
    try:
        server_args = resolve(argv, capability)
        with emulation:  # check_server_args reads the platform facts too
            server_args.check_server_args()
    except ours:
        raise
    except Exception as err:  # SGLang raises ValueError, AssertionError, RuntimeError...
        raise SGLangRefused(one_line(f"{type(err).__name__}: {err}")) from err
    check_gpu_fits(server_args, capability or local_capability())
    return server_args


def check_gpu_fits(server_args: Any, capability: tuple[int, int] | None) -> None:
    """Refuse a resolved DSA backend whose kernels the GPU cannot run (:data:`FLASHMLA_BACKENDS`
    off SM90 and SM100); a non-DSA model, a device other than CUDA or an unknown GPU pass.

    Only the backends a node runs count: the prefill side on a PD prefill node, the decode side
    on a decode node, both otherwise.

    Raises:
        InputError: names the backend, the GPU and the fix.
    """
    from sglang.srt.arg_groups.overrides import model_config_of, resolution_result
    from sglang.srt.configs.model_config import is_deepseek_dsa

    if capability is None or resolution_result(server_args, "device") != "cuda":
        return
    if not is_deepseek_dsa(model_config_of(server_args).hf_config):
        return
    mode = resolution_result(server_args, "disaggregation_mode")
    sides = {"prefill": ("prefill",), "decode": ("decode",)}.get(mode, ("prefill", "decode"))
    major, minor = capability
    for side in sides:
        backend = resolution_result(server_args, f"dsa_{side}_backend")
        if backend in FLASHMLA_BACKENDS and major not in FLASHMLA_MAJORS:
            raise InputError(
                f"this GPU is SM{major}{minor}, but the DSA {side} backend resolves to {backend}, "
                f"whose FlashMLA kernels run on SM90 (Hopper) and SM100 (Blackwell) only. Fix: "
                f"serve on an H100/H200/B200/B300 node (cpkv-serve --dry-run --gpu sm90|sm100 "
                f"shows what runs there)"
            )
