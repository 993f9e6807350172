"""The indexer ops: paged and ragged MQA logits, one call shape for every release.

Releases differ in what they name these ops and which keywords they take (0.2.5 keeps
only ``fp8_fp4_*``, without ``clean_logits``); the facade picks the symbol through
``_surface.RENAMES``, passes only what the signature has, and does in torch what the
wheel no longer does (``-inf`` outside each row's range), so results agree everywhere.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from deepgemm_compat import _checks as chk
from deepgemm_compat._schedule import DEFAULT_CACHE, check_schedule, current_num_sms
from deepgemm_compat._surface import FP8_FP4_PLAIN_Q_FROM, PAGED_NEXT_N_FROM, surface
from deepgemm_compat.errors import UnsupportedFeatureError

if TYPE_CHECKING:
    import torch


def paged_mqa_logits(
    q: torch.Tensor,
    kv_cache: torch.Tensor,
    weights: torch.Tensor,
    context_lens: torch.Tensor,
    block_table: torch.Tensor,
    max_context_len: int,
    *,
    schedule_meta: torch.Tensor | None = None,
    clean_logits: bool = True,
    q_scale: torch.Tensor | None = None,
) -> torch.Tensor:
    """Indexer logits of queries against a paged fp8 key cache (DSA decode / verify).

    ``logits[b * next_n + i, j] = sum_h relu(q[b, i, h] · k_j) * weights[b * next_n + i, h]``
    with ``k_j`` the dequantised key of the request's ``j``-th token; positions
    ``j >= context_lens[b, i]`` are ``-inf`` when ``clean_logits``.

    Args:
        q: ``(B, next_n, H, D)`` float8_e4m3fn. SGLang's per-token layout is
            ``B = N_total, next_n = 1``; ``(B, next_n >= 2)`` serves MTP verify (>= 0.1.2).
        kv_cache: ``(num_blocks, block_kv, 1, D + 4)`` uint8: per block, ``block_kv * D``
            fp8 bytes then ``block_kv`` float32 scales. Read-only.
        weights: ``(B * next_n, H)`` float32 head weights.
        context_lens: ``(B, next_n)`` int32, the number of keys row ``(b, i)`` sees. 2-D always.
        block_table: ``(B, max_blocks)`` int32 block ids into ``kv_cache``.
        max_context_len: width of the output (``>=`` every context length).
        schedule_meta: from ``get_paged_mqa_logits_metadata``; ``None`` builds it once and
            caches it until ``context_lens`` or the SM count changes.
        clean_logits: fill positions past each row's context length with ``-inf``.
        q_scale: per-token scales for an fp4-packed ``q`` (only ``fp8_fp4_*`` takes it).

    Returns:
        ``(B * next_n, max_context_len)`` float32 logits (written, new tensor).
    """
    import torch

    s = surface()
    chk.need_dim("q", q, 4, "(batch, next_n, heads, dim)")
    batch, next_n, heads, dim = q.shape
    chk.context_lens_2d(context_lens, batch, next_n)
    chk.need_dim("kv_cache", kv_cache, 4, "(num_blocks, block_kv, 1, dim + 4) uint8")
    chk.need_dtype("kv_cache", kv_cache, torch.uint8, fix="view the fused fp8+scale cache as uint8")
    chk.need_size("kv_cache", kv_cache, 3, dim + 4, f"dim {dim} fp8 bytes + 4 scale bytes")
    chk.need_dim("weights", weights, 2, "(batch * next_n, heads) float32")
    chk.need_dtype("weights", weights, torch.float32)
    chk.need_shape("weights", weights, (batch * next_n, heads), "(batch * next_n, heads)")
    chk.int32_layout("block_table", block_table, 2)
    chk.need_size("block_table", block_table, 0, batch, "one row per request of q")
    chk.same_device(
        q=q,
        kv_cache=kv_cache,
        weights=weights,
        context_lens=context_lens,
        block_table=block_table,
        q_scale=q_scale,
    )
    if q_scale is None:
        chk.need_dtype("q", q, torch.float8_e4m3fn, fix="or pass q_scale for an fp4-packed q")
    if next_n > 1 and s.version < PAGED_NEXT_N_FROM:
        raise UnsupportedFeatureError(
            f"sgl-deep-gemm {s.version}'s paged-MQA scheduler reads past the batch for "
            f'next_n={next_n} (fixed in 0.1.2): pip install "sgl-deep-gemm>=0.1.2", or flatten '
            "to the per-token layout (q.view(-1, 1, H, D), context_lens.view(-1, 1))"
        )

    if q_scale is None:
        name, q_arg = s.which("paged_mqa_logits"), q
    else:
        name, q_arg = "fp8_fp4_paged_mqa_logits", (q, q_scale)
    fn, params = s.symbol(name) if name else (None, None)
    if fn is None:
        raise UnsupportedFeatureError(
            f"sgl-deep-gemm {s.version} has no {name or 'paged MQA logits'}"
        )
    if name.startswith("fp8_fp4") and q_scale is None and s.version < FP8_FP4_PLAIN_Q_FROM:
        raise UnsupportedFeatureError(
            f"sgl-deep-gemm {s.version}'s fp8_fp4_paged_mqa_logits rejects a plain fp8 q"
        )

    num_sms = current_num_sms()
    if schedule_meta is None:
        schedule_meta = DEFAULT_CACHE.get(context_lens, kv_cache.shape[1], num_sms)
    else:
        check_schedule(schedule_meta, num_sms)

    # The wheel's own cleaning asserts 1-D context lens (`not is_context_lens_2d`, seen on
    # 0.1.4.post1 on an H200) and the facade always passes 2-D lens: clean in torch instead.
    kwargs = {"clean_logits": False} if "clean_logits" in (params or {}) else {}
    logits = fn(
        q_arg,
        kv_cache,
        weights,
        context_lens,
        block_table,
        schedule_meta,
        max_context_len,
        **kwargs,
    )
    if clean_logits:
        cols = torch.arange(logits.shape[1], device=logits.device)
        logits.masked_fill_(cols[None, :] >= context_lens.reshape(-1, 1), float("-inf"))
    return logits


def mqa_logits(
    q: torch.Tensor,
    kv: torch.Tensor,
    kv_scale: torch.Tensor,
    weights: torch.Tensor,
    ks: torch.Tensor,
    ke: torch.Tensor,
    *,
    clean_logits: bool = True,
    max_seqlen_k: int = 0,
) -> torch.Tensor:
    """Indexer logits of ragged queries against contiguous fp8 keys (DSA prefill).

    ``logits[t, j] = sum_h relu(q[t, h] · kv[j] * kv_scale[j]) * weights[t, h]`` for
    ``ks[t] <= j < ke[t]``; other positions are ``-inf`` when ``clean_logits``.

    Args:
        q: ``(S, H, D)`` float8_e4m3fn.
        kv: ``(S_kv, D)`` float8_e4m3fn keys; ``kv_scale``: ``(S_kv,)`` float32.
        weights: ``(S, H)`` float32.
        ks, ke: ``(S,)`` int32, the key range ``[ks, ke)`` of each query.
        max_seqlen_k: ``0`` for ``(S, S_kv)`` output; else ``(S, max_seqlen_k)`` with
            column ``c`` holding key ``ks[t] + c``.

    Returns:
        float32 logits, ``(S, S_kv)`` or ``(S, max_seqlen_k)`` (new tensor).
    """
    import torch

    s = surface()
    chk.need_dim("q", q, 3, "(seq, heads, dim) float8_e4m3fn")
    chk.need_dtype("q", q, torch.float8_e4m3fn)
    chk.need_dim("kv", kv, 2, "(seq_kv, dim) float8_e4m3fn")
    chk.need_dtype("kv", kv, torch.float8_e4m3fn)
    chk.need_size("kv", kv, 1, q.shape[2], "head dim of q")
    chk.need_dim("kv_scale", kv_scale, 1, "(seq_kv,) float32")
    chk.need_dtype("kv_scale", kv_scale, torch.float32)
    chk.need_size("kv_scale", kv_scale, 0, kv.shape[0], "one scale per key")
    chk.need_dim("weights", weights, 2, "(seq, heads) float32")
    chk.need_dtype("weights", weights, torch.float32)
    chk.need_shape("weights", weights, (q.shape[0], q.shape[1]))
    for name, t in (("ks", ks), ("ke", ke)):
        chk.int32_layout(name, t, 1)
        chk.need_size(name, t, 0, q.shape[0], "one key range per query")
    chk.same_device(q=q, kv=kv, kv_scale=kv_scale, weights=weights, ks=ks, ke=ke)

    fn, params = s.require("mqa_logits"), s.params("mqa_logits") or {}
    if "clean_logits" in params:
        logits = fn(
            q, (kv, kv_scale), weights, ks, ke, clean_logits=clean_logits, max_seqlen_k=max_seqlen_k
        )
    else:  # 0.2.5: fp8_fp4_mqa_logits(q, kv, weights, ks, ke, max_seqlen_k, schedule_meta=None)
        logits = fn(q, (kv, kv_scale), weights, ks, ke, max_seqlen_k)
    if clean_logits:
        cols = torch.arange(logits.shape[1], device=logits.device)[None, :]
        lo, hi = ks[:, None], ke[:, None]
        outside = (cols >= hi - lo) if max_seqlen_k else (cols < lo) | (cols >= hi)
        logits.masked_fill_(outside, float("-inf"))
    return logits


def get_paged_mqa_logits_metadata(
    context_lens: torch.Tensor, block_kv: int, num_sms: int | None = None
) -> torch.Tensor:
    """Schedule metadata for ``paged_mqa_logits``: ``(num_sms + 1, 2)`` int32 (new tensor).

    Args:
        context_lens: ``(B, next_n)`` int32, as passed to ``paged_mqa_logits``.
        block_kv: tokens per cache block (64 for DSA).
        num_sms: defaults to the SM count DeepGEMM schedules for now.
    """
    chk.need_dim("context_lens", context_lens, 2, "(batch, next_n) int32")
    return DEFAULT_CACHE.get(context_lens, block_kv, num_sms)
