"""One benchmark's outputs: ``<name>.json`` merged per device, ``<name>.png``, its ``.md`` sections.

A benchmark script defines one :class:`Report` (its name, how its rows are keyed, how they are
drawn and tabulated) and calls :meth:`Report.publish` after measuring, or with no new rows to
re-render the record from its JSON alone (``--render``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from ._markdown import write_sections
from ._plot import Figure, write_png
from ._record import DEFAULT_KEY, merge_rows, read_rows, write_record


@dataclass(frozen=True)
class Report:
    """How one benchmark's record is keyed, drawn and tabulated.

    Attributes:
        name: the record's file stem and ``benchmark`` field (``"cpkv-runtime"``).
        figure: all rows -> the PNG's :class:`Figure`.
        sections: all rows -> ``{section key: Markdown body}`` for the ``.md`` (optional).
        key: the row fields naming one measurement on one device (see ``merge_rows``).
    """

    name: str
    figure: Callable[[list[dict]], Figure]
    sections: Callable[[list[dict]], dict[str, str]] | None = None
    key: Sequence[str] = DEFAULT_KEY

    def json_path(self, out: Path | str) -> Path:
        return Path(out) / f"{self.name}.json"

    def publish(
        self,
        new_rows: Sequence[dict],
        out: Path | str,
        *,
        md: Path | str | None = None,
        recorded: Path | str | None = None,
    ) -> list[dict]:
        """Merge ``new_rows`` into the record, then write JSON, PNG and Markdown sections.

        The JSON is written first, so a failure while drawing or tabulating loses no
        measurement.

        Args:
            out: folder of ``<name>.json`` and ``<name>.png``.
            md: Markdown file whose generated sections are rewritten (None: no Markdown).
            recorded: record whose rows are merged with the new ones (default: the JSON already
                in ``out``); rows of other devices, cases and providers are kept.

        Returns:
            Every row now in the record.
        """
        source = recorded or self.json_path(out)
        rows = merge_rows(read_rows(source), new_rows, self.key)
        if not rows:
            raise ValueError(
                f"no rows for {self.name}: nothing was measured and {source} holds none; run the "
                "benchmark, or point --out at a folder with its JSON"
            )
        write_record(self.json_path(out), self.name, rows)
        write_png(Path(out) / f"{self.name}.png", self.figure(rows))
        if md is not None and self.sections is not None:
            write_sections(md, self.sections(rows))
        return rows
