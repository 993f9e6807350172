"""The shared-KV hook specs against the installed sglang 0.5.23 (signatures, lazy class)."""

from __future__ import annotations

import _sglang_env
from sglang_cpkv.plugin._framework import check_target
from sglang_cpkv.plugin.table import SHARED_KV_SPECS

pytestmark = _sglang_env.SGLANG_IMPORT_WARNINGS


def test_every_shared_kv_spec_matches_installed_sglang():
    for spec in SHARED_KV_SPECS:
        check_target(spec)


def test_pool_class_subclasses_sglang_pool_and_overrides_the_map():
    from sglang.srt.mem_cache import page_interleave_pool as pip

    spec = next(s for s in SHARED_KV_SPECS if s.name == "shared-kv-pool")
    cls = spec.hook()
    assert spec.lazy and issubclass(cls, pip.PageInterleaveDSATokenToKVPool)
    for name in (
        "begin_shard_extend", "translate_loc_to_scratch", "_translate_loc_cached",
        "_get_write_plan", "_prefetch_layer", "set_mla_kv_buffer", "_create_index_key_cache",
    ):  # fmt: skip
        assert name in vars(cls), name
    from sglang_cpkv.plugin.shared_kv._pool import CpkvIndexKeyCache

    assert issubclass(CpkvIndexKeyCache, pip._PageInterleaveIndexKeyCache)
    assert {"_scratch_pages", "write_targets"} <= set(vars(CpkvIndexKeyCache))
