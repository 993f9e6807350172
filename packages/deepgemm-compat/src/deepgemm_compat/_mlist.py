"""SGLang's DeepGEMM warmup M list, read from SGLang itself when it is importable.

SGLang builds one M list per process (``update_deep_gemm_config`` in
``sglang/srt/layers/deep_gemm_wrapper/compile_utils.py``) and JIT-warms every DeepGEMM kernel for
it. :func:`sglang_m_list` runs that very function at run time, through the source the cpkv SGLang
plugin (``sglang-integration``) registers under the entry-point group :data:`SOURCE_GROUP`: this
package never imports ``sglang`` itself. The copy below (:func:`copy_m_list`) is only the
fallback where no source is installed (``deepgemm-compat plan`` on a laptop). A differential test
in ``sglang-integration`` holds the copy equal to the real function of :data:`HELD_EQUAL_TO` for a
table of chunk sizes and for random ones.

The rule, as SGLang 0.5.23 has it:

* full mode: every M in ``1..m_max``; ``m_max`` is 65536 when chunking is off
  (``chunked < 1``), 16384 up to ``chunked = 8192``, else ``min(2 * chunked, 131072)``.
* fast mode (``SGLANG_JIT_DEEPGEMM_FAST_WARMUP``): always ``1..1024``; then, while
  ``next_m < bound`` with ``bound = min(chunked, 32768)`` (16384 when chunking is off), every
  ``step``-th M of ``[next_m, 2 * next_m)`` for ``next_m = 1024, 2048, ...`` and
  ``step = 2, 4, ...``, *not* cut at the bound; plus the bound itself. At chunked 12288 that is
  3071 Ms up to 16368.
"""

from __future__ import annotations

from collections.abc import Callable
from importlib.metadata import entry_points

from cpkv_cli.environment import DEEPGEMM_COMPAT_M_LIST

#: The SGLang release :func:`copy_m_list` is held equal to (by the differential test).
HELD_EQUAL_TO = "sglang 0.5.23"
#: Where SGLang's function lives.
UPSTREAM = "sglang.srt.layers.deep_gemm_wrapper.compile_utils.update_deep_gemm_config"
#: Environment variable choosing the source; values as for ``source`` of :func:`sglang_m_list`.
SOURCE_ENV = "DEEPGEMM_COMPAT_M_LIST"
SOURCES = ("auto", "sglang", "copy")
#: Entry-point group of run-time M-list sources; the SGLang plugin registers ``sglang`` there as
#: ``f(chunked_prefill_size, fast) -> list[int]``.
SOURCE_GROUP = "deepgemm_compat.m_list_sources"


def _check_chunked(chunked_prefill_size: object) -> int:
    if not isinstance(chunked_prefill_size, int) or isinstance(chunked_prefill_size, bool):
        raise ValueError(f"chunked_prefill_size must be an int, got {chunked_prefill_size!r}")
    return chunked_prefill_size


def fast_sample(bound: int) -> list[int]:
    """SGLang's fast-mode sample for a ``bound``: ``1..1024``, the stepped ranges while
    ``next_m < bound`` (each runs to ``2 * next_m``, past the bound), and the bound itself."""
    ms = set(range(1, 1025))
    next_m, step = 1024, 2
    while next_m < bound:
        ms.update(range(next_m, 2 * next_m, step))
        next_m, step = 2 * next_m, 2 * step
    ms.add(bound)
    return sorted(ms)


def copy_m_list(chunked_prefill_size: int, fast: bool = False) -> list[int]:
    """Our copy of SGLang's warmup M list (see the module docstring); the fallback only."""
    chunked = _check_chunked(chunked_prefill_size)
    if fast:
        return fast_sample(min(chunked, 32 * 1024) if chunked >= 1 else 16 * 1024)
    if chunked < 1:
        m_max = 64 * 1024
    elif chunked > 8192:
        m_max = min(2 * chunked, 128 * 1024)
    else:
        m_max = 16 * 1024
    return list(range(1, m_max + 1))


def _upstream_source() -> Callable[[int, bool], list[int]]:
    """The ``sglang`` entry point of :data:`SOURCE_GROUP`, loaded (which imports SGLang)."""
    found = [ep for ep in entry_points(group=SOURCE_GROUP) if ep.name == "sglang"]
    if not found:
        raise ImportError(
            f"no run-time source of SGLang's list: install sglang-integration (the cpkv SGLang "
            f"plugin, entry point {SOURCE_GROUP}:sglang) beside SGLang"
        )
    try:
        return found[0].load()
    except Exception as exc:  # an installed but broken sglang counts as absent
        raise ImportError(f"cannot load {found[0].value}: {exc!r}") from exc


def upstream_m_list(chunked_prefill_size: int, fast: bool = False) -> list[int]:
    """SGLang's own M list for ``chunked_prefill_size`` and mode, computed by SGLang's code.

    Raises:
        ImportError: no source is installed, or SGLang's import fails.
        RuntimeError: SGLang's function reads a runtime input the source does not supply.
    """
    chunked = _check_chunked(chunked_prefill_size)
    source = _upstream_source()
    try:
        return list(source(chunked, bool(fast)))
    except ImportError as exc:  # an installed but broken sglang counts as absent
        raise ImportError(f"cannot import sglang: {exc!r}") from exc


def _installed_sglang() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"sglang {version('sglang')}"
    except PackageNotFoundError:
        return "sglang"


def resolve_m_list(
    chunked_prefill_size: int, fast: bool = False, source: str | None = None
) -> tuple[list[int], str]:
    """SGLang's warmup M list and where it came from.

    Args:
        chunked_prefill_size: ``--chunked-prefill-size`` (-1 = chunking off).
        fast: SGLang's fast warmup mode (``SGLANG_JIT_DEEPGEMM_FAST_WARMUP=1``).
        source: ``"auto"`` (SGLang's function when importable, else the copy), ``"sglang"``
            (SGLang's function or an error) or ``"copy"``; default ``$DEEPGEMM_COMPAT_M_LIST``,
            else ``"auto"``.

    Returns:
        ``(ms, source)``, ``ms`` sorted ascending; ``source`` names the SGLang release that
        computed it, or says that the copy was used and why.
    """
    chosen = source if source is not None else DEEPGEMM_COMPAT_M_LIST.read()
    if chosen not in SOURCES:
        raise ValueError(f"M list source {chosen!r} is not one of {', '.join(SOURCES)} (source=)")
    _check_chunked(chunked_prefill_size)
    if chosen == "copy":
        return copy_m_list(chunked_prefill_size, fast), f"copy of {HELD_EQUAL_TO}"
    try:
        ms = upstream_m_list(chunked_prefill_size, fast)
    except ImportError as exc:
        if chosen == "sglang":
            raise
        why = f"copy of {HELD_EQUAL_TO} (SGLang not importable: {exc})"
        return copy_m_list(chunked_prefill_size, fast), why
    return ms, f"{_installed_sglang()} update_deep_gemm_config"


def sglang_m_list(
    chunked_prefill_size: int, fast: bool = False, source: str | None = None
) -> list[int]:
    """SGLang's warmup M list (full or fast mode), before any kernel-specific filter."""
    return resolve_m_list(chunked_prefill_size, fast, source)[0]


def sglang_m_max(chunked_prefill_size: int, source: str | None = None) -> int:
    """The largest M of SGLang's full-mode list: the largest forward SGLang warms for."""
    return max(sglang_m_list(chunked_prefill_size, False, source))
