"""SGLang-shaped scenarios: the batches SGLang 0.5.23's scheduler and radix cache really build.

Each builder's docstring names the SGLang behaviour it models. Lengths are in units of the page
size ``P`` (16 in the tiny model; SGLang's DSA page is 64), so SGLang's 63/64/65/127/129-token
boundaries appear here as ``P-1, P, P+1, 2P-1, 2P+1``. Chunked prefills end their non-final
chunks on a page boundary, as SGLang's chunker does (``schedule_policy``: ``end = (prefix_len +
extend_len) // page_size * page_size``). Under ``--allocator sglang`` every hit is rounded down
to the page; under ``--allocator free`` the same prompts share partial pages.
"""

from __future__ import annotations

from ._scenario_text import REST, ScenarioSpec, ScenarioText, Step

__all__ = ["SGLANG_SCENARIOS"]


def _radix_page_aligned(t: ScenarioText, p: int) -> list[Step]:
    """Radix hits rounded down to the page (``RadixKey.match`` returns whole pages only).

    Prompts diverge from a cached prefix mid-page, on a page boundary, one token past the cached
    prompt, and inside the first page: SGLang matches 3P, 5P, 6P and nothing, and recomputes the
    rest of the diverging page into a fresh page (the cached prompt's own partial last page was
    freed when it finished).
    """
    base = t.own("base", 6 * p + 9)
    reqs = {
        "a": base[: 3 * p + 5] + t.own("a", 2 * p + 3),
        "b": base[: 5 * p] + t.own("b", p + 7),
        "c": base + t.own("c", 4),
        "d": base[: p - 1] + t.own("d", 2 * p),
    }
    return [
        Step(admit=[("base", base)], batch=[("base", REST)], finish=["base"]),
        Step(admit=list(reqs.items()), batch=[(n, REST) for n in reqs]),
    ]


def _chunked_history_and_current(t: ScenarioText, p: int) -> list[Step]:
    """A chunked prefill whose earlier chunks other requests hit in the same batch.

    SGLang's ``checkpoint_kv_cache`` puts every finished chunk into the radix tree, so the next
    batch can hold the chunked request writing its next chunk into fresh pages while other
    requests read its earlier chunks as history: one request's pages are history for some rows
    and its own current KV is written in the same step. The final chunk ends mid-page.
    """
    long = t.own("long", 9 * p + 7)
    h1 = long[: 4 * p + 6] + t.own("h1", p + 3)  # hits the whole first chunk (4P)
    h2 = long[: 2 * p + 3] + t.own("h2", 2 * p)  # diverges inside the first chunk
    h3 = long[: 7 * p] + t.own("h3", 5)  # hits the first two chunks
    return [  # SGLang puts the chunked request first in its batch
        Step(admit=[("long", long)], batch=[("long", 4 * p)]),
        Step(admit=[("h1", h1), ("h2", h2)], batch=[("long", 3 * p), ("h1", REST), ("h2", REST)]),
        Step(admit=[("h3", h3)], batch=[("long", REST), ("h3", REST)]),
    ]


def _full_hit_short_extend(t: ScenarioText, p: int) -> list[Step]:
    """Full prefix hits whose extend is shorter than cp, so some ranks get none of its tokens.

    The whole prompt is cached; SGLang still computes the tokens past the last whole page of
    ``len - 1`` (``_compute_max_prefix_len``), 1 to 3 tokens here, fewer than the 4 ranks of cp 4.
    A cached prompt that ends on a page boundary (``e``) recomputes its whole last page.
    """
    base = t.own("base", 5 * p)
    reqs = {
        "a": base[: 4 * p + 1],
        "b": base[: 4 * p + 2],
        "c": base[: 4 * p + 3],
        "d": base[: 2 * p + 1],
        "e": base[: 3 * p],
    }
    return [
        Step(admit=[("base", base)], batch=[("base", REST)], finish=["base"]),
        Step(admit=list(reqs.items()), batch=[(n, REST) for n in reqs]),
    ]


def _two_prefix_chains(t: ScenarioText, p: int) -> list[Step]:
    """Two cached prefixes, each hit by two requests, interleaved in one batch.

    SGLang's radix tree holds two chains; a batch mixes their hits, so the shared read-only pages
    of two chains sit side by side in one layout.
    """
    x, y = t.own("x", 4 * p + 5), t.own("y", 3 * p + 11)
    reqs = {
        "x1": x + t.own("x1", p + 2),
        "y1": y + t.own("y1", 6),
        "x2": x[: 2 * p] + t.own("x2", 2 * p + 9),
        "y2": y[: p + 4] + t.own("y2", 3 * p),
    }
    return [
        Step(admit=[("x", x), ("y", y)], batch=[("x", REST), ("y", REST)], finish=["x", "y"]),
        Step(admit=list(reqs.items()), batch=[(n, REST) for n in reqs]),
    ]


def _page_boundary_lengths(t: ScenarioText, p: int) -> list[Step]:
    """Prefix and suffix lengths one token either side of one and two pages.

    SGLang's 63, 64, 65, 127 and 129 tokens at page 64, scaled to ``P-1, P, P+1, 2P-1, 2P+1``:
    each length is one request's cached prefix and another's new suffix. SGLang matches
    ``0, P, P, P, 2P`` of those prefixes.
    """
    lens = [p - 1, p, p + 1, 2 * p - 1, 2 * p + 1]
    base = t.own("base", 3 * p)
    reqs = {
        f"r{pre}+{suf}": base[:pre] + t.own(f"r{pre}+{suf}", suf)
        for pre, suf in zip(lens, lens[1:] + lens[:1], strict=True)
    }
    return [
        Step(admit=[("base", base)], batch=[("base", REST)], finish=["base"]),
        Step(admit=list(reqs.items()), batch=[(n, REST) for n in reqs]),
    ]


def _fresh(lengths: list[int]):
    def build(t: ScenarioText, p: int) -> list[Step]:
        reqs = {f"f{i}": t.own(f"f{i}", n) for i, n in enumerate(lengths)}
        return [Step(admit=list(reqs.items()), batch=[(n, REST) for n in reqs])]

    build.__doc__ = f"""Fresh prompts of lengths {lengths}, no prefix anywhere in the batch.

    SGLang 0.5.23's interleave CP with RAGGED top-k and no prefix in the batch offsets each
    kept request by the extend lengths of the requests this rank keeps, not of the whole chunk
    (``dsa_backend.py`` ``topk_indices_offset``), so a rank that misses an earlier request reads
    another request's rows: [1, 6] at cp 2 and [1, 1, 300] at cp 4 with the interleave split.
    Our engine keys every table by request; these shapes must pass.
    """
    return build


SGLANG_SCENARIOS: dict[str, ScenarioSpec] = {
    "radix_page_aligned": ScenarioSpec(
        _radix_page_aligned,
        "SGLang radix hits rounded down to the page: mid-page, on-boundary and sub-page divergence",
    ),
    "chunked_history_and_current": ScenarioSpec(
        _chunked_history_and_current,
        "a chunked prefill's earlier chunks hit by other requests while its next chunk writes",
    ),
    "full_hit_short_extend": ScenarioSpec(
        _full_hit_short_extend,
        "whole prompts cached: 1-3 token extends, fewer than cp, some ranks get none",
    ),
    "two_prefix_chains": ScenarioSpec(
        _two_prefix_chains,
        "two cached prefixes, each hit twice, interleaved in one batch",
    ),
    "page_boundary_lengths": ScenarioSpec(
        _page_boundary_lengths,
        "prefix and suffix lengths P-1, P, P+1, 2P-1, 2P+1 (SGLang's 63..129 at page 64)",
    ),
    "fresh_prompts_cp2": ScenarioSpec(
        _fresh([1, 6]),
        "fresh prompts [1, 6] at cp 2: SGLang's interleave RAGGED top-k offset shape",
        cp=2,
    ),
    "fresh_prompts_cp4": ScenarioSpec(
        _fresh([1, 1, 300]),
        "fresh prompts [1, 1, 300] at cp 4: SGLang's interleave RAGGED top-k offset shape",
        cp=4,
    ),
}
