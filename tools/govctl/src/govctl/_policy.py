"""Rules that read the repository's policy: the tag vocabulary and the verification guards.

Upstream govctl's `check` enforces these on every item; so do we, under our own codes:

- E009: a tag matches `[a-z][a-z0-9-]*`, a letter first (upstream's tag pattern);
- E018: a tag is listed in gov/config.toml `[tags] allowed` (upstream's controlled vocabulary;
  a config without the list allows no tag);
- E019: a waived guard is required: in `required_guards`, or in `[verification] default_guards`
  while `enabled = true`;
- E010: a waiver's reason is not blank, and a guard is waived once;
- E024: a guard in `required_guards` or in a waiver is the `[govctl] id` of a gov/guard/*.toml.

The tag pattern is checked here and not by the schema's `pattern`, so the result does not
depend on which schema copy a repository carries (ours once allowed a leading digit);
`Schema.check` leaves tag patterns to this rule, so each bad tag is reported once.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from govctl._config import Config
from govctl._diagnostics import Diagnostic
from govctl._links import Artifacts
from govctl._load import WorkFile

TAG_PATTERN = r"[a-z][a-z0-9-]*"
TAG_RE = re.compile(TAG_PATTERN)
# the schema's `guard` pattern: a malformed guard is the schema's E009, not also E019/E024
GUARD_RE = re.compile(r"GUARD-[A-Z][A-Z0-9-]*")


def _strings(wf: WorkFile, table: str, key: str) -> list[tuple[int, str]]:
    v = wf.get(table, key)
    return [(i, x) for i, x in enumerate(v) if isinstance(x, str)] if isinstance(v, list) else []


def _guards(wf: WorkFile) -> list[tuple[int, str]]:
    """(index, guard) of the well-formed `required_guards`."""
    return [
        (i, g) for i, g in _strings(wf, "verification", "required_guards") if GUARD_RE.fullmatch(g)
    ]


def _waivers(wf: WorkFile) -> list[tuple[int, dict[str, Any]]]:
    v = wf.get("verification", "waivers")
    return [(i, w) for i, w in enumerate(v) if isinstance(w, dict)] if isinstance(v, list) else []


def _waived(w: dict[str, Any]) -> str | None:
    g = w.get("guard")
    return g if isinstance(g, str) and GUARD_RE.fullmatch(g) else None


def rule_tags(wf: WorkFile, cfg: Config) -> Iterator[Diagnostic]:
    """E009 a tag that does not start with a letter; E018 a tag outside `[tags] allowed`."""
    for i, tag in _strings(wf, "govctl", "tags"):
        if ("govctl", "tags", i) in wf.unquoted:
            continue  # an unquoted date: E002 already
        if not TAG_RE.fullmatch(tag):
            msg = f"govctl.tags[{i}]: {tag!r} is not a tag: a lowercase letter, then a-z, 0-9, -"
            yield wf.diag("E009", msg, "govctl", "tags", i)
        elif cfg.tags_allowed is not None and tag not in cfg.tags_allowed:
            if cfg.tags_allowed:
                known = ", ".join(sorted(cfg.tags_allowed))
                why = f"is not in gov/config.toml [tags] allowed ({known}); add it there"
            else:
                why = "is not allowed: gov/config.toml has no [tags] allowed list; add one"
            yield wf.diag("E018", f"tag {tag!r} {why}", "govctl", "tags", i)


def rule_waivers(wf: WorkFile, cfg: Config) -> Iterator[Diagnostic]:
    """E019 a waiver for a guard the item does not require; E010 a blank reason or a repeat."""
    required = set(cfg.default_guards) | {g for _, g in _guards(wf)}
    seen: set[str] = set()
    for i, w in _waivers(wf):
        guard, reason = _waived(w), w.get("reason")
        where = ("verification", "waivers", i)
        if isinstance(reason, str) and reason and not reason.strip():  # "" is the schema's
            yield wf.diag("E010", f"waivers[{i}].reason: must not be blank", *where, "reason")
        if guard is None:
            continue
        if guard in seen:
            yield wf.diag("E010", f"waivers[{i}]: {guard} is waived twice", *where, "guard")
        seen.add(guard)
        if guard not in required:
            yield wf.diag(
                "E019",
                f"waivers[{i}]: {guard} is not required here, so there is nothing to waive "
                "(it is neither in required_guards nor in [verification] default_guards)",
                *where,
                "guard",
            )


def rule_guards_exist(wf: WorkFile, artifacts: Artifacts) -> Iterator[Diagnostic]:
    """E024 a required or waived guard that no gov/guard/*.toml defines."""
    named = [(g, ("required_guards", i)) for i, g in _guards(wf)]
    named += [(g, ("waivers", i, "guard")) for i, w in _waivers(wf) if (g := _waived(w))]
    for guard, where in named:
        if guard not in artifacts.guards:
            msg = f"verification: guard {guard} is not defined by any gov/guard/*.toml"
            yield wf.diag("E024", msg, "verification", *where)
