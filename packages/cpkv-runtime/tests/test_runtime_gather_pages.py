"""gather_pages: whole-page copies by index, against a plain-Python oracle, on every backend."""

from __future__ import annotations

import cpkv_runtime as cr
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st


def _oracle(pool: torch.Tensor, pages: list[int]) -> torch.Tensor:
    want = torch.zeros((len(pages), *pool.shape[1:]), dtype=pool.dtype)
    for i, page in enumerate(pages):
        want[i] = pool[page]
    return want


@pytest.mark.parametrize(
    ("dtype", "page"),
    [
        (torch.bfloat16, (8, 1, 12)),  # latent rows (P, 1, D)
        (torch.uint8, (8 * 6,)),  # one flat row per page (the indexer's packed pages)
        (torch.int32, (8, 3)),
    ],
)
def test_gather_pages_matches_oracle(dtype, page, backend):
    pool = torch.randint(0, 120, (9, *page)).to(dtype)
    pages = [4, 0, 8, 4, 2]
    out = torch.full((len(pages), *page), 7).to(dtype)
    want = _oracle(pool, pages)
    got = cr.gather_pages(pool, torch.tensor(pages, dtype=torch.int32), out=out, backend=backend)
    assert got is out
    assert torch.equal(
        got.view(torch.uint8) if dtype == torch.bfloat16 else got,
        want.view(torch.uint8) if dtype == torch.bfloat16 else want,
    )


@given(pages=st.lists(st.integers(0, 11), max_size=20), wide=st.booleans())
def test_gather_pages_without_out_is_index_select(pages, wide):
    pool = torch.randint(-50, 50, (12, 4, 5), dtype=torch.int32)
    index = torch.tensor(pages, dtype=torch.int64 if wide else torch.int32)
    got = cr.gather_pages(pool, index)
    assert torch.equal(got, _oracle(pool, pages))


def test_gather_pages_strided_pool_runs_on_torch(backend):
    wide = torch.randint(0, 99, (6, 4, 10), dtype=torch.int32)
    pool = wide[..., :3]  # pages are not one contiguous block each
    got = cr.gather_pages(pool, torch.tensor([5, 1]), backend=backend)
    assert torch.equal(got, pool[[5, 1]])


@pytest.mark.parametrize(
    ("pages", "out", "match"),
    [
        ([0, 6], True, r"pages\[1\] = 6 is outside the pool \[0, 6\)"),
        ([0, -1], False, r"pages\[1\] = -1 is outside"),
    ],
)
def test_gather_pages_refuses_bad_pages(pages, out, match):
    pool = torch.zeros(6, 4, 2)
    kwargs = {"out": torch.zeros(len(pages), 4, 2)} if out else {}
    with pytest.raises(cr.LayoutError, match=match):
        cr.gather_pages(pool, torch.tensor(pages), **kwargs)


def test_gather_pages_refuses_wrong_out():
    with pytest.raises(cr.LayoutError, match=r"out must be torch.float32 \(2, 4, 2\)"):
        cr.gather_pages(torch.zeros(6, 4, 2), torch.tensor([0, 1]), out=torch.zeros(3, 4, 2))
