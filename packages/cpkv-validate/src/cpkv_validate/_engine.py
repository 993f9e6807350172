"""The reference engine: prefill steps over a paged KV pool, through cpkv_runtime, under CP.

One :meth:`Engine.step` runs a batch of (request, extend length) the way a DSA server does:

1. allocate pages, plan the dense layout (``plan_layout``: one slot per (request, page));
2. split the current tokens over the CP ranks (``cp_split``, zigzag or interleave);
3. per layer: project this rank's tokens, all-gather the current latent KV and indexer keys,
   ``materialize`` the history pages and ``fill_current`` the current rows into dense buffers,
   run the lightning indexer (full layers) or reuse the carried top-k (shared layers), turn the
   top-k positions into pool locations and ``remap_locs`` them into the dense buffer, attend;
4. gather the outputs, write the current KV into the pool (copy-on-write for shared pages).

Which pages a request gets, and which it shares, is the allocator model's business
(``allocator``: ``free`` = token-granular sharing with partial pages copied on write, the shape
under which a value-keyed inverse breaks; ``sglang`` = SGLang's page-aligned radix cache and
paged allocator). The engine only asks it for pages and tells it what was computed.

``sglang_offsets`` (``upstream`` or ``fixed``, :mod:`._ragged`) models SGLang's RAGGED top-k
offsets: in a batch without prefix under interleave CP, sparse attention then reads the gathered
current chunk at ``offset[row] + position`` instead of the dense layout, as SGLang's no-prefix
branch does.

With ``audit=True`` every KV row a query reads is checked against the row its own request put
there (pool history or its own current KV); a foreign row is looked up among the batch's current
rows and the pool to name the request it came from (:class:`Leak`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from cpkv_runtime import Layout, cp_split, current_tokens, gather_order, plan_layout

from . import _model as m
from ._alloc_free import CopyOnWriteAllocator
from ._alloc_sglang import SGLangAllocator
from ._config import ModelConfig, schedule
from ._pool import PagePool, Request
from ._ragged import RAGGED_RULES, ragged_chunk_branch, ragged_offsets
from ._rt import LocalComm, legacy_conflicts, legacy_layout
from ._step import SELF, Leak, StepCtx

__all__ = ["ALLOCATORS", "Engine", "Leak", "StepOutput"]

#: ``--allocator`` name -> page allocator model (``_alloc_free``, ``_alloc_sglang``).
ALLOCATORS = {"free": CopyOnWriteAllocator, "sglang": SGLangAllocator}


@dataclass
class StepOutput:
    """Outputs of one step: per request, positions (n,) and final hidden rows (n, hidden).

    Tensors stay on the engine's device (every rank holds all of them after the all-gather).
    """

    positions: dict[str, torch.Tensor] = field(default_factory=dict)
    hidden: dict[str, torch.Tensor] = field(default_factory=dict)
    leaks: list[Leak] = field(default_factory=list)
    legacy_conflicts: int = 0


class Engine:
    """A paged, prefix-sharing, context-parallel prefill engine over the reference model.

    Args:
        cfg, weights: the model (:func:`_model.init_weights`).
        num_pages: pages the allocator hands out.
        comm: :class:`LocalComm` (cp = 1) or :class:`DistComm` (one engine per rank).
        split: ``zigzag`` or ``interleave``.
        inverse: ``per-request`` (the fix) or ``legacy`` (value-keyed, the old bug).
        allocator: ``free`` or ``sglang`` (:data:`ALLOCATORS`).
        prefix_cache: share prefixes between requests (off for the batch-size-1 golden runs).
        backend: cpkv_runtime backend (None = its automatic choice).
        audit: check every KV row read against its owner (names leak sources).
        q_chunk: queries per attention/indexer chunk (bounds memory at long context).
        stable_topk: break indexer top-k ties by position (batch-invariant); False = torch.topk.
        sglang_offsets: None (read through the dense layout everywhere), or the RAGGED offset
            rule of SGLang's no-prefix interleave branch (``upstream``/``fixed``, :mod:`._ragged`).
    """

    def __init__(
        self,
        cfg: ModelConfig,
        weights: m.Weights,
        *,
        num_pages: int,
        comm: object | None = None,
        split: str = "zigzag",
        inverse: str = "per-request",
        allocator: str = "free",
        prefix_cache: bool = True,
        backend: str | None = None,
        audit: bool = False,
        q_chunk: int = 4096,
        stable_topk: bool = True,
        sglang_offsets: str | None = None,
    ) -> None:
        self.cfg, self.w = cfg, weights
        ref = weights["embed_tokens.weight"]
        self.device, self.dtype = ref.device, ref.dtype
        if allocator not in ALLOCATORS:
            raise ValueError(f"allocator must be one of {', '.join(ALLOCATORS)}, got {allocator!r}")
        if sglang_offsets is not None and sglang_offsets not in RAGGED_RULES:
            raise ValueError(
                f"sglang_offsets must be None or one of {', '.join(RAGGED_RULES)}, "
                f"got {sglang_offsets!r}"
            )
        self.sglang_offsets = sglang_offsets
        self.pages = ALLOCATORS[allocator](num_pages, cfg.page_size, prefix_cache=prefix_cache)
        self.pool = PagePool(cfg, self.pages.num_rows, self.dtype, self.device)
        self.comm = comm if comm is not None else LocalComm()
        self.split, self.inverse, self.backend = split, inverse, backend
        self.audit, self.q_chunk, self.stable_topk = audit, q_chunk, stable_topk
        self.requests: dict[str, Request] = {}
        self.schedule = schedule(cfg)
        self.types = self.schedule.indexer_types

    # -- request lifecycle -------------------------------------------------------------------
    def admit(self, name: str, tokens: list[int]) -> Request:
        """Add a request; it reuses the pages of the longest prefix the allocator matches."""
        if name in self.requests:
            raise ValueError(f"request {name!r} is already admitted; names must be unique")
        req = Request(name, list(tokens))
        self.pages.admit(req)
        self.requests[name] = req
        return req

    def finish(self, name: str) -> None:
        """Drop the live request; its prefix stays in the cache until evicted."""
        self.pages.finish(self.requests.pop(name))

    def evict(self, name: str) -> None:
        """Drop a cached prefix; pages nobody else holds return to the allocator."""
        self.pages.evict(name)

    # -- one prefill step ----------------------------------------------------------------------
    def step(self, batch: list[tuple[str, int]]) -> StepOutput:
        """Prefill ``extend`` more tokens of each named request, as one batch.

        Args:
            batch: (request name, extend length >= 1) in batch order.

        Returns:
            :class:`StepOutput` with the final hidden rows of every current token (all ranks).
        """
        reqs = [self.requests[n] for n, _ in batch]
        ext = [int(e) for _, e in batch]
        for r, e in zip(reqs, ext, strict=True):
            if e < 1 or r.cached + e > len(r.tokens):
                raise ValueError(
                    f"request {r.name!r}: extend {e} with {r.cached} cached tokens exceeds its "
                    f"{len(r.tokens)} tokens (or is < 1)"
                )
        self.pages.extend(reqs, [r.cached + e for r, e in zip(reqs, ext, strict=True)])
        dev = self.device
        extend = torch.tensor(ext, dtype=torch.int32, device=dev)
        page_tab, layout = self._plan(reqs, extend)
        out = StepOutput()
        if self.inverse == "legacy":
            out.legacy_conflicts = legacy_conflicts(layout)
            layout = legacy_layout(layout)
        token_req, token_pos, loc = (t.long() for t in current_tokens(layout))
        token_ids = torch.tensor(
            [t for r, e in zip(reqs, ext, strict=True) for t in r.tokens[r.cached : r.cached + e]],
            device=dev,
        )
        split = cp_split(
            extend, self.comm.world, token_req, token_pos, token_ids, loc, strategy=self.split
        )
        l_req, l_pos, l_ids, _ = split.local(self.comm.rank)
        ctx = StepCtx(self, reqs, layout, split, page_tab, token_req, loc, l_req, l_pos)
        ctx.chunk_offsets = self._chunk_offsets(reqs, ext, l_req)
        hidden = ctx.forward(l_ids)
        full = gather_order(self.comm.all_gather(hidden), split)
        out.leaks = self._all_leaks(ctx.leaks)
        for b, r in enumerate(reqs):
            sel = token_req == b
            out.positions[r.name] = token_pos[sel]
            out.hidden[r.name] = full[sel]
        self._write_cache(reqs, ext, ctx, token_req, token_pos, out.leaks)
        return out

    def _plan(self, reqs: list[Request], extend: torch.Tensor) -> tuple[torch.Tensor, Layout]:
        """The batch's page table (B, max_pages) int64 (-1 = none) and its dense layout."""
        dev, p = self.device, self.cfg.page_size
        page_tab = torch.full((len(reqs), max(len(r.pages) for r in reqs)), -1, dtype=torch.int64)
        for b, r in enumerate(reqs):
            page_tab[b, : len(r.pages)] = torch.tensor(r.pages)
        page_tab = page_tab.to(dev)
        prefix = torch.tensor([r.cached for r in reqs], dtype=torch.int32, device=dev)
        layout = plan_layout(
            page_tab.int(), prefix, extend, p, self.pool.num_pages, backend=self.backend
        )
        return page_tab, layout

    def _all_leaks(self, mine: list[Leak]) -> list[Leak]:
        """Every rank's leaks, once each: a rank reads only its own queries' rows, so a leak may
        show on one rank alone (SGLang's RAGGED offsets misplace only the ranks missing a
        request). Rank order, first report kept."""
        if not self.audit or self.comm.world == 1:
            return mine
        seen, out = set(), []
        for part in self.comm.all_gather_object(mine):
            for leak in part:
                key = (leak.layer, leak.kind, leak.victim, leak.source)
                if key not in seen:
                    seen.add(key)
                    out.append(leak)
        return out

    def _chunk_offsets(
        self, reqs: list[Request], ext: list[int], l_req: torch.Tensor
    ) -> torch.Tensor | None:
        """(L,) int64 offset of each local row in the gathered chunk (-1 on padding rows), or
        None where attention reads through the dense layout (no SGLang offsets modelled, or a
        batch outside SGLang's no-prefix interleave branch)."""
        prefix = [r.cached for r in reqs]
        if self.sglang_offsets is None or not ragged_chunk_branch(
            self.split, self.comm.world, ext, prefix
        ):
            return None
        real = l_req >= 0
        rows = l_req[real].tolist()
        out = torch.full(l_req.shape, -1, dtype=torch.long, device=l_req.device)
        out[real] = torch.tensor(
            ragged_offsets(ext, rows, self.sglang_offsets), dtype=torch.long, device=l_req.device
        )
        return out

    def _write_cache(self, reqs, ext, ctx, token_req, token_pos, leaks) -> None:
        """Copy-on-write any shared page a request wrote, store its current KV rows, and tell
        the allocator what is now computed."""
        p, pool = self.cfg.page_size, self.pool
        tainted = {}
        for leak in leaks:
            if leak.source != SELF:  # its own rows elsewhere: no other request to carry forward
                tainted.setdefault(leak.victim, set()).add(leak.source)
        for b, (r, e) in enumerate(zip(reqs, ext, strict=True)):
            for src, dst in self.pages.before_write(r, r.cached + e):
                pool.copy_page(src, dst)
            sel = torch.nonzero(token_req == b).squeeze(1)
            pos = token_pos[sel]
            pages = torch.tensor(r.pages, device=self.device)
            locs = pages[pos // p] * p + pos % p
            for layer in range(len(self.types)):
                pool.kv[layer].view(-1, self.cfg.latent_dim)[locs] = ctx.cur_lat[layer][sel]
                if pool.idx[layer] is not None:
                    pool.idx[layer].view(-1, self.cfg.index_head_dim)[locs] = ctx.cur_idx[layer][
                        sel
                    ]
            src = frozenset(tainted.get(r.name, ()))
            for loc_ in locs.tolist() if self.audit else ():  # leak bookkeeping
                pool.writer[loc_] = r.name
                if src:
                    pool.taint[loc_] = src
                else:
                    pool.taint.pop(loc_, None)
            r.cached += e
            r.extends.append(e)
            self.pages.commit(r)
