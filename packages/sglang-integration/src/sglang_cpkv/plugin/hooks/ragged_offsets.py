"""RAGGED top-k offsets under interleave prefill CP: each row's base in the KV attention reads.

With the RAGGED top-k transform, a query's top-k entries are positions inside its own request
(``0..seq_len-1``) and ``topk_indices_offset[row]`` moves them to the row where that request
starts in the KV the sparse-attention kernel reads. SGLang 0.5.23 (``layers/attention/
dsa_backend.py``, ``DeepseekSparseAttnBackend.init_forward_metadata``) builds it under
interleave CP from this rank's requests only: ``bs_idx`` keeps the requests with at least one
token on the rank, ``cu_seqlens_k`` is recomputed over them, and
``topk_indices_offset = repeat_interleave(cu_seqlens_k[:-1], extend_seq_lens)``. That matches
the KV of the prefix branch (``page_table_1_flattened``, built over the same kept requests), but
the branch for a batch without any prefix (``forward_extend``: ``kv_cache = cat([k, k_rope])``)
attends over the whole all-gathered chunk of every request in batch order. A rank that holds no
token of an earlier request then bases a later request at that request's rows: extend lengths
``[1, 6]`` at cp 2 put rank 1's three queries on request 0's row. Nothing crashes; the output is
silently wrong at batch size > 1.

:func:`init_forward_metadata_with_chunk_offsets` (an AROUND hook on that method) runs SGLang's
metadata build and, only in that branch (interleave CP applied, RAGGED offsets built, no prefix
anywhere in the batch, no pooled index keys), replaces the offsets by each row's request start
in the gathered chunk: the exclusive cumulative extend lengths of *all* requests, one per token,
sharded to this rank's rows by SGLang's own ``shard_local_tokens`` (the same split its other
per-row tables use). It also sets ``page_table_1_flattened`` to the chunk's page table, because
``prepare_mtp_seed_indices`` turns fused RAGGED indices into pool slots through that table (and
otherwise rebuilds it over the kept requests only, which matched the old offsets). The prefix
branch and every other configuration keep SGLang's metadata untouched.

The rule itself, in plain Python (:func:`rank_rows`, :func:`sglang_offsets`,
:func:`attended_offsets`), holds SGLang's offsets and the right ones side by side for any batch;
``tests/test_upstream_ragged_offsets.py`` holds both against SGLang's own code.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from sglang_cpkv.plugin._decisions import record

#: Prefill backends whose EXTEND batches take the RAGGED top-k transform over a packed fp8 pool
#: (``get_topk_transform_method``); ``flashmla_sparse_q8`` does on any pool.
RAGGED_ON_PACKED_FP8 = frozenset({"flashmla_sparse", "flashmla_sparse_q8", "triton_sparse_mla"})
_announced = False  # the first correction in a process is logged, later ones are not


def _check_lens(extend_lens: Sequence[int], prefix_lens: Sequence[int] | None, cp: int) -> None:
    if cp < 1:
        raise ValueError(f"cp_size must be >= 1, got {cp}")
    if any(n < 0 for n in extend_lens):
        raise ValueError(f"extend_lens must be >= 0, got {list(extend_lens)}")
    if prefix_lens is not None and len(prefix_lens) != len(extend_lens):
        raise ValueError(
            f"prefix_lens has {len(prefix_lens)} entries but extend_lens has "
            f"{len(extend_lens)}; give one prefix length per request"
        )


def rank_rows(extend_lens: Sequence[int], cp_size: int, cp_rank: int) -> list[tuple[int, int]]:
    """``(request, position in its extend)`` of each query row a rank holds under interleave CP.

    Flattened token ``i`` (requests in batch order) goes to rank ``i % cp_size``; a rank's rows
    keep token order.
    """
    _check_lens(extend_lens, None, cp_size)
    rows: list[tuple[int, int]] = []
    start = 0
    for req, n in enumerate(extend_lens):
        first = start + (cp_rank - start) % cp_size  # first token of this request on the rank
        rows += [(req, i - start) for i in range(first, start + n, cp_size)]
        start += n
    return rows


def sglang_offsets(
    extend_lens: Sequence[int], prefix_lens: Sequence[int], cp_size: int, cp_rank: int
) -> list[int]:
    """SGLang 0.5.23's ``topk_indices_offset`` for one rank (interleave CP, RAGGED).

    The requests kept are those with a row on the rank; a row's offset is the sum of the
    sequence lengths (prefix + extend) of the kept requests before its own.
    """
    _check_lens(extend_lens, prefix_lens, cp_size)
    rows = rank_rows(extend_lens, cp_size, cp_rank)
    kept = sorted({req for req, _ in rows})
    base, acc = {}, 0
    for req in kept:
        base[req] = acc
        acc += prefix_lens[req] + extend_lens[req]
    return [base[req] for req, _ in rows]


def attended_offsets(
    extend_lens: Sequence[int], prefix_lens: Sequence[int], cp_size: int, cp_rank: int
) -> list[int]:
    """Where each of a rank's rows' request starts in the KV that sparse attention reads.

    With a prefix anywhere in the batch that KV is the kept requests' flattened page table, so
    this equals :func:`sglang_offsets`. Without one it is the gathered chunk of every request,
    and the base is the request's first token in the chunk.
    """
    _check_lens(extend_lens, prefix_lens, cp_size)
    if any(prefix_lens):
        return sglang_offsets(extend_lens, prefix_lens, cp_size, cp_rank)
    starts = [sum(extend_lens[:req]) for req in range(len(extend_lens))]
    return [starts[req] for req, _ in rank_rows(extend_lens, cp_size, cp_rank)]


@dataclasses.dataclass(frozen=True)
class RaggedExposure:
    """Whether a resolved deployment builds the offsets this hook corrects.

    Attributes:
        affected: prefill runs interleave CP with RAGGED top-k on fresh (no-prefix) batches.
        reason: one line saying why, naming the settings that decide it.
    """

    affected: bool
    reason: str


def ragged_exposure(
    *,
    enable_prefill_cp: bool,
    cp_strategy: str | None,
    cp_size: int,
    prefill_backend: str | None,
    kv_layout: str,
    sm_major: int | None,
    disaggregation_mode: str = "null",
) -> RaggedExposure:
    """Decide, from resolved server arguments, whether prefill hits the misplaced offsets.

    Mirrors SGLang 0.5.23's ``get_topk_transform_method`` (RAGGED iff the prefill backend is
    ``flashmla_sparse``/``triton_sparse_mla`` over a packed fp8 pool, or ``flashmla_sparse_q8``)
    and ``set_dsa_prefill_impl`` (``flashmla_auto`` over a packed fp8 pool on Blackwell runs a
    batch whose KV is under 512x its queries, i.e. every fresh batch, on ``flashmla_sparse``).

    Args:
        kv_layout: the dry-run's KV layout text (``"packed fp8 (FlashMLA)"``, ``"raw fp8
            (trtllm)"``, ``"bf16"``).
        sm_major: GPU compute-capability major, None when unknown.
    """
    if disaggregation_mode == "decode":
        return RaggedExposure(False, "decode node: no prefill extend batches")
    if not enable_prefill_cp or cp_size <= 1:
        return RaggedExposure(False, "prefill CP off")
    if cp_strategy != "interleave":
        return RaggedExposure(False, f"CP split {cp_strategy}: only interleave keeps bs_idx")
    packed = kv_layout.startswith("packed fp8")
    impl = prefill_backend
    via = ""
    if impl == "flashmla_auto" and packed and sm_major is not None and sm_major in (10, 11, 12):
        impl, via = "flashmla_sparse", " (flashmla_auto picks it for fresh prompts on Blackwell)"
    if impl == "flashmla_sparse_q8" or (impl in RAGGED_ON_PACKED_FP8 and packed):
        return RaggedExposure(
            True,
            f"interleave CP {cp_size} with prefill {impl}{via} over {kv_layout} KV: RAGGED "
            f"top-k, and a batch without prefix attends over the whole gathered chunk",
        )
    return RaggedExposure(
        False, f"prefill {prefill_backend} over {kv_layout} KV uses the PAGED top-k transform"
    )


def _chunk_offsets(forward_batch: Any) -> Any:
    """Each local row's request start in the gathered chunk (int32, this rank's rows)."""
    import torch
    from sglang.srt.layers.cp.base import get_cp_strategy

    extend = forward_batch.extend_seq_lens.to(torch.int32)
    starts = torch.cumsum(extend, 0, dtype=torch.int32) - extend
    total = sum(forward_batch.extend_seq_lens_cpu)  # host ints: no device sync
    per_token = torch.repeat_interleave(starts, extend, output_size=total)
    return get_cp_strategy().shard_local_tokens(per_token)


def _chunk_page_table(backend: Any, forward_batch: Any) -> Any:
    """The chunk's pool slots in chunk order (every request's extend, batch order)."""
    import torch

    table = backend.req_to_token_pool.req_to_token
    return torch.cat(
        [
            table[forward_batch.req_pool_indices[i], :n]
            for i, n in enumerate(forward_batch.extend_seq_lens_cpu)
        ]
    )


def init_forward_metadata_with_chunk_offsets(original: Any, self: Any, forward_batch: Any) -> None:
    """AROUND hook on ``DeepseekSparseAttnBackend.init_forward_metadata(self, forward_batch)``.

    Runs SGLang's build, then rebases the RAGGED offsets on the gathered chunk when the batch
    takes the no-prefix branch under interleave CP (module docstring). Every other batch keeps
    SGLang's metadata object as built.
    """
    original(self, forward_batch)
    metadata = self.forward_metadata
    if metadata.topk_indices_offset is None or self.dsa_index_kpool > 1:
        return
    from sglang.srt.layers.attention.dsa.utils import can_dsa_prefill_cp_interleave

    if not can_dsa_prefill_cp_interleave(forward_batch):
        return
    if any(forward_batch.extend_prefix_lens_cpu):
        return  # prefix branch: offsets index the kept requests' flattened page table
    offsets = _chunk_offsets(forward_batch)
    if offsets.shape != metadata.topk_indices_offset.shape:
        raise RuntimeError(
            f"ragged-offsets hook: SGLang built {metadata.topk_indices_offset.shape[0]} "
            f"RAGGED offsets for this rank but the chunk split gives {offsets.shape[0]} rows "
            f"(extend lengths {forward_batch.extend_seq_lens_cpu}), so the hook does not fit "
            f"this sglang. Fix: install sglang 0.5.20-0.5.23; CPKV_DISABLE_HOOKS=ragged-offsets "
            f"runs without the fix (such batches then read other requests' KV)."
        )
    global _announced
    if not _announced:
        _announced = True
        record(
            "ragged-offsets",
            "RAGGED top-k offsets rebased on the gathered chunk",
            f"a batch without prefix under interleave CP, extend lengths "
            f"{list(forward_batch.extend_seq_lens_cpu)[:8]}; logged once per process",
        )
    self.forward_metadata = dataclasses.replace(  # DSAMetadata is frozen
        metadata,
        topk_indices_offset=offsets.to(metadata.topk_indices_offset.dtype),
        page_table_1_flattened=_chunk_page_table(self, forward_batch),
    )
