"""The backend suite's CPU stand-ins that touch rows, held bitwise equal to what they replace.

``_skv_backend_stand_ins`` replaces SGLang's Triton paged dequantisation (too slow in Triton's
interpreter to run per layer) by a torch function with the kernel's contract, and reads packed
fp8 rows for the FlashMLA stand-in with its own dequantiser. Both are compared here with SGLang's
own kernel, run by Triton's interpreter, on a packed cache of random rows, over a table with
repeated, reversed and page-boundary rows: the RoPE part (copied, where the suite's identity
marks live) bitwise, the dequantised part within one bf16 step (the interpreter casts float32 to
bf16 by truncation, a GPU and torch round to nearest; the rows read are the same either way).
"""

from __future__ import annotations

import _sglang_env
import pytest
import torch

pytestmark = _sglang_env.SGLANG_IMPORT_WARNINGS


@pytest.fixture(scope="module")
def packed() -> torch.Tensor:
    """[130, 656] packed fp8 DSA rows: 512 fp8, four fp32 scales, 64 bf16 (RoPE)."""
    g = torch.Generator().manual_seed(7)
    nope = (torch.randn(130, 512, generator=g) * 40).to(torch.float8_e4m3fn).view(torch.uint8)
    scale = (torch.rand(130, 4, generator=g) + 0.01).view(torch.uint8)
    rope = torch.randn(130, 64, generator=g).bfloat16().view(torch.uint8)
    return torch.cat([nope, scale, rope], dim=1).view(torch.float8_e4m3fn)


TABLE = [5, 5, 129, 0, 63, 64, 65, 128, 127, 1, 64, 5]


def _interpreted_dequant(cache: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    import sglang.kernels.ops.attention.dsa.dequant_k_cache as dequant
    from triton.runtime.interpreter import InterpretedFunction

    kernel = dequant._dequantize_k_cache_paged_kernel
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dequant, "_dequantize_k_cache_paged_kernel",
                   InterpretedFunction(getattr(kernel, "fn", kernel)))  # fmt: skip
        return dequant.dequantize_k_cache_paged_dsa(cache[:, None, :], table)


def _same_rows(got: torch.Tensor, want: torch.Tensor) -> None:
    got, want = got.reshape(-1, 576), want.reshape(-1, 576)
    assert torch.equal(got[:, 512:], want[:, 512:])  # RoPE: copied bytes
    step = want[:, :512].float().abs() * 2**-7 + 1e-30  # one bf16 step at that magnitude
    assert bool(((got[:, :512].float() - want[:, :512].float()).abs() <= step).all())


def test_paged_dequantizer_stand_in_equals_sglangs_kernel(packed):
    import sglang.kernels.ops.attention.dsa.dequant_k_cache as dequant
    from _dsa_stand_ins import paged_dequantizer

    table = torch.tensor(TABLE, dtype=torch.int32)
    want = _interpreted_dequant(packed, table)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(dequant, "_dequantize_k_cache_paged_kernel", paged_dequantizer())
        got = dequant.dequantize_k_cache_paged_dsa(packed[:, None, :], table)
    _same_rows(got, want)
    # and a wrong table is told apart: row 0 of the table is not row 2
    with pytest.raises(AssertionError):
        _same_rows(got[[2]], want[[0]])


def test_flashmla_kv_row_reader_equals_sglangs_kernel(packed):
    from _skv_backend_stand_ins import dequantize_packed

    table = torch.tensor(TABLE, dtype=torch.int32)
    _same_rows(dequantize_packed(packed[table.long()]), _interpreted_dequant(packed, table))


def test_on_the_gpu_flashmlas_sparse_prefill_gets_a_top_k_in_blocks_of_128():
    """On an H100 the suite's flashmla_sparse configurations (top-k 32) stopped at FlashMLA's
    ``topk % 128 == 0`` assertion; the CPU stand-in has no such rule and keeps the small top-k."""
    import _skv_backend_cases as cases

    block = cases.FLASHMLA_SPARSE_TOPK_BLOCK
    sparse = [c for c in cases.CONFIGS if c.backend == "flashmla_sparse"]
    assert sparse and all(c.index_topk % block for c in sparse)  # the CPU top-k, selective
    for config in cases.CONFIGS:
        gpu, cpu = cases.on_device(config, "cuda"), cases.on_device(config, "cpu")
        assert cpu == config
        if config.backend == "flashmla_sparse":
            assert gpu.index_topk % block == 0 and gpu.index_topk >= config.index_topk
            assert gpu.index_topk - config.index_topk < block
            assert gpu.name == config.name and gpu.kv_dtype == config.kv_dtype
        else:
            assert gpu == config


def test_on_the_gpu_flashmlas_kernels_are_recorded(packed):
    """On an H100 the first flashmla_sparse forward stopped at ``forward_extend did not reach
    sparse MLA``: on the GPU only SGLang's Triton kernel was recorded, FlashMLA's ran unseen. Its
    two kernels (here fakes standing for the wheel's) must run and be recorded like the Triton
    one, called as SGLang's DSA backend calls them."""
    import sys
    import types

    import _skv_backend_stand_ins as stand_ins

    name = "sglang.kernels.ops.attention.flash_mla_interface"
    ran: list[str] = []
    fake = types.ModuleType(name)

    def flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None):
        ran.append("flash_mla_sparse_fwd")
        return q[..., :d_v], None, None

    def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v,
                               tile_scheduler_metadata, num_splits=None, softmax_scale=None,
                               causal=False, is_fp8_kvcache=False, indices=None,
                               kv_format=None):  # fmt: skip
        ran.append("flash_mla_with_kvcache")
        return q[..., :head_dim_v], None

    fake.flash_mla_sparse_fwd, fake.flash_mla_with_kvcache = (
        flash_mla_sparse_fwd,
        flash_mla_with_kvcache,
    )
    q = torch.zeros(3, 8, 576, dtype=torch.bfloat16)
    kv = stand_ins.dequantize_packed(packed[:128])
    idx = torch.tensor([[5, 0, -1], [63, 64, 127], [1, -1, -1]], dtype=torch.int32)
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, name, fake)
        with stand_ins.installed(mp, torch.device("cuda")) as calls:
            from sglang.kernels.ops.attention.flash_mla_interface import (
                flash_mla_sparse_fwd as sparse,
            )
            from sglang.kernels.ops.attention.flash_mla_interface import (
                flash_mla_with_kvcache as paged,
            )

            lengths = torch.tensor([2, 3, 1], dtype=torch.int32)
            sparse(q=q, kv=kv[:, None], indices=idx[:, None], sm_scale=0.1, d_v=512,
                   attn_sink=None, topk_length=lengths)  # fmt: skip
            paged(q=q[:, None], k_cache=packed[:128].view(2, 64, 1, -1),
                  cache_seqlens=torch.tensor([128] * 3), head_dim_v=512,
                  tile_scheduler_metadata=None, num_splits=None, softmax_scale=0.1,
                  indices=idx[:, None, None], block_table=torch.empty(3, 0, dtype=torch.int32),
                  is_fp8_kvcache=True, kv_format="v32")  # fmt: skip
    assert ran == ["flash_mla_sparse_fwd", "flash_mla_with_kvcache"]  # the real kernels ran
    assert len(calls.calls) == 2  # and each was recorded
    (rows_s, idx_s), (rows_p, idx_p) = calls.calls
    assert torch.equal(rows_s, kv) and torch.equal(idx_s, idx)
    assert torch.equal(rows_p, kv) and torch.equal(idx_p, idx)


def test_flashmla_kv_schedule_stand_in_holds_flashmlas_num_splits_rule():
    """FlashMLA's ``sparse_decode_fwd`` asserts ``num_splits must have shape (b+1)`` for the
    kernel's batch ``b`` (q's rows). The CPU stand-ins of ``get_mla_metadata`` and
    ``flash_mla_with_kvcache`` hold the same rule: a schedule planned for 62 rows (a CP rank's
    padded shard) runs a 62-row q and refuses a 61-row one (its logical rows), as on an H100."""
    import _skv_backend_stand_ins as stand_ins

    _, splits = stand_ins.mla_schedule(cache_seqlens=torch.ones(62, dtype=torch.int32))
    assert splits.shape == (63,)
    stand_ins.check_num_splits(splits, torch.zeros(62, 1, 64, 576))
    with pytest.raises(RuntimeError, match=r"num_splits must have shape \(b\+1\)"):
        stand_ins.check_num_splits(splits, torch.zeros(61, 1, 64, 576))
    with pytest.raises(RuntimeError, match=r"num_splits must have shape \(b\+1\)"):
        stand_ins.check_num_splits(None, torch.zeros(62, 1, 64, 576))


@pytest.mark.slow
def test_flashmla_kv_runs_every_forward_on_a_cp_ranks_padded_rows(tmp_path):
    """On an H100 flashmla_kv/fp8 agreed on step 0 (an even split) and then failed on both ranks
    at FlashMLA's ``num_splits must have shape (b+1)``: SGLang plans flashmla_kv's schedule for
    the CP rank's physical rows (its shard padded to ``per_rank_actual_token``, which the model
    is handed), while the suite handed attention the logical rows alone. With the stand-ins
    holding FlashMLA's rule, a CPU run at CP 2 (step 1 splits 121 tokens 61/60, padded to 62)
    must run and agree on every forward (about a minute)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    worker = Path(__file__).parent / "_skv_backend_worker.py"
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(worker), str(tmp_path), "--world", "2", "--cp", "2",
                           "--configs", "flashmla_kv/fp8", "--no-mutations"],
                          env=env, capture_output=True, text=True, timeout=900)  # fmt: skip
    assert (tmp_path / "summary.json").exists(), (proc.returncode, proc.stderr[-2000:])
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["errors"] == [], (summary["config_errors"], proc.stderr[-2000:])
    assert summary["failures"] == 0
    row = summary["cases"]["cp2 flashmla_kv/fp8"]
    assert row["ok"] == row["forwards"] == 2 * 8  # two ranks, four steps and their drafts


def test_a_configurations_error_is_recorded_by_name_and_ends_the_rank(tmp_path):
    """An exception inside one configuration is recorded as that configuration's error (its
    traceback, listed by name in the summary) and still ends the rank's loop: a rank that went
    on alone could pair its next collectives with a peer still inside the failed configuration.
    The run counts as failed."""
    import json

    import _skv_backend_worker as worker

    result = {"rank": 0, "error": None, "failures": [], "runs": [], "mutations": {},
              "seconds": {}, "config_errors": {}}  # fmt: skip
    ran = []
    with pytest.raises(RuntimeError, match="num_splits"):
        for tag in ("cp2 a", "cp2 b", "cp2 c"):
            with worker.configuration(result, tag):
                if tag == "cp2 b":
                    raise RuntimeError("num_splits must have shape (b+1)")  # planted
                ran.append(tag)
                result["runs"].append({"tag": f"{tag} step 0", "ok": True, "rows": 1,
                                       "reads": 1, "method": "PAGED", "kv_read": "x"})  # fmt: skip
    assert ran == ["cp2 a"]
    assert list(result["config_errors"]) == ["cp2 b"]
    assert "num_splits must have shape" in result["config_errors"]["cp2 b"]
    result["error"] = "RuntimeError: num_splits must have shape (b+1)"  # what gloo_rank records
    (tmp_path / "rank0.json").write_text(json.dumps(result))
    summary = worker.write_summary(tmp_path, "cpu")
    assert len(summary["errors"]) == 1  # a failed run
    assert "num_splits" in summary["config_errors"]["rank 0 cp2 b"]
    assert set(summary["cases"]) == {"cp2 a"}
    result["runs"].append({"tag": "cp2 b step 0", "ok": True, "rows": 1, "reads": 1,
                           "method": "PAGED", "kv_read": "x"})  # fmt: skip
    (tmp_path / "rank0.json").write_text(json.dumps(result))
    worker.write_summary(tmp_path, "cpu")
    table = (tmp_path / "summary.md").read_text()
    assert "| cp2 b | [0] | 1/1, then an error |" in table and "| cp2 a | [0] | 1/1 |" in table
