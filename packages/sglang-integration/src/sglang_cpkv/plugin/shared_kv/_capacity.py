"""Capacity of a shared-KV deployment: KV tokens per rank with and without sharding, and the
scratch a batch needs, with and without dedup. Pure arithmetic (the dry run feeds it SGLang's
resolved settings).

SGLang's sizing (0.5.23): the sharded pool charges two scratch slots against the KV budget
before sizing the pool (``page_interleave.compute_page_shard_scratch_bytes``), each slot holding
one layer's ``[prefix | chunk | trash page]`` rows of ``kv_dim * kv_size + index_head_dim +
index_head_dim / 128 * 4`` bytes (``_page_shard_row_bytes``); the prefix region is eight
context lengths rounded to the ``N * P`` gather span (``make_page_shard_spec``), the chunk region
the chunked-prefill budget rounded to a page. The KV budget itself is about
``GPU memory * mem_fraction_static - weights`` per rank (SGLang measures it at start-up).

Under EAGLE (GLM's NextN) SGLang's ``DefaultPoolConfigurator`` (``pool_configurator.py``) sizes
the target and the draft pool together: the draft's layers (``eagle_draft_num_layers``, the
config's ``num_nextn_predict_layers``) add their latent and indexer bytes to every token, and
the scratch is charged once per pool it builds (``compute_page_shard_scratch_bytes(...,
include_mtp=True)`` doubles it). The token count is then rounded down to a page.
``tests/test_shared_kv_capacity.py`` holds :func:`tokens_per_rank` equal to that configurator.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

__all__ = [
    "BatchScratch",
    "ScratchSpec",
    "batch_scratch",
    "capacity_report",
    "inverse_bound",
    "tokens_per_rank",
]

GIB = 1 << 30
#: SGLang's ``_KV_SHARD_SCRATCH_PREFIX_CONTEXTS``: full-context prefixes the scratch holds.
PREFIX_CONTEXTS = 8


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class ScratchSpec:
    """SGLang's ``PageShardSpec`` capacities and the bytes of one scratch row.

    Attributes:
        shard_size: ``N``; page_size: ``P``.
        max_prefix_tokens: gather region rows; chunk_tokens: write region rows.
        latent_bytes: latent KV bytes per token per layer; index_bytes: indexer bytes likewise.
    """

    shard_size: int
    page_size: int
    max_prefix_tokens: int
    chunk_tokens: int
    latent_bytes: int
    index_bytes: int

    @classmethod
    def for_model(
        cls, *, context_len: int, chunked_prefill_size: int, shard_size: int, page_size: int,
        latent_bytes: int, index_head_dim: int,
    ) -> ScratchSpec:  # fmt: skip
        """The spec SGLang's ``make_page_shard_spec`` builds for these settings."""
        span = shard_size * page_size
        return cls(
            shard_size=shard_size,
            page_size=page_size,
            max_prefix_tokens=PREFIX_CONTEXTS * _ceil_div(context_len, span) * span,
            chunk_tokens=_ceil_div(chunked_prefill_size, page_size) * page_size,
            latent_bytes=latent_bytes,
            index_bytes=index_head_dim + index_head_dim // 128 * 4,
        )

    @property
    def row_bytes(self) -> int:
        return self.latent_bytes + self.index_bytes

    @property
    def scratch_rows(self) -> int:
        return self.max_prefix_tokens + self.chunk_tokens + self.page_size

    @property
    def scratch_bytes(self) -> int:
        """Both slots (double buffer), as SGLang charges them against the KV budget."""
        return 2 * self.scratch_rows * self.row_bytes


@dataclass(frozen=True)
class BatchScratch:
    """Scratch pages one batch occupies in a slot (one layer), and what it gathers.

    Attributes:
        gathered_pages: history pages in the gather region (``N * block``, padding included).
        unique_pages: distinct history slots among them (what carries data).
        write_pages: fresh private pages of the current tokens.
        fits: whether both regions fit the spec (else admission defers the batch).
    """

    gathered_pages: int
    unique_pages: int
    write_pages: int
    page_bytes: int
    fits: bool

    @property
    def bytes(self) -> int:
        return (self.gathered_pages + self.write_pages) * self.page_bytes

    @property
    def gather_bytes(self) -> int:
        """Bytes the all-gather assembles per layer (every rank's padded block)."""
        return self.gathered_pages * self.page_bytes


def batch_scratch(
    spec: ScratchSpec, requests: int, prefix: int, extend: int
) -> dict[str, BatchScratch]:
    """Scratch of ``requests`` requests on one shared ``prefix`` plus ``extend`` new tokens each.

    The prefix pages lie on one radix chain (owners cyclic from rank 0); a partial last prefix
    page is each request's own (the page its previous chunk left half full).

    Returns:
        ``{"dedup": ..., "no_dedup": ..., "sglang": ...}``: cpkv's plan; the same slots without
        sharing read-only pages; SGLang 0.5.23's value-keyed plan, whose gather block is the
        host bound ``sum ceil(prefix_pages / N)`` over requests (it counts shared pages once per
        request) and which needs page-aligned prefixes.
    """
    n, p = spec.shard_size, spec.page_size
    full, partial = prefix // p, int(prefix % p != 0)
    total = _ceil_div(prefix + extend, p)
    fresh = requests * (total - full - partial)
    owners = [0] * n
    for j in range(full):
        owners[j % n] += 1
    owners[full % n] += requests * partial
    out = {}
    for name, gathered, unique in (
        ("dedup", n * max(owners), full + requests * partial),
        ("no_dedup", n * requests * _ceil_div(full + partial, n), requests * (full + partial)),
        ("sglang", n * requests * _ceil_div(full, n), full),
    ):
        write = fresh + (requests * partial if name == "sglang" else 0)
        fits = gathered * p <= spec.max_prefix_tokens and write * p <= spec.chunk_tokens
        out[name] = BatchScratch(gathered, unique, write, p * spec.row_bytes, fits)
    return out


def tokens_per_rank(
    budget_bytes: float, token_bytes: int, scratch_bytes: int, shard_size: int, page_size: int
) -> dict[str, int]:
    """KV capacity of one rank: replicated (every rank holds every token) against sharded, as
    SGLang's ``DefaultPoolConfigurator.calculate_pool_sizes`` sizes it (whole pages).

    Args:
        budget_bytes: KV budget per rank (``GPU memory * mem_fraction_static - weights``).
        token_bytes: bytes per token over all layers of every pool (target and draft; latent +
            indexer).
        scratch_bytes: the sharded pools' fixed scratch (charged before sizing, once per pool).
        shard_size: ``N``; page_size: ``P``.

    Returns:
        rows of each rank and distinct tokens the CP group caches, both ways.
    """
    budget = int(budget_bytes)

    def rows(available: int) -> int:
        return max(available, 0) // token_bytes // page_size * page_size

    replicated = rows(budget)
    sharded_rows = rows(budget - scratch_bytes)
    return {
        "replicated_rows_per_rank": replicated,
        "replicated_tokens_cached": replicated,
        "sharded_rows_per_rank": sharded_rows,
        "sharded_tokens_cached": sharded_rows * shard_size,
    }


def logical_pages(rows_per_rank: int, shard_size: int, page_size: int) -> int:
    """The sharded pool's logical pages: page ``l`` lives on rank ``l % N`` as local page
    ``l // N < rows / P + 1`` (the pool's ``cpkv_num_pages``, the width of the plan's inverse)."""
    return shard_size * (rows_per_rank // page_size + 1)


def inverse_bound(
    requests: int | None, rows_per_rank: int, shard_size: int, page_size: int
) -> dict:
    """The per-request page inverse one forward allocates, at most.

    ``inverse[b, page]`` (int32) spans every logical page of the sharded pool, ``N * (rows / P +
    1)`` (the pool's ``cpkv_num_pages``), for each of the forward's requests; SGLang admits at
    most ``max_running_requests`` into a batch and the pool refuses a larger one. ``requests``
    is None when SGLang sizes that limit at start-up (no ``--max-running-requests``).
    """
    pages = logical_pages(rows_per_rank, shard_size, page_size)
    return {"requests": requests, "logical_pages": pages, "bytes_per_request": pages * 4,
            "bytes": None if requests is None else requests * pages * 4}  # fmt: skip


def capacity_report(
    spec: ScratchSpec, *, layers: int, index_layers: int, budget_bytes: float | None,
    batch: tuple[int, int, int], max_running_requests: int | None = None, draft_layers: int = 0,
) -> dict[str, object]:  # fmt: skip
    """The dry run's capacity section (JSON-serialisable).

    Args:
        draft_layers: the EAGLE draft's KV layers (GLM's NextN: ``num_nextn_predict_layers``),
            0 without EAGLE. Each adds a latent and an indexer row per token (SGLang's
            configurator allocates the draft's indexer on every draft layer), and the draft
            pool's scratch is charged like the target's.
    """
    token_bytes = layers * spec.latent_bytes + index_layers * spec.index_bytes
    token_bytes += draft_layers * (spec.latent_bytes + spec.index_bytes)
    pools = 2 if draft_layers else 1
    out: dict[str, object] = {
        "token_bytes_all_layers": token_bytes,
        "draft_layers": draft_layers,
        "scratch": {
            "shard_size": spec.shard_size,
            "max_prefix_tokens": spec.max_prefix_tokens,
            "chunk_tokens": spec.chunk_tokens,
            "row_bytes": spec.row_bytes,
            "bytes_both_slots": spec.scratch_bytes,
            "pools": pools,
            "bytes_charged": pools * spec.scratch_bytes,
        },
        "batch": {"requests": batch[0], "prefix": batch[1], "extend": batch[2]},
    }
    shapes = batch_scratch(spec, *batch)
    out["batch_scratch"] = {
        k: {**asdict(v), "bytes": v.bytes, "gather_bytes": v.gather_bytes}
        for k, v in shapes.items()
    }
    if budget_bytes is not None:
        out["kv_budget_bytes"] = int(budget_bytes)
        out["tokens"] = tokens_per_rank(
            budget_bytes, token_bytes, pools * spec.scratch_bytes, spec.shard_size, spec.page_size
        )
    # per GiB of KV budget when the budget is unknown
    rows = (out["tokens"]["sharded_rows_per_rank"] if budget_bytes is not None  # type: ignore[index]
            else GIB // token_bytes)  # fmt: skip
    out["inverse"] = {
        **inverse_bound(max_running_requests, rows, spec.shard_size, spec.page_size),
        "per_gib_of_budget": budget_bytes is None,
    }
    return out
