"""One step's forward pass over this rank's tokens, and the audit that names leak sources.

Per layer: project this rank's tokens, all-gather the current latent KV and indexer keys
(``gather_order``; with the audit on, ``localize`` must give this rank its own rows back),
``materialize`` the history pages and ``fill_current`` the current rows into dense buffers, run
the lightning indexer on full layers (IndexCache ``TopkCarry`` reuses the top-k on shared ones),
map top-k positions to pool locations and ``remap_locs`` them into the dense buffer, attend.

The audit checks every KV row a query reads (latent rows and indexer keys) against the row its
own request put there (pool history or its own current KV). A foreign row is matched bitwise
against the batch's current rows and the pool to name the request it came from; rows a victim
writes after reading foreign KV carry that source forward (``PagePool.taint``). A row of the
reader's own request at another position is reported as :data:`SELF` (SGLang's misplaced RAGGED
offsets shift a query onto its own earlier rows as well as onto another request's).

With ``chunk_offsets`` set (the engine's ``sglang_offsets`` mode, in SGLang's no-prefix
interleave branch), sparse attention reads the gathered current chunk at ``offset[row] +
position``, as SGLang does there; the indexer is unchanged (its key ranges are per request).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from cpkv_runtime import fill_current, gather_order, localize, materialize, remap_locs
from indexcache import TopkCarry

from . import _model as m

__all__ = ["SELF", "Leak", "StepCtx"]

#: Leak source of a row that is the reader's own KV, but of another position.
SELF = "itself (another position)"


_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t`` viewed as same-width integers: rows are compared as bytes (NaN == NaN, -0 != 0)."""
    return t.view(_INT_OF_SIZE[t.element_size()])


@dataclass(frozen=True)
class Leak:
    """A KV row read by ``victim`` that is not its own (layer, kind ``kv``/``index_k``)."""

    layer: int
    kind: str
    victim: str
    position: int
    source: str


class StepCtx:
    """Per-step state shared by the layers (layout, split, gathered current KV, audit)."""

    def __init__(self, eng, reqs, layout, split, page_tab, token_req, loc, l_req, l_pos):
        self.e, self.reqs, self.layout, self.split = eng, reqs, layout, split
        self.page_tab, self.token_req, self.loc = page_tab, token_req, loc
        self.l_req, self.l_pos = l_req.long(), l_pos.long()
        self.cur_lat: list[torch.Tensor] = []
        self.cur_idx: list[torch.Tensor | None] = []
        self.leaks: list[Leak] = []
        self._seen: set[tuple] = set()
        self._fill_checked = False  # fill_current value checks ran for this step
        self.chunk_offsets: torch.Tensor | None = None  # (L,) int64; see the module docstring
        self.chunks = self._chunks(eng.q_chunk)

    def _chunks(self, q_chunk: int) -> list[tuple[int, torch.Tensor, int]]:
        """This rank's query chunks, the same for every layer: (request b, rows (n,), n_keys).

        ``n_keys`` is the number of positions the chunk's queries can see (its last position + 1).
        Built once per step from host copies of the local request/position columns, so the
        layers run without a host sync per request or per chunk.
        """
        req, pos = self.l_req.cpu(), self.l_pos.cpu()
        out = []
        for b in range(len(self.reqs)):
            rows = torch.nonzero(req == b).squeeze(1)
            for c in range(0, rows.shape[0], q_chunk):
                q = rows[c : c + q_chunk]
                out.append((b, q.to(self.l_req.device), int(pos[q].max()) + 1))
        return out

    def _gather(self, x: torch.Tensor) -> torch.Tensor:
        """All-gather this rank's rows (L, ...) into the batch's (T, ...) in token order."""
        full = gather_order(self.e.comm.all_gather(x), self.split)
        if self.e.audit:  # the way back must give this rank exactly its own rows again
            mine = localize(full, self.split, self.e.comm.rank)
            ok = self.l_req >= 0
            if mine.shape != x.shape or not torch.equal(mine[ok], x[ok]):
                raise RuntimeError(
                    f"CP plumbing: rank {self.e.comm.rank}'s rows do not survive all-gather + "
                    f"localize ({tuple(x.shape)} -> {tuple(mine.shape)})"
                )
        return full

    def _dense(self, pool_t: torch.Tensor, cur: torch.Tensor) -> torch.Tensor:
        e = self.e
        dense = materialize(pool_t, self.layout, backend=e.backend)
        # token_req/loc/layout are the step's: their values are checked on the first fill only
        check = e.inverse != "legacy" and not self._fill_checked
        fill_current(
            dense, cur, self.token_req, self.loc, self.layout, backend=e.backend, validate=check
        )
        self._fill_checked = True
        return dense.view(-1, pool_t.shape[-1])

    def _locs(self, b: int, pos: torch.Tensor) -> torch.Tensor:
        p = self.e.cfg.page_size
        safe = pos.clamp_min(0)
        loc = self.page_tab[b][safe // p] * p + safe % p
        return torch.where(pos >= 0, loc, -1)

    def _remap(self, layer: int, b: int, locs: torch.Tensor) -> torch.Tensor:
        rid = torch.full((locs.shape[0],), b, dtype=torch.int32, device=locs.device)
        # The value checks cost host syncs; the locs come from the same page table in every
        # layer (only the top-k positions change), so checking the first layer's calls is enough.
        check = layer == 0
        return remap_locs(locs, rid, self.layout, backend=self.e.backend, validate=check).long()

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        e, cfg, w = self.e, self.e.cfg, self.e.w
        valid = self.l_req >= 0
        x = w["embed_tokens.weight"][ids.clamp_min(0)] * valid[:, None]
        pos = self.l_pos.clamp_min(0)
        carry = TopkCarry(e.schedule)
        for layer, kind in enumerate(e.types):
            pre = f"layers.{layer}."
            xn = m.rms_norm(x, w[pre + "input_layernorm.weight"], cfg.rms_norm_eps)
            ai = m.attention_inputs(w, cfg, layer, xn, pos)
            self.cur_lat.append(self._gather(ai.latent))
            dense = self._dense(e.pool.kv[layer], self.cur_lat[-1])
            dense_idx = None
            if kind == "full":
                self.cur_idx.append(self._gather(ai.idx_k))
                dense_idx = self._dense(e.pool.idx[layer], self.cur_idx[-1])
            else:
                self.cur_idx.append(None)
            o_lat = torch.zeros(
                x.shape[0],
                cfg.num_attention_heads,
                cfg.kv_lora_rank,
                dtype=x.dtype,
                device=x.device,
            )
            # IndexCache: full layers run the indexer, shared layers reuse the carried top-k.
            run = functools.partial(self._topk, layer, ai, dense_idx, x.shape[0])
            topk = carry.step(layer, run, num_rows=x.shape[0])
            for b, q, _ in self.chunks:
                o_lat[q] = self._attend(layer, b, q, topk[q], ai, dense)
            x = x + m.attention_output(w, cfg, layer, o_lat)
            xn = m.rms_norm(x, w[pre + "post_attention_layernorm.weight"], cfg.rms_norm_eps)
            x = x + m.mlp(w, layer, xn)
        return m.rms_norm(x, w["norm.weight"], cfg.rms_norm_eps)

    def _topk(self, layer, ai, dense_idx, n_rows) -> torch.Tensor:
        """This rank's (n_rows, index_topk) top-k positions, -1 = none (padding, short rows)."""
        k = self.e.cfg.index_topk
        topk = torch.full((n_rows, k), -1, dtype=torch.long, device=self.l_pos.device)
        for b, q, n_keys in self.chunks:
            topk[q] = self._indexer(layer, b, q, n_keys, ai, dense_idx)
        return topk

    def _indexer(self, layer, b, q, n_keys, ai, dense_idx) -> torch.Tensor:
        qpos = self.l_pos[q]
        span = torch.arange(n_keys, device=qpos.device)
        d = self._remap(layer, b, self._locs(b, span))
        keys = dense_idx[d.clamp_min(0)]
        if self.e.audit:
            self._audit(layer, "index_k", b, span, d, keys)
        scores = m.index_scores(ai.idx_q[q], ai.idx_w[q], keys, self.e.cfg)
        valid = (span[None, :] <= qpos[:, None]) & (d >= 0)[None, :]
        sel = m.select_topk(scores, valid, self.e.cfg.index_topk, self.e.stable_topk)
        pad = self.e.cfg.index_topk - sel.shape[1]
        return torch.nn.functional.pad(sel, (0, pad), value=-1) if pad else sel

    def _attend(self, layer, b, q, sel, ai, dense) -> torch.Tensor:
        if self.chunk_offsets is None:
            d = self._remap(layer, b, self._locs(b, sel.reshape(-1))).view(sel.shape)
            rows = dense[d.clamp_min(0)]
        else:  # SGLang's RAGGED indices into the gathered chunk (T, latent), in token order
            d = torch.where(sel >= 0, self.chunk_offsets[q][:, None] + sel, -1)
            rows = self.cur_lat[layer][d.clamp_min(0)]
        if self.e.audit:
            ok = sel >= 0
            self._audit(layer, "kv", b, sel[ok], d[ok], rows[ok])
        return m.absorbed_attention(ai.q_abs[q], ai.q_rot[q], rows, d >= 0, self.e.cfg)

    # -- audit ------------------------------------------------------------------------------
    def _audit(self, layer, kind, b, pos, dense_loc, got) -> None:
        """Compare rows read for request b at ``pos`` with b's own rows; record foreign ones."""
        e, r = self.e, self.reqs[b]
        store = e.pool.kv[layer] if kind == "kv" else e.pool.idx[layer]
        cur = self.cur_lat[layer] if kind == "kv" else self.cur_idx[layer]
        width = store.shape[-1]
        want = torch.empty_like(got)
        hist = pos < r.cached
        locs = self._locs(b, pos)
        want[hist] = store.view(-1, width)[locs[hist]]
        mine = torch.nonzero(self.token_req == b).squeeze(1)
        want[~hist] = cur[mine[pos[~hist] - r.cached]]
        bad = (dense_loc < 0) | (_bits(got) != _bits(want)).any(dim=-1)
        sources: set[str] = set()
        for i in torch.nonzero(bad).squeeze(1).tolist():
            sources.add(self._source(b, got[i], cur, store, width))
        if e.pool.taint:
            for loc_ in locs[hist].tolist():
                sources.update(e.pool.taint.get(loc_, ()))
        for src in sources:
            key = (layer, kind, r.name, src)
            if key not in self._seen:
                self._seen.add(key)
                first = int(pos[bad][0]) if bool(bad.any()) else -1
                self.leaks.append(Leak(layer, kind, r.name, first, src))

    def _source(self, b, row, cur, store, width) -> str:
        row = _bits(row)
        hit = torch.nonzero((_bits(cur) == row).all(dim=-1)).squeeze(1)
        if hit.numel():
            src = int(self.token_req[hit[0]])
            return SELF if src == b else self.reqs[src].name
        hit = torch.nonzero((_bits(store.view(-1, width)) == row).all(dim=-1)).squeeze(1)
        for loc_ in hit.tolist():
            if loc_ in self.e.pool.writer:
                return self.e.pool.writer[loc_]
        return "?"
