"""The schema file, and the compiled fast predicate against jsonschema as the oracle."""

from __future__ import annotations

import copy
import json
import re
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from _govctl_support import BUNDLED_SCHEMA, FIXTURES, MAX_EXAMPLES, REPO_SCHEMA
from govctl._compile import compile_schema, ecma_regex
from govctl._rules import ID_PATTERN, REF_PATTERN
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

SCHEMA = json.loads(BUNDLED_SCHEMA.read_text())


def _anchored_pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Any:
    """`pattern` as the schema's ECMA-262 dialect reads our `^...$` patterns: the whole string.

    jsonschema's own `pattern` uses Python's `re.search`, whose `$` also matches before a final
    newline ("ADR-0001\\n" would pass); every pattern of ours is anchored at both ends
    (`test_schema_patterns_are_anchored`), so a full match of the inside is the ECMA reading.
    """
    if validator.is_type(instance, "string") and not re.fullmatch(pattern[1:-1], instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


ORACLE = jsonschema.validators.extend(jsonschema.Draft7Validator, {"pattern": _anchored_pattern})(
    SCHEMA, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER
)
FAST = compile_schema(SCHEMA)
VALID_DOCS = [
    tomllib.loads(p.read_text())
    for p in sorted((FIXTURES / "positive").rglob("*.toml"))
    if "work" in p.relative_to(FIXTURES).parts or p.parent.name in ("positive", "linked")
]


def test_repo_schema_is_the_bundled_schema() -> None:
    """The packaged schema is the source; gov/schema/ holds a copy for editors' `#:schema` line."""
    assert REPO_SCHEMA.read_text() == BUNDLED_SCHEMA.read_text(), (
        f"gov/schema/work.schema.json differs from the packaged schema: cp {BUNDLED_SCHEMA} "
        f"{REPO_SCHEMA}"
    )


def test_code_patterns_are_the_schema_patterns() -> None:
    """E017/E021 read IDs and refs with the same patterns the schema's E009 uses."""
    assert SCHEMA["definitions"]["work_id"]["pattern"] == f"^{ID_PATTERN}$"
    assert SCHEMA["definitions"]["ref"]["pattern"] == f"^(?:{REF_PATTERN})$"


def _patterns(node: Any) -> list[str]:
    if isinstance(node, dict):
        own = [node["pattern"]] if isinstance(node.get("pattern"), str) else []
        return own + [p for v in node.values() for p in _patterns(v)]
    return [p for v in node for p in _patterns(v)] if isinstance(node, list) else []


def test_schema_patterns_are_anchored() -> None:
    assert _patterns(SCHEMA) and all(
        p.startswith("^") and p.endswith("$") for p in _patterns(SCHEMA)
    )


@pytest.mark.parametrize(
    ("pattern", "text", "matches"),
    [
        (r"^ADR-\d{4}$", "ADR-0001", True),
        (r"^ADR-\d{4}$", "ADR-0001\n", False),  # Python's own `$` would match here
        (r"^GUARD-[A-Z][A-Z0-9-]*$", "GUARD-X\n", False),
        (r"^a$|^b$", "b\n", False),
        (r"^a[$]$", "a$", True),  # `$` in a class is a dollar sign
        (r"^a\$$", "a$", True),  # so is an escaped one
        (r"^a\\$", "a\\", True),  # an escaped backslash, then the end
        (r"x", "ax\n", True),  # unanchored: search
    ],
)
def test_ecma_regex_dollar_is_the_end(pattern: str, text: str, matches: bool) -> None:
    assert (ecma_regex(pattern).search(text) is not None) is matches


def test_trailing_newline_fails_the_pattern(gov_repo: Path, run_line) -> None:
    good = (FIXTURES / "positive/2026-08-09-queue-minimal.toml").read_text()
    bad = good.replace("[content]", 'refs = ["WI-2026-08-09-001\\n"]\n\n[content]', 1)
    (gov_repo / "gov/work/2026-08-09-x.toml").write_text(bad)
    r = run_line(["check", "--format", "json"], cwd=gov_repo)
    assert [d["code"] for d in json.loads(r.stdout)["diagnostics"]] == ["E009"]


def test_schema_is_valid_draft07_and_closed() -> None:
    jsonschema.Draft7Validator.check_schema(SCHEMA)

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if node.get("type") == "object":
                assert node.get("additionalProperties") is False, node
            for v in node.values():
                walk(v)

    walk(SCHEMA)


def test_the_schema_compiles() -> None:
    assert FAST is not None


@pytest.mark.parametrize(
    "schema",
    [
        {"oneOf": [{"type": "string"}]},
        {"type": ["string", "null"]},
        {"format": "email"},
        {"$ref": "http://x/y.json"},
        {"items": [{"type": "string"}]},
    ],
)
def test_unsupported_keywords_compile_to_none(schema: dict) -> None:
    assert compile_schema(schema) is None


def test_valid_fixtures_pass_both() -> None:
    assert len(VALID_DOCS) >= 6
    for doc in VALID_DOCS:
        assert ORACLE.is_valid(doc)
        assert FAST(doc)


LEAVES = st.one_of(
    st.sampled_from(
        [
            "",
            "queue",
            "done",
            "pending",
            "added",
            "2026-08-01",
            "2026-02-30",
            "2026-8-1",
            "WI-2026-08-01-a3f9",
            "WI-2026-08-01-A3F9",
            "WI-2026-08-01-001",
            "ADR-0001",
            "RFC-0001:C-X",
            "runtime",
            "Runtime",
            "GUARD-X",
            "GUARD-X\n",  # `$` is the end of the string: these fail their patterns
            "ADR-0001\n",
            "runtime\n",
            "x",
        ]
    ),
    st.text(max_size=12),
    st.integers(-2, 3),
    st.booleans(),
    st.floats(allow_nan=False, allow_infinity=False, width=16),
)
VALUES = st.recursive(
    LEAVES,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(["text", "date", "x", "status"]), inner, max_size=3),
    ),
    max_leaves=6,
)


def _paths(node: Any, where: tuple = ()) -> list[tuple]:
    out = [where]
    items = (
        node.items()
        if isinstance(node, dict)
        else enumerate(node)
        if isinstance(node, list)
        else ()
    )
    for k, v in items:
        out += _paths(v, (*where, k))
    return out


@st.composite
def mutated_docs(draw: st.DrawFn) -> Any:
    doc = copy.deepcopy(draw(st.sampled_from(VALID_DOCS)))
    for _ in range(draw(st.integers(0, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        if not path:
            continue
        *head, last = path
        parent = doc
        for k in head:
            parent = parent[k]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[last] = draw(VALUES)
        elif action == "delete":
            del parent[last]
        elif isinstance(parent, dict):
            parent[draw(st.sampled_from(["extra", "title", "refs", "tags", "notes"]))] = draw(
                VALUES
            )
        else:
            parent.append(draw(VALUES))
    return doc


def _has_float(node: Any) -> bool:
    if isinstance(node, float):
        return True
    items = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    return any(_has_float(v) for v in items)


@settings(
    max_examples=MAX_EXAMPLES * 5, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(mutated_docs())
def test_fast_predicate_agrees_with_jsonschema(doc: Any) -> None:
    fast, oracle = FAST(doc), ORACLE.is_valid(doc)
    if fast:
        assert oracle, "fast path accepted a document jsonschema rejects"
    if not _has_float(doc):  # floats are the one documented conservative case
        assert fast == oracle


def test_float_is_conservative_not_wrong() -> None:
    doc = copy.deepcopy(VALID_DOCS[0])
    doc["govctl"]["schema"] = 1.0  # a valid draft-07 integer
    assert ORACLE.is_valid(doc) and not FAST(doc)


def test_check_without_a_compilable_schema_still_reports(gov_repo: Path, run_line) -> None:
    schema = json.loads(BUNDLED_SCHEMA.read_text())
    schema["properties"]["govctl"]["properties"]["title"] = {
        "oneOf": [{"type": "string", "minLength": 3}]
    }
    (gov_repo / "gov/schema/work.schema.json").write_text(json.dumps(schema))
    good = (FIXTURES / "positive/2026-08-01-full-done-item.toml").read_text()
    (gov_repo / "gov/work/2026-08-01-x.toml").write_text(
        good.replace(
            'title = "Localise the all-gathered current KV before the cache write"', 'title = "ab"'
        )
    )
    r = run_line(["check", "--format", "json"], cwd=gov_repo)
    codes = [d["code"] for d in json.loads(r.stdout)["diagnostics"]]
    assert (r.exit_code, codes) == (1, ["E010"])


@settings(
    max_examples=MAX_EXAMPLES * 3, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(st.lists(mutated_docs(), min_size=1, max_size=3))
def test_rules_never_raise_on_malformed_documents(docs: list[Any]) -> None:
    """Every rule reads defensively: any document shape yields diagnostics, never an exception."""
    from govctl._config import Config
    from govctl._links import Artifacts, cross_file
    from govctl._load import WorkFile
    from govctl._policy import rule_guards_exist, rule_tags, rule_waivers
    from govctl._rules import RULES
    from govctl._schema import load_schema

    schema = load_schema(BUNDLED_SCHEMA)
    cfg = Config(Path("."), tags_allowed=frozenset({"runtime"}), default_guards=("GUARD-X",))
    files = [WorkFile(Path(f"2026-08-0{i}-x.toml"), f"f{i}", "", doc) for i, doc in enumerate(docs)]
    for wf in files:
        schema.check(wf)
        for rule in RULES:
            list(rule(wf))
        list(rule_tags(wf, cfg))
        list(rule_waivers(wf, cfg))
        list(rule_guards_exist(wf, Artifacts(None)))
    cross_file(files, [], Artifacts(None))
