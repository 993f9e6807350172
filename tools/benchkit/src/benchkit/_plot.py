"""PNG plots of records: panels of lines, drawn with matplotlib's Agg backend (no display).

A benchmark describes what to draw (:class:`Panel`, :class:`Line`, :class:`HLine`, usually built
from rows with :func:`lines_from_rows`); :func:`write_png` draws it. Keeping matplotlib here
means every record's plot looks alike and a benchmark holds no drawing code.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Line:
    """One series: ``y`` against ``x``, optionally a shaded ``band`` (low, high) around it."""

    label: str
    x: Sequence[float]
    y: Sequence[float]
    band: tuple[Sequence[float], Sequence[float]] | None = None
    color: str | None = None
    linestyle: str = "-"
    marker: str | None = "o"


@dataclass(frozen=True)
class HLine:
    """A horizontal reference line (a ceiling, a goal)."""

    y: float
    label: str
    color: str = "gray"
    linestyle: str = "--"


@dataclass(frozen=True)
class Panel:
    """One axes. ``xticks`` names categorical x positions 0, 1, ... (the lines' x are indices).

    ``yscale="symlog"`` uses ``linthresh`` for its linear range; ``ymin`` pins the lower limit.
    """

    title: str
    xlabel: str
    ylabel: str
    lines: Sequence[Line]
    hlines: Sequence[HLine] = ()
    xscale: str = "linear"
    yscale: str = "linear"
    xticks: Sequence[str] | None = None
    linthresh: float | None = None
    ymin: float | None = None


@dataclass(frozen=True)
class Figure:
    """Panels laid out ``ncols`` to a row, under an optional title."""

    panels: Sequence[Panel]
    title: str | None = None
    ncols: int = 1
    panel_size: tuple[float, float] = field(default=(5.5, 3.8))


def lines_from_rows(
    rows: Iterable[dict],
    *,
    x: str | Callable[[dict], float],
    label: Callable[[dict], str],
    y: str = "p50",
    band: tuple[str, str] | None = None,
    style: Callable[[str], dict[str, object]] | None = None,
) -> list[Line]:
    """One :class:`Line` per label, its points sorted by x; rows whose y is None are skipped.

    Args:
        x: a row field, or a function of the row.
        label: names the line a row belongs to.
        band: row fields of a shaded band, e.g. ``("p20", "p80")``.
        style: extra :class:`Line` fields for a label (``color``, ``linestyle``, ``marker``).
    """
    x_of = (lambda r: r[x]) if isinstance(x, str) else x
    points: dict[str, list[tuple[float, float, float, float]]] = defaultdict(list)
    for r in rows:
        if r.get(y) is None:
            continue
        lo, hi = (r[band[0]], r[band[1]]) if band else (math.nan, math.nan)
        points[label(r)].append((x_of(r), r[y], lo, hi))
    lines = []
    for name, pts in sorted(points.items()):
        pts.sort()
        xs, ys, los, his = (list(col) for col in zip(*pts, strict=True))
        extra = style(name) if style else {}
        lines.append(Line(name, xs, ys, band=(los, his) if band else None, **extra))  # type: ignore[arg-type]
    return lines


def write_png(path: Path | str, figure: Figure, *, dpi: int = 110) -> Path | None:
    """Draw ``figure`` into the PNG ``path``.

    Returns:
        ``path``; None (after saying so) where matplotlib is not installed: the JSON is already
        written, and the benchmark's ``--render`` draws the plot later from it.
    """
    path = Path(path)
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: {path} not drawn (re-render it later with --render)")
        return None
    n = len(figure.panels)
    if n == 0:
        raise ValueError(f"{path}: the figure has no panels; give it at least one Panel")
    ncols = max(1, min(figure.ncols, n))
    nrows = -(-n // ncols)
    width, height = figure.panel_size
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    for ax, panel in zip(axes.flat, figure.panels, strict=False):
        _draw(ax, panel)
    for ax in list(axes.flat)[n:]:
        ax.set_visible(False)
    if figure.title:
        fig.suptitle(figure.title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path


def _draw(ax, panel: Panel) -> None:  # ax: matplotlib Axes
    for line in panel.lines:
        (drawn,) = ax.plot(
            line.x,
            line.y,
            label=line.label,
            color=line.color,
            linestyle=line.linestyle,
            marker=line.marker,
        )
        if line.band is not None:
            ax.fill_between(line.x, *line.band, color=drawn.get_color(), alpha=0.2)
    for h in panel.hlines:
        ax.axhline(h.y, color=h.color, linestyle=h.linestyle, linewidth=1, label=h.label)
    ax.set_xscale(panel.xscale)
    if panel.yscale == "symlog":
        ax.set_yscale("symlog", linthresh=panel.linthresh or 1.0)
    else:
        ax.set_yscale(panel.yscale)
    if panel.ymin is not None:
        ax.set_ylim(bottom=panel.ymin)
    if panel.xticks is not None:
        ax.set_xticks(range(len(panel.xticks)), panel.xticks, rotation=30, ha="right", fontsize=7)
    ax.set_title(panel.title, fontsize=9)
    ax.set_xlabel(panel.xlabel)
    ax.set_ylabel(panel.ylabel)
    ax.grid(True, which="both", alpha=0.3)
    if panel.lines or panel.hlines:
        ax.legend(fontsize=7)
