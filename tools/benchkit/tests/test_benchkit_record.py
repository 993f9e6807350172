"""Records: the per-device merge rule (fixed cases and random ones), reading and writing."""

from __future__ import annotations

import json
import os
import stat

import pytest
from benchkit import device_label, merge_rows, read_rows, write_record
from hypothesis import given
from hypothesis import strategies as st

H200, CPU = "NVIDIA H200", None


def row(gpu, op="materialize", case="B=8", provider="torch", p50=1.0, **extra):
    return {"op": op, "case": case, "provider": provider, "p50": p50, "gpu_name": gpu, **extra}


def test_other_devices_rows_are_kept():
    recorded = [row(H200, p50=5.0), row(CPU, p50=9.0)]
    new = [row(CPU, p50=8.0)]
    assert merge_rows(recorded, new) == [row(H200, p50=5.0), row(CPU, p50=8.0)]


def test_only_the_cases_run_again_are_replaced():
    recorded = [row(CPU, case="B=1", p50=1.0), row(CPU, case="B=8", p50=2.0)]
    assert merge_rows(recorded, [row(CPU, case="B=8", p50=3.0)]) == [
        row(CPU, case="B=1", p50=1.0),
        row(CPU, case="B=8", p50=3.0),
    ]


def test_providers_not_run_again_are_kept():
    recorded = [row(H200, provider="torch"), row(H200, provider="cuda", p50=0.1)]
    new = [row(H200, provider="torch", p50=2.0)]
    assert merge_rows(recorded, new) == [row(H200, provider="cuda", p50=0.1), new[0]]


def test_extra_key_fields_separate_measurements():
    recorded = [row(H200, mode="eager"), row(H200, mode="graph")]
    new = [row(H200, mode="graph", p50=0.5)]
    assert merge_rows(recorded, new) == new  # key without mode: both are "the same" measurement
    with_mode = ("op", "case", "provider", "mode")
    assert merge_rows(recorded, new, key=with_mode) == [recorded[0], new[0]]


def test_list_valued_key_fields_compare_by_value():
    recorded = [row(CPU, case=None, shape=[2, 3])]
    assert merge_rows(recorded, [row(CPU, case=None, shape=[2, 3], p50=4.0)], key=("shape",)) == [
        row(CPU, case=None, shape=[2, 3], p50=4.0)
    ]


rows = st.builds(
    row,
    st.sampled_from([H200, "NVIDIA B200", CPU]),
    op=st.sampled_from(["a", "b"]),
    case=st.sampled_from(["x", "y", "z"]),
    provider=st.sampled_from(["torch", "cuda"]),
    p50=st.floats(0, 10),
)


@given(st.lists(rows, max_size=12), st.lists(rows, max_size=6))
def test_merge_keeps_everything_not_measured_again(recorded, new):
    merged = merge_rows(recorded, new)
    ident = lambda r: (device_label(r), r["op"], r["case"], r["provider"])  # noqa: E731
    redone = {ident(r) for r in new}
    assert merged[len(merged) - len(new) :] == new
    kept = merged[: len(merged) - len(new)]
    assert kept == [r for r in recorded if ident(r) not in redone]


def test_read_rows_of_every_shape(tmp_path):
    rows_ = [row(H200)]
    assert read_rows(tmp_path / "missing.json") == []
    (tmp_path / "list.json").write_text(json.dumps(rows_))
    (tmp_path / "dict.json").write_text(json.dumps({"benchmark": "x", "rows": rows_}))
    legacy = {"env": {"gpu_name": H200}, "summary": {}, "rows": rows_}
    (tmp_path / "legacy.json").write_text(json.dumps(legacy))
    for name in ("list", "dict", "legacy"):
        assert read_rows(tmp_path / f"{name}.json") == rows_


@pytest.mark.parametrize("text", ['{"env": {}}', "[1, 2]", '"rows"'])
def test_read_rows_refuses_what_is_no_record(tmp_path, text):
    (tmp_path / "bad.json").write_text(text)
    with pytest.raises(ValueError, match=r"bad\.json is not a benchmark record"):
        read_rows(tmp_path / "bad.json")


def test_write_record_round_trips_and_keeps_the_mode(tmp_path):
    path = tmp_path / "sub" / "x.json"
    rows_ = [row(H200, p50=0.1 + 0.2, shape=[1, 2], note=None, ok=True)]
    write_record(path, "x", rows_)
    assert json.loads(path.read_text()) == {"benchmark": "x", "rows": rows_}
    assert read_rows(path) == rows_ and path.read_text().endswith("\n")
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o644
    os.chmod(path, 0o664)
    write_record(path, "x", [])
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o664
    assert [p.name for p in path.parent.iterdir()] == ["x.json"]  # no temporary file left
