"""Authoring: `work new/move/tick/journal add/add`. Edits keep comments and layout (tomlkit).

Every mutation reads the file, edits the tomlkit document, and hands the new text to
`_store.write_checked`, which refuses a write that would fail `check` and writes atomically.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from govctl._checker import Checker
from govctl._config import Config
from govctl._edit import (
    ADDABLE,
    META_ORDER,
    append_table,
    parse_criterion,
    set_after,
    toml_ml_str,
    toml_str,
)
from govctl._ids import new_id, slugify
from govctl._load import WorkFile, load
from govctl._rules import SCHEMA_LINE, criteria_of, date_of
from govctl._store import write_checked
from govctl.errors import LifecycleError, UsageError

# upstream's `work move` state machine
TRANSITIONS = {
    ("queue", "active"),
    ("queue", "cancelled"),
    ("active", "done"),
    ("active", "cancelled"),
}
PLACEHOLDER = "TODO: describe what this work item changes and why."


def today() -> str:
    return dt.date.today().isoformat()


def check_date(value: str | None) -> str:
    """`value` ("YYYY-MM-DD") or today; UsageError for anything else."""
    if value is None:
        return today()
    if date_of(value) is None:
        raise UsageError(f"--date {value!r}: expected a real date YYYY-MM-DD")
    return value


def all_items(cfg: Config) -> list[WorkFile]:
    """Every work item file in gov/work, parsed (unparseable ones have doc None)."""
    return [load(p, p.name) for p in sorted(cfg.work_dir.glob("*.toml"))]


def locate(cfg: Config, item_id: str) -> WorkFile:
    """The file holding `item_id`; UsageError when missing or ambiguous."""
    hits = [wf for wf in all_items(cfg) if wf.item_id == item_id]
    if not hits:
        raise UsageError(f"no work item {item_id} in {cfg.work_dir} (see `govctl work list`)")
    if len(hits) > 1:
        names = ", ".join(wf.path.name for wf in hits)
        raise UsageError(f"{item_id} is defined twice ({names}); fix it first (govctl check)")
    return hits[0]


def _mutate(cfg: Config, wf: WorkFile, edit: Callable[[Any], None]) -> Path:
    """Apply `edit` to the tomlkit document of `wf` and write it back (checked, atomic)."""
    import tomlkit

    doc = tomlkit.parse(wf.text)
    edit(doc)
    write_checked(wf.path, tomlkit.dumps(doc), root=cfg.root)
    return wf.path


def new(
    cfg: Config,
    title: str,
    *,
    date: str | None = None,
    active: bool = False,
    description: str | None = None,
    refs: Sequence[str] = (),
    depends_on: Sequence[str] = (),
    tags: Sequence[str] = (),
    criteria: Sequence[str] = (),
    strategy: str | None = None,
) -> tuple[str, Path]:
    """Create gov/work/<date>-<slug>.toml; return (ID, path)."""
    if not title.strip():
        raise UsageError("title must not be empty")
    date = check_date(date)
    existing = {wf.item_id for wf in all_items(cfg) if wf.item_id}
    try:
        item_id = new_id(strategy or cfg.id_strategy, date, existing)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc
    lines = [
        SCHEMA_LINE,
        "",
        "[govctl]",
        f"id = {toml_str(item_id)}",
        f"title = {toml_str(title.strip())}",
        f'status = "{"active" if active else "queue"}"',
        f'created = "{date}"',
    ]
    if active:
        lines.append(f'started = "{date}"')
    for key, values in (("refs", refs), ("depends_on", depends_on), ("tags", tags)):
        if values:
            lines.append(f"{key} = [{', '.join(map(toml_str, values))}]")
    lines += ["", "[content]", f"description = {toml_ml_str((description or PLACEHOLDER).strip())}"]
    for c in criteria:
        text, category = parse_criterion(c)
        lines += [
            "",
            "[[content.acceptance_criteria]]",
            f"text = {toml_str(text)}",
            'status = "pending"',
            f'category = "{category}"',
        ]
    path = cfg.work_dir / f"{date}-{slugify(title)}.toml"
    cfg.work_dir.mkdir(parents=True, exist_ok=True)
    write_checked(path, "\n".join(lines) + "\n", root=cfg.root, create=True)
    return item_id, path


def move(cfg: Config, item_id: str, status: str, *, date: str | None = None) -> Path:
    """Transition the status (upstream state machine) and stamp started/completed."""
    date = check_date(date)
    wf = locate(cfg, item_id)
    # a transition stamps dates and certifies criteria: on an item that is already wrong it
    # would only move the error (tick/add/journal stay allowed, to repair it step by step)
    broken = Checker([wf.path], root=cfg.root).run().errors
    if broken:
        listing = "\n".join(f"  {d}" for d in broken)
        raise LifecycleError(
            f"{item_id} has errors; fix them before moving it (govctl check):\n{listing}"
        )
    current = wf.get("govctl", "status")
    if current == status:
        raise LifecycleError(f"{item_id} is already '{status}'")
    if (current, status) not in TRANSITIONS:
        allowed = sorted(b for a, b in TRANSITIONS if a == current) or ["nothing (final)"]
        raise LifecycleError(
            f"{item_id}: '{current}' -> '{status}' is not allowed; from "
            f"'{current}' it can go to {', '.join(allowed)}"
        )
    if status == "done":
        crit = criteria_of(wf)
        pending = [c.get("text", "") for c in crit if c.get("status", "pending") == "pending"]
        if not crit:
            raise LifecycleError(
                f"{item_id}: 'done' needs at least one acceptance criterion "
                f'(govctl work add {item_id} acceptance_criteria "add: ...")'
            )
        if pending:
            raise LifecycleError(
                f"{item_id}: {len(pending)} {'criterion' if len(pending) == 1 else 'criteria'} "
                "still pending: " + "; ".join(pending) + f" (govctl work tick {item_id} PATTERN)"
            )

    def edit(doc: Any) -> None:
        meta = doc["govctl"]
        meta["status"] = status
        if status == "active":
            set_after(meta, "started", date, META_ORDER[:4])
        if status in ("done", "cancelled"):
            set_after(meta, "completed", date, META_ORDER[:5])

    return _mutate(cfg, wf, edit)


def tick(cfg: Config, item_id: str, pattern: str, status: str = "done") -> tuple[Path, str]:
    """Set the status of the one criterion matching `pattern`; return (path, its text)."""
    wf = locate(cfg, item_id)
    raw, crit = wf.get("content", "acceptance_criteria"), criteria_of(wf)
    if isinstance(raw, list) and len(raw) != len(crit):
        raise UsageError(f"{item_id}: malformed acceptance criteria; run `govctl check` first")
    texts = [str(c.get("text", "")) for c in crit]
    hits = [i for i, t in enumerate(texts) if t == pattern]
    if not hits:
        hits = [i for i, t in enumerate(texts) if pattern.lower() in t.lower()]
    if len(hits) != 1:
        what = "no criterion" if not hits else f"{len(hits)} criteria"
        listing = "\n".join(f"  {i + 1}. {t}" for i, t in enumerate(texts)) or "  (none)"
        raise UsageError(f"{item_id}: {what} match {pattern!r}; criteria:\n{listing}")
    index = hits[0]

    def edit(doc: Any) -> None:
        doc["content"]["acceptance_criteria"][index]["status"] = status

    return _mutate(cfg, wf, edit), texts[index]


def journal_add(
    cfg: Config, item_id: str, text: str, *, scope: str | None = None, date: str | None = None
) -> Path:
    """Append a [[content.journal]] entry (date defaults to today)."""
    import tomlkit

    date = check_date(date)
    row: dict[str, Any] = {"date": date}
    if scope:
        row["scope"] = scope
    row["content"] = tomlkit.string(text, multiline="\n" in text)

    def edit(doc: Any) -> None:
        append_table(doc, doc["content"], "journal", row)

    return _mutate(cfg, locate(cfg, item_id), edit)


def add(cfg: Config, item_id: str, field: str, value: str) -> Path:
    """Append `value` to a list field (acceptance_criteria takes "category: text")."""
    if field not in ADDABLE:
        raise UsageError(f"cannot add to {field!r}; one of {', '.join(ADDABLE)}")

    def edit(doc: Any) -> None:
        content = doc["content"]
        if field == "acceptance_criteria":
            text, category = parse_criterion(value)
            append_table(
                doc, content, field, {"text": text, "status": "pending", "category": category}
            )
            return
        table = content if field == "notes" else doc["govctl"]
        if field in table:
            table[field].append(value)
        else:
            after = ("description",) if field == "notes" else META_ORDER[: META_ORDER.index(field)]
            set_after(table, field, [value], after)

    return _mutate(cfg, locate(cfg, item_id), edit)
