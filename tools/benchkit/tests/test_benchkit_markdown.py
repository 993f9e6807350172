"""Tables and generated sections: exact output, and hand-written text kept byte for byte."""

from __future__ import annotations

import pytest
from benchkit import (
    human_time,
    markdown_table,
    read_section,
    section_markers,
    splice_section,
    text_table,
    write_sections,
)
from hypothesis import given
from hypothesis import strategies as st


def test_markdown_table_exact():
    got = markdown_table(["T", "p50 | p80"], [[8192, "1.0"], ["x|y", None]], align="rl")
    assert got == ("| T | p50 \\| p80 |\n|---:|---|\n| 8192 | 1.0 |\n| x\\|y | None |")


@pytest.mark.parametrize(("header", "rows", "align", "match"), [
    (["a", "b"], [[1]], "", "table row 0 has 1 cells for 2 columns"),
    (["a", "b"], [[1, 2]], "r", "align='r' has 1 letters for 2 columns"),
])  # fmt: skip
def test_markdown_table_shape_errors(header, rows, align, match):
    with pytest.raises(ValueError, match=match):
        markdown_table(header, rows, align)


def test_text_table_pads_columns():
    assert text_table(["op", "us"], [["remap", 1.5], ["x", 12345]]) == (
        "op     us\nremap  1.5\nx      12345"
    )


@pytest.mark.parametrize(("value", "unit", "text"), [
    (182.4, "us", "182 µs"), (7.44, "us", "7.4 µs"), (12143.2, "us", "12.14 ms"),
    (2.3854, "ms", "2.39 ms"), (3.214, "s", "3.21 s"), (0.0004, "s", "400 µs"),
    (1000.0, "us", "1.00 ms"), (None, "us", "n/a"),
])  # fmt: skip
def test_human_time(value, unit, text):
    assert human_time(value, unit) == text


def test_splice_replaces_only_the_section():
    doc = "# Title\n\nprose\n<!-- t:begin -->\nold\n<!-- t:end -->\nafter\n"
    assert splice_section(doc, "t", "new\n") == (
        "# Title\n\nprose\n<!-- t:begin -->\nnew\n<!-- t:end -->\nafter\n"
    )


def test_splice_appends_a_missing_section():
    assert splice_section("prose\n", "t", "x") == "prose\n\n<!-- t:begin -->\nx\n<!-- t:end -->\n"
    assert splice_section("", "t", "x") == "<!-- t:begin -->\nx\n<!-- t:end -->\n"


@pytest.mark.parametrize("doc", [
    "<!-- t:end -->\n<!-- t:begin -->\n",
    "<!-- t:begin -->\nno end\n",
    "<!-- t:begin -->\n<!-- t:end -->\n<!-- t:begin -->\n<!-- t:end -->\n",
])  # fmt: skip
def test_splice_refuses_broken_markers(doc):
    with pytest.raises(ValueError, match=r"x\.md: section 't' needs exactly one"):
        splice_section(doc, "t", "body", name="x.md")


@pytest.mark.parametrize("key", ["", "a\nb", "a--b"])
def test_section_keys_must_be_one_plain_line(key):
    with pytest.raises(ValueError, match="section key"):
        section_markers(key)


prose = st.text(st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)))


@given(prose, prose, prose, st.text(max_size=40))
def test_hand_written_text_survives(before, between, after, body):
    begin_a, end_a = section_markers("a")
    begin_b, end_b = section_markers("b")
    doc = f"{before}{begin_a}\nold a\n{end_a}{between}{begin_b}\nold b\n{end_b}{after}"
    got = splice_section(splice_section(doc, "a", body), "b", "B")
    assert got.startswith(before + begin_a) and got.endswith(end_b + after)
    assert f"{end_a}{between}{begin_b}" in got
    assert read_section(got, "b") == "B"


def test_write_sections_checks_all_before_writing(tmp_path):
    md = tmp_path / "r.md"
    md.write_text("hand\n<!-- a:begin -->\n1\n<!-- a:end -->\n<!-- b:end -->\n")
    with pytest.raises(ValueError, match="section 'b'"):
        write_sections(md, {"a": "2", "b": "3"})
    assert md.read_text() == "hand\n<!-- a:begin -->\n1\n<!-- a:end -->\n<!-- b:end -->\n"
    write_sections(tmp_path / "new.md", {"a": "2"})
    assert (tmp_path / "new.md").read_text() == "<!-- a:begin -->\n2\n<!-- a:end -->\n"


def test_read_section_absent():
    assert read_section("no markers", "a") is None
