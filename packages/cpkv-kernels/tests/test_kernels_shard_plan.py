"""GPU: the sharded pool's per-forward CUDA op (``shard_plan``) equals the torch reference
bitwise, on random batches and the adversarial groups (shared prefix pages, a page written by
one request and read by another, wide -1 padding, empty requests, page-boundary edges, no
current tokens), at 1 to 8 shards and every rank, int32 and int64 inputs, with and without kept
rows, with and without the layout outputs; bad pages give the same status. The torch reference
is held to a plain-Python oracle on CPU (``cpkv-runtime``'s ``test_runtime_shard_plan.py``).

Run on an H200: ``python3 -m pytest packages/cpkv-kernels/tests -m gpu``.
"""

from __future__ import annotations

import random

import cpkv_runtime
import pytest
import torch
from _cases import Batch, named_batches, random_batch
from _compare import assert_bitwise_equal

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]
TORCH_OPS = cpkv_runtime.available_backends()["torch"].ops
# The op's outputs in order (cpkv_runtime._backend); the first LEAN without the layout.
NAMES = ("host", "inverse", "rows", "kept", "slot_scratch", "send_pages", "token_req",
         "cur_rows", "local_rows", "order", "spos", "ext_start", "slot_page", "pages", "prefix",
         "extend", "seq", "pages_used", "slot_table", "slot_owner", "used_slots", "status",
         "info")  # fmt: skip
LEAN = 9
# Defined whatever the status (the rest only for valid input).
ALWAYS = frozenset({"host", "rows", "kept", "order", "spos", "ext_start", "pages", "used_slots",
                    "status", "info"})  # fmt: skip


def _cuda_ops() -> dict:
    backend = cpkv_runtime.available_backends().get("cuda")
    if backend is None or not backend.available:
        pytest.skip(f"the CUDA backend is unavailable: {getattr(backend, 'reason', 'absent')}")
    return backend.ops


def _token_table(batch: Batch, rng: random.Random, dtype: torch.dtype):
    """SGLang-shaped ``req_to_token`` for the batch (rows shuffled, junk elsewhere)."""
    p, bsz = batch.page_size, len(batch.req_pages)
    width = len(batch.req_pages[0]) * p + rng.randint(0, 3)
    rows = bsz + rng.randint(0, 3)
    table = torch.randint(
        -3,
        1 << 20,
        (rows, max(width, 1)),
        generator=torch.Generator().manual_seed(rng.randint(0, 1 << 30)),
    )
    where = rng.sample(range(rows), bsz)
    for b, row in enumerate(batch.req_pages):
        for j, page in enumerate(row):
            table[where[b], j * p : (j + 1) * p] = page * p + torch.arange(p)
    idx_dtype = rng.choice([torch.int32, torch.int64])
    return table.to(dtype).cuda(), torch.tensor(where, dtype=idx_dtype).cuda()


def _locs(batch: Batch, rng: random.Random, dtype: torch.dtype) -> torch.Tensor:
    out = []
    for b, row in enumerate(batch.req_pages):
        for i in range(batch.prefix[b], batch.prefix[b] + batch.extend[b]):
            page = row[i // batch.page_size] if rng.random() > 0.05 else batch.num_pages + 1
            out.append(-1 if rng.random() < 0.03 else page * batch.page_size + i % batch.page_size)
    return torch.tensor(out, dtype=dtype).cuda()


def _check(batch: Batch, shards: int, seed: int, label: str, *, valid: bool = True) -> None:
    """Every rank's plan on the CUDA op equals the torch reference's; ``valid`` says whether the
    batch is good input (status 0) or bad (a non-zero status, the same on both)."""
    ops, rng = _cuda_ops(), random.Random(seed)
    p, bsz = batch.page_size, len(batch.req_pages)
    dtype = rng.choice([torch.int32, torch.int64])
    r2t, where = _token_table(batch, rng, dtype)
    used = [-(-(q + e) // p) for q, e in zip(batch.prefix, batch.extend, strict=True)]
    kept = sorted(rng.sample(range(bsz), rng.randint(0, bsz)))
    capacity = sum(used) + rng.randint(0, 2)
    write_base = shards * capacity + rng.randint(0, 2)
    for rank in range(shards):
        args = (r2t, where, _locs(batch, rng, dtype), [*batch.prefix, *batch.extend], kept,
                max(used, default=0), p, batch.num_pages, capacity, shards, rank, write_base,
                write_base + capacity + rng.randint(0, 2))  # fmt: skip
        got, want = ops["shard_plan"](*args, True), TORCH_OPS["shard_plan"](*args, True)
        lean = ops["shard_plan"](*args, False)  # without the layout: the same first outputs
        assert len(lean) == LEAN and len(got) == len(want) == len(NAMES)
        status = int(want[0][0])
        assert (status == 0) == valid, f"{label}: torch reference status {status}"
        assert int(got[0][0]) == status, label
        for outputs, what in ((got, "shard_plan"), (lean, "shard_plan(lean)")):
            for name, g, w in zip(NAMES, outputs, want, strict=False):
                if status == 0 or name in ALWAYS:
                    assert_bitwise_equal(f"{label} rank {rank} {what} {name}", g, w, 1, "(i)")


@pytest.mark.parametrize("shards", [1, 2, 3, 8])
@pytest.mark.parametrize("page_size", [1, 16, 64])
def test_named_batches(page_size, shards):
    for i, batch in enumerate(named_batches(page_size)):
        _check(batch, shards, i, f"{batch.name} P={page_size} N={shards}")


@pytest.mark.parametrize("shards", [1, 2, 8])
@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
@pytest.mark.parametrize("page_size", [1, 16, 64])
@pytest.mark.parametrize("bsz", [1, 4, 8, 33])
def test_random_batches(bsz, page_size, share, shards):
    rng = random.Random(f"{bsz}-{page_size}-{share}-{shards}")
    batch = random_batch(rng, bsz, page_size, share, max_seq=min(40 * page_size + 3, 5000))
    _check(batch, shards, rng.randint(0, 1 << 30), f"random B={bsz} P={page_size} N={shards}")


def test_many_tiles():
    """More used slots than one block of the ordering kernel numbers at once (1,024 a tile):
    the counts carried from tile to tile."""
    rng = random.Random(5)
    batch = random_batch(rng, 64, 16, 0.5, max_seq=1600)
    _check(batch, 8, 11, "64 requests, ~6,000 slots")


@pytest.mark.parametrize("what", ["duplicate", "outside", "negative"])
def test_bad_input_gives_the_same_status(what):
    pages = [[3, 4, 5], [6, 7, 8]]
    prefix, extend = [8, 4], [2, 6]
    if what == "duplicate":
        pages[1][1] = 6
    elif what == "outside":
        pages[1][1] = 1 << 20
    else:
        prefix[0] = -1
    _check(Batch(what, pages, prefix, extend, 4, 16), 2, 3, what, valid=False)
