"""Benchmark records: JSON files of rows, merged per device so no device's measurements are lost.

A record is ``{"benchmark": <name>, "rows": [<row>, ...]}``. A row is one measurement: its case
fields (``op``, ``case``, ``provider`` and whatever the benchmark adds), ``p50``/``p20``/``p80``
and ``unit``, and the environment of :func:`benchkit.capture_env`. Records written before the
harness existed (a bare list of rows) read the same way.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

from ._env import device_label

#: The row fields that name a measurement, besides its device (see :func:`merge_rows`).
DEFAULT_KEY = ("op", "case", "provider")


def read_rows(path: Path | str) -> list[dict]:
    """The rows of the record at ``path``; none if there is no file.

    Raises:
        ValueError: the file is not a record (a JSON list of rows, or an object with ``rows``).
    """
    path = Path(path)
    if not path.exists():
        return []
    data = json.loads(path.read_text())
    rows = data.get("rows") if isinstance(data, dict) else data
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError(
            f"{path} is not a benchmark record: expected a JSON list of row objects or "
            '{"benchmark": ..., "rows": [...]}; point at the JSON a benchmark wrote'
        )
    return rows


def write_record(path: Path | str, benchmark: str, rows: Sequence[dict]) -> None:
    """Write ``{"benchmark", "rows"}`` to ``path`` atomically (a crash leaves the old file)."""
    text = json.dumps({"benchmark": benchmark, "rows": list(rows)}, indent=1) + "\n"
    write_text_atomic(Path(path), text)


def merge_rows(
    recorded: Iterable[dict], new: Sequence[dict], key: Sequence[str] = DEFAULT_KEY
) -> list[dict]:
    """The recorded rows that ``new`` does not measure again, then ``new``.

    A recorded row is replaced only by a new row of the same device (:func:`device_label`) and
    the same ``key`` fields: rows of other devices, and this device's rows of cases or providers
    not run this time, are kept as they were.

    Args:
        key: row fields that, with the device, name one measurement (missing fields are None).
    """
    redone = {_identity(r, key) for r in new}
    return [r for r in recorded if _identity(r, key) not in redone] + list(new)


def _identity(row: dict, key: Sequence[str]) -> tuple[str, ...]:
    # json.dumps: key fields may be lists (shapes) or None; sort_keys makes dicts comparable
    return (device_label(row), *(json.dumps(row.get(k), sort_keys=True) for k in key))


def write_text_atomic(path: Path, text: str) -> None:
    """Replace ``path``'s contents with ``text`` via a temporary file in the same folder."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        # mkstemp makes the file 0600; keep the old file's mode, or the usual 0644
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.exists() else 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
