"""One definition per op: the Triton custom ops and the CUDA extension's declarations are the
contract's (``cpkv_runtime._contract.OP_SPECS``), and each launcher takes its arguments.

The C++ declarations are read from ``csrc/binding*.cpp`` as text, so this runs without a GPU or a
build: a C++ schema that drifts from the contract fails here before it fails on the H200.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path

import pytest
import torch
from cpkv_kernels import ops
from cpkv_kernels.ops import plan_slots
from cpkv_runtime import NO_TRITON, OP_NAMES
from cpkv_runtime._contract import OP_SPECS

CSRC = Path(ops.__file__).parents[1] / "csrc"
TRITON = [op for op in OP_NAMES if op not in NO_TRITON]


def cpp_declarations(texts: list[str]) -> dict[str, str]:
    """``m.def("...")`` of C++ sources, adjacent string literals joined, by op."""
    found = {}
    for text in texts:
        for call in re.findall(r"m\.def\(\s*((?:\"[^\"]*\"\s*)+)\)", text):
            schema = "".join(re.findall(r"\"([^\"]*)\"", call))
            found[schema.split("(")[0].removesuffix("_cuda")] = schema
    return found


def sources() -> list[str]:
    return [path.read_text() for path in sorted(CSRC.glob("binding*.cpp"))]


def test_the_cuda_extension_declares_the_contracts_schemas():
    assert cpp_declarations(sources()) == {op: OP_SPECS[op].cuda_schema() for op in OP_NAMES}


def test_a_drifted_declaration_is_seen():
    drifted = [text.replace("Tensor slot_page,", "Tensor page,", 1) for text in sources()]
    got = cpp_declarations(drifted)
    assert got["materialize"] != OP_SPECS["materialize"].cuda_schema()


@pytest.mark.parametrize("op", TRITON)
def test_the_triton_op_is_registered_from_the_contract(op):
    schema = str(getattr(torch.ops.cpkv, f"{op}_triton").default._schema)
    want = plan_slots.SCHEMA if op == "plan_slots" else OP_SPECS[op].triton_schema()
    assert schema == f"cpkv::{op}_triton{want}"


@pytest.mark.parametrize("op", TRITON)
def test_each_launcher_takes_the_schemas_arguments(op):
    module = getattr(ops, op)
    launcher = getattr(module, f"launch_{op}")
    names = re.findall(r"(\w+)(?:,|\))", plan_slots.SCHEMA.split(" ->")[0])
    params = names if op == "plan_slots" else OP_SPECS[op].params
    inspect.signature(launcher).bind(*params)  # takes them all, positionally
    fixed = [p.name for p in inspect.signature(launcher).parameters.values() if p.kind == 1]
    assert list(params[: len(fixed)]) == fixed  # under the schema's names


@pytest.mark.parametrize("impl", ["triton", "cuda"])
def test_checked_wrappers_trace_whole_under_torch_compile(impl: str):
    """Binding, checks, allocation and argument conversion of a checked op trace under
    ``torch.compile(fullgraph=True)``: on CPU, over a kernel that only fills its output. The GPU
    suite compiles the real ops under the GPU box's torch (2.11, where an ``Args`` filled through
    ``__dict__.update`` once failed to trace); this runs the same trace under CI's torch."""
    from cpkv_kernels._api import _wrap

    def fill_out(locs, req_id, inverse, page_size, out):
        out.fill_(page_size)

    remap = _wrap(OP_SPECS["remap_locs"], fill_out, impl)
    locs = torch.arange(12, dtype=torch.int64).reshape(3, 4)
    req_id = torch.zeros(3, dtype=torch.int64)
    inverse = torch.zeros((1, 4), dtype=torch.int32)
    torch._dynamo.reset()
    compiled = torch.compile(lambda *a: remap(*a), fullgraph=True, backend="eager")
    got = compiled(locs, req_id, inverse, 16)
    assert got.dtype == torch.int32 and got.shape == locs.shape and bool((got == 16).all())


def _length_dtypes_reaching(impl: str, prefix_dtype, extend_dtype, converter=None):
    """The dtypes ``current_page_mask``'s kernel receives for lengths of the given dtypes."""
    import cpkv_kernels._api as api

    seen = []

    def kernel(req_pages, prefix_lens, extend_lens, page_size, mask):
        seen.append((prefix_lens.dtype, extend_lens.dtype))

    mp = pytest.MonkeyPatch()
    if converter is not None:
        mp.setattr(api, "_converter", converter)
    try:
        op = api._wrap(OP_SPECS["current_page_mask"], kernel, impl)
    finally:
        mp.undo()
    op(torch.zeros((2, 3), dtype=torch.int32), torch.tensor([64, 0], dtype=prefix_dtype),
       torch.tensor([5, 70], dtype=extend_dtype), 64)  # fmt: skip
    return seen[0]


@pytest.mark.parametrize("impl", ["triton", "cuda"])
@pytest.mark.parametrize(
    "prefix_dtype, extend_dtype",
    [(torch.int64, torch.int32), (torch.int32, torch.int64), (torch.int16, torch.int64),
     (torch.int64, torch.int16), (torch.int32, torch.int32)],
)  # fmt: skip
def test_both_lengths_reach_the_kernel_in_one_dtype(impl, prefix_dtype, extend_dtype):
    """The kernels read prefix_lens and extend_lens with one index type (the C++ ops refuse a
    mixed pair): the wrapper converts both to ``lengths_dtype`` of the prefix, the rule the
    runtime's bare ``plan_slots`` call applies too (``_layout_static._raw_index``)."""
    from cpkv_runtime._contract import lengths_dtype

    want = lengths_dtype(torch.tensor([0], dtype=prefix_dtype))
    assert _length_dtypes_reaching(impl, prefix_dtype, extend_dtype) == (want, want)


def test_a_converter_that_narrows_the_lengths_apart_fails_the_check():
    """Mutation: the earlier converter cast a length outside the prefix's dtype to int32, so an
    int64 prefix with an int32 extend reached the kernel as a mixed pair."""
    import cpkv_kernels._api as api

    real = api._converter
    index = api._index

    def narrowing(op, name, impl):
        if name in ("prefix_lens", "extend_lens"):
            return lambda t, a: index(
                t, (a.prefix_lens.dtype,) if a.prefix_lens.dtype in api._WIDE else (torch.int32,)
            )
        return real(op, name, impl)

    got = _length_dtypes_reaching("cuda", torch.int64, torch.int16, narrowing)
    assert got[0] != got[1]
