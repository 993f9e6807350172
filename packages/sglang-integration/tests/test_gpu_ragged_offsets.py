"""GPU check of the RAGGED offsets with SGLang's own Triton sparse-MLA prefill kernel (H200).

``sglang.kernels.ops.attention.dsa.triton_sparse_mla_prefill.sparse_mla_prefill`` is the kernel
``--dsa-prefill-backend triton_sparse_mla`` runs on the no-prefix RAGGED branch: query rows of
one rank against the whole gathered chunk ``kv [T, 576]``, each row's top-k list being its
request-local positions plus ``topk_indices_offset``. For each CP rank of a batch, the rank's
rows run once with SGLang 0.5.23's offsets and once with the ``ragged-offsets`` hook's, and every
row is compared with the same request run alone (its own KV only, offsets 0). Both offset rules
come from ``sglang_cpkv.plugin.hooks.ragged_offsets`` and are held equal to SGLang's own metadata on
the CPU (``test_upstream_ragged_offsets.py``). GLM-5.1's top-k (2048) covers every sequence
here, so a row lists all its causal positions, padded with -1 to 2048 as the indexer does.

Needs only the kernel module: it imports without sgl-kernel, flashinfer or deep_gemm; the
``sglang`` package imports ``IPython.display`` for notebooks, stood in here when absent.
``CPKV_GPU_RESULTS=<file.json>`` also writes the table as JSON.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
import torch
from sglang_cpkv.plugin.hooks.ragged_offsets import attended_offsets, rank_rows, sglang_offsets

pytestmark = [
    pytest.mark.gpu,
    # why: Triton/sglang deprecations at first compile on the GPU box are not this test's subject
    pytest.mark.filterwarnings("ignore::DeprecationWarning"),
]

#: name -> (cp, extend lengths); none has a prefix (the branch attending over the whole chunk).
CASES = {
    "one_token_first": (2, [1, 6]),
    "two_short_first": (4, [1, 1, 300]),
    "one_token_each": (4, [1, 1, 1, 1]),
    "short_last": (2, [6, 1]),
}
HEADS, TOPK, D_QK, D_V = 32, 2048, 576, 512  # 32 heads: GLM-5.1 at attention TP 2
DEVICE = "cuda"


@pytest.fixture(scope="module")
def sparse_mla_prefill():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU (SGLang's Triton sparse-MLA prefill kernel)")
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from _sglang_kernels import load_sparse_mla_prefill

    return load_sparse_mla_prefill()


def _indices(rows, offsets) -> torch.Tensor:
    """``[rows, TOPK]`` int32: a row at position p lists ``offset + 0..p``, then -1."""
    out = torch.full((len(rows), TOPK), -1, dtype=torch.int32)
    for i, ((_, p), base) in enumerate(zip(rows, offsets, strict=True)):
        out[i, : p + 1] = torch.arange(base, base + p + 1, dtype=torch.int32)
    return out.to(DEVICE)


def _run_case(kernel, cp: int, extend: list[int]) -> list[dict]:
    g = torch.Generator(device=DEVICE).manual_seed(0)
    total = sum(extend)
    kv = (torch.randn(total, D_QK, generator=g, device=DEVICE) * 0.5).to(torch.bfloat16)
    q = torch.randn(total, HEADS, D_QK, generator=g, device=DEVICE).to(torch.bfloat16)
    starts = [sum(extend[:b]) for b in range(len(extend))]
    scale = D_QK**-0.5
    alone = {}
    for b, n in enumerate(extend):  # each request by itself: its own KV, offsets 0
        rows = [(b, p) for p in range(n)]
        s = starts[b]
        out = kernel(q[s : s + n], kv[s : s + n], _indices(rows, [0] * n), scale, D_V)
        alone.update({row: out[i] for i, row in enumerate(rows)})
    zeros, table = [0] * len(extend), []
    for rank in range(cp):
        rows = rank_rows(extend, cp, rank)
        q_rank = q[[starts[b] + p for b, p in rows]]
        for rule, offsets in (
            ("sglang", sglang_offsets(extend, zeros, cp, rank)),
            ("fixed", attended_offsets(extend, zeros, cp, rank)),
        ):
            out = kernel(q_rank, kv, _indices(rows, offsets), scale, D_V)
            diff = [(out[i].float() - alone[row].float()).abs().max().item()
                    for i, row in enumerate(rows)]  # fmt: skip
            equal = [torch.equal(out[i], alone[row]) for i, row in enumerate(rows)]
            table.append({
                "cp": cp, "extend": extend, "rank": rank, "offsets": rule, "rows": len(rows),
                "misplaced_rows": sum(o != a for o, a in zip(
                    offsets, attended_offsets(extend, zeros, cp, rank), strict=True)),
                "rows_equal_to_alone": sum(equal), "max_abs_diff": max(diff, default=0.0),
            })  # fmt: skip
    return table


def _print(table: list[dict]) -> None:
    print(f"\n{'case':>22} rank offsets rows misplaced equal-to-alone max|diff|")
    for r in table:
        case = f"{r['extend']}@cp{r['cp']}"
        counts = f"{r['rows']:>4} {r['misplaced_rows']:>9} {r['rows_equal_to_alone']:>14}"
        print(f"{case:>22} {r['rank']:>4} {r['offsets']:>8} {counts} {r['max_abs_diff']:.3g}")


def test_fixed_offsets_give_every_request_its_batch_size_1_output(sparse_mla_prefill):
    table = [row for cp, extend in CASES.values() for row in _run_case(sparse_mla_prefill, cp,
                                                                        extend)]  # fmt: skip
    _print(table)
    if path := os.environ.get("CPKV_GPU_RESULTS"):
        meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__}
        with open(path, "w") as f:
            json.dump({**meta, "rows": table}, f, indent=1)
    for r in table:
        # bitwise equal to the request alone, except the rows whose offsets point elsewhere
        misplaced = r["misplaced_rows"] if r["offsets"] == "sglang" else 0
        assert r["rows_equal_to_alone"] == r["rows"] - misplaced, r
    misplaced = {(tuple(r["extend"]), r["rank"]) for r in table if r["misplaced_rows"]}
    assert misplaced == {((1, 6), 1), ((1, 1, 300), 0), ((1, 1, 300), 1), ((1, 1, 300), 2),
                         ((1, 1, 300), 3), ((1, 1, 1, 1), 1), ((1, 1, 1, 1), 2),
                         ((1, 1, 1, 1), 3)}  # fmt: skip


def test_kernel_matches_the_cpu_stand_in(sparse_mla_prefill):
    """The torch sparse MLA the CPU tests put in FlashMLA's place computes what this kernel
    computes (same rows, softmax over them, V = the first 512 columns)."""
    import _dsa_stand_ins as stand_ins

    cp, extend = CASES["two_short_first"]
    g = torch.Generator(device=DEVICE).manual_seed(1)
    kv = (torch.randn(sum(extend), D_QK, generator=g, device=DEVICE) * 0.5).to(torch.bfloat16)
    q = torch.randn(sum(extend), HEADS, D_QK, generator=g, device=DEVICE).to(torch.bfloat16)
    rows = rank_rows(extend, cp, 2)
    idx = _indices(rows, attended_offsets(extend, [0] * len(extend), cp, 2))
    q_rank = q[[sum(extend[:b]) + p for b, p in rows]]
    got = sparse_mla_prefill(q_rank, kv, idx, D_QK**-0.5, D_V).float()
    want = stand_ins.SparseMLA()(q_rank, kv, idx[:, None, :], D_QK**-0.5, D_V)[0].float()
    assert (got - want).abs().max().item() < 3e-2  # bf16 output, fp32 accumulation in both
