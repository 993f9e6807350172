"""The backend contract: the tensor-level ops every backend (torch, triton, cuda) implements.

What each op computes is written below; its signature (in the form the kernels take), its
metadata checks and its output shapes are written once, in ``_contract.OP_SPECS``.

`cpkv_runtime` owns the torch definitions and a registry; `cpkv_kernels` registers its Triton and
CUDA implementations through the entry-point group ``cpkv_runtime.backends``. Each entry point is a
zero-argument callable returning a :class:`Backend`. The runtime never imports the kernels by name.

Op signatures (all index tensors int32 unless stated, ``-1`` = absent; ``P`` = page size; rows are
opaque: ``kv_pool`` and ``dense`` may have any dtype and any trailing shape ``*row``). Inputs arrive
validated. The runtime hands a non-torch backend only tensors whose dims after the first are
contiguous (each page of ``kv_pool``/``dense``, each row of ``current_kv``, one block; the first
dim may have any stride); other layouts run on torch.

``build_inverse(slot_table, req_pages, num_pages) -> inverse``
    slot_table: (B, M) slot of request b's j-th page, -1 past its pages.
    req_pages:  (B, M) pool page of request b's j-th page, -1 past its pages.
    returns inverse: (B, num_pages), ``inverse[b, req_pages[b, j]] = slot_table[b, j]``, else -1.

``materialize(kv_pool, slot_page, out=None) -> dense``
    kv_pool: (num_pages, P, *row) read-only. slot_page: (S,) source pool page of each slot.
    returns dense: (S, P, *row), ``dense[s] = kv_pool[slot_page[s]]`` (into ``out`` if given).

``fill_current(dense, current_kv, token_req, out_cache_loc, inverse, page_size) -> None``
    dense: (S, P, *row) written in place. current_kv: (T, *row) read-only.
    token_req: (T,) request of each token (any value, even out of range, on padding rows).
    out_cache_loc: (T,) int32/int64 pool location (page * P + offset), -1 = padding row (skipped).
    ``dense[inverse[token_req[t], loc // P], loc % P] = current_kv[t]``.

``remap_locs(locs, req_id, inverse, page_size, out=None) -> dense_locs``
    locs: (N,) or (N, K) int32/int64 pool locations, -1 = absent. req_id: (N,) request of each row
    (-1 on rows whose locs are all -1, e.g. CP padding).
    returns int32 of locs' shape: ``inverse[req_id[n], loc // P] * P + loc % P``; -1 stays -1 and a
    page the request does not use maps to -1.

``plan_slots(req_pages, prefix_lens, extend_lens, page_size, num_pages, max_slots, dedup)``
    The slot plan of :func:`cpkv_runtime.plan_layout_static` (numbering of ``plan_layout``) in
    shapes fixed by ``(B, M, num_pages, max_slots)``: no host sync, no value-dependent shape.
    req_pages: (B, M) int32/int64; prefix_lens, extend_lens: (B,) int32/int64 (unvalidated).
    returns the tuple ``(pages, prefix, extend, seq, pages_used, slot_table, slot_page,
    slot_owner, inverse, used_slots, status, info)``, all int32, in the order of
    :class:`cpkv_runtime.Layout`'s fields: pages (B, M), ``req_pages`` with -1 at
    ``j >= pages_used[b]``; prefix, extend, seq (= prefix + extend), pages_used
    (= ceil(seq / P)), each (B,); slot_table (B, M); slot_page, slot_owner (max_slots,), -1 from
    slot ``info[0]`` on (padding); inverse (B, num_pages); used_slots (1,) = ``info[0]``;
    status (1,) = ``info[1]``; info (3,) = (slots the batch needs, status, sum of extend_lens),
    one tensor so that a caller reads all three in one transfer. ``status`` is 0 on valid input,
    else an OR of bits: 1 a negative length, 2 a request needing more than M pages, 4 a used
    page outside ``[0, num_pages)``, 8 a page listed twice by one request, 16 more slots needed
    than ``max_slots``. Pairs whose slot would be ``>= max_slots`` get slot -1 (no inverse
    entry). With bits 1-8 set only ``info``, ``used_slots`` and ``status`` are defined (kernels
    never write outside their outputs).

``fill_sources(token_req, out_cache_loc, inverse, page_size, num_slots) -> sources``
    Which current row :func:`fill_current` writes into each dense row, once per forward, so
    that every layer can build its dense buffer in one pass (``build_dense``).
    token_req, out_cache_loc, inverse: as in ``fill_current``. returns sources
    (num_slots, P) int32: ``sources[inverse[token_req[t], loc // P], loc % P] = t`` for every
    row ``t`` that ``fill_current`` writes (the largest ``t`` where several rows name one
    destination, as a sequential scatter leaves it), -1 elsewhere. Rows ``fill_current``
    skips are skipped here: ``loc < 0``, a request outside ``[0, B)``, a page outside the pool,
    an inverse entry -1 or ``>= num_slots``.

``build_dense(kv_pool, slot_page, current_kv, sources, used_slots, out) -> None``
    ``materialize`` then ``fill_current`` in one pass that writes every dense row once:
    ``out[s, r] = current_kv[sources[s, r]]`` where ``0 <= sources[s, r] < T``, else
    ``kv_pool[slot_page[s], r]`` where ``slot_page[s]`` is a pool page, else untouched.
    kv_pool: (num_pages, P, *row) read-only; slot_page: (S,); current_kv: (T, *row)
    read-only; sources: (S, P) from ``fill_sources``; used_slots: None or (1,) int32 on the
    device (``plan_layout_static``'s count): slots ``>= used_slots[0]`` are not visited (their
    slot_page is -1 and no source names them, so nothing changes; the kernels skip the work);
    out: (S, P, *row), written.

``layer_step(kv_pool, slot_page, current_kv, sources, used_slots, dense, locs, row_req,
inverse, page_size, dense_locs) -> None``
    One layer of :class:`cpkv_runtime.LayerStep`: ``build_dense(kv_pool, slot_page, current_kv,
    sources, used_slots, dense)`` then ``remap_locs(locs, row_req, inverse, page_size,
    dense_locs)``; one call, so a backend can launch both from one entry point.

``shard_plan(req_to_token, req_pool_indices, out_cache_loc, lens, kept, width, page_size,
num_pages, max_slots, shard_size, shard_rank, write_base, trash_page, with_layout) -> list``
    One forward's scratch plan for a page-interleaved sharded pool (logical page ``l`` on rank
    ``l % N``, ``N = shard_size``), all on the device: :func:`plan_slots` with dedup over the
    batch's pages, the gather order, and the placement. req_to_token: (R, C) int32/int64 token
    locations of each request's positions; req_pool_indices: (B,) int32/int64 rows of it;
    out_cache_loc: (T,) int32/int64 the current tokens' locations, request-major; lens: host
    ints, B prefix lengths then B extend lengths; kept: host ints, requests of the rows a CP
    rank keeps (any list); width: ``M >= max ceil(seq / P)``.

    The pages are ``req_pages[b, j] = req_to_token[req_pool_indices[b], j * P] // P`` for
    ``j < ceil(seq_b / P)``, -1 past them, where that read is outside ``req_to_token`` or the
    page is negative; pages past int32 become ``2**31 - 1`` (all bad pages for the status).
    A slot is *gathered* when some request reads history through it (``j < ceil(prefix_b /
    P)``); its category is its owner rank ``slot_page % N``, else ``N``. ``order`` sorts the
    used slots stably by category (slot order within one), then the padding slots in place;
    ``g_r`` counts the gathered slots of ranks ``0..r``; ``block = max_r(g_r - g_{r-1})``.
    Rank ``r``'s run goes to scratch pages ``r * block + i``, the other used slots to
    ``write_base + i``, in order.

    Returns ``host`` (3 + N,) int32 ``[status, used slots, g_0, ..., g_{N-1}, block]`` (the one
    tensor a caller reads); ``inverse`` (B, num_pages) of the ``plan_slots`` outputs; ``rows``
    (B,) int64 ``0 .. B - 1``; ``kept`` (K,) int64; ``slot_scratch`` (S + 1,) int64 the scratch
    page of each used slot, ``trash_page`` for the padding slots and at entry ``S`` (so
    ``slot_scratch[-1]`` is trash); ``send_pages`` (S,) int32 rank ``shard_rank``'s run as local
    pages (``slot_page // N``), then 0; ``token_req`` (T,) int64 the request of each token
    (``B`` past the last); ``cur_rows`` (T,) int64 ``slot_scratch[inverse[token_req, loc // P]]
    * P + loc % P`` (trash for a page outside the pool or the request); ``local_rows`` (T,)
    int64 ``(loc // P // N) * P + loc % P`` where rank ``shard_rank`` owns the page, else
    ``loc % P`` (local page 0, the reserved one). With ``with_layout`` also ``order`` (S,)
    int32, its inverse permutation ``spos``, ``ext_start`` (B + 1,) int64 (each request's first
    token and the total), then the ``plan_slots`` outputs ``slot_page``, ``pages``, ``prefix``,
    ``extend``, ``seq``, ``pages_used``, ``slot_table``, ``slot_owner``, ``used_slots``,
    ``status``, ``info`` (each returned tensor costs the host the time this op exists to save).
    With a nonzero status, ``order`` is the identity, every ``g_r`` and ``block`` are 0 and the
    placement is not meaningful. Triton does not implement it: a Triton launch costs more host
    time than the op saves; without CUDA it runs on torch.

``current_page_mask(req_pages, prefix_lens, extend_lens, page_size) -> mask``
    req_pages: (B, M); prefix_lens, extend_lens: (B,).
    returns bool (B, M): True where request b's j-th page holds any of b's current tokens
    (``extend_lens[b] > 0`` and ``prefix_lens[b] // P <= j < ceil((prefix_lens[b] + extend_lens[b])
    / P)``; the ``extend_lens[b] > 0`` term matters when a prefix ends mid-page and nothing is
    current).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ._contract import OP_SPECS

#: The ops, in the order of the contract (``_contract.OP_SPECS``: one entry per op, holding its
#: signature, its metadata checks and its output shapes).
OP_NAMES: tuple[str, ...] = tuple(OP_SPECS)

# Ops no Triton kernel implements (see ``shard_plan`` above): Triton falls through to torch.
NO_TRITON: frozenset[str] = frozenset({"shard_plan"})

# Dispatch order when no backend is forced: the first available one that supports the device wins.
PRIORITY: tuple[str, ...] = ("cuda", "triton", "torch")


@dataclass(frozen=True)
class Backend:
    """One implementation of the ops in :data:`OP_NAMES`.

    Attributes:
        name: ``"torch"``, ``"triton"`` or ``"cuda"``.
        ops: op name -> callable with the signature documented in this module. A backend may
            implement a subset; missing ops fall through to the next backend in priority order.
        available: False when the backend cannot run here (``reason`` says why).
        reason: why it is unavailable, shown once in a warning when it was asked for.
        devices: device types it runs on (``{"cuda"}``; Triton under ``TRITON_INTERPRET=1``
            adds ``"cpu"``).
        raw_ops: op name -> the bare launcher of that op, for callers that checked their
            arguments already (``plan_layout_static``, ``prepare_layer_step`` and every layer
            of a ``LayerStep``): the op's arguments with every output argument passed; index
            tensors contiguous and int32 (``req_pages``, ``out_cache_loc`` and ``locs`` may be
            int64, and so may ``prefix_lens`` with ``extend_lens``, which share one dtype); no
            metadata checks, no conversion; ops that write into an output argument return
            nothing. Ops missing here use ``ops``.
    """

    name: str
    ops: dict[str, Callable[..., object]] = field(default_factory=dict)
    available: bool = True
    reason: str = ""
    devices: frozenset[str] = frozenset({"cuda"})
    raw_ops: dict[str, Callable[..., object]] = field(default_factory=dict)

    def supports(self, op: str, device: torch.device) -> bool:
        return self.available and op in self.ops and device.type in self.devices
