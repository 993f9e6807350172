"""The hook table's way-out columns, as ``cpkv-serve --dry-run`` prints them and as the package
README shows them (``tests/test_hook_table.py`` holds the README's copy equal to :func:`markdown`).

Everything comes from ``sglang_cpkv.plugin.table``: per hook, the process it runs in, the SGLang
releases its signature is checked against, the upstream behaviour it corrects and the upstream
change that would delete it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

__all__ = ["markdown", "rows", "text"]


def _all_specs() -> tuple[Any, ...]:
    from sglang_cpkv.plugin.table import SHARED_KV_SPECS, SPECS

    return (*SPECS, *SHARED_KV_SPECS)


def rows(on: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """One JSON-serialisable row per hook of the table, in table order.

    Args:
        on: names of the hooks this deployment registers; each row then says ``on``. None: every
            row of the table, without ``on`` (the README's view).
    """
    names = None if on is None else set(on)
    out = []
    for spec in _all_specs():
        row = {
            "name": spec.name,
            "target": spec.target,
            "kind": spec.kind,
            "runs_in": spec.runs_in,
            "checked": list(spec.checked),
            "corrects": spec.corrects,
            "delete_when": spec.delete_when,
        }
        if names is not None:
            row["on"] = spec.name in names
        out.append(row)
    return out


def text(table: Sequence[dict[str, Any]]) -> list[str]:
    """The dry-run section: a heading and four lines per hook."""
    out = ["Hooks on SGLang and their way out (plugin/table.py)"]
    for r in table:
        state = "" if "on" not in r else (" (on)" if r["on"] else " (off)")
        out += [
            f"  {r['name']}{state}: {r['kind']} {r['target']}",
            f"    runs in {r['runs_in']}; signature checked on sglang {', '.join(r['checked'])}",
            f"    corrects: {r['corrects']}",
            f"    delete when: {r['delete_when']}",
        ]
    return out


def markdown() -> str:
    """The README's table of every hook (no trailing newline)."""
    out = [
        "| hook | target (kind) | runs in | checked on sglang | corrects in SGLang | delete when |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows():
        cells = (
            f"`{r['name']}`",
            f"`{r['target'].removeprefix('sglang.srt.')}` ({r['kind']})",
            r["runs_in"],
            ", ".join(r["checked"]),
            r["corrects"],
            r["delete_when"],
        )
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(out)
