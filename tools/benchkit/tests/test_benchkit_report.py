"""Report.publish: measure, merge a second device, then re-render from the JSON alone."""

from __future__ import annotations

import json

import pytest
from benchkit import Figure, Panel, Report, lines_from_rows, markdown_table, read_section


def _sections(rows):
    out = {}
    for dev in sorted({r["gpu_name"] or "cpu" for r in rows}):
        mine = [r for r in rows if (r["gpu_name"] or "cpu") == dev]
        out[f"demo {dev}"] = markdown_table(
            ["case", "p50"], [[r["case"], f"{r['p50']:.3f}"] for r in mine], "lr"
        )
    return out


REPORT = Report(
    name="demo",
    figure=lambda rows: Figure(
        [Panel("t", "n", "us", lines_from_rows(rows, x="n", label=lambda r: r["provider"]))]
    ),
    sections=_sections,
)


def rows(gpu, scale):
    return [
        {"op": "sort", "case": f"n={n}", "provider": "py", "n": n, "p50": n * scale,
         "p20": n * scale, "p80": n * scale, "unit": "us", "gpu_name": gpu}
        for n in (10, 100)
    ]  # fmt: skip


def test_publish_merge_and_rerender(tmp_path):
    md = tmp_path / "demo.md"
    hand = "# Demo\n\nHand-written intro.\n\n<!-- demo cpu:begin -->\n<!-- demo cpu:end -->\n"
    md.write_text(hand + "\nHand-written outro.\n")
    REPORT.publish(rows(None, 1.0), tmp_path, md=md)
    REPORT.publish(rows("NVIDIA H200", 0.01), tmp_path, md=md)
    record = json.loads((tmp_path / "demo.json").read_text())
    assert record["benchmark"] == "demo" and len(record["rows"]) == 4  # both devices kept
    text = md.read_text()
    assert text.startswith("# Demo\n\nHand-written intro.\n\n<!-- demo cpu:begin -->\n")
    assert "<!-- demo cpu:end -->\n\nHand-written outro.\n" in text
    assert read_section(text, "demo cpu").endswith("| n=100 | 100.000 |")
    assert read_section(text, "demo NVIDIA H200").endswith("| n=100 | 1.000 |")  # appended
    png, json_text = (tmp_path / "demo.png").stat().st_size, (tmp_path / "demo.json").read_text()

    (tmp_path / "demo.png").unlink()
    REPORT.publish([], tmp_path, md=md)  # --render: nothing measured, everything redrawn
    assert (tmp_path / "demo.json").read_text() == json_text
    assert md.read_text() == text
    assert (tmp_path / "demo.png").stat().st_size == png


def test_publish_reads_rows_from_another_record(tmp_path):
    (tmp_path / "old.json").write_text(json.dumps(rows("NVIDIA H200", 0.01)))  # a bare list
    all_rows = REPORT.publish(rows(None, 1.0), tmp_path / "out", recorded=tmp_path / "old.json")
    assert [r["gpu_name"] for r in all_rows] == ["NVIDIA H200", "NVIDIA H200", None, None]


def test_render_without_a_record_says_what_to_do(tmp_path):
    with pytest.raises(ValueError, match="no rows for demo: nothing was measured"):
        REPORT.publish([], tmp_path)
