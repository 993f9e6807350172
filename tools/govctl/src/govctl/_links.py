"""Rules across work items: unique IDs, refs and [[ID]] links resolve, depends_on acyclic.

The universe is the checked files plus, when they live in the repository's gov/work, the other
items there (`context`): a ref to an item that is not being checked still resolves, but only
checked files get diagnostics. RFC/ADR refs resolve against gov/rfc/RFC-NNNN/ (clauses under
its clauses/C-NAME.toml) and gov/adr/ADR-NNNN*.toml.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from functools import cached_property
from pathlib import Path
from typing import Any

from govctl._diagnostics import Diagnostic, diag
from govctl._graph import elementary_cycles
from govctl._load import WorkFile
from govctl._mentions import bare_mentions, line_of_match, link_matches, texts
from govctl._rules import REF_PATTERN

# refs the schema accepts; a malformed one is the schema's E009, not also a dangling E021
REF_RE = re.compile(REF_PATTERN)


class Artifacts:
    """RFC/ADR/guard IDs on disk under a gov/ directory, scanned only when a ref needs them."""

    def __init__(self, gov: Path | None) -> None:
        self.gov = gov

    @cached_property
    def rfcs(self) -> dict[str, Path]:
        d = self.gov / "rfc" if self.gov else None
        if d is None or not d.is_dir():
            return {}
        return {p.name: p for p in d.iterdir() if p.is_dir() and re.fullmatch(r"RFC-\d{4}", p.name)}

    @cached_property
    def adrs(self) -> set[str]:
        d = self.gov / "adr" if self.gov else None
        if d is None or not d.is_dir():
            return set()
        return {m.group(0) for p in d.glob("*.toml") if (m := re.match(r"ADR-\d{4}", p.name))}

    @cached_property
    def guards(self) -> set[str]:
        """`[govctl] id` of each gov/guard/*.toml; a file that does not parse defines none."""
        d = self.gov / "guard" if self.gov else None
        if d is None or not d.is_dir():
            return set()
        import tomllib

        ids: set[str] = set()
        for p in d.glob("*.toml"):
            try:
                meta = tomllib.loads(p.read_text(encoding="utf-8")).get("govctl")
            except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
                continue
            if isinstance(meta, dict) and isinstance(meta.get("id"), str):
                ids.add(meta["id"])
        return ids

    def exists(self, ref: str) -> bool:
        if ref.startswith("ADR-"):
            return ref in self.adrs
        rfc, _, clause = ref.partition(":")
        d = self.rfcs.get(rfc)
        return d is not None and (not clause or (d / "clauses" / f"{clause}.toml").is_file())


def _strings(v: Any) -> list[str]:
    return [x for x in v if isinstance(x, str)] if isinstance(v, list) else []


def cross_file(
    checked: list[WorkFile], context: list[WorkFile], artifacts: Artifacts
) -> list[Diagnostic]:
    """E020-E023 and W003 for the parsed files in `checked`."""
    checked = [wf for wf in checked if wf.doc is not None]
    is_checked = {id(wf) for wf in checked}
    by_id: dict[str, list[WorkFile]] = {}
    for wf in sorted([*checked, *(c for c in context if c.doc is not None)], key=lambda w: w.shown):
        if wf.item_id is not None:
            by_id.setdefault(wf.item_id, []).append(wf)
    out: list[Diagnostic] = []
    for item_id, files in by_id.items():
        if len(files) > 1:
            out.extend(_duplicates(item_id, files, is_checked))

    def resolves(ref: str) -> bool:
        return ref in by_id if ref.startswith("WI-") else artifacts.exists(ref)

    for wf in checked:
        for key in ("refs", "depends_on"):
            for ref in _strings(wf.get("govctl", key)):
                if REF_RE.fullmatch(ref) and not resolves(ref):
                    what = "work item" if ref.startswith("WI-") else "known artifact"
                    msg = f"{key}: '{ref}' does not resolve to a {what}"
                    out.append(wf.diag("E021", msg, "govctl", key))
        out.extend(_dangling_links(wf, resolves))
        if wf.get("govctl", "status") != "done":
            out.extend(_bare_mentions(wf, resolves))
        if wf.get("govctl", "status") == "done":
            for dep in _strings(wf.get("govctl", "depends_on")):
                other = by_id.get(dep)
                status = other[0].get("govctl", "status") if other else None
                if other and status != "done":
                    msg = f"'done' but depends on {dep}, which is '{status}'"
                    out.append(wf.diag("W003", msg, "govctl", "depends_on"))
    out.extend(_cycles(by_id, is_checked))
    return out


def _dangling_links(wf: WorkFile, resolves: Callable[[str], bool]) -> Iterator[Diagnostic]:
    """E022 once per link target that does not resolve, at its first place."""
    seen: set[str] = set()
    for text, path in texts(wf):
        for m in link_matches(text):
            ref = m.group(1)
            if ref not in seen and not resolves(ref):
                seen.add(ref)
                line = line_of_match(wf, path, text, m)
                yield diag("E022", f"link [[{ref}]] does not resolve", wf.shown, line)


def _bare_mentions(wf: WorkFile, resolves: Callable[[str], bool]) -> Iterator[Diagnostic]:
    """W004 once per existing artifact an unfinished item names without [[...]]."""
    seen: set[str] = set()
    for text, path in texts(wf, prose_only=True):
        for m in bare_mentions(text):
            ref = m.group(1)
            if ref not in seen and resolves(ref):
                seen.add(ref)
                line = line_of_match(wf, path, text, m)
                msg = f"mentions {ref} without link syntax; write [[{ref}]]"
                yield diag("W004", msg, wf.shown, line)


def _duplicates(item_id: str, files: list[WorkFile], is_checked: set[int]) -> Iterator[Diagnostic]:
    """E020 on every checked copy after the first; on the first only when no other is checked."""
    first = files[0]
    pairs = [(other, first) for other in files[1:] if id(other) in is_checked]
    if not pairs and id(first) in is_checked:
        pairs = [(first, files[1])]
    for wf, also in pairs:
        where = f"{also.shown}:{also.line_of('govctl', 'id')}"
        yield wf.diag("E020", f"duplicate ID {item_id} (also in {where})", "govctl", "id")


def _cycles(by_id: dict[str, list[WorkFile]], is_checked: set[int]) -> Iterator[Diagnostic]:
    graph = {i: _strings(files[0].get("govctl", "depends_on")) for i, files in by_id.items()}
    graph = {i: deps for i, deps in graph.items() if deps}
    if not graph:
        return
    for cycle in elementary_cycles(graph):
        owners = [by_id[i][0] for i in cycle if id(by_id[i][0]) in is_checked]
        if not owners:
            continue
        wf = owners[0]
        chain = " -> ".join([*cycle, cycle[0]])
        yield wf.diag("E023", f"depends_on cycle: {chain}", "govctl", "depends_on")
