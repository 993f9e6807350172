"""The scripts, configurations and planted bugs of the shared-KV suite on SGLang's allocator.

A script is what clients send and what the scheduler does with it: prompts (token ids), which
requests each step's batch runs and how far (a chunk, or the rest), and which requests are
checkpointed, finish or abort after the step's forward. SGLang's radix cache and allocator decide
every hit, page and location (``_skv_radix_sched``). ``LOCAL_PAGES`` pages per rank at CP 2 make
the pool tight enough that allocation evicts in steps 4 and 5. ``SCRIPT``:

0. ``A`` and ``G`` run their first chunks; ``G``'s chain rotates from rank 1 (least-full class).
1. ``A`` and ``G`` finish (one token each, their first page read back as history); ``B`` hits
   ``A``'s published chunk.
2. ``C1`` is ``A``'s published chunk and one new token: a full hit and one token, on a page of
   rank 1; below CP 2, so SGLang runs it without the CP split (``InterleaveCPStrategy.can_apply``).
3. ``C2`` repeats ``G``'s prompt: its first ``len - 1`` tokens are cached, so it extends one token
   too, on a page of rank 0. (The allocator hands it ``G``'s freed last page, which already holds
   that very row: a repeat recomputes identical KV.)
4. ``K``'s first chunk beside ``E`` (a hit on ``A``'s page): ``G``'s cached page, the least
   recently used leaf, is evicted, and ``K``, a prefix sharing nothing with ``G``, is allocated
   into it.
5. ``K``'s second chunk reads that page as history; ``D`` evicts ``A``'s page. After the forward
   ``K`` is aborted: its second chunk's page is freed unpublished, its first stays cached.
6. ``H`` hits ``D``; ``M`` hits ``K``'s first chunk and is allocated into ``A``'s evicted page.

The script runs without EAGLE. EAGLE keys the tree by bigrams and caps a match at
``page_floor(len - 2)`` tokens, so there a repeated prompt extends at least two tokens (split at
CP 2); ``EAGLE_SCRIPT`` runs that case under the target deployment's EAGLE configuration.

Mutations plant a bug in cpkv's pool that SGLang's allocator and radix cache expose; each must
make the comparison (forward records or pool contents) fail. None raises on one rank only: a
rank that left a forward early would leave the other waiting in the next all-gather.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from _skv_backend_cases import patch_attr
from _skv_backend_rank import Config

P = 64
LOCAL_PAGES = 3  # pages per rank: 6 logical pages at CP 2


@dataclass(frozen=True)
class PlainConfig(Config):
    """A :class:`Config` served without speculative decoding (radix keys are plain tokens)."""

    def argv(self, cp: int, model_path: str) -> list[str]:
        argv, out, skip = super().argv(cp, model_path), [], False
        for a in argv:
            if skip:
                skip = False
            elif a.startswith("--speculative-"):
                skip = True
            else:
                out.append(a)
        return out


CONFIGS: tuple[Config, ...] = (
    PlainConfig("flashmla_sparse/bf16", "flashmla_sparse", "bfloat16", 32),
    PlainConfig("flashmla_sparse/fp8", "flashmla_sparse", "fp8_e4m3", 32),
)
#: The target deployment's EAGLE (bigram radix keys), for ``EAGLE_SCRIPT``.
EAGLE_CONFIG = Config("flashmla_sparse/fp8+eagle", "flashmla_sparse", "fp8_e4m3", 32)


def _doc(start: int, n: int) -> tuple[int, ...]:
    return tuple(range(start, start + n))


X, GD, KD, WD = _doc(1000, 65), _doc(2000, 65), _doc(5000, 192), _doc(6000, 65)


@dataclass(frozen=True)
class Step:
    """One scheduling round: admissions, the batch (``(name, tokens)``, None = the rest), then
    after the forward the chunked requests checkpointed, the finished released, the aborted
    released without a checkpoint."""

    admit: tuple[tuple[str, tuple[int, ...]], ...]
    batch: tuple[tuple[str, int | None], ...]
    checkpoint: tuple[str, ...] = ()
    finish: tuple[str, ...] = ()
    abort: tuple[str, ...] = ()


SCRIPT: tuple[Step, ...] = (
    Step((("A", X), ("G", GD)), (("A", 64), ("G", 64)), checkpoint=("A", "G")),
    Step((("B", X[:64] + _doc(3000, 10)),), (("A", None), ("G", None), ("B", None)),
         finish=("A", "G", "B")),
    Step((("C1", (*X[:64], 1500)),), (("C1", None),), finish=("C1",)),
    Step((("C2", GD),), (("C2", None),), finish=("C2",)),
    Step((("K", KD), ("E", X[:64] + _doc(9000, 5))), (("K", 64), ("E", None)),
         checkpoint=("K",), finish=("E",)),
    Step((("D", WD),), (("K", 64), ("D", None)), finish=("D",), abort=("K",)),
    Step((("H", WD[:64] + _doc(8000, 3)), ("M", KD[:64] + _doc(7000, 5))),
         (("H", None), ("M", None)), finish=("H", "M")),
)  # fmt: skip

XE = _doc(4000, 130)
#: Under EAGLE: ``A`` publishes 128 tokens (129 bigrams, floored to the page); its repeat ``C``
#: matches ``page_floor(130 - 2) = 128`` and extends two tokens, one per rank.
EAGLE_SCRIPT: tuple[Step, ...] = (
    Step((("A", XE),), (("A", 64),), checkpoint=("A",)),
    Step((), (("A", None),), finish=("A",)),
    Step((("C", XE),), (("C", None),), finish=("C",)),
)


# ---- planted bugs ---------------------------------------------------------------------------


def _token_positions(prefix_lens: Sequence[int], seq_lens: Sequence[int]) -> torch.Tensor:
    return torch.tensor([p for q, s in zip(prefix_lens, seq_lens, strict=True)
                         for p in range(int(q), int(s))], dtype=torch.long)  # fmt: skip


def _rewrite_local_rows(keep: Callable[..., torch.Tensor]) -> contextlib.AbstractContextManager:
    """Wrap the pool's ``plan_forward``: each current token persists at its local row where
    ``keep(plan, positions, geo, kept_rows)`` holds, else on local page 0 (dropped)."""
    from sglang_cpkv.plugin.shared_kv import _pool

    real = _pool.plan_forward

    def plan_forward(req_to_token, req_pool_indices, prefix_lens, seq_lens, out_cache_loc, geo,
                     num_pages, *, kept_rows=None, ops=None):  # fmt: skip
        plan = real(req_to_token, req_pool_indices, prefix_lens, seq_lens, out_cache_loc, geo,
                    num_pages, kept_rows=kept_rows, ops=ops)  # fmt: skip
        loc = out_cache_loc.long()
        page, offset = loc // geo.page_size, loc % geo.page_size
        local = (page // geo.shard_size) * geo.page_size + offset
        mine = keep(plan, _token_positions(prefix_lens, seq_lens), geo, kept_rows)
        plan.local_rows = torch.where(mine.to(loc.device), local, offset)
        return plan

    return patch_attr(_pool, "plan_forward", plan_forward)


def owner_by_position() -> contextlib.AbstractContextManager:
    """Wrong page owner: a token persists on the rank of its position page (``pos // P % N``,
    every chain rotated from rank 0) instead of its page's owner (``page % N``)."""
    return _rewrite_local_rows(
        lambda plan, pos, geo, kept: (pos // geo.page_size) % geo.shard_size == geo.shard_rank
    )


def unsplit_batch_persisted_as_split() -> contextlib.AbstractContextManager:
    """A batch SGLang runs without the CP split is persisted as if it were split: token ``t``
    only by rank ``t % N`` (and only where that rank owns its page)."""

    def keep(plan, pos, geo, kept):
        t = torch.arange(pos.numel())
        loc = plan.out_cache_loc.long().cpu()
        owned = (loc // geo.page_size) % geo.shard_size == geo.shard_rank
        return owned & ((t % geo.shard_size == geo.shard_rank) | (kept is not None))

    return _rewrite_local_rows(keep)


def gathered_page_memo() -> contextlib.AbstractContextManager:
    """Stale page after eviction: gathered history pages are remembered by logical page across
    forwards (committed pages never change while cached) and served from that memory, with no
    invalidation when SGLang frees a page and hands it to another prefix."""
    from sglang_cpkv.plugin.shared_kv._pool import CpkvSharedKVPool

    real = CpkvSharedKVPool._prefetch_layer

    def _prefetch_layer(self, layer_id):
        real(self, layer_id)
        local_layer = layer_id - self.start_layer
        if local_layer >= self.layer_num:
            return
        placement = self.cpkv_forward.placement
        used = placement.num_slots
        pages = placement.layout.slot_page[:used].tolist()
        scratch = placement.slot_scratch[:used].tolist()
        memo = self.__dict__.setdefault("_mutation_memo", {})
        slot = self._slots[layer_id % 2]
        for _, name in self._gather_pairs(local_layer):
            view = self._page_view(slot.tensors[name], name)
            for page, at in zip(pages, scratch, strict=True):
                if at >= self.shard_size * placement.block:  # not gathered
                    continue
                key = (layer_id, name, page)
                if key in memo:
                    view[at].copy_(memo[key])
                else:
                    memo[key] = view[at].clone()

    return patch_attr(CpkvSharedKVPool, "_prefetch_layer", _prefetch_layer)


def row_pages_remembered() -> contextlib.AbstractContextManager:
    """Stale row after free: the plan keeps each ``req_to_token`` row's pages from the row's
    previous forward and takes only the new pages from the table (right for a chunked request,
    which keeps its row; wrong once SGLang gives a freed row to another request)."""
    from sglang_cpkv.plugin.shared_kv._pool import CpkvSharedKVPool

    real = CpkvSharedKVPool._begin

    def _begin(self, req_to_token, req_pool_indices, prefix_lens, seq_lens, **kw):
        memo = self.__dict__.setdefault("_mutation_rows", {})
        table = req_to_token.clone()
        for row, q, s in zip(req_pool_indices.tolist(), prefix_lens, seq_lens, strict=True):
            old = memo.get(row)
            if old is not None:
                n = min(int(q), old.numel())
                table[row, :n] = old[:n]
            memo[row] = req_to_token[row, :s].clone()
        return real(self, table, req_pool_indices, prefix_lens, seq_lens, **kw)

    return patch_attr(CpkvSharedKVPool, "_begin", _begin)


MUTATIONS: dict[str, Callable[[], contextlib.AbstractContextManager]] = {
    "owner_by_position": owner_by_position,
    "unsplit_batch_persisted_as_split": unsplit_batch_persisted_as_split,
    "gathered_page_memo": gathered_page_memo,
    "row_pages_remembered": row_pages_remembered,
}
#: configurations each mutation runs under (one PAGED, one RAGGED)
MUTATION_CONFIGS = ("flashmla_sparse/bf16", "flashmla_sparse/fp8")
