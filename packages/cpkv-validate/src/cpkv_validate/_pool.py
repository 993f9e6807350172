"""The paged KV storage of the reference engine, and the state of one request in it.

Token ``i`` of a request lives at pool location ``pages[i // P] * P + i % P``, per layer. Which
pages a request gets, and which it shares with others, is decided by an allocator model
(``_alloc_free.CopyOnWriteAllocator`` or ``_alloc_sglang.SGLangAllocator``); this module only
stores rows and remembers who wrote them, so the audit can name the source of a foreign row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ._config import ModelConfig

__all__ = ["PagePool", "Request"]


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
        protected: tokens at the front of ``pages`` that the prefix cache owns (SGLang's
            ``cache_protected_len``; the copy-on-write model does not use it).
    """

    name: str
    tokens: list[int]
    pages: list[int] = field(default_factory=list)
    cached: int = 0
    hit: int = 0
    hit_source: str | None = None
    extends: list[int] = field(default_factory=list)
    protected: int = 0


class PagePool:
    """Per-layer paged KV storage: ``latent_dim`` rows on every layer, indexer keys on full ones.

    Args:
        cfg: model dimensions.
        num_pages: pages of storage (the allocator decides which of them it hands out).
        dtype, device: storage.

    Nothing is zeroed when a page changes hands: a page reused after eviction still holds its
    previous owner's KV, as in a real server.
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
        self.writer: dict[int, str] = {}  # pool location -> request that last wrote it
        self.taint: dict[int, frozenset[str]] = {}  # location -> leak sources its KV carries

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
