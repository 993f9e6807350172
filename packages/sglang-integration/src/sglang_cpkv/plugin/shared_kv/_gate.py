"""Which DSA configurations the shared-KV pool serves, and why the others are refused.

SGLang 0.5.23's gate (``arg_groups/kv_shard_hook.py``, ``validate_kv_shard_attention_backend``)
admits DSA sharding only with ``trtllm`` prefill and decode, fp8 KV, page 64, interleave CP and
Mooncake: SM100 only. Its other restrictions live in ``handle_kv_cache_sharding`` and stay in
force (PD prefill only, no two-batch overlap, no prefill CUDA graph, the Python radix tree core,
no DCP, HiCache only in kernel/cache mode, no streaming sessions, ...). This module replaces only
the backend part, for DSA models, with a table: every (prefill backend, KV dtype, SM) either
works or is refused by name with the reason. ``docs/shared-kv.md`` prints the table.

Why each refusal holds (SGLang 0.5.23, ``layers/attention/dsa_backend.py``):

- ``flashmla_kv`` reads packed fp8 pages only (FlashMLA's paged sparse kernel): bf16 refused.
- ``flashmla_sparse`` / ``triton_sparse_mla`` with fp8 KV take the RAGGED top-k transform
  (``get_topk_transform_method``). On a batch without any prefix, ``forward_extend`` attends over
  the gathered chunk of every request while ``init_forward_metadata`` bases each row on this
  rank's kept requests only: a rank missing an earlier request reads its rows. Refused unless
  the plugin's RAGGED-offset fix (a hook on ``init_forward_metadata``) is active.
- ``flashmla_auto`` with fp8 on SM100 picks ``flashmla_sparse`` for every EXTEND batch whose KV
  tokens are fewer than 512 times its query tokens (``set_dsa_prefill_impl``:
  ``seq_lens_sum < extend_num_tokens * 512``, else ``flashmla_kv``): every batch without a prefix
  (KV tokens = query tokens) and most batches with one (a 64K prefix with 2K new tokens is 66K <
  1M), so the no-prefix batches above run it. On SM90 it always picks ``flashmla_kv``; with bf16
  always ``flashmla_sparse`` (PAGED).
- ``trtllm`` runs on SM100 only, and SGLang built its sharded pool for it with fp8 KV only.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "GATED_PREFILL_BACKENDS",
    "SHARDED_DECODE_BACKENDS",
    "GateInput",
    "Verdict",
    "backend_verdict",
    "gate_refusals",
]

FP8, BF16 = "fp8_e4m3", "bfloat16"
#: the prefill backends the gate has an answer for (anything else is refused as unvalidated).
GATED_PREFILL_BACKENDS = (
    "flashmla_sparse",
    "flashmla_kv",
    "flashmla_auto",
    "triton_sparse_mla",
    "trtllm",
)
#: decode backends a sharded prefill node may run: of EAGLE's steps only the draft extend after
#: each prefill runs there (SGLang's ``forward_mode.is_draft_extend_v2`` paths use
#: ``dsa_decode_impl``); draft decode and verify steps run on the decode node.
SHARDED_DECODE_BACKENDS = ("flashmla_kv", "flashmla_sparse", "flashmla_auto", "trtllm")

_RAGGED = (
    "with an fp8 KV cache this backend takes the RAGGED top-k transform, and on a batch without "
    "any prefix SGLang 0.5.23 bases each query row on this rank's kept requests while the "
    "kernel reads every request's gathered chunk: under interleave CP a rank that misses an "
    "earlier request reads that request's rows (init_forward_metadata, dsa_backend.py). "
    "Fix: enable the plugin's RAGGED-offset hook, or use --dsa-prefill-backend flashmla_kv "
    "with fp8, or --kv-cache-dtype bfloat16"
)


@dataclass(frozen=True)
class Verdict:
    """One gate answer: ``works`` and why."""

    works: bool
    reason: str


def backend_verdict(backend: str, kv_dtype: str, sm_major: int, *, ragged_fixed: bool) -> Verdict:
    """Whether ``backend`` serves prefill over the shared-KV scratch with ``kv_dtype`` on an SM.

    Args:
        backend: ``--dsa-prefill-backend`` as resolved.
        kv_dtype: ``fp8_e4m3`` or ``bfloat16``.
        sm_major: 9 (Hopper) or 10 (Blackwell); other GPUs are refused.
        ragged_fixed: whether the plugin's RAGGED-offset fix is active.
    """
    if sm_major not in (9, 10):
        return Verdict(False, f"SM{sm_major}x: the shared-KV gate covers SM90 and SM100 only")
    if kv_dtype not in (FP8, BF16):
        return Verdict(False, f"--kv-cache-dtype {kv_dtype}: DSA pools store fp8_e4m3 or bfloat16")
    fp8 = kv_dtype == FP8
    if backend == "trtllm":
        if sm_major < 10:
            return Verdict(False, "trtllm's DSA kernels run on SM100 (Blackwell) only")
        if not fp8:
            return Verdict(
                False,
                "SGLang built its sharded pool for trtllm with fp8_e4m3 only (raw 576-byte "
                "rows); with bf16 use flashmla_sparse or triton_sparse_mla",
            )
        return Verdict(
            True, "raw fp8 rows read through the per-request page table (SGLang's own pair)"
        )
    if backend == "flashmla_kv":
        if not fp8:
            return Verdict(
                False,
                "flashmla_kv reads packed fp8 pages only (FlashMLA's paged sparse kernel); "
                "with bf16 use flashmla_sparse",
            )
        return Verdict(
            True, "PAGED top-k: packed fp8 scratch pages through the per-request page table"
        )
    if backend in ("flashmla_sparse", "triton_sparse_mla"):
        if not fp8:
            return Verdict(
                True, "PAGED top-k: bf16 scratch rows through the per-request page table"
            )
        if ragged_fixed:
            return Verdict(
                True,
                "RAGGED top-k: prefix batches dequantise the scratch through the per-request "
                "flattened table; batches without prefix read the gathered chunk at fixed offsets",
            )
        return Verdict(False, _RAGGED)
    if backend == "flashmla_auto":
        if not fp8:
            return Verdict(
                True, "always flashmla_sparse with bf16 KV: PAGED top-k over the scratch"
            )
        if sm_major == 9:
            return Verdict(
                True, "always flashmla_kv with fp8 KV on SM90: PAGED top-k over the scratch"
            )
        if ragged_fixed:
            return Verdict(
                True,
                "flashmla_sparse where a batch's KV tokens < 512 x its query tokens, else "
                "flashmla_kv; RAGGED offsets fixed",
            )
        return Verdict(
            False,
            "on SM100 with fp8 KV it runs flashmla_sparse on every batch whose KV tokens are "
            "fewer than 512 x its query tokens (set_dsa_prefill_impl), every batch without a "
            "prefix among them; " + _RAGGED,
        )
    return Verdict(
        False,
        f"{backend} was not validated with the shared-KV scratch (validated: "
        f"{', '.join(GATED_PREFILL_BACKENDS)})",
    )


@dataclass(frozen=True)
class GateInput:
    """The resolved settings the gate reads (from SGLang's resolving view)."""

    device: str
    enable_prefill_cp: bool
    attn_cp_size: int
    cp_strategy: str
    pp_size: int
    prefill_backend: str | None
    decode_backend: str | None
    kv_cache_dtype: str
    page_size: int | None
    transfer_backend: str
    layer_split: bool
    index_kpool: int
    index_kpool_compress: bool
    sm_major: int


def gate_refusals(g: GateInput, *, ragged_fixed: bool) -> tuple[list[str], Verdict | None]:
    """Every reason the shared-KV pool refuses ``g`` (empty = served), and the backend verdict."""
    out: list[str] = []
    if g.device != "cuda" or not g.enable_prefill_cp or g.attn_cp_size <= 1:
        out.append(
            "needs CUDA prefill context parallelism (--enable-prefill-cp --attn-cp-size > 1): "
            "the pool is sharded over the attention-CP ranks"
        )
    if g.cp_strategy != "interleave":
        out.append(
            f"--cp-strategy {g.cp_strategy}: SGLang's sharded DSA path is built on interleave "
            "CP (its metadata keeps interleave's per-rank requests, the plan reads that split)"
        )
    if g.pp_size != 1:
        out.append("--pp-size > 1: the per-layer gather assumes every layer on every CP rank")
    if g.page_size != 64:
        out.append(
            f"--page-size {g.page_size}: DSA indexer pages and the gather unit are 64 tokens"
        )
    if g.transfer_backend != "mooncake":
        out.append(
            f"--disaggregation-transfer-backend {g.transfer_backend}: only Mooncake's sender "
            "filters the DSA indexer-state pages to the ones this rank owns "
            "(_prepare_sharded_dsa_indices); NIXL sends every logical page of that state"
        )
    if g.layer_split:
        out.append(
            "--enable-dsa-cache-layer-split: layer split shards layers, not pages; one pool "
            "cannot do both"
        )
    if g.index_kpool != 1 or g.index_kpool_compress:
        out.append(
            "pooled or compressed index keys (index_kpool != 1): the scratch translates in "
            "token units, which equal indexer slots only at index_kpool 1"
        )
    verdict = None
    if g.prefill_backend is None:
        out.append("no DSA prefill backend resolved")
    else:
        verdict = backend_verdict(
            g.prefill_backend, g.kv_cache_dtype, g.sm_major, ragged_fixed=ragged_fixed
        )
        if not verdict.works:
            out.append(f"--dsa-prefill-backend {g.prefill_backend}: {verdict.reason}")
    if g.decode_backend not in SHARDED_DECODE_BACKENDS:
        out.append(
            f"--dsa-decode-backend {g.decode_backend}: under EAGLE a sharded prefill node runs "
            f"the draft extend after each prefill with it (the draft's decode and verify steps "
            f"run on the decode node); validated: {', '.join(SHARDED_DECODE_BACKENDS)}"
        )
    return out, verdict
