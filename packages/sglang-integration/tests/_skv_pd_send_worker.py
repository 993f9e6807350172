"""SGLang's Mooncake PD send from cpkv's sharded pool to a decode pool, end to end on a CPU.

``python _skv_pd_send_worker.py OUT_JSON`` runs every case of :data:`CASES` in this one process,
then each planted bug of :data:`MUTATIONS`, and writes what it found. A case is a deployment
(``_skv_backend_cases.CONFIGS``: bf16 KV, or packed fp8 KV with FlashMLA's 656-byte rows) at a
CP size, resolved as ``cpkv-serve --cpkv-shared-kv`` resolves it (prefill node, Mooncake, EAGLE):

1. **Prefill.** Its ``N`` CP ranks are ``N`` pools of the class SGLang's registry holds once the
   plugin loaded (``CpkvSharedKVPool``), target and NextN draft, filled by the scenario's extend
   forwards as a model fills them: SGLang's (hooked) ``prepare_kv_shard_forward`` plans each
   forward on every rank, then every rank stores the whole chunk's latent rows
   (``set_mla_kv_buffer``) and indexer keys (``set_index_k_scale_buffer``), as each does after
   the CP gather. SGLang's unsharded ``DSATokenToKVPool`` (the replica) gets the same stores.
2. **Send.** After every forward each rank sends as SGLang's prefill does
   (``_skv_pd_sglang``): ``send_kv_chunk``, ``MooncakeKVSender.send`` narrowing the chunk to
   its own pages (``filter_kv_indices_for_shard_rank``), ``MooncakeKVManager.transfer_worker``
   reading them from our pool's buffers (``kv_data_ptrs + page * kv_item_len``) and, with the
   final chunk, its indexer pages and the status.
3. **Decode.** An unsharded decode pool pair at decode's own page ids, with a cached prefix for
   two requests.

The check (:func:`check`): every page of every request in decode's pools (latent rows of each
layer, indexer pages, draft latent and indexer) equals that logical page of the replica, byte
for byte, including the pages decode held before; every destination page past a cached prefix
was written exactly once and no other decode byte changed; decode got Success from every
prefill rank for every request. Then each planted bug (two in where our pool persists a token,
one in the sender) must fail it.

What stands in:

- for the send: the transport only (``_skv_pd_transport``: Mooncake's transfer engine and the
  zmq frames); the managers, senders and scheduler are SGLang's (``_skv_pd_sglang`` says how
  they are built without their sockets and threads);
- for the forwards that fill the pools: the pool's NCCL all-gather is a lockstep all-gather
  over threads (:class:`ThreadAllGather`); SGLang's fp8 quantising store kernel is its torch
  stand-in (``_dsa_stand_ins.fp8_quantizer``) and its other Triton kernels run in Triton's
  interpreter; the indexer's ``act_quant`` is the torch one of ``_skv_backend_stand_ins``; the GPU
  is the emulated H200 of ``cpkv-serve --dry-run``. Page ids come from ``_skv_backend_model``'s
  imitation of SGLang's ``PageInterleavePoolAllocator`` (prefill) and a free list (decode).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import threading
import time
import traceback
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).parent))
from _skv_backend_cases import patch_attr
from _skv_pd_sglang import (
    PAGE,
    Decode,
    Prompt,
    Sender,
    admit,
    decode_manager,
    decode_prealloc,
    drain,
    prefill_sender,
    send_chunk,
)

FIXTURE = str(Path(__file__).parent / "fixtures" / "glm51_fp8")
SM90 = (9, 0)
#: (configuration of ``_skv_backend_cases.CONFIGS``, CP size): bf16 rows and FlashMLA's packed
#: fp8 rows at CP 2, packed fp8 at CP 4 (three ranks send an empty final chunk there)
CASES = (("flashmla_sparse/bf16", 2), ("flashmla_kv/fp8", 2), ("flashmla_kv/fp8", 4))
MUTATION_CASE = ("flashmla_kv/fp8", 2)
#: target layers, each flagged when it shares the previous layer's top-k (IndexCache: a 0-row
#: indexer buffer, which the transfer elides); the NextN draft is one more layer after them
SKIP_TOPK = (False, True)
TARGET = (0, len(SKIP_TOPK), SKIP_TOPK)
DRAFT = (len(SKIP_TOPK), 1, (False,))
DECODE_PAGES = 40  # decode's pool (its page 0 is SGLang's padding page)


def scenario() -> tuple[tuple[Prompt, ...], tuple[tuple[Any, ...], ...]]:
    """Prompts and the prefill steps (``_skv_backend_model.Extend`` batches) that compute them.

    ``A`` is chunked (128, 64, 64, 1 tokens): at CP 2 its middle chunks have one page each (the
    rank without it skips that chunk), at CP 4 every chunk leaves ranks without a page, and its
    final chunk holds one page, so the other ranks send an empty final chunk that carries their
    indexer pages of the earlier chunks. ``F`` is one chunk. ``B`` and ``G`` reuse ``F``'s first
    two pages on prefill (a radix hit); decode holds one (``B``) or both (``G``) of them
    already, so ``B`` sends ``F``'s second page and its own, ``G`` its own only. Token counts
    are small: SGLang's indexer store runs in Triton's interpreter, one program per token.
    """
    from _skv_backend_model import Extend, Hit

    prompts = (
        Prompt("A", 257),
        Prompt("F", 129),
        Prompt("B", 134, decode_cached=64, cached_from="F"),
        Prompt("G", 129, decode_cached=128, cached_from="F"),
    )
    steps = (
        (Extend("A", 128), Extend("F", 129)),
        (Extend("A", 64), Extend("B", 6, Hit("F", 128))),
        (Extend("A", 64), Extend("G", 1, Hit("F", 128))),
        (Extend("A", 1),),
    )
    return prompts, steps


# ---- the prefill ranks' all-gather, in one process ---------------------------------------------


class ThreadGroup:
    """The ``N`` ranks of one shard group as threads of this process, one running at a time
    (``turn``: Triton's interpreter is not thread-safe); a rank gives up its turn only while it
    waits for the others in :class:`ThreadAllGather`."""

    def __init__(self, size: int) -> None:
        self.size = size
        self.barrier = threading.Barrier(size, timeout=120)
        self.turn = threading.Lock()
        self.parts: list[torch.Tensor | None] = [None] * size

    def member(self, rank: int) -> SimpleNamespace:
        """What the pool reads of SGLang's ``GroupCoordinator`` on rank ``rank``."""
        return SimpleNamespace(world_size=self.size, rank_in_group=rank, cpu_group=(self, rank),
                               device=torch.device("cpu"))  # fmt: skip

    def wait(self) -> None:
        """Wait for every rank, off turn."""
        self.turn.release()
        try:
            self.barrier.wait()
        finally:
            self.turn.acquire()

    def on_every_rank(self, fn: Callable[[int], None]) -> None:
        """``fn(rank)`` on every rank (threads taking turns); the first failure breaks the
        barrier (freeing the ranks waiting on it) and is re-raised."""
        errors: list[BaseException] = []

        def run(rank: int) -> None:
            with self.turn:
                try:
                    fn(rank)
                except BaseException as exc:
                    errors.append(exc)
                    self.barrier.abort()

        threads = [threading.Thread(target=run, args=(r,)) for r in range(self.size)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]


class ThreadAllGather:
    """Stands in for ``PyNcclCommunicator`` (``page_interleave_pool``'s all-gather): each rank's
    thread deposits its block, waits for all, and copies the concatenation in rank order."""

    def __init__(self, group: tuple[ThreadGroup, int], device: Any, **_: Any) -> None:
        self.group, self.rank = group

    def change_state(self, enable: bool | None = None, **_: Any) -> Any:
        return contextlib.nullcontext()

    def all_gather(self, output: torch.Tensor, send: torch.Tensor, *_: Any, **__: Any) -> None:
        g = self.group
        g.parts[self.rank] = send.clone()
        g.wait()
        output.copy_(torch.cat([p for p in g.parts if p is not None]))
        g.wait()


# ---- prefill: the ranks' pools and the replica, filled by the forwards -------------------------


@dataclass
class Prefill:
    """A prefill node: ``N`` ranks' (target, draft) pools, the replica's (``fill_replica`` False
    when it is an earlier run's of the same scenario), ``req_to_token`` and the allocator's
    imitation (``_skv_backend_model.Cache``)."""

    dep: Any
    group: ThreadGroup
    pools: list[tuple[Any, Any]]
    replica: tuple[Any, Any]
    r2t: Any
    cache: Any
    fill_replica: bool = True

    @property
    def size(self) -> int:
        return self.group.size


def build_prefill(dep: Any, replica: tuple[Any, Any] | None = None) -> Prefill:
    """The pools of ``dep`` (the sizes of ``_skv_backend_rank``); ``replica``: an earlier run's,
    already filled (no planted bug touches the replica's stores)."""
    import _skv_backend_rank as rank_mod
    from _skv_backend_model import Cache
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool, ReqToTokenPool

    n = dep.cp
    group = ThreadGroup(n)
    cls = dep.sharded_pool_class()
    pools = []
    for rank in range(n):
        spec = dep.shard_spec(rank)
        pools.append(tuple(
            cls(rank_mod.LOCAL_PAGES * PAGE, shard_spec=spec, shard_group=group.member(rank),
                **dep._pool_kwargs(*where))
            for where in (TARGET, DRAFT)
        ))  # fmt: skip
    fill = replica is None
    if replica is None:
        size = n * (rank_mod.LOCAL_PAGES + 1) * PAGE
        replica = tuple(DSATokenToKVPool(size, **dep._pool_kwargs(*w)) for w in (TARGET, DRAFT))
    r2t = ReqToTokenPool(size=rank_mod.MAX_REQUESTS, max_context_len=4096, device=dep.device,
                         enable_memory_saver=False)  # fmt: skip
    return Prefill(dep, group, pools, replica, r2t, Cache(n, *r2t.req_to_token.shape), fill)


def _store(pool: Any, fb: Any, rows: Sequence[Any], draft: bool) -> None:
    """One forward's stores into ``pool`` at ``fb.out_cache_loc``: each layer's latent rows of the
    whole chunk and, for layers keeping their own top-k, the indexer keys (the indexer's
    fallback store: ``act_quant``, then ``set_index_k_scale_buffer``)."""
    import _skv_backend_model as model
    import _skv_backend_stand_ins as stand_ins

    toks = model.chunk(rows)
    start, _, skip = DRAFT if draft else TARGET
    for layer_id, shares in enumerate(skip, start):
        ident = [model.identity(r, p, layer_id) for r, p in toks]
        kv = torch.stack([model.kv_row(i) for i in ident])
        layer = SimpleNamespace(layer_id=layer_id)
        pool.set_mla_kv_buffer(layer, fb.out_cache_loc, kv[:, None, :512], kv[:, None, 512:])
        if not shares:
            keys = torch.stack([model.index_key(i, 128) for i in ident]).bfloat16()
            k_fp8, k_scale = stand_ins.torch_act_quant(keys)
            pool.set_index_k_scale_buffer(layer_id, fb.out_cache_loc, k_fp8, k_scale)


def run_forward(pre: Prefill, rows: Sequence[Any]) -> None:
    """One extend forward of ``rows`` (target, then the draft's extend) on every rank and on the
    replica."""
    from _skv_backend_rank import forward_batch
    from sglang.srt.layers.attention.kv_shard_hooks import prepare_kv_shard_forward

    table = pre.r2t.req_to_token
    for d, draft in enumerate((False, True)):
        batches = [forward_batch(rows, table, pre.dep.device) for _ in range(pre.size)]

        def plan(rank: int, d: int = d, batches: list = batches) -> None:
            assert prepare_kv_shard_forward(pre.pools[rank][d], table, batches[rank])

        pre.group.on_every_rank(plan)
        for rank in range(pre.size):
            _store(pre.pools[rank][d], batches[rank], rows, draft)
        if pre.fill_replica:
            _store(pre.replica[d], forward_batch(rows, table, pre.dep.device), rows, draft)


def build_decode(dep: Any, control: Any) -> Decode:
    """Decode's unsharded pools, its manager and its own page ids (from the top)."""
    import _skv_backend_rank as rank_mod
    from sglang.srt.mem_cache.memory_pool import DSATokenToKVPool, ReqToTokenPool

    pools = tuple(DSATokenToKVPool(DECODE_PAGES * PAGE, **dep._pool_kwargs(*where))
                  for where in (TARGET, DRAFT))  # fmt: skip
    r2t = ReqToTokenPool(size=rank_mod.MAX_REQUESTS, max_context_len=4096, device=dep.device,
                         enable_memory_saver=False)  # fmt: skip
    manager = decode_manager(dep, pools, r2t, control)
    return Decode(pools, r2t, manager, list(range(DECODE_PAGES, 0, -1)))


# ---- one case: fill, send, compare -------------------------------------------------------------


def _page_rows(buf: torch.Tensor, per_token: bool) -> torch.Tensor:
    """``buf``'s bytes, one row per page (latent buffers count tokens, the indexer's pages)."""
    raw = buf if buf.dtype == torch.uint8 else buf.view(torch.uint8)
    return raw.reshape(raw.shape[0] // PAGE if per_token else raw.shape[0], -1)


def _buffers(pools: tuple[Any, Any]) -> dict[str, torch.Tensor]:
    """Every buffer the PD path moves, by name, as page rows (0-row indexer layers left out)."""
    out = {}
    for part, pool in zip(("target", "draft"), pools, strict=True):
        for i, buf in enumerate(pool.kv_buffer):
            out[f"{part} latent layer {pool.start_layer + i}"] = _page_rows(buf, True)
        for i, buf in enumerate(pool.index_k_with_scale_buffer):
            if buf.shape[0]:
                out[f"{part} indexer layer {pool.start_layer + i}"] = _page_rows(buf, False)
    return out


def _written_pages(dec: Decode, engines: Sequence[Any]) -> dict[tuple[str, int], int]:
    """How often each (decode buffer, page) was a destination of the ranks' transfers."""
    regions = [
        (b.data_ptr(), b.numel(), b.shape[1], name) for name, b in _buffers(dec.pools).items()
    ]
    count: dict[tuple[str, int], int] = defaultdict(int)
    for engine in engines:
        for w in engine.writes:
            ptr, _, item, name = next(r for r in regions if r[0] <= w.dst < r[0] + r[1])
            if (w.dst - ptr) % item or w.length % item:
                name += " (not whole pages)"
            for page in range((w.dst - ptr) // item, (w.dst + w.length - ptr) // item):
                count[(name, page)] += 1
    return count


def check(pre: Prefill, dec: Decode, prompts: Sequence[Prompt], senders: Sequence[Sender],
          control: Any, rooms: dict[str, int]) -> list[str]:  # fmt: skip
    """Every difference between decode's pools and the replica, and every other break of the
    contract (a page written twice or never, a byte outside the requests, a missing status)."""
    from sglang.srt.disaggregation.base.conn import KVPoll

    bad: list[str] = []
    ours, ref = _buffers(dec.pools), _buffers(pre.replica)
    if ours.keys() != ref.keys():
        return [f"decode's buffers {sorted(ours)} are not the replica's {sorted(ref)}"]
    for prompt in prompts:
        dst, src = dec.pages[prompt.name], pre.cache.requests[prompt.name].pages
        for name in ours:
            got, want = ours[name][dst], ref[name][src]
            if not bool(want[-1].any()):
                bad.append(f"{prompt.name}: {name}: the replica's last page is empty")
            diff = (got != want).any(1).nonzero().flatten().tolist()
            if diff:
                where = f"decode {[dst[i] for i in diff]}, logical {[src[i] for i in diff]}"
                bad.append(
                    f"{prompt.name}: {name}: pages {diff} differ from the replica's ({where})"
                )
    held = {p for pages in dec.pages.values() for p in pages}
    spare = [p for p in range(1, DECODE_PAGES + 1) if p not in held]
    bad += [f"{name}: bytes on decode pages no request holds"
            for name, buf in ours.items() if bool(buf[spare].any())]  # fmt: skip
    want = {(name, page): 1 for prompt in prompts for name in ours
            for page in dec.pages[prompt.name][prompt.decode_cached // PAGE :]}  # fmt: skip
    engines = [s.manager.engine.engine for s in senders]
    got = _written_pages(dec, engines)
    if dict(got) != want:
        wrong = sorted(k for k in set(got) | set(want) if got.get(k, 0) != want.get(k, 0))
        bad.append(f"decode pages not written exactly once past each cached prefix: "
                   f"{[(k, got.get(k, 0)) for k in wrong[:4]]} ({len(wrong)} in all)")  # fmt: skip
    bad += [f"rank {s.rank}: transfer refused: {e}" for s, e in
            ((s, e) for s in senders for e in s.manager.engine.engine.refused)]  # fmt: skip
    statuses: dict[int, set[tuple[int, int]]] = defaultdict(set)
    for _, frames in control.frames:
        parsed = dec.manager.parse_kv_status_message(frames)
        if parsed is not None:
            statuses[parsed[0]].add((int(parsed[1]), int(parsed[2])))
    every = {(KVPoll.Success, r) for r in range(pre.size)}
    for prompt in prompts:
        got_status = sorted(statuses[rooms[prompt.name]])
        if set(got_status) != every:
            bad.append(f"{prompt.name}: decode got (status, prefill rank) {got_status}, not "
                       f"Success from every rank")  # fmt: skip
        for s in senders:
            polled = s.reqs[prompt.name].disagg_kv_sender.poll()
            if polled != KVPoll.Success:
                bad.append(f"{prompt.name}: rank {s.rank}'s sender polls {polled}")
    return bad


def _chunks(pre: Prefill, senders: Sequence[Sender], rooms: dict[str, int]) -> list[dict]:
    """Per rank, each chunk it queued: its request, pages (after the shard filter), whether it is
    the final one, and how many indexer pages a final one carries for this rank (SGLang's filter
    of its DSA payload, as ``maybe_send_extra`` applies it)."""
    import numpy as np
    from sglang.srt.disaggregation.utils import filter_kv_indices_for_shard_rank

    name = {room: n for n, room in rooms.items()}
    out = []
    for s in senders:
        for q in s.queued:
            state = np.asarray(q.state[0] if q.last and q.state else [], dtype=np.int32)
            owned, _ = filter_kv_indices_for_shard_rank(
                kv_indices=state, index_slice=slice(0, len(state)), shard_rank=s.rank,
                shard_size=pre.size,
            )  # fmt: skip
            out.append({"req": name[q.room], "rank": s.rank, "pages": len(q.pages),
                        "last": q.last, "state_pages": len(owned)})  # fmt: skip
    return out


def run_case(dep: Any, replica: tuple[Any, Any] | None = None) -> tuple[dict[str, Any], Any]:
    """The scenario through prefill, the send and decode for ``dep``; returns what it found and
    the replica (see :func:`build_prefill`)."""
    import _skv_pd_transport as transport
    from sglang.srt.runtime_context import get_parallel

    control = transport.ControlLog()
    pre = build_prefill(dep, replica)
    dec = build_decode(dep, control)
    registration = dec.manager.build_receiver_registration_message()
    senders = [prefill_sender(dep, pre.pools[r], pre.r2t, r, control, registration)
               for r in range(pre.size)]  # fmt: skip
    prompts, steps = scenario()
    by_name = {p.name: p for p in prompts}
    rooms = {p.name: 1000 + i for i, p in enumerate(prompts)}
    for extends in steps:
        rows = pre.cache.step(extends)
        pre.r2t.req_to_token.copy_(pre.cache.req_to_token)
        for r in rows:
            prompt = by_name[r.req.name]
            if prompt.name not in dec.rows:  # decode preallocates; every prefill rank bootstraps
                metadata = decode_prealloc(dec, prompt, rooms[prompt.name])
                for s in senders:
                    admit(s, prompt, rooms[prompt.name], metadata, r.req.row)
        run_forward(pre, rows)
        pre.cache.commit(rows)
        for s in senders:
            for r in rows:
                send_chunk(s, r.req.name, r.seq, last=r.seq == by_name[r.req.name].tokens)
            drain(s)
    kv_args = senders[0].manager.kv_args
    found = {
        "failures": check(pre, dec, prompts, senders, control, rooms),
        "pool_class": type(pre.pools[0][0]).__qualname__,
        "decode_class": type(dec.pools[0]).__qualname__,
        "kv_cache_sharding": bool(get_parallel().enable_kv_cache_sharding),
        "kv_item_lens": list(kv_args.kv_item_lens),
        "num_draft_entries": kv_args.num_draft_entries,
        "state_types": [str(t.value) for t in kv_args.state_types],
        "state_item_lens": [list(x) for x in kv_args.state_item_lens],
        "decode_cached": {p.name: p.decode_cached for p in prompts},
        "chunks": _chunks(pre, senders, rooms),
    }
    return found, pre.replica


# ---- planted bugs: where cpkv's pool persists a token, and one in the sender -----------------


def _persisting(rows: Callable[[Any, torch.Tensor], torch.Tensor]) -> Any:
    """``CpkvSharedKVPool.cpkv_persist_rows`` (the local row each latent row and indexer key the
    pool stores lands on) replaced by ``rows(pool, loc)``."""
    from sglang_cpkv.plugin.shared_kv._pool import CpkvSharedKVPool

    return patch_attr(CpkvSharedKVPool, "cpkv_persist_rows", rows)


def owner_next_rank() -> contextlib.AbstractContextManager:
    """A wrong owner rule in our pool: each rank persists the pages of the next rank (owner
    ``(l - 1) % N`` instead of ``l % N``), at SGLang's local page ``l // N``."""
    from sglang_cpkv.plugin.shared_kv._plan import owned_rows

    def rows(pool: Any, loc: torch.Tensor) -> torch.Tensor:
        n = pool.shard_size
        page, offset = loc.long() // PAGE, loc.long() % PAGE
        return owned_rows(page, offset, PAGE, n, (pool.shard_rank + 1) % n)

    return _persisting(rows)


def local_page_off_by_one() -> contextlib.AbstractContextManager:
    """A wrong local page id in our pool: the owner persists page ``l`` at local page
    ``l // N - 1`` (as if the reserved page 0 were not counted)."""

    def rows(pool: Any, loc: torch.Tensor) -> torch.Tensor:
        n = pool.shard_size
        page, offset = loc.long() // PAGE, loc.long() % PAGE
        local = offset + (page // n - 1).clamp(min=0) * PAGE
        return torch.where(page % n == pool.shard_rank, local, offset)

    return _persisting(rows)


def empty_final_chunk_dropped() -> contextlib.AbstractContextManager:
    """The sender drops a final chunk that holds none of its rank's pages, as it drops such a
    non-final one (``CommonKVSender._prepare_send_indices``): that rank's indexer pages of the
    earlier chunks and its status never reach decode."""
    from sglang.srt.disaggregation.common.conn import CommonKVSender

    real = CommonKVSender._prepare_send_indices

    def prepare(self: Any, kv_indices: Any, state_indices: Any = None) -> tuple:
        kv, index_slice, last, skip = real(self, kv_indices, state_indices)
        return kv, index_slice, last, skip or len(kv) == 0

    return patch_attr(CommonKVSender, "_prepare_send_indices", prepare)


MUTATIONS: dict[str, Callable[[], contextlib.AbstractContextManager]] = {
    "owner_next_rank": owner_next_rank,
    "local_page_off_by_one": local_page_off_by_one,
    "empty_final_chunk_dropped": empty_final_chunk_dropped,
}


# ---- the process -------------------------------------------------------------------------------


def _setup() -> list[str]:
    """The plugin (``CPKV_SHARED_KV=1``: SGLang's registry holds cpkv's pool) and the stand-ins of
    the forwards that fill the pools (module docstring); returns the hooks applied."""
    import sglang.kernels.ops.quantization.dsa_quant_k_cache as quant
    from _dsa_stand_ins import fp8_quantizer
    from sglang.srt.mem_cache import page_interleave_pool
    from sglang_cpkv.plugin.entry import activate

    hooks = list(activate())
    page_interleave_pool.PyNcclCommunicator = ThreadAllGather
    quant._quantize_k_cache_fast_kernel = fp8_quantizer()
    return hooks


def main(argv: Sequence[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="the results (JSON)")
    ap.add_argument("--only", nargs="*", default=None, help="cases, as 'cp<N> <config>'")
    ap.add_argument("--no-mutations", action="store_true", help="skip the planted bugs")
    args = ap.parse_args(argv)
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before SGLang imports Triton
    os.environ["CPKV_SHARED_KV"] = "1"
    torch.set_num_threads(1)
    result: dict[str, Any] = {"error": None, "cases": {}, "mutations": {}, "seconds": {}}
    t0 = time.monotonic()
    try:
        import _skv_backend_cases as cases
        import _skv_backend_rank as rank_mod
        import _skv_pd_transport as transport

        result["hooks"] = _setup()
        configs = {c.name: c for c in cases.CONFIGS}
        runs = [(name, cp, None) for name, cp in CASES
                if args.only is None or f"cp{cp} {name}" in args.only]  # fmt: skip
        if not args.no_mutations:
            runs += [(*MUTATION_CASE, m) for m in MUTATIONS]
        replicas: dict[tuple[str, int], Any] = {}
        for name, cp, mutation in runs:
            t1, key = time.monotonic(), f"cp{cp} {name}"
            group = ThreadGroup(cp)  # only the deployment's CP group: the pools get their own
            dep = rank_mod.Deployment(configs[name], cp, 0, group.member(0), torch.device("cpu"),
                                      FIXTURE, SM90)  # fmt: skip
            planted = MUTATIONS[mutation]() if mutation else contextlib.nullcontext()
            with transport.installed(), dep.context():
                try:
                    with planted:
                        case, replicas[(name, cp)] = run_case(dep, replicas.get((name, cp)))
                except Exception as exc:  # a planted bug may also fail loudly
                    if mutation is None:
                        raise
                    case = {"failures": [f"{type(exc).__name__}: {str(exc)[:300]}"]}
            if mutation is None:
                result["cases"][key] = case
            else:
                result["mutations"][mutation] = {"case": key, "failures": case["failures"][:4],
                                                 "count": len(case["failures"])}  # fmt: skip
            result["seconds"][f"{key} {mutation or ''}".strip()] = round(time.monotonic() - t1, 1)
    except Exception:
        result["error"] = traceback.format_exc()
    result["seconds"]["total"] = round(time.monotonic() - t0, 1)
    args.out.write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main()
