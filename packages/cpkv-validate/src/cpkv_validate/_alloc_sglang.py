"""``--allocator sglang``: SGLang 0.5.23's radix cache and paged KV allocator, page by page.

What SGLang does, and this model does the same way:

- **match**: the prompt is cut to ``len - 1`` tokens (``Req._compute_max_prefix_len``: one
  token is always computed) and then to whole pages (``RadixKey.page_aligned``); the match is
  rounded down to the page (``RadixKey.match``). A hit never covers a partially filled page.
- **allocate**: for a batch, ``PagedTokenToKVPoolAllocator.alloc_extend`` continues each request
  on its own last page up to the next page boundary and takes one fresh page for every
  position-page from ``ceil(prefix_len / P)`` on, requests in batch order, pages from the front
  of the free list. Pages start at 1 (page 0 is the padding page) and freed pages go back to the
  front, in order (``torch.cat((freed, free_pages))``).
- **checkpoint** after every chunk (``checkpoint_kv_cache``) and at finish
  (``release_kv_cache``): the page-aligned part of what the request has computed goes into the
  tree; pages the tree already had (another request computed the same tokens) are freed and the
  request's row is repointed to the tree's copy. The partial last page stays the request's own
  (``cache_protected_len`` marks the tree-owned part); at finish it is freed.

So every page a request writes is its own: SGLang never lets two requests of a batch list one
page while one of them writes it, and a value-keyed inverse has nothing to get wrong here.

Where we differ: SGLang's tree compresses runs of pages into nodes and evicts least-recently-used
leaves under memory pressure; here each node is one page (the same pages match, lock and free in
the same order) and :meth:`SGLangAllocator.evict` drops what one named entry alone reaches —
what SGLang's eviction frees when that entry is the least recently used. SGLang releases a
request that finishes inside a batch's result loop (between checkpoints of the other requests);
the engine releases after the whole step. The prefill-side PD allocator (``need_sort``) sorts
freed pages before reuse; this models the default allocator.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

from ._pool import Request

__all__ = ["RadixPages", "SGLangAllocator"]


class _Node:
    """One cached page of the tree: its tokens, its pool page, and who holds it."""

    __slots__ = ("children", "key", "lock", "owner", "page", "parent")

    def __init__(self, parent: _Node | None, key: tuple[int, ...], page: int, owner: str) -> None:
        self.parent, self.key, self.page, self.owner = parent, key, page, owner
        self.children: dict[tuple[int, ...], _Node] = {}
        self.lock = 0  # running requests whose locked path goes through this page


class RadixPages:
    """A radix tree over whole pages: page-aligned keys only, the first copy of a page wins."""

    def __init__(self, page_size: int) -> None:
        self.page_size = page_size
        self.root = _Node(None, (), -1, "")

    def _keys(self, tokens: Sequence[int]) -> list[tuple[int, ...]]:
        p = self.page_size
        return [tuple(tokens[i : i + p]) for i in range(0, len(tokens) // p * p, p)]

    def match(self, tokens: Sequence[int]) -> list[_Node]:
        """Nodes of the longest cached page-aligned prefix of ``tokens``, root excluded."""
        node, path = self.root, []
        for key in self._keys(tokens):
            node = node.children.get(key)
            if node is None:
                break
            path.append(node)
        return path

    def insert(self, tokens: Sequence[int], pages: Sequence[int], owner: str) -> tuple[int, _Node]:
        """Insert the page-aligned ``tokens`` stored on ``pages``; existing pages are kept.

        Returns:
            (tokens that were already cached, the node the key ends on).
        """
        node, existing = self.root, 0
        for key, page in zip(self._keys(tokens), pages, strict=False):
            child = node.children.get(key)
            if child is None:
                child = node.children[key] = _Node(node, key, page, owner)
            else:
                existing += self.page_size
            node = child
        return existing, node

    def path_pages(self, node: _Node) -> list[int]:
        out = []
        while node is not self.root:
            out.append(node.page)
            node = node.parent
        return out[::-1]

    def lock(self, node: _Node, delta: int) -> None:
        """``inc_lock_ref``/``dec_lock_ref``: a locked path cannot be evicted."""
        while node is not self.root:
            node.lock += delta
            node = node.parent

    def evict_chain(self, node: _Node, keep: set[_Node]) -> list[int]:
        """Delete ``node`` and then each parent left childless, unlocked and not in ``keep``.

        Returns:
            The freed pages, leaf first (each one is freed to the front of the list in turn).
        """
        freed = []
        while node is not self.root and not node.lock and not node.children and node not in keep:
            freed.append(node.page)
            del node.parent.children[node.key]
            node = node.parent
        return freed


class SGLangAllocator:
    """SGLang's paged allocator and radix cache (see the module docstring for the rules).

    Args:
        num_pages: pages it hands out, numbered 1..num_pages (``num_rows = num_pages + 1``:
            page 0 is SGLang's padding page and is never handed out).
        page_size: tokens per page.
        prefix_cache: share prefixes (False = SGLang's ``--disable-radix-cache``).
    """

    mode = "sglang"

    def __init__(self, num_pages: int, page_size: int, prefix_cache: bool = True) -> None:
        self.num_pages, self.num_rows, self.page_size = num_pages, num_pages + 1, page_size
        self.free: deque[int] = deque(range(1, num_pages + 1))
        self.tree = RadixPages(page_size)
        self.enabled = prefix_cache
        self.locks: dict[str, _Node] = {}  # live request -> the node its tree lock is on
        self.entries: dict[str, _Node] = {}  # request -> node its last checkpoint ended on

    def num_free(self) -> int:
        return len(self.free)

    def cached_names(self) -> list[str]:
        return list(self.entries)

    def _release(self, pages: Sequence[int]) -> None:
        self.free.extendleft(reversed(pages))  # freed pages go to the front, in order

    def _relock(self, name: str, node: _Node) -> None:
        old = self.locks.get(name)
        if old is not None:
            self.tree.lock(old, -1)
        self.tree.lock(node, +1)
        self.locks[name] = node

    # -- request lifecycle ---------------------------------------------------------------------
    def admit(self, req: Request) -> None:
        """Match ``tokens[:len - 1]`` rounded down to the page, and lock the matched path."""
        path = self.tree.match(req.tokens[: len(req.tokens) - 1]) if self.enabled else []
        req.pages = [n.page for n in path]
        req.hit = req.cached = req.protected = len(path) * self.page_size
        req.hit_source = path[-1].owner if path else None
        self._relock(req.name, path[-1] if path else self.tree.root)

    def extend(self, reqs: Sequence[Request], seq_lens: Sequence[int]) -> None:
        """``alloc_extend``: fresh pages from ``ceil(prefix_len / P)`` on, in batch order."""
        p = self.page_size
        need = [max(0, -(-n // p) - len(r.pages)) for r, n in zip(reqs, seq_lens, strict=True)]
        if sum(need) > len(self.free):
            raise MemoryError(
                f"KV pool exhausted: the batch needs {sum(need)} new pages, {len(self.free)} of "
                f"{self.num_pages} are free; fix: raise num_pages or evict cached prefixes"
            )
        for r, k in zip(reqs, need, strict=True):
            r.pages.extend(self.free.popleft() for _ in range(k))

    def before_write(self, req: Request, end: int) -> list[tuple[int, int]]:
        """Nothing to copy: every page from ``cached // P`` on is the request's own."""
        return []

    def commit(self, req: Request) -> None:
        """``checkpoint``: put the page-aligned computed prefix in the tree, adopt its pages."""
        if not self.enabled:
            return
        p = self.page_size
        key_len = req.cached // p * p
        existing, node = self.tree.insert(req.tokens[:key_len], req.pages[: key_len // p], req.name)
        self._release(req.pages[req.protected // p : existing // p])  # our copies of its pages
        req.pages[: key_len // p] = self.tree.path_pages(node)
        req.protected = key_len
        self._relock(req.name, node)
        if key_len:
            self.entries[req.name] = node

    def finish(self, req: Request) -> None:
        """``release_kv_cache(checkpoint=True)``: checkpoint, free the pages the tree does not
        own (the partial last page), drop the lock."""
        self.commit(req)
        self._release(req.pages[req.protected // self.page_size :])
        self.tree.lock(self.locks.pop(req.name), -1)

    def evict(self, name: str) -> None:
        """Drop the pages only ``name``'s cached prefix reaches (unlocked, no other entry's)."""
        node = self.entries.pop(name, None)
        if node is None:
            return
        for page in self.tree.evict_chain(node, set(self.entries.values())):
            self._release([page])
