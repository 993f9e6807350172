"""The plugin's shared-KV hooks (registered only under ``CPKV_SHARED_KV=1``, which
``cpkv-serve --cpkv-shared-kv`` sets for SGLang and every process it starts).

- :func:`pool_class`: the replacement for ``PageInterleaveDSATokenToKVPool`` (a class REPLACE:
  SGLang's registry substitutes the class everywhere it is bound, so the pool builders
  ``_build_dsa_kv_pool`` and the MTP draft builder construct cpkv's subclass);
- :func:`prepare_with_request_plan`: AROUND ``prepare_kv_shard_forward``, which sees the whole
  ``ForwardBatch`` (``out_cache_loc``, CP split) that ``begin_shard_extend`` does not;
- :func:`validate_with_cpkv_gate`: AROUND ``validate_kv_shard_attention_backend``; DSA models
  go through :mod:`._gate` instead of SGLang's ``trtllm``-only check, others through SGLang's;
- :func:`check_built_pool`: AFTER ``KVCacheConfigurator._build_token_to_kv_pool`` (target and MTP
  draft pools): a sharded DSA pool SGLang built must be cpkv's, or the scheduler stops.
"""

from __future__ import annotations

from typing import Any

from sglang_cpkv.errors import SharedKVError, StartRefused
from sglang_cpkv.plugin._decisions import record
from sglang_cpkv.plugin._registered import registered_target
from sglang_cpkv.plugin.shared_kv._gate import GateInput, gate_refusals

__all__ = [
    "check_built_pool",
    "pool_class",
    "prepare_with_request_plan",
    "ragged_fix_active",
    "validate_with_cpkv_gate",
]

ENV = "CPKV_SHARED_KV"
#: the hook target of the plugin's RAGGED top-k offset fix (see ``_gate``).
RAGGED_FIX_TARGET = (
    "sglang.srt.layers.attention.dsa_backend.DeepseekSparseAttnBackend.init_forward_metadata"
)


def pool_class() -> type:
    """cpkv's pool class (imports SGLang's pool module)."""
    from sglang_cpkv.plugin.shared_kv._pool import CpkvSharedKVPool

    return CpkvSharedKVPool


def check_built_pool(pool: Any, configurator: Any, **_: Any) -> None:
    """AFTER ``_build_token_to_kv_pool(self, *, sizes, is_dsa_model, is_dsv4_model,
    req_to_token_pool)``: under ``--cpkv-shared-kv`` a sharded DSA pool must be cpkv's.

    The class REPLACE of ``PageInterleaveDSATokenToKVPool`` is checked after ``apply_hooks``
    (``plugin._applied``); this is the check on what SGLang then actually constructed, in the
    scheduler, before the first request.

    Raises:
        StartRefused: SGLang built a sharded DSA pool that is not ``CpkvSharedKVPool``.
    """
    from sglang.srt.mem_cache.page_interleave_pool import PageInterleaveKVPoolMixin

    sharded = isinstance(pool, PageInterleaveKVPoolMixin) or (
        getattr(configurator, "kv_shard_rank", None) is not None
    )
    dsa = hasattr(pool, "index_key_cache")
    if sharded and dsa and not getattr(type(pool), "cpkv_shared_kv", False):
        raise StartRefused(
            f"--cpkv-shared-kv is on but SGLang built a {type(pool).__qualname__} "
            f"({type(pool).__module__}) for the sharded DSA KV cache, not cpkv's "
            f"CpkvSharedKVPool: the per-request scratch is not in place. Fix: check that no "
            f"other plugin replaces PageInterleaveDSATokenToKVPool, or run without "
            f"--cpkv-shared-kv."
        )


def prepare_with_request_plan(
    original: Any, pool: Any, req_to_token: Any, forward_batch: Any
) -> bool:
    """AROUND ``prepare_kv_shard_forward(pool, req_to_token, forward_batch) -> is_extend``.

    cpkv's pool plans from the whole batch (:meth:`CpkvSharedKVPool.begin_cpkv_extend`);
    any other pool keeps SGLang's path.
    """
    begin = getattr(pool, "begin_cpkv_extend", None)
    if begin is None:
        return original(pool, req_to_token, forward_batch)
    if not forward_batch.forward_mode.is_extend_or_draft_extend_or_mixed():
        pool.end_shard_extend()
        return False
    if (
        forward_batch.req_pool_indices is None
        or forward_batch.extend_prefix_lens_cpu is None
        or forward_batch.seq_lens_cpu is None
    ):
        raise RuntimeError("KV-sharded attention requires request indices and CPU length metadata")
    begin(req_to_token, forward_batch)
    return True


def ragged_fix_active() -> bool:
    """Whether a hook this process registered fixes the RAGGED top-k offsets (read from
    ``plugin._registered``: a hook knows neither the table nor the entry point)."""
    return registered_target(RAGGED_FIX_TARGET)


def validate_with_cpkv_gate(original: Any, server_args: Any, cfg: Any = None) -> None:
    """AROUND ``validate_kv_shard_attention_backend(server_args, cfg=None)``.

    Raises:
        SharedKVError: every reason this DSA deployment cannot run the shared-KV pool.
    """
    import torch
    from sglang.srt.arg_groups.overrides import (
        attention_backends_of,
        model_config_of,
        resolved_view,
        resolving_view,
    )
    from sglang.srt.configs.model_config import get_dsa_index_kpool, get_dsa_index_kpool_compress

    cfg = cfg or resolving_view(server_args)
    prefill_backend, _ = attention_backends_of(resolved_view(server_args))
    if prefill_backend != "dsa":
        return original(server_args, cfg)
    hf_config = model_config_of(server_args).hf_config
    facts = GateInput(
        device=cfg.device,
        enable_prefill_cp=bool(cfg.enable_prefill_cp),
        attn_cp_size=int(cfg.attn_cp_size),
        cp_strategy=str(cfg.cp_strategy),
        pp_size=int(cfg.pp_size),
        prefill_backend=cfg.dsa_prefill_backend,
        decode_backend=cfg.dsa_decode_backend,
        kv_cache_dtype=str(cfg.kv_cache_dtype),
        page_size=cfg.page_size,
        transfer_backend=str(cfg.disaggregation_transfer_backend),
        layer_split=bool(cfg.enable_dsa_cache_layer_split),
        index_kpool=int(get_dsa_index_kpool(hf_config)),
        index_kpool_compress=bool(get_dsa_index_kpool_compress(hf_config)),
        # The same query SGLang's passes make (emulated by cpkv-serve --dry-run --gpu).
        sm_major=torch.cuda.get_device_capability()[0],
    )
    refusals, verdict = gate_refusals(facts, ragged_fixed=ragged_fix_active())
    if refusals:
        raise SharedKVError(
            "--cpkv-shared-kv cannot serve this deployment: " + "; ".join(refusals) + "."
        )
    record(
        "shared-kv",
        f"prefill {facts.prefill_backend} with {facts.kv_cache_dtype} KV on "
        f"SM{facts.sm_major}0 over the per-request scratch",
        verdict.reason if verdict else "",
    )
    return None
