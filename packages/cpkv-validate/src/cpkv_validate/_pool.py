"""A paged KV pool with a page allocator, and a radix-like prefix cache that shares pages.

The reference engine stores, per layer, the latent KV row of every token (and, on full layers, the
indexer key) in pages of ``P`` tokens; token ``i`` of a request lives at location
``pages[i // P] * P + i % P``. A new request reuses the pages of the longest cached token prefix,
*including a partially filled last page*: its first current tokens then land on a page that other
requests also list (they read rows the new request does not). That is the physical page sharing
under which a value-keyed inverse goes wrong. The pool itself stays consistent by copy-on-write at
cache-write time (:meth:`PagePool.ensure_private`): during the step the writer's private dense slot
is the copy.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ._config import ModelConfig

__all__ = ["PagePool", "PrefixCache", "Request"]


@dataclass
class Request:
    """One request's state in an engine.

    Attributes:
        name: unique label (reports name leaks by it).
        tokens: the whole prompt; steps prefill it chunk by chunk.
        pages: pool pages in order (token i on ``pages[i // P]``).
        cached: tokens whose KV is in the pool.
        hit: tokens reused from the prefix cache at admission; ``hit_source`` names the entry.
        extends: extend length of each step it took part in.
    """

    name: str
    tokens: list[int]
    pages: list[int] = field(default_factory=list)
    cached: int = 0
    hit: int = 0
    hit_source: str | None = None
    extends: list[int] = field(default_factory=list)


class PagePool:
    """Per-layer paged KV storage plus a reference-counted page allocator.

    Args:
        cfg: model dimensions (``latent_dim`` rows on every layer, ``index_head_dim`` rows on full
            layers).
        num_pages: pool size.
        dtype, device: storage.

    Freed pages go to the front of the free list (LIFO), so eviction churn hands a page with a
    previous owner's KV straight to the next request, as a real allocator does; nothing is zeroed.
    """

    def __init__(
        self, cfg: ModelConfig, num_pages: int, dtype: torch.dtype, device: torch.device | str
    ) -> None:
        p = cfg.page_size
        self.cfg, self.num_pages, self.page_size = cfg, num_pages, p
        self.kv = [
            torch.zeros(num_pages, p, cfg.latent_dim, dtype=dtype, device=device)
            for _ in cfg.indexer_types
        ]
        self.idx = [
            torch.zeros(num_pages, p, cfg.index_head_dim, dtype=dtype, device=device)
            if kind == "full"
            else None
            for kind in cfg.indexer_types
        ]
        self.free = list(range(num_pages - 1, -1, -1))  # pop() hands out 0, 1, 2, ...
        self.ref = [0] * num_pages
        self.writer: dict[int, str] = {}  # pool location -> request that last wrote it
        self.taint: dict[int, frozenset[str]] = {}  # location -> leak sources its KV carries

    def alloc(self) -> int:
        if not self.free:
            raise MemoryError(
                f"KV pool exhausted: all {self.num_pages} pages are held; fix: raise num_pages "
                f"or evict cached prefixes"
            )
        page = self.free.pop()
        self.ref[page] = 1
        return page

    def incref(self, page: int) -> None:
        self.ref[page] += 1

    def decref(self, page: int) -> None:
        self.ref[page] -= 1
        if self.ref[page] == 0:
            self.free.append(page)

    def copy_page(self, src: int, dst: int) -> None:
        """Copy every layer's rows of page ``src`` into ``dst`` (copy-on-write)."""
        for store in (*self.kv, *(t for t in self.idx if t is not None)):
            store[dst].copy_(store[src])
        p = self.page_size
        for o in range(p):
            if (src * p + o) in self.writer:
                self.writer[dst * p + o] = self.writer[src * p + o]
            self.taint.pop(dst * p + o, None)
            if (src * p + o) in self.taint:
                self.taint[dst * p + o] = self.taint[src * p + o]


class PrefixCache:
    """Token-prefix -> pages, one entry per request (updated after each of its steps).

    Each entry holds a reference on its pages, so a finished request's prefix stays reusable
    until :meth:`evict` drops it.
    """

    def __init__(self, pool: PagePool, enabled: bool = True) -> None:
        self.pool, self.enabled = pool, enabled
        self.entries: dict[str, tuple[tuple[int, ...], list[int]]] = {}

    def match(self, tokens: list[int]) -> tuple[int, list[int], str | None]:
        """Longest cached prefix of ``tokens`` (at most ``len - 1``: one token is always computed).

        Returns:
            (length, pages covering it, name of the entry) — (0, [], None) on a miss.
        """
        best, pages, src = 0, [], None
        if not self.enabled:
            return best, pages, src
        limit = len(tokens) - 1
        for name, (toks, pgs) in self.entries.items():
            n = 0
            for a, b in zip(toks[:limit], tokens, strict=False):
                if a != b:
                    break
                n += 1
            if n > best:
                best, src = n, name
                pages = pgs[: -(-n // self.pool.page_size)]
        return best, list(pages), src

    def put(self, name: str, tokens: list[int], pages: list[int]) -> None:
        if not self.enabled:
            return
        for p in pages:
            self.pool.incref(p)
        self.evict(name)
        self.entries[name] = (tuple(tokens), list(pages))

    def evict(self, name: str) -> None:
        old = self.entries.pop(name, None)
        if old is not None:
            for p in old[1]:
                self.pool.decref(p)

    def holds(self, name: str, page: int) -> bool:
        entry = self.entries.get(name)
        return entry is not None and page in entry[1]
