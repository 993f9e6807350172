"""SGLang 0.5.23's Mooncake PD path, prefill ranks to decode, run in one process.

Every step that decides which pages move and from which address is SGLang's own code:

- ``kv_args`` (what a manager registers and reads): ``PrefillBootstrapQueue._init_kv_manager``
  and ``DecodePreallocQueue._init_kv_manager``: the pools' ``get_contiguous_buf_infos`` through
  ``get_kv_transfer_buf_infos``, the draft pool's after it, ``setup_state_kv_args`` for the
  indexer buffers (``StateType.DSA``) of both;
- decode's messages: ``build_receiver_registration_message``, ``build_receiver_metadata_message``
  (destination pages from ``kv_to_page_indices`` and ``suffix_page_indices`` past its cached
  prefix, as ``decode.py`` computes them), parsed on prefill by ``KVArgsRegisterInfo.from_zmq``,
  ``TransferInfo.from_zmq`` and ``_publish_peer_registration``;
- the send: ``MooncakeKVSender`` (its constructor, ``init`` through
  ``PrefillBootstrapQueue.finalize_bootstrap``, ``send``: ``CommonKVSender._prepare_send_indices``
  narrows each chunk with ``filter_kv_indices_for_shard_rank``), the scheduler's
  ``send_kv_chunk``, and ``MooncakeKVManager.transfer_worker`` (``send_kvcache``,
  ``maybe_send_extra`` with ``_prepare_sharded_dsa_indices``, ``send_aux``, the status);
- the transfer: SGLang's ``MooncakeTransferEngine`` over the transport stand-in.

What does not run is what needs a network or another process: the managers, the sender's
scheduler and its requests are SGLang's classes (or, for the scheduler and a ``Req``, the
attributes the send path reads) built without their constructors, which open zmq sockets, start
threads and register with a bootstrap server; :func:`_manager` gives a manager what its
constructors set, and :func:`deliver` is the prefill bootstrap thread's handling of the two
decode messages. The bytes and the frames cross through ``_skv_pd_transport``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import torch

PAGE = 64  # SGLang's DSA page size


@dataclass(frozen=True)
class Prompt:
    """A request: ``tokens`` long; decode already holds its first ``decode_cached`` tokens as the
    first pages of request ``cached_from`` (decode's radix cache)."""

    name: str
    tokens: int
    decode_cached: int = 0
    cached_from: str | None = None


# ---- managers ----------------------------------------------------------------------------------


def _manager(kv_args: Any, mode: Any, is_mla: bool, *, shard: tuple[int, int], port: int,
             engine: Any, control: Any) -> Any:  # fmt: skip
    """A ``MooncakeKVManager`` holding what ``CommonKVManager.__init__`` and
    ``MooncakeKVManager.__init__`` (``disaggregation/common/conn.py``, ``mooncake/conn.py``) set
    for ``mode`` on this deployment, without their sockets, threads and bootstrap registration.

    ``shard``: (rank, size) in the KV shard group (``get_kv_shard_group`` there); ``engine``:
    SGLang's ``MooncakeTransferEngine``; ``control``: where the zmq frames go.
    """
    from sglang.srt.disaggregation.common.utils import FastQueue
    from sglang.srt.disaggregation.mooncake.conn import MooncakeKVManager
    from sglang.srt.disaggregation.mooncake.utils import check_mooncake_custom_mem_pool_enabled
    from sglang.srt.disaggregation.utils import DisaggregationMode
    from sglang.srt.environ import envs
    from sglang.srt.runtime_context import get_parallel, linear_attn_tp_size

    m = MooncakeKVManager.__new__(MooncakeKVManager)
    parallel = get_parallel()
    m.kv_args, m.disaggregation_mode, m.is_mla_backend = kv_args, mode, is_mla
    m.kv_cache_dtype_str, m.kv_layout = kv_args.kv_cache_dtype_str, kv_args.kv_layout
    m.kv_item_lens_sum = sum(kv_args.kv_item_lens)
    m.state_item_lens_sum = sum(x for comp in kv_args.state_item_lens for x in comp)
    m._kv_replica_factor = None
    m.is_hybrid_mla_backend = getattr(kv_args, "is_hybrid_mla_backend", False)
    m.enable_deferred_decode_kv_release = False
    m._dcp_pack_buffers, m._dcp_pack_max_tokens = None, None
    m.attn_tp_size, m.attn_tp_rank = parallel.attn_tp_size, parallel.attn_tp_rank
    m.attn_cp_rank, m.attn_cp_size = shard
    m.state_tp_size = linear_attn_tp_size()
    m.dcp_size, m.dcp_rank = parallel.attn_dcp_size, parallel.attn_dcp_rank
    m.attn_dp_size, m.attn_dp_rank = parallel.attn_dp_size, parallel.attn_dp_rank
    m.system_dp_size, m.system_dp_rank = parallel.dp_size, kv_args.system_dp_rank or 0
    m.pp_size, m.pp_rank = parallel.pp_size, kv_args.pp_rank
    m.local_ip, m.rank_port = "127.0.0.1", port
    m.kv_shard_rank, m.kv_shard_size = shard
    m.enable_all_cp_ranks_for_transfer = m.kv_shard_size > 1  # "every CP rank sends"
    m.request_status = {}
    m._socket_send_locks = defaultdict(threading.Lock)
    m.failure_records, m.failure_lock = {}, threading.Lock()
    m._staging_outstanding = defaultdict(int)
    m._deferred_ack_targets, m._deferred_ack_poisoned_rooms = {}, set()
    m.defer_decode_allocation, m.deferred_bootstrap = False, None
    m._send_multipart_locked = control.send  # the zmq socket: transport
    m.engine = engine
    m.enable_staging, m._staging_ctx = False, None
    m.max_transfer_batch_indices = envs.SGLANG_MOONCAKE_MAX_TRANSFER_BATCH_INDICES.get()
    m.enable_trace, m._stopped, m.enable_failed_session_probe = False, False, False
    if mode == DisaggregationMode.PREFILL:
        m.is_dummy_cp_rank = False  # not with every CP rank sending
        m.transfer_infos, m.req_to_decode_prefix_len, m.decode_kv_args_table = {}, {}, {}
        m.session_failures, m.failed_sessions = defaultdict(int), set()
        m.failed_session_probes, m.state_layout_rejections = {}, {}
        m.state_strides_validated, m.session_lock = set(), threading.Lock()
        m.transfer_queues = [FastQueue()]
        m.executors = [concurrent.futures.ThreadPoolExecutor(1)]
        m.enable_custom_mem_pool, m.custom_mem_pool_type = check_mooncake_custom_mem_pool_enabled()
    m.register_buffer_to_engine()
    return m


@contextlib.contextmanager
def _manager_class(module: Any, build: Callable[..., Any]) -> Iterator[None]:
    """``module.get_kv_class`` answers ``build`` for the manager class inside the block (SGLang's
    answer for every other class)."""
    from sglang.srt.disaggregation.utils import KVClassType

    real = module.get_kv_class

    def get_kv_class(backend: Any, class_type: Any) -> Any:
        return build if class_type == KVClassType.MANAGER else real(backend, class_type)

    module.get_kv_class = get_kv_class
    try:
        yield
    finally:
        module.get_kv_class = real


def _engine(host: str) -> Any:
    """SGLang's ``MooncakeTransferEngine`` (on the transport stand-in, ``_skv_pd_transport``)."""
    from sglang.srt.distributed.device_communicators.mooncake_transfer_engine import (
        MooncakeTransferEngine,
    )

    return MooncakeTransferEngine(hostname=host, gpu_id=0, ib_device=None)


def _queue(dep: Any, pools: tuple[Any, Any], r2t: Any) -> SimpleNamespace:
    """What the two ``_init_kv_manager`` read of their queue and scheduler (no aux buffers:
    the metadata buffers carry the first output token, not KV)."""
    from sglang.srt.disaggregation.utils import TransferBackend, is_mla_backend

    runner = SimpleNamespace(kv_cache_dtype_str=dep.config.kv_dtype)
    scheduler = SimpleNamespace(
        rust_server=None, model_config=dep.model_config, req_to_token_pool=r2t,
        server_args=dep.args, hisparse_coordinator=None, enable_hisparse=False,
        tp_worker=SimpleNamespace(model_runner=runner),
    )  # fmt: skip
    return SimpleNamespace(
        transfer_backend=TransferBackend.MOONCAKE, tp_rank=0, pp_rank=0, scheduler=scheduler,
        token_to_kv_pool=pools[0], draft_token_to_kv_pool=pools[1], req_to_token_pool=r2t,
        is_mla_backend=is_mla_backend(pools[0]), enable_staging=False,
        metadata_buffers=SimpleNamespace(get_buf_infos=lambda: ([], [], [])),
    )  # fmt: skip


def prefill_manager(dep: Any, pools: tuple[Any, Any], r2t: Any, rank: int, control: Any) -> Any:
    """Prefill rank ``rank``'s manager over its (target, draft) pools, its ``kv_args`` built by
    SGLang's ``PrefillBootstrapQueue._init_kv_manager`` (``disaggregation/prefill.py``)."""
    import sglang.srt.disaggregation.prefill as prefill

    def build(kv_args: Any, mode: Any, server_args: Any, is_mla: bool, **_: Any) -> Any:
        return _manager(kv_args, mode, is_mla, shard=(rank, dep.cp), port=20000 + rank,
                        engine=_engine(f"prefill{rank}"), control=control)  # fmt: skip

    with _manager_class(prefill, build):
        return prefill.PrefillBootstrapQueue._init_kv_manager(_queue(dep, pools, r2t))


def decode_manager(dep: Any, pools: tuple[Any, Any], r2t: Any, control: Any) -> Any:
    """The decode manager over decode's unsharded (target, draft) pools, its ``kv_args`` built by
    SGLang's ``DecodePreallocQueue._init_kv_manager`` (``disaggregation/decode.py``)."""
    import sglang.srt.disaggregation.decode as decode

    def build(kv_args: Any, mode: Any, server_args: Any, is_mla: bool, **_: Any) -> Any:
        return _manager(kv_args, mode, is_mla, shard=(0, 1), port=21000,
                        engine=_engine("decode"), control=control)  # fmt: skip

    with _manager_class(decode, build):
        return decode.DecodePreallocQueue._init_kv_manager(_queue(dep, pools, r2t))


def deliver(m: Any, frames: list[bytes]) -> None:
    """A decode message as the prefill bootstrap thread handles it (``mooncake/conn.py``,
    ``start_prefill_thread``): a registration (room ``None``) is parsed and published (SGLang
    checks decode's state layout there); request metadata goes into ``transfer_infos``, and once
    every destination sent its own the room waits for input with decode's cached prefix."""
    from sglang.srt.disaggregation.base.conn import KVPoll
    from sglang.srt.disaggregation.mooncake.conn import KVArgsRegisterInfo, TransferInfo

    room, session = frames[0].decode("ascii"), frames[3].decode("ascii")
    if room == "None":
        info = KVArgsRegisterInfo.from_zmq(frames)
        info.requires_dcp_relayout = m.requires_dcp_relayout(info.dst_dcp_size, info.dst_dcp_rank)
        mismatch = m._publish_peer_registration(session, info)
        if mismatch is not None:
            raise RuntimeError(f"prefill rejected decode's layout: {mismatch}")
        return
    room_id, required = int(room), int(frames[7].decode("ascii"))
    infos = m.transfer_infos.setdefault(room_id, {})
    infos[session] = TransferInfo.from_zmq(frames)
    if len(infos) == required:
        m.resolve_kv_replica_factor(infos)
        m.req_to_decode_prefix_len[room_id] = next(
            (i.decode_prefix_len for i in infos.values() if i.decode_prefix_len is not None), 0
        )
        m.update_status(room_id, KVPoll.WaitingForInput)


# ---- decode ------------------------------------------------------------------------------------


@dataclass
class Decode:
    """Decode's (target, draft) pools, ``req_to_token``, manager, free pages, and each request's
    row and pages."""

    pools: tuple[Any, Any]
    r2t: Any
    manager: Any
    free: list[int]
    rows: dict[str, int] = field(default_factory=dict)
    pages: dict[str, list[int]] = field(default_factory=dict)


def decode_prealloc(dec: Decode, prompt: Prompt, room: int) -> list[bytes]:
    """Decode admits ``prompt``: its cached prefix (``cached_from``'s first pages) and fresh
    pages (decode's own ids), and the metadata message every prefill rank receives: destination
    pages past the cached prefix (``kv_to_page_indices``, as ``_transfer_page_indices`` sends
    them) and each state component's payload (DSA: ``suffix_page_indices``), as ``decode.py``
    builds them."""
    from sglang.srt.disaggregation.base.conn import StateType
    from sglang.srt.mem_cache.common import kv_to_page_indices, suffix_page_indices

    cached = prompt.decode_cached // PAGE
    pages = dec.pages[prompt.cached_from][:cached] if cached else []
    pages = pages + [dec.free.pop(0) for _ in range(-(-prompt.tokens // PAGE) - cached)]
    row = len(dec.rows) + 3  # decode's rows are not prefill's either
    dec.rows[prompt.name], dec.pages[prompt.name] = row, pages
    table = dec.r2t.req_to_token
    locs = [p * PAGE + o for p in pages for o in range(PAGE)]
    table[row, : len(locs)] = torch.tensor(locs, dtype=table.dtype)
    start, end = prompt.decode_cached, prompt.tokens
    kv = kv_to_page_indices(table[row, start:end], PAGE).astype("int32")
    payloads = {StateType.DSA: lambda: suffix_page_indices(table, row, start, end, PAGE)}
    state = [payloads[st]() if st in payloads else None for st in dec.manager.kv_args.state_types]
    return dec.manager.build_receiver_metadata_message(
        bootstrap_room=room, required_dst_info_num=1, kv_indices=kv, aux_index=0,
        state_indices=state, decode_prefix_len=prompt.decode_cached, is_dummy=False,
    )  # fmt: skip


# ---- the prefill ranks' senders ----------------------------------------------------------------


@dataclass
class Queued:
    """A chunk a rank's sender queued for its transfer worker (pages after the shard filter)."""

    room: int
    pages: list[int]
    last: bool
    state: list[Any] | None


@dataclass
class Sender:
    """One prefill rank's sending side: its manager, what ``send_kv_chunk`` reads of its
    scheduler and bootstrap queue, its requests, and every chunk it queued."""

    rank: int
    manager: Any
    scheduler: Any
    bootstrap: Any
    reqs: dict[str, Any] = field(default_factory=dict)
    queued: list[Queued] = field(default_factory=list)


def prefill_sender(dep: Any, pools: tuple[Any, Any], r2t: Any, rank: int, control: Any,
                   registration: list[bytes]) -> Sender:  # fmt: skip
    """Prefill rank ``rank``'s sender side, decode's registration delivered.

    Its allocator is SGLang's ``PageInterleavePoolAllocator`` (``send_kv_chunk`` asks it for the
    page size and the transfer ids); the metadata buffers (``set_buf``: the first output token)
    are not KV and stay out.
    """
    from sglang.srt.disaggregation.prefill import (
        PrefillBootstrapQueue,
        SchedulerDisaggregationPrefillMixin,
    )
    from sglang.srt.mem_cache.allocator.page_interleave import PageInterleavePoolAllocator

    manager = prefill_manager(dep, pools, r2t, rank, control)
    deliver(manager, registration)
    pool = pools[0]
    allocator = PageInterleavePoolAllocator(pool.size, PAGE, dep.cp, torch.int64, "cpu", pool,
                                            need_sort=False)  # fmt: skip
    scheduler = SimpleNamespace(
        kv_checksum_computer=None, token_to_kv_pool_allocator=allocator, enable_staging=False,
        disagg_metadata_buffers=SimpleNamespace(set_buf=lambda req: None), req_to_token_pool=r2t,
        disagg_prefill_bootstrap_queue=SimpleNamespace(kv_manager=manager),
        disagg_prefill_pending_chunk_rids=set(),
    )  # fmt: skip
    mixin = SchedulerDisaggregationPrefillMixin
    scheduler._send_kv_chunk = lambda *a, **k: mixin._send_kv_chunk(scheduler, *a, **k)
    bootstrap = SimpleNamespace(scheduler=scheduler)
    queue = PrefillBootstrapQueue
    bootstrap.ensure_metadata_buffer = lambda req: queue.ensure_metadata_buffer(bootstrap, req)
    bootstrap._num_pages_to_send = lambda req, n: queue._num_pages_to_send(bootstrap, req, n)
    sender = Sender(rank, manager, scheduler, bootstrap)
    add = manager.add_transfer_request

    def add_transfer_request(room: int, kv_indices: Any, index_slice: Any, is_last_chunk: bool,
                             *args: Any, **kwargs: Any) -> None:  # fmt: skip
        state = kwargs.get("state_indices")
        sender.queued.append(Queued(room, [int(x) for x in kv_indices], is_last_chunk, state))
        add(room, kv_indices, index_slice, is_last_chunk, *args, **kwargs)

    manager.add_transfer_request = add_transfer_request  # records, then SGLang's own
    return sender


def admit(s: Sender, prompt: Prompt, room: int, metadata: list[bytes], row: int) -> None:
    """The request reaches this rank: SGLang's ``MooncakeKVSender``, decode's metadata, then
    ``PrefillBootstrapQueue.finalize_bootstrap`` (the send starts at decode's cached prefix)."""
    from sglang.srt.disaggregation.base.conn import KVPoll
    from sglang.srt.disaggregation.mooncake.conn import MooncakeKVSender
    from sglang.srt.disaggregation.prefill import PrefillBootstrapQueue

    kv_sender = MooncakeKVSender(s.manager, bootstrap_addr="127.0.0.1:8998", bootstrap_room=room)
    deliver(s.manager, metadata)
    status = kv_sender.poll()
    if status != KVPoll.WaitingForInput:
        raise RuntimeError(f"rank {s.rank} room {room}: status {status} after decode's metadata")
    req = SimpleNamespace(
        rid=prompt.name, bootstrap_room=room, origin_input_ids=[0] * prompt.tokens, extend_end=0,
        start_send_idx=0, disagg_decode_prefix_len=0, kv=SimpleNamespace(req_pool_idx=row),
        disagg_kv_sender=kv_sender, metadata_buffer_index=0, pending_bootstrap=True,
        time_stats=SimpleNamespace(set_bootstrap_done_time=lambda: None),
    )  # fmt: skip
    PrefillBootstrapQueue.finalize_bootstrap(s.bootstrap, req)
    s.reqs[prompt.name] = req


def send_chunk(s: Sender, name: str, done: int, last: bool) -> None:
    """After a forward computed ``name`` up to ``done`` tokens: the scheduler's
    ``send_kv_chunk`` (``last``: the prompt is complete)."""
    from sglang.srt.disaggregation.prefill import SchedulerDisaggregationPrefillMixin

    req = s.reqs[name]
    req.extend_end = done
    SchedulerDisaggregationPrefillMixin.send_kv_chunk(s.scheduler, req, last_chunk=last)


def drain(s: Sender) -> None:
    """SGLang's ``MooncakeKVManager.transfer_worker`` over everything queued, in this thread: it
    returns at the ``None`` sentinel (teardown's), so each call is synchronous."""
    queue, executor = s.manager.transfer_queues[0], s.manager.executors[0]
    queue.put(None)
    s.manager.transfer_worker(queue, executor)
