"""What the backend-level shared-KV suite feeds SGLang: scenarios of batches and marker tensors.

A *scenario* is a sequence of extend forwards over one KV cache (pools persist between steps, as
in a server): requests keep their ``req_to_token`` row and pages across steps, a chunked prefill
continues a request's own pages, a radix hit lists another request's committed pages as its
prefix. Pages are logical pages of a pool sharded over ``N`` ranks, handed out as SGLang's
``PageInterleavePoolAllocator`` does (owners cyclic along a chain, local page 0 of every rank
reserved), and the same logical ids index the replicated pool the sharded one is compared with.

Every tensor the layers see is a *marker*: a deterministic function of ``(content id, position,
layer)``, so a row read anywhere names where it came from. The latent KV row carries its identity
in its RoPE part, as base-8 digits: stored unquantised in the packed fp8 pool, and exact in the
raw fp8 rows trtllm stores (e4m3 holds the integers up to 16 exactly). A row of EAGLE's draft
also names the token its position was fed (:func:`draft_kv_row`). Indexer keys, queries and
head weights are seeded random vectors of the same identity.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

P = 64  # SGLang's DSA page size
D_NOPE, D_ROPE = 512, 64
#: The marks of a latent row, inside its RoPE part from ``D_NOPE`` on, two base-8 digits each:
#: content id + 1, page and slot of the position, layer + 1, then (draft rows) the fed token's
#: content id + 1, page and slot (0: no token).
MARKS = ("id", "page", "slot", "layer", "token_id", "token_page", "token_slot")
MARK_END = D_NOPE + 2 * len(MARKS)

Identity = tuple[int, int, int]  # (content id, position, layer)
Token = tuple[int, int]  # (content id, position) of a prompt token


@dataclass(frozen=True)
class Hit:
    """A radix hit: the first ``tokens`` (whole pages) of request ``of``'s committed pages."""

    of: str
    tokens: int


@dataclass(frozen=True)
class Extend:
    """One request's part of a step: ``tokens`` new tokens of request ``name``.

    A request's first appearance creates it (content id = its order of creation), with the
    prefix ``hit`` names (or none: a cache miss); later appearances continue it (chunked
    prefill: its own pages are its history).
    """

    name: str
    tokens: int
    hit: Hit | None = None


@dataclass(frozen=True)
class Scenario:
    """Steps run in order over one cache; after the steps of ``draft`` the NextN draft runs its
    EXTEND of the same batch on the draft pool."""

    name: str
    steps: tuple[tuple[Extend, ...], ...]
    draft: tuple[int, ...] = ()


@dataclass
class Request:
    """A request's state across steps: its row, content id, pages and committed tokens."""

    name: str
    row: int
    uid: int
    pages: list[int] = field(default_factory=list)
    done: int = 0  # tokens already in the pool
    hit_of: Request | None = None  # whose committed pages the prefix is
    hit: int = 0  # tokens of that prefix

    def content(self, pos: int) -> int:
        """Content id of position ``pos`` (the hit request's for its prefix)."""
        return self.hit_of.content(pos) if self.hit_of is not None and pos < self.hit else self.uid


@dataclass(frozen=True)
class BatchRow:
    """One request of a batch: ``(prefix, extend)`` lengths and its identity per position."""

    req: Request
    prefix: int
    extend: int

    @property
    def seq(self) -> int:
        return self.prefix + self.extend


class Cache:
    """Requests, ``req_to_token`` and the owner-rotated page allocator of one scenario."""

    def __init__(self, shard_size: int, rows: int, width: int) -> None:
        self.n = shard_size
        self.next_local = [1] * shard_size  # local page 0 is reserved on every rank
        self.requests: dict[str, Request] = {}
        self.req_to_token = torch.zeros(rows, width, dtype=torch.int32)

    @property
    def num_pages(self) -> int:
        """Logical pages a pool must hold for every page handed out (``N * (local + 1)``)."""
        return self.n * (max(self.next_local) + 1)

    def _page(self, owner: int) -> int:
        local = self.next_local[owner]
        self.next_local[owner] += 1
        return local * self.n + owner

    def step(self, extends: Sequence[Extend]) -> list[BatchRow]:
        """Admit, allocate and lay out one step's batch (``req_to_token`` written)."""
        rows = []
        for e in extends:
            req = self.requests.get(e.name)
            if req is None:
                req = Request(e.name, row=len(self.requests) + 1, uid=len(self.requests))
                self.requests[e.name] = req
                if e.hit is not None:
                    src = self.requests[e.hit.of]
                    if e.hit.tokens % P or e.hit.tokens > src.done:
                        raise ValueError(f"{e.name}: a hit covers whole committed pages")
                    req.pages = src.pages[: e.hit.tokens // P]
                    req.hit_of, req.hit = src, e.hit.tokens
                    req.done = e.hit.tokens
            base = req.uid % self.n  # each request's own pages rotate from its own base
            while len(req.pages) * P < req.done + e.tokens:
                req.pages.append(self._page((base + len(req.pages)) % self.n))
            locs = [p * P + o for p in req.pages for o in range(P)]
            self.req_to_token[req.row, : len(locs)] = torch.tensor(locs, dtype=torch.int32)
            rows.append(BatchRow(req, req.done, e.tokens))
        return rows

    def commit(self, rows: Sequence[BatchRow]) -> None:
        for r in rows:
            r.req.done = r.seq


def chunk(rows: Sequence[BatchRow]) -> list[tuple[BatchRow, int]]:
    """The batch's current tokens, request-major: ``(row, position)``."""
    return [(r, p) for r in rows for p in range(r.prefix, r.seq)]


def _randn(ident: Identity, kind: int, shape: tuple[int, ...]) -> torch.Tensor:
    uid, pos, layer = ident
    g = torch.Generator().manual_seed(((uid * 1_000_003 + pos) * 128 + layer) * 8 + kind)
    return torch.randn(shape, generator=g)


def _write_marks(row: torch.Tensor, values: Sequence[int]) -> None:
    for i, v in enumerate(values):
        if not 0 <= v < 64:
            raise ValueError(f"mark {MARKS[i]} = {v}: two base-8 digits hold 0..63")
        row[D_NOPE + 2 * i], row[D_NOPE + 2 * i + 1] = v // 8, v % 8


def _read_marks(kv: torch.Tensor) -> torch.Tensor:
    d = kv[:, D_NOPE:MARK_END].float().long().view(kv.shape[0], len(MARKS), 2)
    return d[..., 0] * 8 + d[..., 1]


@functools.cache
def kv_row(ident: Identity) -> torch.Tensor:
    """Latent KV row ``[576]`` bf16 of a token, its identity in the RoPE part."""
    uid, pos, layer = ident
    row = _randn(ident, 0, (D_NOPE + D_ROPE,)) * 0.5
    _write_marks(row, (uid + 1, pos // P, pos % P, layer + 1, 0, 0, 0))
    return row.to(torch.bfloat16)


@functools.cache
def draft_kv_row(ident: Identity, token: Token) -> torch.Tensor:
    """The draft layer's latent row of position ``ident[1]``, computed from the target's hidden
    state there (``ident``) and the token fed at it (``token``): both marked, and the token
    also moves the values, so an output depends on which token each row was fed."""
    row = kv_row(ident).float()
    row[:D_NOPE] += 0.25 * _randn((token[0], token[1], 127), 5, (D_NOPE,))
    _write_marks(row, (ident[0] + 1, ident[1] // P, ident[1] % P, ident[2] + 1, token[0] + 1,
                       token[1] // P, token[1] % P))  # fmt: skip
    return row.to(torch.bfloat16)


def identities(kv: torch.Tensor) -> list[Identity]:
    """The identity :func:`kv_row` wrote into each row of ``kv [S, >= MARK_END]``."""
    m = _read_marks(kv)
    return list(zip((m[:, 0] - 1).tolist(), (m[:, 1] * P + m[:, 2]).tolist(),
                    (m[:, 3] - 1).tolist(), strict=True))  # fmt: skip


def fed_tokens(kv: torch.Tensor) -> list[Token | None]:
    """The token :func:`draft_kv_row` wrote into each row (None: a row of no draft)."""
    m = _read_marks(kv)
    return [None if t == 0 else (t - 1, page * P + slot)
            for t, page, slot in m[:, 4:].tolist()]  # fmt: skip


@functools.cache
def attn_query(ident: Identity, heads: int) -> torch.Tensor:
    """Absorbed query ``[H, 576]`` float32, blind to the identity marks."""
    q = _randn(ident, 1, (heads, D_NOPE + D_ROPE))
    q[:, D_NOPE:MARK_END] = 0
    return q


@functools.cache
def index_key(ident: Identity, dim: int) -> torch.Tensor:
    return _randn(ident, 2, (dim,))


@functools.cache
def index_query(ident: Identity, heads: int, dim: int) -> torch.Tensor:
    return _randn(ident, 3, (heads, dim))


@functools.cache
def index_weight(ident: Identity, heads: int) -> torch.Tensor:
    return _randn(ident, 4, (heads, 1))


def identity(row: BatchRow, pos: int, layer: int) -> Identity:
    return (row.req.content(pos), pos, layer)
