"""Every environment variable a cpkv command reads, declared once: its name, what it accepts, and
the parser that reads it.

Why in one place: a bad value used to surface wherever it was first read, for ``cpkv-validate``
inside a rank (a 60-line multi-process traceback and exit 1, its contamination code) and for
``cpkv-serve`` inside SGLang's processes. Now each command checks the variables it reads at start,
in the launching process (:func:`check_environment`: one line naming the variable and what it
accepts, exit 2 through :func:`cpkv_cli.run`), lists them in ``--help``
(:class:`~cpkv_cli.OneLineParser`'s ``environment=``), and every library reads them through the
same :meth:`EnvVar.read`, so what the check accepts is what the library does. :data:`READ_BY` says
which command reads which. Unset and empty (or blank) mean the same: the default.
"""

from __future__ import annotations

import os
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from cpkv_cli._messages import InputError

T = TypeVar("T")

__all__ = [
    "READ_BY",
    "VARIABLES",
    "EnvVar",
    "check_environment",
    "environment_help",
]


@dataclass(frozen=True)
class EnvVar(Generic[T]):
    """One variable.

    Attributes:
        name: the variable (``CPKV_BACKEND``).
        accepts: what a value may be, as the error line and ``--help`` say it.
        unset: what holds when it is unset or blank, as ``--help`` says it.
        parse: the stripped, non-empty value to what the reader uses; raises ``ValueError``.
        default: what :meth:`read` returns when it is unset or blank.
        what: what it does, for ``--help``.
    """

    name: str
    accepts: str
    unset: str
    parse: Callable[[str], T]
    default: T
    what: str

    def read(
        self,
        environ: Mapping[str, str] | None = None,
        *,
        error: Callable[[str], Exception] = InputError,
    ) -> T:
        """The parsed value (``environ``: default ``os.environ``).

        Raises:
            error: a value the parser refuses, in one line: ``NAME='value': expected ...``.
        """
        raw = (os.environ if environ is None else environ).get(self.name, "")
        text = raw.strip()
        if not text:
            return self.default
        try:
            return self.parse(text)
        except ValueError:
            shown = repr(raw) if len(raw) <= 80 else f"{raw[:60]!r}... ({len(raw)} characters)"
            raise error(
                f"{self.name}={shown}: expected {self.accepts}; or unset it ({self.unset})"
            ) from None


def check_environment(
    variables: Sequence[EnvVar[Any]], environ: Mapping[str, str] | None = None
) -> None:
    """Read each of ``variables`` once, so a bad value stops a command before it starts anything.

    Raises:
        InputError: the first bad value (one line, see :meth:`EnvVar.read`).
    """
    for var in variables:
        var.read(environ)


def environment_help(variables: Sequence[EnvVar[Any]]) -> str:
    """The ``--help`` section listing ``variables`` (empty when there are none)."""
    if not variables:
        return ""
    lines = ["environment (each checked at start: a bad value is one line, exit 2):"]
    for var in variables:
        lines.append(f"  {var.name}")
        text = f"{var.what}: {var.accepts}; unset: {var.unset}"
        indent = " " * 6
        lines += textwrap.wrap(
            text, 78, initial_indent=indent, subsequent_indent=indent, break_on_hyphens=False
        )
    return "\n".join(lines)


# Parsers: stripped, non-empty text in, the value out, ValueError for anything else ------------
_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}
_NAME = re.compile(r"[a-z0-9][a-z0-9_-]*")
_DOTTED = r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*"
_ENTRY_POINT = re.compile(rf"{_DOTTED}:{_DOTTED}")
_FLAG = "1 or 0 (or true/false, yes/no, on/off)"
INT64_MAX = 2**63 - 1


def _flag(text: str) -> bool:
    word = text.lower()
    if word in _TRUE:
        return True
    if word in _FALSE:
        return False
    raise ValueError(text)


def _bit(text: str) -> bool:
    if text not in ("0", "1"):
        raise ValueError(text)
    return text == "1"


def _one_of(*choices: str, fold: bool = False) -> Callable[[str], str]:
    def parse(text: str) -> str:
        value = text.lower() if fold else text
        if value not in choices:
            raise ValueError(text)
        return value

    return parse


def _byte_count(text: str) -> int:
    if not text.isascii() or not text.isdigit() or len(text) > 19 or int(text) > INT64_MAX:
        raise ValueError(text)
    return int(text)


def _directory(text: str) -> Path:
    path = Path(text).expanduser()
    if path.exists() and not path.is_dir():
        raise ValueError(text)
    return path


def _name(text: str) -> str:
    if not _NAME.fullmatch(text):
        raise ValueError(text)
    return text


def _names(text: str) -> tuple[str, ...]:
    return tuple(_name(n.strip()) for n in text.split(",") if n.strip())


def _entry_points(text: str) -> tuple[str, ...]:
    specs = tuple(s.strip() for s in text.split(",") if s.strip())
    if not all(_ENTRY_POINT.fullmatch(s) for s in specs):
        raise ValueError(text)
    return specs


def _version(text: str) -> str:
    # why lazily: cpkv_cli has no dependencies; only deepgemm-compat reads a version, and it
    # depends on packaging (so the check is the one find_kernel_package applies)
    from packaging.version import InvalidVersion, Version

    try:
        Version(text)
    except InvalidVersion:
        raise ValueError(text) from None
    return text


# cpkv_runtime (read on every op call; also inside cpkv-validate's ranks and SGLang's processes)
CPKV_BACKEND = EnvVar(
    "CPKV_BACKEND", "auto, torch, triton or cuda", "auto",
    _one_of("auto", "cuda", "triton", "torch", fold=True), "auto",
    "cpkv_runtime's backend for every op (auto: cuda > triton > torch by availability)",
)  # fmt: skip
CPKV_DEBUG = EnvVar(
    "CPKV_DEBUG", _FLAG, "off", _flag, False,
    "re-check cpkv_runtime's invariants after every op",
)  # fmt: skip
CPKV_EXTRA_BACKENDS = EnvVar(
    "CPKV_EXTRA_BACKENDS", "comma-separated module:callable backend factories", "none",
    _entry_points, (), "cpkv_runtime backends to load besides the installed entry points",
)  # fmt: skip
CPKV_CP_SPLIT_MAX_BYTES = EnvVar(
    "CPKV_CP_SPLIT_MAX_BYTES", "a byte count, 0..2**63-1 (e.g. 8589934592)",
    "what the device can host now", _byte_count, None, "memory budget of cpkv_runtime.cp_split",
)  # fmt: skip
CPKV_LAYOUT_MAX_BYTES = EnvVar(
    "CPKV_LAYOUT_MAX_BYTES", "a byte count, 0..2**63-1 (e.g. 8589934592)",
    "what the device can host now", _byte_count, None,
    "memory budget of cpkv_runtime.plan_layout",
)  # fmt: skip
# cpkv_kernels (where installed: the cuda backend's JIT builds)
CPKV_CACHE_DIR = EnvVar(
    "CPKV_CACHE_DIR", "a directory (created if missing)", "~/.cache/cpkv", _directory, None,
    "where cpkv-kernels keeps its built CUDA kernels",
)  # fmt: skip
# the SGLang plugin (in cpkv-serve and in every SGLang process it starts)
CPKV_DISABLE_HOOKS = EnvVar(
    "CPKV_DISABLE_HOOKS", "comma-separated hook names (cpkv-serve --dry-run lists the hooks)",
    "every hook on", _names, (), "plugin hooks not to register",
)  # fmt: skip
CPKV_SHARED_KV = EnvVar(
    "CPKV_SHARED_KV", "1 or 0", "off", _bit, False,
    "install the shared-KV hooks (cpkv-serve sets it for --cpkv-shared-kv)",
)  # fmt: skip
CPKV_ALLOW_UNTESTED_SGLANG = EnvVar(
    "CPKV_ALLOW_UNTESTED_SGLANG", "1 or 0", "off", _bit, False,
    "load the plugin on an sglang outside its tested range (a warning, not a refusal)",
)  # fmt: skip
CPKV_DEEPGEMM_FAST_TO_CHUNK = EnvVar(
    "CPKV_DEEPGEMM_FAST_TO_CHUNK", _FLAG, "off", _flag, False,
    "in SGLang's fast DeepGEMM warmup, also warm up to the chunk size",
)  # fmt: skip
CPKV_HOOKS_RECORD_DIR = EnvVar(
    "CPKV_HOOKS_RECORD_DIR", "a directory (created if missing)", "no records", _directory, None,
    "where each SGLang process records the hooks it applied (hooks-<pid>.json)",
)  # fmt: skip
DEBUG_FAULT_ACK = "i-want-wrong-output"
CPKV_DEBUG_FAULT = EnvVar(
    "CPKV_DEBUG_FAULT", "a debug fault's name", "none", _name, None,
    "plant a fault that serves wrong answers (GPU suite only; needs CPKV_DEBUG_FAULT_ACK)",
)  # fmt: skip
CPKV_DEBUG_FAULT_ACK = EnvVar(
    "CPKV_DEBUG_FAULT_ACK", DEBUG_FAULT_ACK, "not acknowledged", _one_of(DEBUG_FAULT_ACK), None,
    "acknowledge CPKV_DEBUG_FAULT",
)  # fmt: skip
CPKV_DEBUG_BREAK_HOOK = EnvVar(
    "CPKV_DEBUG_BREAK_HOOK", "a registered hook's name", "none", _name, None,
    "make that hook fail to apply (GPU suite only)",
)  # fmt: skip
# deepgemm_compat
DEEPGEMM_COMPAT_M_LIST = EnvVar(
    "DEEPGEMM_COMPAT_M_LIST", "auto, sglang or copy", "auto", _one_of("auto", "sglang", "copy"),
    "auto", "where SGLang's warmup M list comes from (plan --m-list's default)",
)  # fmt: skip
DEEPGEMM_COMPAT_MIN_SGL_KERNEL = EnvVar(
    "DEEPGEMM_COMPAT_MIN_SGL_KERNEL", "a version (e.g. 0.4.9)", "0.4.9", _version, None,
    "the lowest sglang-kernel accepted",
)  # fmt: skip
DEEPGEMM_COMPAT_SKIP_KERNEL_CHECK = EnvVar(
    "DEEPGEMM_COMPAT_SKIP_KERNEL_CHECK", _FLAG, "off", _flag, False,
    "skip check_kernel_package's minimum",
)  # fmt: skip
DEEPGEMM_COMPAT_SKIP_CHECKS = EnvVar(
    "DEEPGEMM_COMPAT_SKIP_CHECKS", _FLAG, "off", _flag, False,
    "import deep_gemm without the pairing checks first",
)  # fmt: skip
DEEPGEMM_COMPAT_ALLOW_UNTESTED = EnvVar(
    "DEEPGEMM_COMPAT_ALLOW_UNTESTED", _FLAG, "off", _flag, False,
    "accept an sgl-deep-gemm newer than every wheel checked",
)  # fmt: skip

_RUNTIME = (
    CPKV_BACKEND, CPKV_DEBUG, CPKV_EXTRA_BACKENDS, CPKV_CP_SPLIT_MAX_BYTES, CPKV_LAYOUT_MAX_BYTES,
    CPKV_CACHE_DIR,
)  # fmt: skip
_PLUGIN = (
    CPKV_DISABLE_HOOKS, CPKV_SHARED_KV, CPKV_ALLOW_UNTESTED_SGLANG, CPKV_DEEPGEMM_FAST_TO_CHUNK,
    CPKV_HOOKS_RECORD_DIR, CPKV_DEBUG_FAULT, CPKV_DEBUG_FAULT_ACK, CPKV_DEBUG_BREAK_HOOK,
)  # fmt: skip

#: command (each console script, and the one CLI run with ``python -m``) -> the variables it
#: reads, in its own process or in those it starts
READ_BY: dict[str, tuple[EnvVar[Any], ...]] = {
    # the reference engine's ranks run cpkv_runtime (and cpkv-kernels' backends where installed)
    "cpkv-validate": _RUNTIME,
    "python -m cpkv_validate.refserver": _RUNTIME,  # the same engine, per request
    # SGLang's processes run the plugin, and under --cpkv-shared-kv cpkv_runtime
    "cpkv-serve": (*_PLUGIN, *_RUNTIME),
    # doctor: the pairing checks and the kernel minimum; plan: the M list's source
    "deepgemm-compat": (
        DEEPGEMM_COMPAT_M_LIST,
        DEEPGEMM_COMPAT_MIN_SGL_KERNEL,
        DEEPGEMM_COMPAT_SKIP_CHECKS,
        DEEPGEMM_COMPAT_ALLOW_UNTESTED,
    ),
    "glm-config": (),
    "indexcache": (),
    "govctl": (),
}

#: every declared variable by name (those no console script reads included)
VARIABLES: dict[str, EnvVar[Any]] = {
    v.name: v
    for v in (*_RUNTIME, *_PLUGIN, *READ_BY["deepgemm-compat"], DEEPGEMM_COMPAT_SKIP_KERNEL_CHECK)
}
