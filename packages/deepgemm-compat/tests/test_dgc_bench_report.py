"""bench_warmup.py's CPU side: --report merges run folders into the record, --render redraws it.

The warmup runs themselves need a GPU and the wheel (scripts/gpu-suite deepgemm); here the rows
they wrote, as recorded in docs/benchmarks, go back through the same code.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import benchkit
import pytest

BENCH = Path(__file__).parents[1] / "benchmarks" / "bench_warmup.py"
RECORD = Path(__file__).parents[3] / "docs" / "benchmarks"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("dgc_bench_warmup", BENCH)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def recorded() -> list[dict]:
    return benchkit.read_rows(RECORD / "deepgemm-compat.json")


def test_render_reproduces_the_record(bench, tmp_path):
    for name in ("deepgemm-compat.json", "deepgemm-compat.md"):
        shutil.copy(RECORD / name, tmp_path / name)
    bench.main(["--render", "--out", str(tmp_path), "--md", str(tmp_path / "deepgemm-compat.md")])
    for name in ("deepgemm-compat.json", "deepgemm-compat.md"):
        assert (tmp_path / name).read_text() == (RECORD / name).read_text(), name
    assert (tmp_path / "deepgemm-compat.png").stat().st_size > 0


def gpu_results(rows: list[dict], wheel: str) -> dict:
    """The facade tests' DGC_GPU_RESULTS file that produced the record's rows of ``wheel``."""
    mine = [r for r in rows if r.get("sgl_deep_gemm") == wheel and r.get("kind")]
    extra = ("provider", "kind", "gpu_name", "torch", "sgl_deep_gemm", "timestamp", "command",
             "result")  # fmt: skip
    return {
        "gpu": mine[0]["gpu_name"], "torch": mine[0]["torch"], "sgl_deep_gemm": wheel,
        "timestamp": mine[0]["timestamp"],
        "rows": [{k: v for k, v in r.items() if k not in extra} for r in mine],
    }  # fmt: skip


def test_report_turns_run_folders_into_the_record_rows(bench, recorded, tmp_path):
    runs = tmp_path / "runs"
    runs.mkdir()
    warmups = [r for r in recorded if r["op"] == "deepgemm_warmup"]
    for i, r in enumerate(warmups):
        (runs / f"warmup_{r['provider']}_{i}.json").write_text(json.dumps(r))
    for wheel in ("0.1.4.post1", "0.1.5.post1"):
        (runs / f"gpu_results_{wheel}.json").write_text(json.dumps(gpu_results(recorded, wheel)))
    out = tmp_path / "out"
    md = tmp_path / "record.md"
    md.write_text("# deepgemm-compat\n\nProse a person wrote.\n")
    bench.main(["--report", str(runs), "--out", str(out), "--md", str(md)])
    rows = benchkit.read_rows(out / "deepgemm-compat.json")
    # every recorded value comes back; only the hand-added command/result notes are missing
    trimmed = [{k: v for k, v in r.items() if k not in ("command", "result") or "kind" not in r}
               for r in recorded]  # fmt: skip
    assert benchkit.lost_rows(trimmed, rows) == []
    assert len(rows) == len(recorded)
    text = md.read_text()
    assert text.startswith(
        "# deepgemm-compat\n\nProse a person wrote.\n\n<!-- deepgemm-compat plan"
    )
    for key in ("plan", "NVIDIA H200 facade", "NVIDIA H200 warmup indexer.wq_b chunked=65536 cp=8"):
        body = benchkit.read_section(text, f"deepgemm-compat {key}")
        assert body == benchkit.read_section((RECORD / "deepgemm-compat.md").read_text(),
                                             f"deepgemm-compat {key}")  # fmt: skip


def test_report_of_empty_folders_says_so(bench, tmp_path):
    with pytest.raises(SystemExit, match=r"no warmup_\*\.json or gpu_results\*\.json in"):
        bench.main(["--report", str(tmp_path), "--out", str(tmp_path)])
