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
