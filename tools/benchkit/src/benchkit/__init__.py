"""benchkit: the repo's one benchmark harness (environment, timing, records, tables, plots).

Each package's ``benchmarks/`` keeps only its cases; everything else goes through here. Dev-only:
nothing under ``packages/*/src`` imports it.
"""

from benchkit._compare import lost_rows
from benchkit._env import capture_env, cpu_name, device_label, git_state, gpu_driver
from benchkit._markdown import (
    human_time,
    markdown_table,
    read_section,
    section_markers,
    splice_section,
    text_table,
    write_sections,
)
from benchkit._plot import Figure, HLine, Line, Panel, lines_from_rows, write_png
from benchkit._record import DEFAULT_KEY, merge_rows, read_rows, write_record
from benchkit._report import Report
from benchkit._stats import QUANTILES, UNITS, Quantiles, quantiles
from benchkit._timing import (
    L2_FLUSH_BYTES,
    cuda_event_times,
    cuda_graph_times,
    process_times,
    timed,
    wall_times,
)

__version__ = "0.1.0"

# Grouped by topic (house style), not alphabetically.
__all__ = [  # noqa: RUF022
    # Environment
    "capture_env",
    "device_label",
    "cpu_name",
    "gpu_driver",
    "git_state",
    # Timing
    "wall_times",
    "cuda_event_times",
    "cuda_graph_times",
    "process_times",
    "timed",
    "L2_FLUSH_BYTES",
    # Quantiles
    "quantiles",
    "Quantiles",
    "QUANTILES",
    "UNITS",
    # Records
    "read_rows",
    "write_record",
    "merge_rows",
    "DEFAULT_KEY",
    "lost_rows",
    "Report",
    # Markdown
    "markdown_table",
    "text_table",
    "human_time",
    "write_sections",
    "splice_section",
    "read_section",
    "section_markers",
    # Plots
    "Figure",
    "Panel",
    "Line",
    "HLine",
    "lines_from_rows",
    "write_png",
]
