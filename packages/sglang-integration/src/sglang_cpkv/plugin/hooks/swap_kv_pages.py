"""DEBUG FAULT ``swap-kv-pages``: a served batch of two or more requests reads another's KV.

Registered only under ``CPKV_DEBUG_FAULT=swap-kv-pages`` with ``CPKV_DEBUG_FAULT_ACK=
i-want-wrong-output`` (``plugin._debug``), for the GPU suite: the contamination checks must see
a server that gives a request another request's KV, on SGLang's own code path.

Both of SGLang's DSA metadata builds read the request-to-token table through the batch's
``req_pool_indices`` (``DeepseekSparseAttnBackend.init_forward_metadata``: eager batches, i.e.
prefill and decode without CUDA graphs; ``init_forward_metadata_out_graph``: the decode CUDA
graph's replay, the same signature in SGLang 0.5.20-0.5.23). These AROUND hooks hand SGLang the
batch with its first two entries exchanged while it builds, then put the batch's own tensor back:
every page table, flattened table and indexer table SGLang derives from it then gives request 0
request 1's pages and the other way round, while the KV writes (``out_cache_loc``) stay right.
So both requests' queries attend over the other's KV, and nothing else changes. A batch of one
real request (CUDA-graph padding rows excluded) is left alone, as is a metadata build captured
into a CUDA graph (SGLang's opt-in metadata glue graph), which would keep the swapped copy's
address.
"""

from __future__ import annotations

from typing import Any

from sglang_cpkv.plugin._decisions import record

__all__ = ["init_forward_metadata_swapped", "out_graph_metadata_swapped", "real_requests"]

FAULT = "swap-kv-pages"
_announced = False


def real_requests(forward_batch: Any) -> int:
    """The batch's requests, less the padding rows of a CUDA-graph replay view."""
    return int(forward_batch.batch_size) - int(getattr(forward_batch, "num_padding", 0) or 0)


def _swapped(indices: Any) -> Any:
    """``indices`` with its first two entries exchanged (a new tensor; no host sync)."""
    import torch

    return torch.cat([indices[1:2], indices[0:1], indices[2:]])


def _build_swapped(build: Any, forward_batch: Any) -> Any:
    global _announced
    own = forward_batch.req_pool_indices
    if own is None or real_requests(forward_batch) < 2:
        return build()
    if not _announced:
        _announced = True
        record(
            "debug-fault",
            f"{FAULT}: first batch of {real_requests(forward_batch)} requests served with "
            f"requests 0 and 1 reading each other's KV",
            "CPKV_DEBUG_FAULT, acknowledged; logged once per process",
        )
    forward_batch.req_pool_indices = _swapped(own)
    try:
        return build()
    finally:
        forward_batch.req_pool_indices = own


def init_forward_metadata_swapped(original: Any, self: Any, forward_batch: Any) -> Any:
    """AROUND ``DeepseekSparseAttnBackend.init_forward_metadata(self, forward_batch)``."""
    return _build_swapped(lambda: original(self, forward_batch), forward_batch)


def out_graph_metadata_swapped(
    original: Any, self: Any, forward_batch: Any, in_capture: bool = False
) -> Any:
    """AROUND ``DeepseekSparseAttnBackend.init_forward_metadata_out_graph(self, forward_batch,
    in_capture=False)``: the decode CUDA graph's replay (not its capture)."""
    import torch

    if in_capture or (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing()):
        return original(self, forward_batch, in_capture)
    return _build_swapped(lambda: original(self, forward_batch, in_capture), forward_batch)
