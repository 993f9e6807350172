"""The committed benchmark pages show what their JSON records, and no CUDA-graph time.

``shared-kv-pool.md`` and ``shared-kv-layer.md`` time paths that SGLang runs eager under KV
sharding (``handle_kv_cache_sharding`` turns prefill CUDA graphs off), so their generated tables
carry no replay column; the replay rows an earlier run recorded stay in the JSON. Rendering
needs no GPU and measures nothing.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import benchkit
import pytest

ROOT = Path(__file__).resolve().parents[3]
BENCH_DIR = ROOT / "packages" / "sglang-integration" / "benchmarks"
PAGES = ROOT / "docs" / "benchmarks"


@pytest.fixture
def bench_path():
    sys.path.insert(0, str(BENCH_DIR))
    try:
        yield
    finally:
        sys.path.remove(str(BENCH_DIR))


def _assert_page_shows(page: Path, sections: dict[str, str]) -> None:
    doc = page.read_text()
    assert sections, f"{page.name}: nothing rendered"
    for key, body in sections.items():
        shown = benchkit.read_section(doc, key)
        assert shown == body.strip(), f"{page.name} section {key!r} is stale: run --render"
        assert "graph" not in shown.lower(), f"{page.name} section {key!r} shows a graph time"


@pytest.mark.usefixtures("bench_path")
def test_shared_kv_pool_page_matches_its_record():
    report = importlib.import_module("_pool_report")
    rows = benchkit.read_rows(PAGES / "shared-kv-pool.json")
    assert any(r["mode"] == "graph" for r in rows), "the recorded replay rows are kept"
    _assert_page_shows(PAGES / "shared-kv-pool.md", report.sections(rows))


@pytest.mark.usefixtures("bench_path")
def test_shared_kv_layer_page_matches_its_record():
    bench = importlib.import_module("bench_shared_kv_layer")
    rows, summaries, env = bench.read_record(PAGES / "shared-kv-layer.json")
    assert any(r.mode == "graph" for r in rows), "the recorded replay rows are kept"
    _assert_page_shows(PAGES / "shared-kv-layer.md", bench.sections(summaries, env))
