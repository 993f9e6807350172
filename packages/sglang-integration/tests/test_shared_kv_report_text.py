"""The dry run's shared-KV text names the limit a batch shape exceeds.

Before, a batch over the scratch read "does not fit: admission defers it", without saying which
region (the gather region, sized from the context length, or the write region, sized by
``--chunked-prefill-size``) or by how much.
"""

from __future__ import annotations

from sglang_cpkv.plugin.shared_kv._capacity import ScratchSpec, capacity_report
from sglang_cpkv.serve._report_shared_kv import render_shared_kv

# GLM-5.1 FP8 at cp 8: 656 B packed latent + the indexer's 128-wide keys, 202,752-token context
SPEC = ScratchSpec.for_model(
    context_len=202752, chunked_prefill_size=65536, shard_size=8, page_size=64,
    latent_bytes=656, index_head_dim=128,
)  # fmt: skip


def _text(batch: tuple[int, int, int]) -> str:
    section = {
        "layout": "layout",
        "backends": {"prefill": "flashmla_kv", "decode": "flashmla_kv", "why": []},
        "memory": {
            "gpu_gib": 141.0,
            "gpu_source": "test",
            "mem_fraction_static": 0.8,
            "weights_bytes_per_rank": None,
        },
        **capacity_report(SPEC, layers=78, index_layers=20, budget_bytes=None, batch=batch),
    }
    return render_shared_kv(section)


def test_a_batch_that_fits_says_so():
    text = _text((8, 65536, 2048))
    assert "does not fit" not in text and text.count("; fits") == 3


def test_too_many_new_tokens_name_the_write_region():
    text = _text((64, 2048, 8192))  # 64 x 8,192 new tokens: 524,288 rows to write
    line = next(ln for ln in text.splitlines() if ln.strip().startswith("cpkv (dedup)"))
    assert (
        "does not fit (writes 524,288 rows, the write region holds 65,536 "
        "(--chunked-prefill-size)): admission defers it"
    ) in line


def test_too_long_a_history_names_the_gather_region():
    text = _text((64, 1_700_000, 64))  # 64 requests, no dedup: 64 copies of a 1.7M prefix
    line = next(ln for ln in text.splitlines() if "cpkv without dedup" in ln)
    assert f"the gather region holds {SPEC.max_prefix_tokens:,}" in line
    assert "does not fit (gathers " in line and "write region" not in line
