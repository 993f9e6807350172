"""Value checks of the public ops' inputs: a clear :class:`LayoutError` before any work.

Each check builds every condition's mask first and asks :func:`any_true` once, so valid input costs
one host sync per call however many conditions there are; only when something is wrong does it look
for the first culprit of each condition, in order, and name it (one sync per condition).
"""

from __future__ import annotations

import torch

from ._checks import any_true, raise_first
from ._layout import Layout
from .errors import LayoutError

__all__ = ["check_fill_values", "check_locs"]


def check_fill_values(layout: Layout, token_req: torch.Tensor, loc: torch.Tensor) -> None:
    """fill_current's values: each location in the pool or -1 (padding), on a page its token's
    request writes, written once; each token's request one of the batch."""
    span, bsz = layout.num_pages * layout.page_size, layout.batch_size
    valid = loc >= 0
    outside = (loc < -1) | (loc >= span)
    foreign = valid & ((token_req < 0) | (token_req >= bsz))
    # Each token's slot and its owner. Indices are clamped so this runs on any values: the two
    # checks above catch (and report first) every row a clamp changes. Slot -1 reads owner -1.
    req = token_req.long().clamp(0, max(bsz - 1, 0))
    page = torch.div(loc.long().clamp(0, span - 1), layout.page_size, rounding_mode="floor")
    slot = layout.inverse.long()[req, page] if bsz else torch.full_like(page, -1)
    owner = torch.nn.functional.pad(layout.slot_owner.long(), (0, 1), value=-1)[slot]
    unwritable = valid & (owner != req)
    order = torch.arange(loc.shape[0], device=loc.device)
    key = torch.sort(torch.where(valid, req * span + loc.long(), -1 - order)).values
    twice = key[1:] == key[:-1]  # padding rows hold distinct negative keys
    if not any_true(outside, foreign, unwritable, twice):
        return

    def not_written(t: tuple[int, ...]) -> str:
        b, p = int(req[t]), int(page[t])
        how = "does not use" if int(slot[t]) < 0 else "only reads (history)"
        return (
            f"out_cache_loc[{t[0]}] = {int(loc[t])} is on page {p}, which request {b} {how}; a "
            f"current token must land on a page its request writes "
            f"(pages j >= prefix_lens[{b}] // P); fix: check token_req/out_cache_loc order"
        )

    raise_first(
        outside,
        lambda t: (
            f"out_cache_loc[{t[0]}] = {int(loc[t])} is outside the pool [0, {span}) and not "
            f"-1 (padding)"
        ),
    )
    raise_first(
        foreign,
        lambda t: (
            f"token_req[{t[0]}] = {int(token_req[t])} is not a request of this batch (B = {bsz})"
        ),
    )
    raise_first(unwritable, not_written)
    raise_first(
        twice,
        lambda t: (
            f"two current tokens of request {int(key[t]) // span} write pool location "
            f"{int(key[t]) % span}; each location is written once"
        ),
    )


def check_locs(
    name: str, locs: torch.Tensor, req_id: torch.Tensor, layout: Layout, span: int | None = None
) -> None:
    """Entries >= -1 (and < ``span`` when given), each row's request in the batch; one sync."""
    if req_id.shape[0] != locs.shape[0]:
        raise LayoutError(
            f"req_id has {req_id.shape[0]} entries but {name} has {locs.shape[0]} rows; "
            f"fix: pass the request of every row"
        )
    negative = locs < -1
    rows = locs.unsqueeze(1) if locs.dim() == 1 else locs
    foreign = (rows >= 0).any(dim=1) & ((req_id < 0) | (req_id >= layout.batch_size))
    outside = None if span is None else locs >= span
    if not any_true(negative, foreign, outside):
        return
    raise_first(
        negative, lambda i: f"{name}{list(i)} = {int(locs[i])} is negative and not -1 (absent)"
    )
    raise_first(
        foreign,
        lambda n: (
            f"req_id[{n[0]}] = {int(req_id[n])} is not a request of this batch (B = "
            f"{layout.batch_size}) but {name}[{n[0]}] holds entries other than -1"
        ),
    )
    raise_first(
        outside, lambda i: f"{name}{list(i)} = {int(locs[i])} is outside the pool [0, {span})"
    )
