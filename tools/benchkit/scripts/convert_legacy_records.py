"""One-time conversion of the records written before benchkit (run once, 2026-12-01).

Kept so the conversion can be audited; nothing runs it again. It changes three records, and no
measured value in any:

- ``cpkv-kernels.json`` was ``{"env", "summary", "rows"}``. ``env`` repeats fields every row
  already carries (checked equal here), and ``summary.goals`` is derived from the rows (checked
  here: ``bench_kernels.goals`` recomputes it exactly). The one measurement outside the rows,
  ``summary.copy_tbps`` (the device-to-device copy ceiling), becomes a row of its own:
  ``op="copy_ceiling"``, ``tbps`` as measured; its time was not recorded, so ``p50`` is None.
- ``govctl.json`` rows gain ``"warmup": 2``: the untimed runs per cell, the script's default
  then, which its recorded command did not override (the old ``govctl.md`` said so in prose).

- ``indexcache.json`` H200 rows: ``command`` names the GPU box's scratch folder
  (``/root/out/r/ic/indexcache``); it is written ``$OUT/indexcache``, as the record's ``.md`` has
  shown it since the run, so the re-rendered table says the same and names no path outside the
  repository. Not a measurement; ``python -m benchkit compare --ignore command`` shows nothing
  else changed.

Every other record reads as it is (a bare list of rows is a record); re-rendering writes it as
``{"benchmark", "rows"}``. Usage: ``python tools/benchkit/scripts/convert_legacy_records.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import benchkit

REPO = Path(__file__).resolve().parents[3]
DOCS = REPO / "docs" / "benchmarks"
COPY_CASE = "1 GiB uint8 copy_, read + write"


def convert_kernels(path: Path) -> None:
    data = json.loads(path.read_text())
    if isinstance(data, dict) and "env" not in data:
        print(f"{path.name}: already converted")
        return
    env, summary, rows = data["env"], data["summary"], data["rows"]
    assert all(all(r[k] == v for k, v in env.items()) for r in rows), "env differs from a row"
    sys.path.insert(0, str(REPO / "packages" / "cpkv-kernels" / "benchmarks"))
    import bench_kernels

    copy_row = {
        "op": "copy_ceiling", "case": COPY_CASE, "provider": "copy", "mode": "eager",
        "p50": None, "p20": None, "p80": None, "unit": "us", "bytes_moved": 2 * 2**30,
        "tbps": summary["copy_tbps"], "parity": None,
        "note": "converted record: only the bandwidth was recorded, not the time",
        "meta": {}, **env,
    }  # fmt: skip
    new_rows = [*rows, copy_row]
    assert bench_kernels.goals(new_rows) == summary["goals"], "goals do not recompute"
    benchkit.write_record(path, "cpkv-kernels", new_rows)
    print(f"{path.name}: env dropped (in every row), goals recompute, copy_tbps -> a row")


def convert_govctl(path: Path) -> None:
    rows = benchkit.read_rows(path)
    if all("warmup" in r for r in rows):
        print(f"{path.name}: already converted")
        return
    benchkit.write_record(path, "govctl", [{**r, "warmup": r.get("warmup", 2)} for r in rows])
    print(f"{path.name}: warmup = 2 added to {len(rows)} rows")


def convert_indexcache(path: Path) -> None:
    scratch = "/root/out/r/ic/indexcache"
    rows = benchkit.read_rows(path)
    renamed = [{**r, "command": r["command"].replace(scratch, "$OUT/indexcache")} for r in rows]
    changed = sum(a != b for a, b in zip(rows, renamed, strict=True))
    benchkit.write_record(path, "indexcache", renamed)
    print(f"{path.name}: {scratch} -> $OUT/indexcache in the command of {changed} rows")


if __name__ == "__main__":
    convert_kernels(DOCS / "cpkv-kernels.json")
    convert_govctl(DOCS / "govctl.json")
    convert_indexcache(DOCS / "indexcache.json")
