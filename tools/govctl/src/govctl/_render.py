"""Read-only views of work items: `work list` rows, `work show` text, `work render` Markdown."""

from __future__ import annotations

import json
from typing import Any

from govctl._load import WorkFile
from govctl._mentions import link_matches

_BOX = {"done": "[x]", "cancelled": "[-]", "pending": "[ ]"}


def summary(wf: WorkFile) -> dict[str, Any]:
    """The fields `work list` shows."""
    return {
        "id": wf.item_id,
        "status": wf.get("govctl", "status"),
        "title": wf.get("govctl", "title"),
        "created": wf.get("govctl", "created"),
        "file": wf.shown,
    }


def list_text(rows: list[dict[str, Any]]) -> str:
    """Aligned columns: ID, status, created, title."""
    if not rows:
        return "(no work items)\n"
    w_id = max(len(str(r["id"])) for r in rows)
    w_st = max(len(str(r["status"])) for r in rows)
    return "".join(
        f"{r['id']!s:<{w_id}}  {r['status']!s:<{w_st}}  {r['created']!s:<10}  {r['title']}\n"
        for r in rows
    )


def to_json(value: Any) -> str:
    """Pretty JSON for `--format json` of `work list` / `work show`."""
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def _dates(meta: dict[str, Any]) -> str:
    return ", ".join(f"{k} {meta[k]}" for k in ("created", "started", "completed") if k in meta)


def show_text(wf: WorkFile) -> str:
    """A compact terminal view: header, dates, refs, criteria boxes, last journal entries."""
    doc = wf.doc or {}
    meta, content = doc.get("govctl", {}), doc.get("content", {})
    out = [
        f"{meta.get('id')}  [{meta.get('status')}]  {meta.get('title')}",
        f"  file: {wf.shown}",
        f"  dates: {_dates(meta)}",
    ]
    for key in ("refs", "depends_on", "tags"):
        if meta.get(key):
            out.append(f"  {key}: {', '.join(meta[key])}")
    out += ["", *[f"  {line}" for line in str(content.get("description", "")).strip().splitlines()]]
    crit = content.get("acceptance_criteria", [])
    if crit:
        out += ["", "  acceptance criteria:"]
        out += [
            f"    {_BOX.get(c.get('status', 'pending'), '[?]')} {c.get('text')} "
            f"({c.get('category', 'added')})"
            for c in crit
        ]
    journal = content.get("journal", [])
    if journal:
        n = len(journal)
        shown = "newest first" if n <= 3 else "the last 3, newest first"
        out += ["", f"  journal ({n} {'entry' if n == 1 else 'entries'}; {shown}):"]
        for e in reversed(journal[-3:]):
            scope = f" [{e['scope']}]" if e.get("scope") else ""
            first = str(e.get("content", "")).strip().splitlines()[:1]
            out.append(f"    {e.get('date')}{scope} {first[0] if first else ''}")
    return "\n".join(out) + "\n"


def _links(text: str) -> str:
    """[[WI-...]] -> [WI-...](WI-....md): rendered items sit side by side, one file per ID.

    Links written inside code, and placeholders such as [[RFC-NNNN]], stay as written.
    """
    out, last = [], 0
    for m in link_matches(text):
        ref = m.group(1)
        out += [text[last : m.start()], f"[{ref}]({ref.split(':')[0]}.md)"]
        last = m.end()
    return "".join([*out, text[last:]])


def render_markdown(wf: WorkFile) -> str:
    """The item as Markdown: title, a field table, description, criteria, journal, notes."""
    doc = wf.doc or {}
    meta, content = doc.get("govctl", {}), doc.get("content", {})
    out = [
        f"# {meta.get('id')}: {meta.get('title')}",
        "",
        "| Field | Value |",
        "|---|---|",
        f"| Status | {meta.get('status')} |",
    ]
    out += [
        f"| {k.capitalize()} | {meta[k]} |"
        for k in ("created", "started", "completed")
        if k in meta
    ]
    for key, label in (("refs", "Refs"), ("depends_on", "Depends on"), ("tags", "Tags")):
        if meta.get(key):
            vals = meta[key] if key == "tags" else [_links(f"[[{v}]]") for v in meta[key]]
            out.append(f"| {label} | {', '.join(vals)} |")
    out += ["", "## Description", "", _links(str(content.get("description", "")).strip())]
    crit = content.get("acceptance_criteria", [])
    if crit:
        out += ["", "## Acceptance criteria", ""]
        for c in crit:
            status = c.get("status", "pending")
            text = _links(str(c.get("text", "")))
            text = f"~~{text}~~ (cancelled)" if status == "cancelled" else text
            out.append(
                f"- [{'x' if status == 'done' else ' '}] {text} *({c.get('category', 'added')})*"
            )
    journal = content.get("journal", [])
    if journal:
        out += ["", "## Journal"]
        for e in journal:
            scope = f" · {e['scope']}" if e.get("scope") else ""
            out += [
                "",
                f"### {e.get('date')}{scope}",
                "",
                _links(str(e.get("content", "")).strip()),
            ]
    notes = content.get("notes", [])
    if notes:
        out += ["", "## Notes", "", *[f"- {_links(str(n))}" for n in notes]]
    return "\n".join(out) + "\n"
