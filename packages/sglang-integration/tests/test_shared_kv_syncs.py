"""The shared-KV plan reads the device once per forward, and the per-layer lookups never.

Mechanism: tensors on PyTorch's ``meta`` device carry shapes, dtypes and strides but no data, so
every operation that needs a device value on the host fails on them: ``.item()`` / ``int()`` /
``bool()`` (``Tensor.item() cannot be called on meta tensors``), ``.tolist()`` / ``.cpu()``
(``Cannot copy out of meta tensor``), and the ops that size their output from the data
(``nonzero``, boolean-mask indexing, ``unique``, ``repeat_interleave`` without ``output_size``).
Those are the operations that make a CUDA stream sync with the host. A function that runs to the
end on meta inputs therefore read nothing back, and nothing is patched or stood in for: our code
and ``cpkv_runtime``'s real torch backend run. ``test_meta_catches_every_kind_of_host_read``
shows the mechanism fails on each kind of read, and
``test_a_planted_host_read_fails_the_meta_checks`` that the checks below fail with one read
planted in the plan's finish or in the table lookup. What meta cannot see is a *blocking upload*
(host to device): the plan's uploads are non-blocking, and the GPU test
(``test_shared_kv_gpu.py``) counts every sync of the plan under ``torch.cuda.set_sync_debug_mode``.

The plan is split around its one read (``draft_forward``, ``.tolist()`` of the draft's host
numbers, ``finish_forward``), so both halves run here on meta; ``plan_forward`` itself,
run on meta, stops at that one line. The per-layer lookups (what ``CpkvSharedKVPool``'s
``translate_loc_to_scratch``, ``_translate_loc_cached``, ``cpkv_persist_rows``, the indexer's
``_scratch_pages``/``write_targets`` and the ``_prefetch_layer`` pack call) then run on the plan
built on meta.
"""

from __future__ import annotations

import traceback

import cpkv_runtime as cr
import pytest
import torch
from _skv_shapes import SHAPES, Batch, P, Req, place
from hypothesis import given, settings
from hypothesis import strategies as st
from sglang_cpkv.plugin.shared_kv import (
    ForwardScratch,
    ScratchGeometry,
    current_locs,
    draft_forward,
    finish_forward,
    interleave_kept_rows,
    pack_launcher,
    plan_forward,
)
from sglang_cpkv.plugin.shared_kv import _forward as forward_module

META = torch.device("meta")


def _geometry(batch: Batch, rank: int) -> ScratchGeometry:
    n = batch.shard_size
    history = sum(-(-p // P) for p in batch.prefix)
    return ScratchGeometry(P, n, rank, n * history, sum(len(w) for w in batch.writers))


def _kept(batch: Batch, rank: int) -> list[int] | None:
    if batch.num_tokens < batch.shard_size:
        return None
    return interleave_kept_rows(batch.extend, batch.shard_size, rank)


def _num_pages(batch: Batch) -> int:
    return batch.shard_size * (batch.local_pages + 1)


def _pages(batch: Batch) -> torch.Tensor:
    """(B, M) each request's logical pages, -1 past them, from the batch description."""
    width = max(len(p) for p in batch.pages)
    return torch.tensor([[*p, *[-1] * (width - len(p))] for p in batch.pages], dtype=torch.int32)


def _plan_on(device: torch.device, batch: Batch, rank: int, host_numbers=None):
    """The pool's per-forward path (``CpkvSharedKVPool._begin`` without ``out_cache_loc``):
    ``current_locs``, the draft; then the finish from ``host_numbers`` (read here from the
    draft when None)."""
    r2t = batch.req_to_token().to(device)
    idx = torch.arange(len(batch.pages)).to(device)
    oc = current_locs(r2t, idx, batch.prefix, batch.seq)
    geo = _geometry(batch, rank)
    draft = draft_forward(r2t, idx, batch.prefix, batch.extend, oc, geo, _num_pages(batch),
                          _kept(batch, rank))  # fmt: skip
    if host_numbers is None:
        host_numbers = draft.outputs[0].tolist()
    return draft, finish_forward(draft, host_numbers, geo), r2t


def _tensors(plan: ForwardScratch) -> dict[str, torch.Tensor]:
    placement, layout = plan.placement, plan.placement.layout
    names = ("out_cache_loc", "token_req", "cur_rows", "local_rows")
    out = {name: getattr(plan, name) for name in names}
    out |= {f"placement.{n}": getattr(placement, n) for n in ("slot_scratch", "send_pages")}
    for name in ("req_pages", "prefix_lens", "extend_lens", "slot_table", "slot_page", "inverse"):
        out[f"layout.{name}"] = getattr(layout, name)
    out["table_req"] = plan.table_req
    return out


def _same_shapes(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for name, t in want.items():
        assert (got[name].shape, got[name].dtype) == (t.shape, t.dtype), name


@pytest.mark.parametrize(
    "read",
    [
        lambda t: t.sum().item(),
        lambda t: int(t[0]),
        lambda t: bool((t > 0).any()),
        lambda t: t.tolist(),
        lambda t: t.cpu(),
        lambda t: torch.nonzero(t),
        lambda t: t[t > 0],
        lambda t: torch.unique(t),
        lambda t: torch.repeat_interleave(t, t),
    ],
    ids=["item", "int", "bool", "tolist", "cpu", "nonzero", "mask", "unique", "repeat"],
)
def test_meta_catches_every_kind_of_host_read(read):
    with pytest.raises((RuntimeError, NotImplementedError)):
        read(torch.arange(4, device=META))


def _plan_halves_on_meta(batch: Batch, cp: int) -> None:
    """Both halves of the plan on meta, from the host numbers of the same plan on CPU."""
    for rank in range(cp):
        cpu_draft, cpu_plan, _ = _plan_on(torch.device("cpu"), batch, rank)
        numbers = cpu_draft.outputs[0].tolist()
        assert len(numbers) == 3 + cp  # status, used slots, a count per rank, block: one read
        meta_draft, meta_plan, _ = _plan_on(META, batch, rank, numbers)  # no read in either half
        assert meta_draft.outputs[0].shape == (3 + cp,)
        _same_shapes(_tensors(meta_plan), _tensors(cpu_plan))
        assert meta_plan.placement.block == cpu_plan.placement.block
        assert meta_plan.stage_after_gather is cpu_plan.stage_after_gather


@pytest.mark.parametrize("cp", [2, 4])
@pytest.mark.parametrize("name", list(SHAPES))
def test_plan_reads_the_device_once(name, cp):
    """Both halves of the plan run on meta; the whole plan on meta stops at its one read."""
    _plan_halves_on_meta(place(name, SHAPES[name], cp), cp)


def test_whole_plan_on_meta_stops_at_its_one_read():
    batch = place("two", SHAPES["two_prefix_chains"], 2)
    r2t = batch.req_to_token().to(META)
    idx = torch.arange(len(batch.pages), device=META)
    oc = current_locs(r2t, idx, batch.prefix, batch.seq)
    with pytest.raises(NotImplementedError, match="meta") as info:
        plan_forward(r2t, idx, batch.prefix, batch.seq, oc, _geometry(batch, 0), _num_pages(batch))
    frames = [f for f in traceback.extract_tb(info.tb) if f.filename == forward_module.__file__]
    assert [f.name for f in frames] == ["plan_forward"]
    assert "outputs[0].tolist()" in frames[-1].line


def _per_layer_lookups_on_meta(batch: Batch, cp: int) -> None:
    """Every lookup a layer makes, on the plan built on meta (each computed, not cached). The
    tables have one row per request of the plan (``table_req``: the kept rows when the batch
    is split), as SGLang's DSA backend builds them (``page_table[bs_idx]``)."""
    width = max(batch.seq)
    for rank in range(cp):
        cpu_draft, cpu_plan, cpu_r2t = _plan_on(torch.device("cpu"), batch, rank)
        _, plan, r2t = _plan_on(META, batch, rank, cpu_draft.outputs[0].tolist())
        geo = _geometry(batch, rank)
        rows = cpu_plan.table_req.tolist()
        table, cpu_table = r2t[rows, :width], cpu_r2t[rows, :width]
        plan._cache.clear()
        got, want = plan.translate(table), cpu_plan.translate(cpu_table)
        assert (got.shape, got.dtype) == (want.shape, want.dtype)
        plan._cache.clear()
        got = plan.scratch_pages(table[:, ::P] // P)
        want = cpu_plan.scratch_pages(cpu_table[:, ::P] // P)
        assert (got.shape, got.dtype) == (want.shape, want.dtype)
        assert plan.write_rows(plan.out_cache_loc) is plan.cur_rows
        other = plan.out_cache_loc.clone()
        assert plan.persist_rows(other, geo).shape == other.shape
        if len(batch.pages) == 1:
            plan._cache.clear()
            assert plan.translate(other).shape == other.shape
        # the pack of _prefetch_layer: the resolved page copy on the plan's send pages
        pack = pack_launcher(META)
        pool = torch.empty(batch.local_pages + 1, P, 656, dtype=torch.uint8, device=META)
        send = torch.empty(plan.placement.block, P, 656, dtype=torch.uint8, device=META)
        pack(pool, plan.placement.send_pages, send)


@pytest.mark.parametrize("cp", [2, 4])
@pytest.mark.parametrize("name", list(SHAPES))
def test_per_layer_lookups_read_nothing(name, cp):
    _per_layer_lookups_on_meta(place(name, SHAPES[name], cp), cp)


def _read_back(t: torch.Tensor) -> None:
    t.sum().item()  # the planted host read


def _plant_in_finish_forward(monkeypatch) -> None:
    real = forward_module.ScratchPlacement  # built inside finish_forward, after its checks
    monkeypatch.setattr(
        forward_module, "ScratchPlacement", lambda inv, *a: (_read_back(inv), real(inv, *a))[1]
    )


def _plant_in_translate(monkeypatch) -> None:
    real = forward_module.to_scratch  # called by ForwardScratch.translate
    monkeypatch.setattr(forward_module, "to_scratch", lambda d, *a: (d.tolist(), real(d, *a))[1])


@pytest.mark.parametrize(
    ("plant", "check"),
    [(_plant_in_finish_forward, _plan_halves_on_meta),
     (_plant_in_translate, _per_layer_lookups_on_meta)],
    ids=["item_in_finish_forward", "tolist_in_translate"],
)  # fmt: skip
def test_a_planted_host_read_fails_the_meta_checks(plant, check, monkeypatch):
    """Negative control on the real path: one ``.item()`` / ``.tolist()`` planted inside the
    plan's finish or the table lookup makes the meta check above fail (on CPU it runs fine)."""
    batch = place("two", SHAPES["two_prefix_chains"], 2)
    check(batch, 2)  # passes as shipped
    plant(monkeypatch)
    with pytest.raises((RuntimeError, NotImplementedError), match="meta"):
        check(batch, 2)


@pytest.mark.parametrize("name", list(SHAPES))
def test_the_static_plan_keeps_plan_layouts_slots(name):
    """The placed layout is ``cpkv_runtime.plan_layout``'s for the batch, tensor for tensor."""
    batch = place(name, SHAPES[name], 2)
    _, plan, _ = _plan_on(torch.device("cpu"), batch, 0)
    want = cr.plan_layout(_pages(batch), batch.prefix, batch.extend, P, _num_pages(batch))
    got = plan.placement.layout
    assert not got.padded and got.num_tokens == want.num_tokens
    for field in ("req_pages", "prefix_lens", "extend_lens", "seq_lens", "pages_used",
                  "slot_table", "slot_page", "slot_owner", "inverse"):  # fmt: skip
        assert torch.equal(getattr(got, field), getattr(want, field)), field


def _page_twice(pages: torch.Tensor, r2t: torch.Tensor) -> None:
    pages[1, 1] = pages[1, 0]
    r2t[1, P : 2 * P] = r2t[1, :P]  # request 1's second page is its first page again


def _page_outside(pages: torch.Tensor, r2t: torch.Tensor) -> None:
    pages[0, 1] = 10**6
    r2t[0, P : 2 * P] = 10**6 * P + torch.arange(P, dtype=r2t.dtype)


@pytest.mark.parametrize(
    ("spoil", "what"), [(_page_twice, "twice"), (_page_outside, "out of range")]
)
def test_bad_pages_raise_plan_layouts_error(spoil, what):
    """Invalid pages surface at the plan's one read, with ``plan_layout``'s own message."""
    batch = place("bad", [Req("A", 3 * P, 5), Req("B", 2 * P, 70)], 2)
    pages, r2t = _pages(batch), batch.req_to_token()
    spoil(pages, r2t)
    with pytest.raises(cr.LayoutError) as want:
        cr.plan_layout(pages, batch.prefix, batch.extend, P, _num_pages(batch))
    assert what in str(want.value)
    with pytest.raises(cr.LayoutError) as got:
        plan_forward(r2t, torch.arange(2), batch.prefix, batch.seq, batch.out_cache_loc(),
                     _geometry(batch, 0), _num_pages(batch))  # fmt: skip
    assert str(got.value) == str(want.value)


def test_negative_lengths_are_refused_before_any_device_work():
    batch = place("neg", [Req("A", 2 * P, 5), Req("B", P, 3)], 2)
    oc = batch.out_cache_loc()[:2]
    r2t = batch.req_to_token().to(META)  # any device work on it would fail on its first read
    with pytest.raises(cr.LayoutError, match=r"negative lengths.*\[5, -3\].*fix"):
        plan_forward(r2t, torch.arange(2, device=META), [2 * P, P], [2 * P + 5, P - 3], oc,
                     _geometry(batch, 0), _num_pages(batch))  # fmt: skip


@st.composite
def _batches(draw):
    cp = draw(st.sampled_from([2, 3, 4]))
    reqs = [
        Req(
            draw(st.sampled_from([None, "A", "B"])),
            draw(st.integers(0, 3 * P + 2)),
            draw(st.integers(1, 2 * P + 3)),
        )
        for _ in range(draw(st.integers(1, 5)))
    ]
    return place("random", reqs, cp), draw(st.integers(0, cp - 1))


@settings(max_examples=30, deadline=None)
@given(case=_batches())
def test_random_plans_read_once_and_keep_plan_layouts_slots(case):
    batch, rank = case
    cpu_draft, cpu_plan, _ = _plan_on(torch.device("cpu"), batch, rank)
    _, meta_plan, _ = _plan_on(META, batch, rank, cpu_draft.outputs[0].tolist())
    _same_shapes(_tensors(meta_plan), _tensors(cpu_plan))
    want = cr.plan_layout(_pages(batch), batch.prefix, batch.extend, P, _num_pages(batch))
    assert torch.equal(cpu_plan.placement.layout.slot_page, want.slot_page)
    assert torch.equal(cpu_plan.placement.layout.inverse, want.inverse)
