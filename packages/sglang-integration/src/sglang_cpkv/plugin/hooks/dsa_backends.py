"""DSA prefill/decode backend resolution that keeps one fp8 KV layout.

SGLang 0.5.23 picks the DSA backends in the post-process pass
``arg_groups.overrides._dsa_split_backend_resolution`` (a pass takes no resolution hook, so this
is an AROUND hook through ``HookRegistry``). With an fp8 KV cache the pool row layout depends on
the backends: ``trtllm`` reads raw rows (512 fp8 latent + 64 fp8 rope = 576 bytes), every
FlashMLA backend reads packed rows (512 fp8 + per-128 fp32 scales + 64 bf16 rope = 656 bytes),
and the pool is raw as soon as *either* side is ``trtllm``. A mixed pair passes SGLang's checks
and then crashes (a ``flashmla_kv`` side asserts on the raw pool). SGLang even builds that pair
itself on SM100 when only ``--dsa-prefill-backend flashmla_sparse`` is given (decode filled
with ``trtllm``).

Rules, applied after SGLang's own choice (every decision is logged with its reason):

1. a backend the user set is never changed;
2. ``trtllm`` is refused below SM100 (its kernels are Blackwell-only; SGLang accepts it on SM90);
3. with an fp8 KV cache both sides must be in one layout family, raw (``trtllm``) or packed
   (``flashmla_*``, ``fa3``, ``flashinfer_sparse_mla``...): a side SGLang filled is re-filled
   from the side the user set (raw -> ``trtllm``; packed -> decode ``flashmla_kv``, the FlashMLA
   kernel that reads packed fp8 pages, or prefill = the user's decode backend); a mix the user
   set is an error that names the fix. ``tilelang`` and the ROCm/XPU backends keep SGLang's own
   rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from sglang_cpkv.errors import DsaBackendError
from sglang_cpkv.plugin._decisions import record

FP8 = "fp8_e4m3"
RAW, PACKED = "raw", "packed"
#: backends outside the two families (SGLang validates them itself).
_NO_FAMILY = frozenset({"tilelang", "triton", "aiter", "intel_xpu"})
#: prefill-only backends: never copied to the decode side.
_PREFILL_ONLY = frozenset({"flashmla_sparse_q8", "triton_sparse_mla"})
PACKED_DECODE_FILL = "flashmla_kv"
Side = Literal["prefill", "decode"]


def layout_family(backend: str | None) -> str | None:
    """``"raw"`` for ``trtllm``, ``"packed"`` for the other CUDA DSA backends, else None."""
    if backend is None or backend in _NO_FAMILY:
        return None
    return RAW if backend == "trtllm" else PACKED


@dataclass(frozen=True)
class BackendChoice:
    """The resolved pair and why.

    Attributes:
        prefill, decode: the backends to run.
        notes: ``(message, reason)`` per decision, in order.
    """

    prefill: str | None
    decode: str | None
    notes: tuple[tuple[str, str], ...] = field(default=())


def _flag(side: Side) -> str:
    return f"--dsa-{side}-backend"


def _fill(side: Side, other: str) -> str:
    if layout_family(other) == RAW:
        return "trtllm"
    return PACKED_DECODE_FILL if side == "decode" else other


def decide_dsa_backends(
    *,
    kv_cache_dtype: str,
    sm_major: int,
    user_prefill: str | None,
    user_decode: str | None,
    sglang_prefill: str | None,
    sglang_decode: str | None,
) -> BackendChoice:
    """Apply the rules above to SGLang's resolved pair.

    Args:
        kv_cache_dtype: resolved KV-cache dtype (``"fp8_e4m3"`` or ``"bfloat16"``).
        sm_major: GPU compute-capability major (9 = Hopper, 10 = Blackwell).
        user_prefill, user_decode: what the user passed (None = unset).
        sglang_prefill, sglang_decode: what SGLang resolved.

    Raises:
        DsaBackendError: ``trtllm`` below SM100, or a user-set fp8 pair from two families.
    """
    notes: list[tuple[str, str]] = []
    chosen: dict[Side, str | None] = {"prefill": sglang_prefill, "decode": sglang_decode}
    user: dict[Side, str | None] = {"prefill": user_prefill, "decode": user_decode}
    for side in ("prefill", "decode"):
        if user[side] is not None and chosen[side] != user[side]:
            notes.append((f"{side} {chosen[side]} -> {user[side]}", f"you set {_flag(side)}"))
            chosen[side] = user[side]
    for side in ("prefill", "decode"):
        if chosen[side] == "trtllm" and sm_major < 10:
            who = "you set it" if user[side] else "SGLang chose it"
            raise DsaBackendError(
                f"{_flag(side)} is trtllm ({who}) but this GPU is SM{sm_major}0; trtllm's DSA "
                f"kernels run on SM100 (Blackwell) only. Fix: on Hopper use {_flag(side)} "
                f"flashmla_kv with --kv-cache-dtype fp8_e4m3, or flashmla_sparse with bfloat16, "
                f"or leave it unset."
            )
    prefill, decode = chosen["prefill"], chosen["decode"]
    fam_p, fam_d = layout_family(prefill), layout_family(decode)
    if kv_cache_dtype != FP8:
        notes.append(
            (f"prefill={prefill}, decode={decode}", f"{kv_cache_dtype} KV has one row layout")
        )
        return BackendChoice(prefill, decode, tuple(notes))
    if fam_p is None or fam_d is None or fam_p == fam_d:
        reason = (
            f"fp8 KV, both {fam_p} layout" if fam_p and fam_p == fam_d else "SGLang's own checks"
        )
        notes.append((f"prefill={prefill}, decode={decode} kept", reason))
        return BackendChoice(prefill, decode, tuple(notes))
    if user_prefill and user_decode:
        packed_side = prefill if fam_p == PACKED else decode
        raise DsaBackendError(
            f"--dsa-prefill-backend {prefill} ({fam_p} fp8 rows) and --dsa-decode-backend "
            f"{decode} ({fam_d} fp8 rows) share one fp8 KV pool, which is raw (576 B/token) as "
            f"soon as either side is trtllm and packed (656 B/token, with scales) otherwise; the "
            f"mix crashes at the first forward. Fix: use trtllm on both sides (SM100), or "
            f"flashmla_* on both (e.g. --dsa-prefill-backend {packed_side} --dsa-decode-backend "
            f"{PACKED_DECODE_FILL}), or --kv-cache-dtype bfloat16."
        )
    # Exactly one side (or neither) was set by the user: re-fill the other from it.
    src: Side = "decode" if user_decode and not user_prefill else "prefill"
    dst: Side = "prefill" if src == "decode" else "decode"
    new = _fill(dst, chosen[src])  # type: ignore[arg-type]
    who = f"you set {_flag(src)} {chosen[src]}" if user[src] else f"SGLang chose {chosen[src]}"
    notes.append(
        (
            f"{dst} {chosen[dst]} -> {new}",
            f"{who} ({layout_family(chosen[src])} fp8 rows); SGLang filled {dst} with "
            f"{chosen[dst]} ({layout_family(chosen[dst])} rows), and one fp8 pool cannot serve "
            f"both",
        )
    )
    chosen[dst] = new
    return BackendChoice(chosen["prefill"], chosen["decode"], tuple(notes))


def dsa_backend_resolution(original: Any, view: Any) -> dict:
    """AROUND hook on ``_dsa_split_backend_resolution(view) -> {field: value}``.

    Runs SGLang's pass, then :func:`decide_dsa_backends` on its result (CUDA DSA models only),
    and returns SGLang's declarations with the corrected backends.
    """
    import torch
    from sglang.srt.arg_groups.model_override_base import model_config_of, record_of
    from sglang.srt.configs.model_config import is_deepseek_dsa
    from sglang.srt.runtime_context import get_platform

    declared = original(view)
    platform = get_platform()
    if platform.is_hip or platform.is_npu or platform.is_xpu:
        return declared
    hf_config = model_config_of(view).hf_config
    if not is_deepseek_dsa(hf_config):
        return declared
    prefill = declared.get("dsa_prefill_backend", view.dsa_prefill_backend)
    decode = declared.get("dsa_decode_backend", view.dsa_decode_backend)
    if prefill is None and decode is None:
        return declared
    raw = record_of(view)
    choice = decide_dsa_backends(
        kv_cache_dtype=declared.get("kv_cache_dtype", view.kv_cache_dtype),
        # The same query SGLang's pass makes (emulated by cpkv-serve --dry-run --gpu).
        sm_major=torch.cuda.get_device_capability()[0],
        user_prefill=raw.dsa_prefill_backend,
        user_decode=raw.dsa_decode_backend,
        sglang_prefill=prefill,
        sglang_decode=decode,
    )
    for message, reason in choice.notes:
        record("dsa-backends", message, reason)
    out = dict(declared)
    for name, value in (
        ("dsa_prefill_backend", choice.prefill),
        ("dsa_decode_backend", choice.decode),
    ):
        if value != getattr(raw, name):
            out[name] = value
    return out
