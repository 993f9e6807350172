"""The contract (``_contract.OP_SPECS``) is the torch definition's: one entry per op, whose
arguments are the torch functions', whose allocated outputs and fake results have the shapes and
dtypes the torch functions return, and whose checks refuse bad metadata in one line.
"""

from __future__ import annotations

import inspect

import pytest
import torch
from cpkv_runtime import OP_NAMES, LayoutError, available_backends, plan_layout
from cpkv_runtime._contract import OP_SPECS

TORCH_OPS = available_backends()["torch"].ops
P = 4


def _batch() -> dict[str, object]:
    """Three requests over 6 pool pages of 4 rows; two share a prefix page."""
    req_pages = torch.tensor([[0, 1, -1], [0, 2, 3], [4, -1, -1]], dtype=torch.int32)
    prefix, extend = torch.tensor([4, 4, 0]), torch.tensor([3, 8, 2])
    lay = plan_layout(req_pages, prefix, extend, P, 6)
    loc = torch.tensor([4, 5, 6, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17], dtype=torch.int64)
    req = torch.tensor([0] * 3 + [1] * 8 + [2] * 2, dtype=torch.int32)
    return {"lay": lay, "loc": loc, "req": req, "prefix": prefix, "extend": extend}


def _same(got: object, want: object) -> None:
    if isinstance(want, torch.Tensor):
        assert (got.shape, got.dtype, got.device) == (want.shape, want.dtype, want.device)
        return
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        _same(g, w)


def test_one_entry_per_op_in_contract_order():
    assert tuple(OP_SPECS) == OP_NAMES and set(TORCH_OPS) == set(OP_NAMES)


@pytest.mark.parametrize("op", OP_NAMES)
def test_the_arguments_are_the_torch_definitions(op):
    """The kernel form's arguments are the torch function's, plus the outputs it allocates."""
    spec = OP_SPECS[op]
    torch_params = tuple(inspect.signature(TORCH_OPS[op]).parameters)
    assert torch_params == tuple(p for p in spec.params if p in torch_params)
    assert set(spec.params) - set(torch_params) <= set(spec.allocates)
    assert set(spec.allocates) <= set(spec.mutates)


def test_fake_results_are_shaped_like_the_torch_results():
    d = _batch()
    lay = d["lay"]
    plan_args = (lay.req_pages, d["prefix"], d["extend"], P, 6, 9, True)
    _same(OP_SPECS["plan_slots"].fake(*plan_args), TORCH_OPS["plan_slots"](*plan_args))
    src_args = (d["req"], d["loc"], lay.inverse, P, lay.num_slots)
    _same(OP_SPECS["fill_sources"].fake(*src_args), TORCH_OPS["fill_sources"](*src_args))
    r2t = (lay.req_pages.clamp(min=0).long().unsqueeze(2) * P + torch.arange(P)).view(3, -1)
    lens = [*d["prefix"].tolist(), *d["extend"].tolist()]
    for with_layout in (False, True):
        args = (r2t, torch.arange(3), d["loc"], lens, [0, 2], 3, P, 6, 9, 2, 1, 18, 27, with_layout)
        _same(OP_SPECS["shard_plan"].fake(*args), TORCH_OPS["shard_plan"](*args))


def test_allocated_outputs_are_shaped_like_the_torch_results():
    d = _batch()
    lay = d["lay"]
    kv_pool = torch.zeros((6, P, 5), dtype=torch.float16)
    locs = torch.tensor([[4, -1], [8, 16], [17, 0]], dtype=torch.int64)
    calls = {
        "build_inverse": (lay.slot_table, lay.req_pages, 6),
        "materialize": (kv_pool, lay.slot_page),
        "remap_locs": (locs, torch.tensor([0, 1, 2]), lay.inverse, P),
        "current_page_mask": (lay.req_pages, d["prefix"], d["extend"], P),
    }
    for op, args in calls.items():
        spec = OP_SPECS[op]
        a = spec.bind(args, {})
        ((name, allocate),) = spec.allocates.items()
        assert a[name] is None
        _same(allocate(a), TORCH_OPS[op](*args))


def test_the_checks_name_the_argument():
    spec = OP_SPECS["remap_locs"]
    z = torch.zeros((3, 4), dtype=torch.int32)
    a = spec.bind(
        (z, torch.zeros(2, dtype=torch.int32), torch.zeros((1, 4), dtype=torch.int32), 4), {}
    )
    with pytest.raises(LayoutError, match=r"^req_id must have 3 entries \(one per row of locs\)"):
        spec.check_args(a)
    with pytest.raises(TypeError, match="remap_locs"):
        spec.bind((z,), {})  # req_id, inverse and page_size missing


@pytest.mark.parametrize("op", OP_NAMES)
def test_schemas_parse(op):
    spec = OP_SPECS[op]
    assert spec.cuda_schema().startswith(f"{op}_cuda(") and spec.params
    assert "SymInt" in spec.triton_schema() or "int " not in spec.schema


def test_bind_reads_positional_and_keyword_calls_alike():
    """Every argument positional (the fast path), some by keyword, the output left out: one
    binding; an unknown keyword or a surplus argument is a TypeError naming the op."""
    spec = OP_SPECS["remap_locs"]
    locs, req_id = torch.zeros((3, 4), dtype=torch.int32), torch.zeros(3, dtype=torch.int32)
    inverse, out = torch.zeros((1, 4), dtype=torch.int32), torch.empty((3, 4), dtype=torch.int32)
    whole = spec.bind((locs, req_id, inverse, 4, out), {})
    mixed = spec.bind((locs, req_id), {"inverse": inverse, "page_size": 4, "out": out})
    assert [whole[n] for n in spec.params] == [mixed[n] for n in spec.params]
    assert whole.locs is locs and whole["out"] is out
    assert spec.bind((locs, req_id, inverse, 4), {}).out is None
    for args, kwargs in (((locs, req_id, inverse, 4), {"bogus": 1}), ((*[locs] * 6,), {})):
        with pytest.raises(TypeError, match="remap_locs"):
            spec.bind(args, kwargs)
