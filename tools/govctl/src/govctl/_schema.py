"""JSON-Schema (draft-07 + format checker) validation of work items, mapped to E004-E010.

The schema is `gov/schema/work.schema.json` of the repository being checked, or the copy
bundled with govctl when there is none. Every document goes through the compiled predicate
(`_compile`); `jsonschema` is imported only when a document fails it.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from govctl._compile import Predicate, compile_schema, ecma_regex
from govctl._diagnostics import Diagnostic
from govctl._load import WorkFile

BUNDLED_SCHEMA = Path(__file__).with_name("work.schema.json")
_FRIENDLY_PATTERNS = {
    "id": "WI-YYYY-MM-DD-xxxx (4 hex digits), WI-YYYY-MM-DD-xxxx-NNN or WI-YYYY-MM-DD-NNN",
    "refs": "RFC-NNNN, RFC-NNNN:C-NAME, ADR-NNNN or a work item ID",
    "depends_on": "a work item ID (WI-YYYY-MM-DD-...)",
    "required_guards": "GUARD-NAME (capital letters, digits and dashes)",
    "guard": "GUARD-NAME (capital letters, digits and dashes)",
}
_CODE_OF = {
    "required": "E004",
    "additionalProperties": "E005",
    "type": "E006",
    "enum": "E007",
    "const": "E007",
    "format": "E008",
    "pattern": "E009",
}


class Schema:
    """A loaded schema: its JSON, the fast predicate and (lazily) a jsonschema validator."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.json: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        self.fast: Predicate | None = compile_schema(self.json)
        self._validator: Any = None

    @property
    def validator(self) -> Any:
        if self._validator is None:
            import jsonschema  # ~0.1 s; only reached when a document fails the fast predicate

            base = jsonschema.Draft7Validator
            base.check_schema(self.json)
            cls = jsonschema.validators.extend(base, {"pattern": _ecma_pattern})
            self._validator = cls(self.json, format_checker=base.FORMAT_CHECKER)
        return self._validator

    def check(self, wf: WorkFile) -> list[Diagnostic]:
        """Schema diagnostics for one parsed file (none when it is valid)."""
        if self.fast is not None and self.fast(wf.doc):
            return []
        # a value already reported as an unquoted date (E002) is not reported again; a tag's
        # pattern is `_policy.rule_tags`'s to check (upstream's, whatever this schema says)
        errors = [
            e
            for e in self.validator.iter_errors(wf.doc)
            if tuple(e.absolute_path) not in wf.unquoted and not _is_tag_pattern(e)
        ]
        # One diagnostic per problem: a value of the wrong type also fails its enum/pattern/...
        typed = {tuple(e.absolute_path) for e in errors if e.validator == "type"}
        errors = [e for e in errors if e.validator == "type" or tuple(e.absolute_path) not in typed]
        # jsonschema raises one `required` error per missing key, each carrying the whole
        # list: keep one per table, which then reports every missing key once
        tables: set[tuple[str | int, ...]] = set()
        out: list[Diagnostic] = []
        for e in errors:
            if e.validator == "required":
                if tuple(e.absolute_path) in tables:
                    continue
                tables.add(tuple(e.absolute_path))
            out.extend(_to_diagnostics(e, wf))
        return out


def _ecma_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    """jsonschema's `pattern` keyword with `$` meaning the end of the string (`ecma_regex`)."""
    if validator.is_type(instance, "string") and not ecma_regex(pattern).search(instance):
        import jsonschema

        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


def _is_tag_pattern(e: Any) -> bool:
    return e.validator == "pattern" and tuple(e.absolute_path)[:2] == ("govctl", "tags")


@cache
def load_schema(path: Path) -> Schema:
    return Schema(path)


def _where(path: list[str | int]) -> str:
    s = ""
    for p in path:
        s += f"[{p}]" if isinstance(p, int) else (f".{p}" if s else str(p))
    return s or "(top level)"


def _table(path: list[str | int]) -> str:
    return f"[{_where(path)}]" if path else "the top level"


def _to_diagnostics(e: Any, wf: WorkFile) -> list[Diagnostic]:
    path = list(e.absolute_path)
    code = _CODE_OF.get(e.validator, "E010")
    where = _where(path)
    if e.validator == "required":
        missing = [k for k in e.validator_value if k not in e.instance]
        return [
            wf.diag(code, f"missing required key '{k}' in {_table(path)}", *path) for k in missing
        ]
    if e.validator == "additionalProperties":
        allowed = sorted(e.schema.get("properties", {}))
        extra = [k for k in e.instance if k not in allowed]
        return [
            wf.diag(
                code,
                f"unknown key '{k}' in {_table(path)} (allowed: {', '.join(allowed)})",
                *path,
                k,
            )
            for k in extra
        ]
    if e.validator == "type":
        got = f"{_json_type(e.instance)} {_short(e.instance)}"
        msg = f"{where}: expected {e.validator_value}, got {got}"
    elif e.validator == "enum":
        msg = (
            f"{where}: {_short(e.instance)} is not one of {', '.join(map(str, e.validator_value))}"
        )
    elif e.validator == "const":
        msg = f"{where}: must be {e.validator_value!r}, got {_short(e.instance)}"
    elif e.validator == "format":
        msg = f"{where}: {_short(e.instance)} is not a valid date (YYYY-MM-DD, a real day)"
    elif e.validator == "pattern":
        key = next((p for p in reversed(path) if isinstance(p, str)), "")
        want = _FRIENDLY_PATTERNS.get(key, f"pattern {e.validator_value}")
        msg = f"{where}: {_short(e.instance)} is not {want}"
    elif e.validator == "minLength":
        msg = f"{where}: must not be empty"
    elif e.validator == "uniqueItems":
        msg = f"{where}: lists an item twice {_short(e.instance)}"
    else:
        msg = f"{where}: {e.message}"
    return [wf.diag(code, msg, *path)]


def _json_type(x: Any) -> str:
    names = {
        bool: "boolean",
        int: "integer",
        float: "number",
        str: "string",
        list: "array",
        dict: "table",
        type(None): "null",
    }
    return names.get(type(x), type(x).__name__)


def _short(x: Any) -> str:
    r = json.dumps(x, ensure_ascii=False, default=str)
    return r if len(r) <= 60 else r[:57] + "..."
