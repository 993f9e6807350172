"""One DSA layer on one context-parallel rank of the shared-KV path, for ``bench_cp_layer_scaling``.

The batch (``_layer_cases.build_inputs``: pages of a shared prefix and private pages, random KV,
queries and indexer inputs, built identically on every rank from one seed) lives on a pool
sharded the way SGLang's KV-sharded pool keeps it: logical page ``l`` on rank ``l % cp`` as local
page ``l // cp`` (SGLang reserves local page 0 as its padding page; nothing writes padding here,
so the batch's pages are used as logical pages unshifted). Query tokens are split as SGLang's
interleave CP splits them: flattened token ``i`` on rank ``i % cp``. Per layer, each rank:

- **gather** (on a side stream, one layer ahead in :meth:`RankLayer.forward`): packs the
  history pages it owns with ``cpkv_runtime.gather_pages`` into its block of the scratch and
  all-gathers the blocks (the placement is ``sglang_cpkv.plugin.shared_kv.plan_forward``'s, the plan
  ``CpkvSharedKVPool`` makes), then all-gathers the current KV its tokens computed;
- **cpkv ops**: stores the gathered current KV at each token's private scratch row and remaps
  its tokens' top-k pool locations to scratch rows (``cpkv_runtime.remap_locs`` +
  ``to_scratch``);
- **indexer**: its tokens' logits against every key of their request (DeepGEMM's fp8
  ``mqa_logits``), causal mask, ``torch.topk``, positions to pool locations, as
  ``_layer_cases.Indexer`` does for all tokens;
- **attention**: SGLang's Triton ``sparse_mla_prefill`` of its tokens over the scratch.

Not modelled: the indexer's key pages are read in place (the pool gathers them too, at 132 bytes
per token against 1,152 of bf16 latent); the layer's other parts (projections, MoE) are absent.

Not the pool: ``CpkvSharedKVPool`` packs through ``shared_kv.pack_launcher`` and gathers with
SGLang's communicator, stores through SGLang's fused quantise-and-store kernel into packed fp8
rows, and has no per-layer top-k remap (SGLang's backend maps the top-k through page tables the
pool translates once per forward); here the pack is ``cpkv_runtime.gather_pages``, the gathers
are ``torch.distributed``'s, the rows bf16, and the "cpkv ops" remap every token's top-k per
layer. Of SGLang only the Triton ``sparse_mla_prefill`` kernel runs, called directly.
"""

from __future__ import annotations

import math

import cpkv_runtime as cr
import torch
import torch.distributed as dist
from _layer_cases import Inputs
from sglang_cpkv.plugin.shared_kv import ScratchGeometry, plan_forward, to_scratch

#: torch >= 2.14 names it all_gather_single (all_gather_into_tensor warns there); older: the latter
_all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


class RankIndexer:
    """Top-k pool locations of this rank's query tokens (``_layer_cases.Indexer`` over a subset
    of the rows: the rows of one request in chunks whose float32 logits stay under budget)."""

    def __init__(self, inp: Inputs, tokens: slice, mqa_logits, budget_bytes: int = 4 << 30):
        self.inp, self.mqa_logits = inp, mqa_logits
        req = inp.token_req[tokens].long()
        self.q = inp.index_q[tokens].contiguous()
        self.w = inp.index_w[tokens].contiguous()
        self.ke = (inp.token_pos[tokens] + 1).int()
        self.ks = torch.zeros_like(self.ke)
        seq = inp.case.prefix + inp.case.new
        self.cols = torch.arange(seq, device=req.device)
        per_chunk = max(1, budget_bytes // (4 * seq))
        counts = torch.bincount(req.cpu(), minlength=inp.case.bsz).tolist()
        self.chunks, start = [], 0
        for b, n in enumerate(counts):
            self.chunks += [(b, lo, min(lo + per_chunk, start + n)) for lo in
                            range(start, start + n, per_chunk)]  # fmt: skip
            start += n
        self.out = torch.empty((req.shape[0], inp.dims.topk), dtype=torch.int32, device=req.device)

    def __call__(self) -> torch.Tensor:
        inp, k = self.inp, self.inp.dims.topk
        for b, lo, hi in self.chunks:
            keys = inp.key_locs[b]
            rows = inp.index_k.view(torch.uint8).index_select(0, keys).view(inp.index_k.dtype)
            logits = self.mqa_logits(
                self.q[lo:hi], rows, inp.index_scale.index_select(0, keys), self.w[lo:hi],
                self.ks[lo:hi], self.ke[lo:hi], clean_logits=False,
            )  # fmt: skip
            logits.masked_fill_(
                self.cols[None, : logits.shape[1]] >= self.ke[lo:hi, None], -math.inf
            )
            values, pos = logits.topk(min(k, logits.shape[1]), dim=1)
            self.out[lo:hi, : pos.shape[1]] = torch.where(values > -math.inf, keys[pos], -1).int()
            self.out[lo:hi, pos.shape[1] :] = -1
        return self.out


class RankLayer:
    """One layer of one CP rank (see the module docstring); two scratch slots, as the pool's."""

    def __init__(self, inp: Inputs, cp: int, rank: int, group, mqa_logits, attention, backend):
        d, p = inp.dims, inp.dims.page_size
        self.inp, self.cp, self.rank, self.group = inp, cp, rank, group
        self.attention, self.backend = attention, backend
        device = inp.q.device
        t = inp.case.tokens
        self.mine = slice(rank, t, cp)  # interleave split
        self.num_mine = len(range(rank, t, cp))
        used = int((inp.req_pages >= 0).sum())
        geo = ScratchGeometry(p, cp, rank, gather_pages=cp * used, write_pages=used)
        bsz, width = inp.req_pages.shape
        # SGLang's req_to_token for these pages: position j * P + o at location page * P + o
        offsets = torch.arange(p, device=device)
        req_to_token = (inp.req_pages.long().unsqueeze(2) * p + offsets).view(bsz, width * p)
        self.plan = plan_forward(
            req_to_token, torch.arange(bsz, device=device), inp.prefix.tolist(),
            (inp.prefix + inp.extend).tolist(), inp.loc.long(), geo, inp.num_pages,
        )  # fmt: skip
        pl = self.plan.placement
        self.block = pl.block
        owned = torch.arange(rank, inp.num_pages, cp, device=device)
        self.local_pool = inp.kv_pool.new_zeros((inp.num_pages // cp + 1, p, d.d_qk))
        self.local_pool[owned // cp] = inp.kv_pool[owned]
        self.slots = [inp.kv_pool.new_zeros((geo.trash_page + 1, p, d.d_qk)) for _ in range(2)]
        # current KV: this rank's rows, padded to an equal share; gathered rank-major
        share = -(-t // cp)
        self.cur_mine = inp.current_kv.new_zeros((share, d.d_qk))
        self.cur_mine[: self.num_mine] = inp.current_kv[self.mine]
        self.cur_all = [inp.current_kv.new_empty((cp * share, d.d_qk)) for _ in range(2)]
        token = torch.arange(share, device=device).unsqueeze(0) * cp + torch.arange(
            cp, device=device
        ).unsqueeze(1)  # (cp, share): token of each gathered row
        trash = geo.trash_page * p
        cur_rows = self.plan.cur_rows
        self.cur_dst = torch.where(token < t, cur_rows[token.clamp(max=t - 1)], trash).flatten()
        self.req_mine = inp.token_req[self.mine].contiguous()
        self.indexer = RankIndexer(inp, self.mine, mqa_logits)
        self.topk = self.indexer().clone()  # fixed top-k for the per-phase timings
        self.q = inp.q[self.mine].contiguous() if cp > 1 else inp.q
        self.dense_locs = torch.empty_like(self.topk)
        self.locs = torch.empty_like(self.topk)
        self.out = self.q.new_empty((self.num_mine, d.heads, d.d_v))
        self.cuda = device.type == "cuda"
        self.side = torch.cuda.Stream(device) if self.cuda else None
        self.ready = [torch.cuda.Event() if self.cuda else None for _ in range(2)]

    # ---- phases -----------------------------------------------------------------------------

    def gather(self, slot: int = 0) -> None:
        """Pack owned history pages, all-gather them; all-gather the current KV."""
        scratch, b, r = self.slots[slot], self.block, self.rank
        if b:
            send = scratch[r * b : (r + 1) * b]
            pages = self.plan.placement.send_pages
            cr.gather_pages(self.local_pool, pages, out=send, backend=self.backend, validate=False)
            _all_gather(scratch[: self.cp * b], send, group=self.group)
        _all_gather(self.cur_all[slot], self.cur_mine, group=self.group)

    def cpkv_ops(self, slot: int = 0, topk: torch.Tensor | None = None) -> None:
        """Gathered current KV to private rows; this rank's top-k to scratch rows."""
        rows = self.slots[slot].view(-1, self.inp.dims.d_qk)
        rows.index_copy_(0, self.cur_dst, self.cur_all[slot])
        topk = self.topk if topk is None else topk
        dense = cr.remap_locs(
            topk, self.req_mine, self.plan.placement.layout, out=self.dense_locs,
            backend=self.backend, validate=False,
        )  # fmt: skip
        scratch = to_scratch(dense, self.plan.placement.slot_scratch, self.inp.dims.page_size)
        self.locs.copy_(torch.where(dense >= 0, scratch, -1))

    def attend(self, slot: int = 0) -> torch.Tensor:
        d = self.inp.dims
        kv = self.slots[slot].view(-1, d.d_qk)
        return self.attention(self.q, kv, self.locs, d.sm_scale, d.d_v, out=self.out)

    def forward(self, layers: int) -> None:
        """``layers`` layers back to back, each layer's gather kicked one layer ahead on the side
        stream (as the pool does); the compute stream waits for it before the cpkv ops."""
        self._kick(0)
        for layer in range(layers):
            if self.cuda:
                torch.cuda.current_stream().wait_event(self.ready[layer % 2])
            if layer + 1 < layers:
                self._kick(layer + 1)
            topk = self.indexer()
            self.cpkv_ops(layer % 2, topk)
            self.attend(layer % 2)

    def _kick(self, layer: int) -> None:
        slot = layer % 2
        if not self.cuda:
            self.gather(slot)
            return
        self.side.wait_stream(torch.cuda.current_stream())  # the slot's previous reader is done
        with torch.cuda.stream(self.side):
            self.gather(slot)
            self.ready[slot].record(self.side)

    # ---- parity -----------------------------------------------------------------------------

    def parity(self) -> dict[str, bool]:
        """After gather + cpkv ops: every row the rank's top-k reads equals the full pool's row,
        and the attention over the scratch equals the attention over the pool, bitwise."""
        inp, d = self.inp, self.inp.dims
        self.gather(0)
        self.cpkv_ops(0)
        pool_rows, scratch_rows = inp.kv_pool.view(-1, d.d_qk), self.slots[0].view(-1, d.d_qk)
        rows_equal = torch.equal(self.locs >= 0, self.topk >= 0)
        for lo in range(0, self.num_mine, 256):  # (rows, topk, d) at a time
            want, got = self.topk[lo : lo + 256].long(), self.locs[lo : lo + 256].long()
            valid = want >= 0
            rows_equal &= torch.equal(
                pool_rows[want.clamp(min=0)][valid], scratch_rows[got.clamp(min=0)][valid]
            )
        ours = self.attend(0).clone()
        replica = self.attention(self.q, pool_rows, self.topk, d.sm_scale, d.d_v)
        same = ours.shape == replica.shape and torch.equal(ours.view(-1), replica.view(-1))
        return {"rows_equal_replica": bool(rows_equal), "attention_equals_replica": bool(same)}
