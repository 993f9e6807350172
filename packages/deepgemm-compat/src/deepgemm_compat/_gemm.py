"""FP8 GEMMs: dense, grouped contiguous (MoE prefill), grouped masked (MoE decode).

Operands are DeepGEMM's ``(data, scale)`` pairs: ``data`` float8_e4m3fn, ``scale`` float32
(1x128 per token for the LHS, 128x128 per block for the RHS; int32 = packed UE8M0 on SM100).
Optional arguments go by keyword only: 0.1.4 inserted ``ensure_zero_padding`` in the middle
of the contiguous signature, so positional optionals shift meaning between releases.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

from deepgemm_compat import _checks as chk
from deepgemm_compat._surface import ADDED_IN, OVERLAP_KEYWORDS, Surface, surface
from deepgemm_compat.errors import InputError, UnsupportedFeatureError

if TYPE_CHECKING:
    import torch

Pair = tuple["torch.Tensor", "torch.Tensor"]


def _keywords(s: Surface, op: str, given: dict[str, Any]) -> dict[str, Any]:
    """Keep only keywords the wheel takes; a missing one that was set is an error."""
    params = s.params(op)
    if params is None:
        return given
    unknown = [k for k in given if k not in params]
    if unknown:
        k = unknown[0]
        since = (
            f' (added in {ADDED_IN[k]}: pip install "sgl-deep-gemm>={ADDED_IN[k]}")'
            if k in ADDED_IN
            else ""
        )
        raise UnsupportedFeatureError(
            f"sgl-deep-gemm {s.version}'s {s.which(op)} takes no {k!r}{since}; "
            f"it takes: {', '.join(params)}"
        )
    return given


def fp8_gemm_nt(
    lhs: Pair,
    rhs: Pair,
    out: torch.Tensor,
    *,
    recipe: tuple[int, int, int] | None = None,
    c: torch.Tensor | None = None,
) -> torch.Tensor:
    """``out = lhs @ rhs.T (+ c)`` with block-scaled fp8 operands.

    Args:
        lhs: ``(M, K)`` fp8 with ``(M, ceil(K / 128))`` scales.
        rhs: ``(N, K)`` fp8 with ``(ceil(N / 128), ceil(K / 128))`` scales.
        out: ``(M, N)`` bfloat16 (float32 when accumulating into ``c``); written.
        recipe: scaling granularity, e.g. ``(1, 128, 128)``; the wheel picks by default.
        c: optional ``(M, N)`` float32 accumulator.

    Returns:
        ``out``.
    """
    a, _ = chk.fp8_pair("lhs", lhs, 1)
    b, _ = chk.fp8_pair("rhs", rhs, 0)
    chk.need_dim("lhs[0]", a, 2, "(M, K)")
    chk.need_dim("rhs[0]", b, 2, "(N, K)")
    chk.need_size("rhs[0]", b, 1, a.shape[1], "K of lhs")
    chk.need_dim("out", out, 2, "(M, N)")
    chk.need_shape("out", out, (a.shape[0], b.shape[0]), "(M, N)")
    chk.same_device(lhs=a, rhs=b, out=out, c=c)
    s = surface()
    given: dict[str, Any] = {}
    if recipe is not None:
        given["recipe"] = tuple(recipe)
    if c is not None:
        given["c"] = c
    s.require("fp8_gemm_nt")(tuple(lhs), tuple(rhs), out, **_keywords(s, "fp8_gemm_nt", given))
    return out


def grouped_gemm_contiguous(
    lhs: Pair,
    rhs: Pair,
    out: torch.Tensor,
    layout: torch.Tensor | None = None,
    *,
    m_indices: torch.Tensor | None = None,
    grouped_layout: torch.Tensor | None = None,
    **optional: Any,
) -> torch.Tensor:
    """MoE GEMM over tokens sorted by expert: ``out[m] = lhs[m] @ rhs[layout[m]].T``.

    The layout goes to the wheel positionally (its parameter is ``grouped_layout``;
    SGLang calls it ``m_indices``, which the wheels reject as a keyword). Give it once:
    as the fourth argument, ``m_indices=`` or ``grouped_layout=``.

    Args:
        lhs: ``(M, K)`` fp8 + ``(M, ceil(K / 128))`` scales, rows grouped by expert, each
            group padded to ``get_mk_alignment_for_contiguous_layout()``.
        rhs: ``(G, N, K)`` fp8 + ``(G, ceil(N / 128), ceil(K / 128))`` scales.
        out: ``(M, N)`` bfloat16; written.
        layout: ``(M,)`` int32 expert per row (``-1`` = padding row).
        **optional: wheel keywords (``recipe_a``, ``ensure_zero_padding``, ...), checked
            against the installed signature.

    Returns:
        ``out``.
    """
    given = [x for x in (layout, m_indices, grouped_layout) if x is not None]
    if len(given) != 1:
        raise InputError(
            "pass the expert layout exactly once (4th argument, m_indices= or grouped_layout=), "
            f"got {len(given)}"
        )
    (lay,) = given
    a, _ = chk.fp8_pair("lhs", lhs, 1)
    b, _ = chk.fp8_pair("rhs", rhs, 0)
    chk.need_dim("lhs[0]", a, 2, "(M, K)")
    chk.need_dim("rhs[0]", b, 3, "(groups, N, K)")
    chk.need_size("rhs[0]", b, 2, a.shape[1], "K of lhs")
    chk.int32_layout("layout", lay, 1)
    if not optional.get("use_psum_layout"):
        chk.need_size("layout", lay, 0, a.shape[0], "one expert id per lhs row")
    chk.need_shape("out", out, (a.shape[0], b.shape[1]), "(M, N)")
    chk.same_device(lhs=a, rhs=b, out=out, layout=lay)
    if a.shape[0] == 0:
        return out
    s = surface()
    kw = _keywords(s, "grouped_gemm_contiguous", optional)
    s.require("grouped_gemm_contiguous")(tuple(lhs), tuple(rhs), out, lay, **kw)
    return out


class MaskedGemmResult(NamedTuple):
    """``grouped_gemm_masked``'s result, the same shape on every release.

    ``overlap`` is whatever a wheel returns for single-batch overlap, else ``None``
    (every published wheel returns ``None``).
    """

    out: torch.Tensor
    overlap: Any = None


def grouped_gemm_masked(
    lhs: Pair,
    rhs: Pair,
    out: torch.Tensor,
    masked_m: torch.Tensor,
    expected_m: int,
    *,
    enable_overlap: bool = False,
    max_block_n: int | None = None,
    signal: torch.Tensor | None = None,
    **optional: Any,
) -> MaskedGemmResult:
    """MoE GEMM over per-expert padded blocks: ``out[g, :masked_m[g]] = lhs[g] @ rhs[g].T``.

    Args:
        lhs: ``(G, M_max, K)`` fp8 + ``(G, M_max, ceil(K / 128))`` scales.
        rhs: ``(G, N, K)`` fp8 + ``(G, ceil(N / 128), ceil(K / 128))`` scales.
        out: ``(G, M_max, N)`` bfloat16; rows past ``masked_m[g]`` are left as they were.
        masked_m: ``(G,)`` int32 valid rows per expert.
        expected_m: typical rows per expert; DeepGEMM tunes (and compiles) for it.
        enable_overlap, max_block_n, signal: single-batch-overlap keywords, passed only
            where the wheel's signature has them (no published wheel does).

    Raises:
        UnsupportedFeatureError: overlap requested on a wheel without it.
    """
    a, _ = chk.fp8_pair("lhs", lhs, 2)
    b, _ = chk.fp8_pair("rhs", rhs, 1)
    chk.need_dim("lhs[0]", a, 3, "(groups, M_max, K)")
    chk.need_dim("rhs[0]", b, 3, "(groups, N, K)")
    chk.need_size("rhs[0]", b, 0, a.shape[0], "groups of lhs")
    chk.need_size("rhs[0]", b, 2, a.shape[2], "K of lhs")
    chk.int32_layout("masked_m", masked_m, 1)
    chk.need_size("masked_m", masked_m, 0, a.shape[0], "one count per group")
    chk.need_shape("out", out, (a.shape[0], a.shape[1], b.shape[1]), "(G, M_max, N)")
    chk.same_device(lhs=a, rhs=b, out=out, masked_m=masked_m, signal=signal)
    s = surface()
    wants_overlap = enable_overlap or signal is not None
    params = s.params("grouped_gemm_masked") or {}
    if wants_overlap:
        missing = [k for k in OVERLAP_KEYWORDS if k not in params]
        if missing:
            raise UnsupportedFeatureError(
                "single-batch overlap needs a masked GEMM that takes "
                f"{', '.join(OVERLAP_KEYWORDS)}; "
                f"sgl-deep-gemm {s.version}'s {s.which('grouped_gemm_masked')} has no "
                f"{', '.join(missing)} (no published sgl-deep-gemm wheel does): run without overlap"
            )
        optional = {**optional, "enable_overlap": True, "signal": signal}
        if max_block_n is not None:
            optional["max_block_n"] = max_block_n
    kw = _keywords(s, "grouped_gemm_masked", optional)
    fn = s.require("grouped_gemm_masked")
    ret = fn(tuple(lhs), tuple(rhs), out, masked_m, int(expected_m), **kw)
    return MaskedGemmResult(out, ret)
