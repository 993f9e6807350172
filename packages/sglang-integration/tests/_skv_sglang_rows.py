"""The requests whose rows SGLang's DSA backend keeps under interleave CP, from SGLang itself.

``init_forward_metadata`` (``dsa_backend.py``) splits a batch when
``can_dsa_prefill_cp_interleave`` holds and then builds its page tables from
``page_table[bs_idx]``, ``bs_idx`` from ``InterleaveCPStrategy.shard_per_request``. The shared-KV
plan's ``table_req`` must be exactly those requests. Two things of SGLang's method need a GPU or
a process group and are replaced for the call: the Triton kernel ``dsa_cp_interleave_q_seqs``
(its device outputs are not used; the host list ``bs_idx_cpu`` is) and the ``cp_rank`` property
(read from the CP process group).
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from unittest import mock

import torch


def sglang_kept_rows(extend: Sequence[int], cp: int, rank: int) -> list[int]:
    """``bs_idx_cpu`` of SGLang's ``InterleaveCPStrategy(cp).shard_per_request`` on ``rank``."""
    import sglang.kernels.ops.attention.dsa.cp_split as cp_split
    from sglang.srt.layers.cp.interleave import InterleaveCPStrategy

    class OnRank(InterleaveCPStrategy):
        cp_rank = rank  # SGLang's property reads the CP process group

    extend = [int(e) for e in extend]
    with mock.patch.object(cp_split, "dsa_cp_interleave_q_seqs", lambda *a: (None, None)):
        _, _, bs_idx_cpu, _ = OnRank(cp).shard_per_request(list(extend), torch.tensor(extend))
    return list(bs_idx_cpu)


def sglang_table_rows(extend: Sequence[int], cp: int, rank: int) -> list[int]:
    """The requests of the rows of an extend forward's tables on ``rank``: SGLang's split
    (``InterleaveCPStrategy.can_apply``, the length test ``can_dsa_prefill_cp_interleave`` makes
    once the deployment runs interleave CP) keeps ``bs_idx``; an unsplit batch keeps all."""
    from sglang.srt.layers.cp.interleave import InterleaveCPStrategy
    from sglang.srt.model_executor.forward_batch_info import ForwardMode

    batch = SimpleNamespace(forward_mode=ForwardMode.EXTEND, extend_seq_lens_cpu=list(extend))
    if not InterleaveCPStrategy(cp).can_apply(sum(extend), batch):
        return list(range(len(extend)))
    return sglang_kept_rows(extend, cp, rank)
