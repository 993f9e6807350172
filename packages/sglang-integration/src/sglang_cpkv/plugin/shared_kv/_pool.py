"""cpkv's sharded DSA pool: SGLang's ``PageInterleaveDSATokenToKVPool`` keyed by request.

Importing this module imports SGLang's pool module; the plugin imports it only when it registers
the shared-KV hooks (``--cpkv-shared-kv``). :class:`CpkvSharedKVPool` keeps everything of the
upstream pool that does not depend on the scratch map (its buffers, owner placement, the
double-buffered scratch slots, the side-stream gather and its communicator, the read getters)
and replaces the value-keyed ``_page_pos`` with a per-forward :class:`ForwardScratch`:

============================  ==================================================================
upstream method               here
============================  ==================================================================
``begin_shard_extend``        :meth:`begin_cpkv_extend` (via the ``prepare_kv_shard_forward``
                              hook, which also sees ``out_cache_loc`` and the CP row split);
                              ``begin_shard_extend`` itself plans from ``req_to_token`` alone
``translate_loc_to_scratch``  per request: rows of a page table by their request, current
                              tokens by ``token_req`` (no ``_page_pos``)
``_translate_loc_cached``     the plan's precomputed rows
``_get_write_plan``           fixed-shape owner rows (non-owned rows land on local page 0):
                              no ``nonzero`` host sync
``_prefetch_layer``           packs owned pages with the ``cpkv_runtime`` page copy (the
                              ``gather_pages`` kernels' bare launcher, resolved once, at the
                              first forward) into the exact-size all-gather block
``set_mla_kv_buffer``         stages each token at its request's private slot, persists owned
                              rows; both with SGLang's own fused quantise-and-store kernel
index key cache               ``_scratch_pages`` and ``write_targets`` per request, likewise
============================  ==================================================================

Per layer the path is: wait for the slot, kick the next layer's pack + all-gather on the side
stream, two stores of the current tokens, reads through tables translated once per forward.
None of it syncs with the host, and every shape is fixed by the plan (CUDA-graph capturable).
The plan itself (:meth:`CpkvSharedKVPool.begin_cpkv_extend`, once per forward) reads the device
once: the ``(3 + N,)`` host numbers of :func:`plan_forward` (layout status, slot count, per-rank
gathered slots, the all-gather's block).
"""

from __future__ import annotations

from typing import Any

import torch
from sglang.srt.mem_cache import page_interleave_pool as _pip
from sglang.srt.mem_cache.memory_pool import unwrap_write_loc

from sglang_cpkv.errors import StartRefused
from sglang_cpkv.plugin.shared_kv._capacity import logical_pages
from sglang_cpkv.plugin.shared_kv._forward import ForwardScratch, ShardOps, plan_forward, shard_ops
from sglang_cpkv.plugin.shared_kv._plan import (
    ScratchCapacityError,
    ScratchGeometry,
    current_locs,
    interleave_kept_rows,
    owned_local_rows,
    pack_launcher,
)
from sglang_cpkv.plugin.shared_kv._surface import missing_state

__all__ = ["CpkvIndexKeyCache", "CpkvSharedKVPool"]

if getattr(_pip.PageInterleaveDSATokenToKVPool, "cpkv_shared_kv", False):  # pragma: no cover
    raise ImportError(
        "sglang's PageInterleaveDSATokenToKVPool is already cpkv's subclass: this module was "
        "imported after the plugin replaced it (import it before HookRegistry.apply_hooks)"
    )


class CpkvIndexKeyCache(_pip._PageInterleaveIndexKeyCache):
    """The indexer's packed key pages, read and staged through the per-request plan."""

    def _scratch_pages(self, layer_id: int, page_indices: torch.Tensor) -> torch.Tensor:
        pool = self.pool
        if not pool._shard_extend_active:
            raise RuntimeError("logical indexer page reads need an active shared-KV extend plan")
        if not self.buffer[layer_id - pool.start_layer].shape[0]:
            raise RuntimeError(f"layer {layer_id} shares its top-k and holds no indexer keys")
        return pool.cpkv_forward.scratch_pages(page_indices)

    def write_targets(self, layer_id: int, loc: torch.Tensor) -> list[tuple[Any, ...]]:
        """(buffer, token slots, selected rows) to store: every token at its request's private
        scratch slot, and every token at its local row (non-owned ones onto local page 0)."""
        if loc.numel() == 0:
            return []
        pool = self.pool
        local = self.buffer[layer_id - pool.start_layer]
        if not local.shape[0]:
            raise RuntimeError(f"layer {layer_id} shares its top-k: it writes no indexer keys")
        targets: list[tuple[Any, ...]] = []
        if pool._shard_extend_active:
            pool.cpkv_stage_after_gather(layer_id)
            slot = pool._slots[layer_id % 2].tensors["index_k"]
            targets.append((slot, pool.cpkv_forward.write_rows(loc), None))
        targets.append((local, pool.cpkv_persist_rows(loc), None))
        return targets


class CpkvSharedKVPool(_pip.PageInterleaveDSATokenToKVPool):
    """SGLang's sharded DSA pool with a ``cpkv_runtime`` scratch layout (see module docstring).

    Constructor arguments are SGLang's (``shard_spec``, ``shard_group`` and the DSA pool's).
    """

    cpkv_shared_kv = True

    def __init__(self, *args: Any, shard_spec: Any, shard_group: Any, **kwargs: Any) -> None:
        super().__init__(*args, shard_spec=shard_spec, shard_group=shard_group, **kwargs)
        missing = missing_state(self)
        if missing:  # SGLang's constructor no longer sets what the per-layer path reads
            raise StartRefused(
                f"SGLang's sharded DSA pool no longer sets {', '.join(missing)}, which "
                f"CpkvSharedKVPool reads; refusing to serve with a pool that would fail "
                f"mid-forward. Fix: install sglang 0.5.23 or run without --cpkv-shared-kv."
            )
        ps = shard_spec.page_size
        self.cpkv_geometry = ScratchGeometry(
            page_size=ps,
            shard_size=shard_spec.shard_size,
            shard_rank=shard_spec.shard_rank,
            gather_pages=shard_spec.max_prefix_tokens // ps,
            write_pages=shard_spec.chunk_tokens // ps,
        )
        self.cpkv_num_pages = logical_pages(self.size, shard_spec.shard_size, ps)
        # The plan's per-request inverse is (B, cpkv_num_pages) int32: B is bounded by SGLang's
        # max_running_requests (the pool builders pass it; None where a builder does not).
        self.cpkv_max_requests: int | None = kwargs.get("max_running_requests")
        self.cpkv_forward: ForwardScratch | None = None
        # The plan's two ops and the page copy, resolved at the first forward (CUDA > Triton >
        # torch, CPKV_BACKEND) and kept: the per-layer packs call the backend's bare launcher
        # (no Python checks) on the plan's send_pages (int32, contiguous, in range by
        # construction) and the pool's pages.
        self._cpkv_ops: ShardOps | None = None
        self._cpkv_pack: Any = None

    def _create_index_key_cache(self) -> CpkvIndexKeyCache:
        return CpkvIndexKeyCache(self, self.index_buf_size)

    # ---- per forward ------------------------------------------------------------------------

    def begin_cpkv_extend(self, req_to_token: torch.Tensor, forward_batch: Any) -> None:
        """Plan this forward from SGLang's batch (called once, at attention-metadata time; the
        forward's one host read is inside :func:`plan_forward`)."""
        from sglang.srt.layers.attention.dsa.utils import can_dsa_prefill_cp_interleave

        kept = None
        if forward_batch.forward_mode.is_extend() and can_dsa_prefill_cp_interleave(forward_batch):
            kept = interleave_kept_rows(
                forward_batch.extend_seq_lens_cpu, self.shard_size, self.shard_rank
            )
        self._begin(
            req_to_token,
            forward_batch.req_pool_indices,
            forward_batch.extend_prefix_lens_cpu,
            forward_batch.seq_lens_cpu.tolist(),
            out_cache_loc=forward_batch.out_cache_loc,
            kept_rows=kept,
        )

    def begin_shard_extend(
        self,
        req_to_token: torch.Tensor,
        req_pool_indices: torch.Tensor,
        prefix_lens_cpu: list[int],
        seq_lens_cpu: list[int],
    ) -> None:
        """SGLang's entry point: the same plan, with ``out_cache_loc`` read from
        ``req_to_token`` and no CP row split (tables with one row per request)."""
        self._begin(req_to_token, req_pool_indices, prefix_lens_cpu, list(seq_lens_cpu))

    def _begin(
        self,
        req_to_token: torch.Tensor,
        req_pool_indices: torch.Tensor,
        prefix_lens: list[int],
        seq_lens: list[int],
        *,
        out_cache_loc: torch.Tensor | None = None,
        kept_rows: list[int] | None = None,
    ) -> None:
        if self.cpkv_max_requests is not None and len(prefix_lens) > self.cpkv_max_requests:
            raise ScratchCapacityError(
                f"this batch has {len(prefix_lens)} requests, but the per-request page inverse "
                f"is bounded at max_running_requests = {self.cpkv_max_requests} requests x "
                f"{self.cpkv_num_pages} logical pages x 4 B = "
                f"{self.cpkv_max_requests * self.cpkv_num_pages * 4:,} B per forward "
                f"(cpkv-serve --dry-run shows it); SGLang admits no more requests than "
                f"that. Fix: raise --max-running-requests or schedule fewer requests per batch"
            )
        if out_cache_loc is None:
            out_cache_loc = current_locs(req_to_token, req_pool_indices, prefix_lens, seq_lens)
        if self._cpkv_ops is None:
            self._cpkv_ops = shard_ops(out_cache_loc.device)
            self._cpkv_pack = pack_launcher(out_cache_loc.device)
        self.cpkv_forward = plan_forward(
            req_to_token,
            req_pool_indices,
            prefix_lens,
            seq_lens,
            out_cache_loc,
            self.cpkv_geometry,
            self.cpkv_num_pages,
            kept_rows=kept_rows,
            ops=self._cpkv_ops,
        )
        block = self.cpkv_forward.placement.block
        self._epoch += 1
        self._block_pages = block
        self._shard_extend_active = True
        self._translate_cache.clear()
        self._write_plan_key = None
        if block:
            self._prefetch_layer(self.start_layer)

    # ---- translation ------------------------------------------------------------------------

    def _plan(self) -> ForwardScratch:
        if self.cpkv_forward is None or not self._shard_extend_active:
            raise RuntimeError(
                "shared-KV scratch lookup outside an extend forward: no plan is active "
                "(prepare_kv_shard_forward / begin_shard_extend was not called)"
            )
        return self.cpkv_forward

    def translate_loc_to_scratch(self, loc: torch.Tensor) -> torch.Tensor:
        return self._plan().translate(loc)

    def _translate_loc_cached(self, loc: torch.Tensor) -> torch.Tensor:
        return self._plan().write_rows(loc)

    def cpkv_persist_rows(self, loc: torch.Tensor) -> torch.Tensor:
        """Local rows for ``loc``: owned rows at their place, others on local page 0."""
        geo = self.cpkv_geometry
        if self._shard_extend_active and self.cpkv_forward is not None:
            return self.cpkv_forward.persist_rows(loc, geo)
        return owned_local_rows(loc, geo.page_size, geo.shard_size, geo.shard_rank)

    def _get_write_plan(self, loc: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        # (token index of each written row, local row): every token, fixed shape, no nonzero.
        return torch.arange(loc.shape[0], device=loc.device), self.cpkv_persist_rows(loc)

    # ---- the layer-ahead gather ---------------------------------------------------------------

    def _page_view(self, buf: torch.Tensor, name: str) -> torch.Tensor:
        # Latent buffers count tokens along dim 0, the indexer's count pages (one row each).
        if name == "index_k":
            return buf
        return buf.view(-1, self.page_size, *buf.shape[1:])

    def _prefetch_layer(self, layer_id: int) -> None:
        """Pack this rank's owned pages and all-gather layer ``layer_id``'s history into its
        slot, on the gather stream. Idempotent per ``(layer_id, epoch)``."""
        local_layer = layer_id - self.start_layer
        if local_layer >= self.layer_num:
            return
        slot = self._slots[layer_id % 2]
        key = (layer_id, self._epoch)
        if slot.resident_key == key:
            return
        placement = self._plan().placement
        block, rank = placement.block, self.shard_rank
        # After the compute stream's prior work: the slot's previous tenant and the pool writes.
        self.kv_gather_stream.wait_stream(self.device_module.current_stream())
        with self.device_module.stream(self.kv_gather_stream):
            if self.layer_transfer_counter is not None:
                self.layer_transfer_counter.wait_until(local_layer)
            for pool_buf, name in self._gather_pairs(local_layer):
                scratch = self._page_view(slot.tensors[name], name)
                send = scratch[rank * block : (rank + 1) * block]
                # cpkv_runtime.gather_pages without its per-call checks (see pack_launcher)
                self._cpkv_pack(self._page_view(pool_buf, name), placement.send_pages, send)
                with self.kv_gather_comm.change_state(enable=True):
                    self.kv_gather_comm.all_gather(scratch[: self.shard_size * block], send)
            slot.ready.record(self.kv_gather_stream)
        slot.resident_key = key

    # ---- writes -----------------------------------------------------------------------------

    def cpkv_stage_after_gather(self, layer_id: int) -> None:
        """Order this layer's scratch stores after its gather when they can share a slot.

        SGLang stages the current tokens before the layer's first read, while the layer's
        gather (kicked one layer ahead, on the side stream) may still run. Its regions never
        overlap there; here a page that ends a prefix mid-page is gathered (its history rows)
        *and* staged (its current rows), so the compute stream waits for the gather first.
        Page-aligned batches (all SGLang builds) skip the wait.
        """
        plan = self.cpkv_forward
        if plan is None or not plan.stage_after_gather or not self._block_pages:
            return
        slot = self._slots[layer_id % 2]
        if slot.resident_key == (layer_id, self._epoch):
            self.device_module.current_stream().wait_event(slot.ready)

    def set_mla_kv_buffer(
        self,
        layer: Any,
        loc_info: Any,
        cache_k_nope: torch.Tensor,
        cache_k_rope: torch.Tensor,
        layer_id_override: int | None = None,
    ) -> None:
        loc, _, _ = unwrap_write_loc(loc_info)
        layer_id = layer_id_override if layer_id_override is not None else layer.layer_id
        if self._shard_extend_active:
            self.cpkv_stage_after_gather(layer_id)
            scratch = self._slots[layer_id % 2].tensors["kv"]
            rows = self._plan().write_rows(loc)
            self._write_mla_kv_buffer(scratch, rows, cache_k_nope, cache_k_rope)
        # The unsharded DSA/MLA store, at local rows (skipping the upstream owner filter).
        super(_pip.PageInterleaveKVPoolMixin, self).set_mla_kv_buffer(
            layer,
            self.cpkv_persist_rows(loc),
            cache_k_nope,
            cache_k_rope,
            layer_id_override=layer_id_override,
        )
