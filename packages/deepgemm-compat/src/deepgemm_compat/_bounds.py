"""The bounds every number given to the warmup planner is held to, each with where it comes from.

Checked at the public boundary (:func:`deepgemm_compat.warmup.plan_warmup`, ``deepgemm-compat
plan``) before anything is built, so ``chunked_prefill_size=10**12``, a CP size of ``10**9`` or a
list of a million shapes is refused at once, with the bound in the message, instead of running for
minutes (a zigzag cap loops over every rank) or building gigabytes of M lists.

Memory: a plan holds, per distinct (kernel, N, K, groups), SGLang's M list and the planned one,
each at most ``MAX_M_LIST`` Ms (SGLang's full list stops there; the fast list, continued to the
chunk by ``fast_to_chunk``, stays under 12,000 Ms even at ``MAX_CHUNKED``): 2 MiB of tuple slots a
shape. So these bounds are also a memory budget: no plan takes more than ``PLAN_BYTES``
(``test_dgc_hostile.py`` measures the largest, 135 MiB).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from deepgemm_compat._shapes import CPSetup, GemmShape
from deepgemm_compat.errors import InputError

INT32_MAX = 2**31 - 1
"""DeepGEMM reads every GEMM dimension (M, N, K, groups) as a C int."""

MAX_CHUNKED = INT32_MAX
"""Largest ``chunked_prefill_size``: a chunk's tokens are one GEMM's M, a C int in DeepGEMM.
SGLang 0.5.23 sets no bound of its own."""

MAX_CP = 72
"""Largest CP size a plan is made for: a CP group all-gathers KV every layer, so it stays inside
one NVLink domain, and the largest one built is 72 GPUs (GB200/GB300 NVL72). SGLang 0.5.23 itself
runs prefill CP for DSA models on one 8-GPU node (``MAX_DSA_CP``)."""

MAX_DSA_CP = 8
"""Largest CP size SGLang 0.5.23 runs DSA (GLM-5.x, DeepSeek-V3.2) prefill CP at: it asserts
``tp_size <= 8`` ("Context parallel only supports single machine") and that ``attn_cp_size``
divides ``tp_size``. ``deepgemm-compat plan`` plans GLM-5.1, so it holds ``--cp`` to this."""

DSA_PAGE_SIZE = 64
"""SGLang 0.5.23's KV page size for DSA models on CUDA (``64 * index_kpool``, ``index_kpool`` 1 by
default); it asserts ``chunked_prefill_size % page_size == 0`` when chunking is on."""

MAX_SHAPES = 4096
"""Most GemmShapes one plan takes (before merging): a per-layer list of the largest DSA model
(78 layers x 14 GEMMs = 1,092) fits three times over."""

MAX_KERNELS = 64
"""Most distinct (kernel, N, K, groups) in one plan: ``glm51_shapes`` gives at most 15 with every
option on, over any TP sizes; each costs up to 2 MiB of M lists (see the module docstring)."""

MAX_M_LIST = 128 * 1024
"""Longest M list SGLang 0.5.23 warms (full mode: ``min(2 * chunked, 131072)`` Ms)."""

PLAN_BYTES = MAX_KERNELS * 2 * MAX_M_LIST * 8 + 16 * 2**20
"""The most memory a plan within these bounds takes: two tuples of 8-byte slots per kernel, plus
16 MiB for SGLang's list itself (131,072 ints) and its copies: 144 MiB."""

MAX_MK_ALIGNMENT = 1024
"""Largest contiguous-layout M alignment: DeepGEMM's is its block M, 128 in every sgl-deep-gemm
wheel; 1024 is eight times that."""

CHUNKED_OFF_WHY = (
    "only -1 turns chunked prefill off: SGLang 0.5.23's scheduler and DeepGEMM warmup treat every "
    "value <= 0 as off, but its --enable-mis, --prefill-only-disable-kv-cache and PD-multiplexing "
    "checks test == -1, so 0 or -5 is off in one place and on in another"
)


def show(value: Any) -> str:
    """``value`` for an error message: short, and safe for ints too long to print."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an int of {value.bit_length()} bits"
    text = repr(value)
    return f"{text[:40]}... ({len(text)} characters)" if len(text) > 60 else text


def check_int(value: Any, name: str, low: int, high: int, why_high: str) -> int:
    """``value`` if it is an int in ``[low, high]``, else :class:`InputError` naming the bound."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(f"{name} must be an int, got {show(value)}")
    if value < low:
        raise InputError(f"{name} must be >= {low:,}, got {show(value)}")
    if value > high:
        raise InputError(f"{name} must be <= {high:,} ({why_high}), got {show(value)}")
    return value


def check_chunked(value: Any, name: str = "chunked_prefill_size") -> int:
    """-1 (off) or a chunk size in ``[1, MAX_CHUNKED]``."""
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(f"{name} must be an int, got {show(value)}")
    if value <= 0 and value != -1:
        raise InputError(
            f"{name}={value}: {CHUNKED_OFF_WHY}; fix: pass -1 for off, or a chunk size >= 1"
        )
    why = "a chunk's tokens are one GEMM's M, a C int in DeepGEMM"
    return value if value == -1 else check_int(value, name, 1, MAX_CHUNKED, why)


def check_plan_inputs(
    shapes: Any, chunked_prefill_size: Any, cp: Any, floor: Any, mk_alignment: Any
) -> None:
    """Every bound of :func:`plan_warmup`'s inputs, checked before anything is built.

    Raises:
        InputError: the first input out of its bound, named with the bound and why.
    """
    if not isinstance(shapes, Sequence) or isinstance(shapes, str):
        raise InputError(
            f"shapes must be a list or tuple of GemmShape, got {type(shapes).__name__}"
        )
    if not shapes:
        raise InputError("plan_warmup needs at least one GemmShape")
    if len(shapes) > MAX_SHAPES:
        raise InputError(
            f"plan_warmup takes at most {MAX_SHAPES:,} shapes (78 layers x 14 GEMMs of the largest "
            f"DSA model is 1,092), got {len(shapes):,}; fix: list each GEMM once"
        )
    kernels = set()
    for i, s in enumerate(shapes):
        if not isinstance(s, GemmShape):
            raise InputError(f"shapes[{i}] must be a GemmShape, got {type(s).__name__}")
        for label in ("n", "k", "groups"):
            check_int(
                getattr(s, label), f"shapes[{i}].{label}", 1, INT32_MAX, "a C int in DeepGEMM"
            )
        kernels.add(s.key)
        if len(kernels) > MAX_KERNELS:
            raise InputError(
                f"plan_warmup plans at most {MAX_KERNELS} distinct (kernel, N, K, groups) (GLM-5.1 "
                f"has at most 15; each holds up to 2 MiB of M lists), got more by shapes[{i}]; "
                f"fix: plan one model at a time"
            )
    check_chunked(chunked_prefill_size)
    if cp is not None and not isinstance(cp, CPSetup):
        raise InputError(f"cp must be a CPSetup or None, got {type(cp).__name__}")
    if cp is not None:
        why = "a CP group stays in one NVLink domain; the largest is 72 GPUs, NVL72"
        check_int(cp.size, "cp.size", 1, MAX_CP, why)
    check_int(floor, "floor", 1, INT32_MAX, "a GEMM's M is a C int in DeepGEMM")
    why = "DeepGEMM's alignment is its block M, 128 in every sgl-deep-gemm wheel"
    check_int(mk_alignment, "mk_alignment", 1, MAX_MK_ALIGNMENT, why)
