"""Tag vocabulary and verification guards, as upstream govctl's `check` enforces them.

Upstream is Rust and cannot run here, so its rules are restated in the oracles below from its
documented behaviour: a tag is a lowercase ASCII letter followed by lowercase letters, digits
and dashes, and must be listed in `[tags] allowed` (no list: no tag); a waiver must name a
guard the item requires, with a non-blank reason, once.
"""

from __future__ import annotations

import string
from pathlib import Path

import pytest
from _govctl_support import MAX_EXAMPLES
from govctl._config import Config, load_config
from govctl._links import Artifacts
from govctl._load import WorkFile
from govctl._policy import rule_guards_exist, rule_tags, rule_waivers
from govctl.errors import UsageError
from hypothesis import given, settings
from hypothesis import strategies as st


def item(**tables: dict) -> WorkFile:
    doc = {"govctl": {"id": "WI-2026-08-01-a3f9"}, "content": {"description": "x"}, **tables}
    return WorkFile(Path("2026-08-01-x.toml"), "x.toml", "", doc)


def codes(diags) -> list[str]:
    return [d.code for d in diags]


def is_upstream_tag(tag: str) -> bool:
    """Upstream's `^[a-z][a-z0-9-]*$`, read char by char (ASCII, no trailing-newline slack)."""
    tail = string.ascii_lowercase + string.digits + "-"
    return bool(tag) and tag[0] in string.ascii_lowercase and all(c in tail for c in tag)


ALLOWED = frozenset({"runtime", "kernels", "a-1"})


@pytest.mark.parametrize(
    ("tag", "allowed", "want"),
    [
        ("runtime", ALLOWED, []),
        ("a-1", ALLOWED, []),
        ("triton", ALLOWED, ["E018"]),
        ("runtime", frozenset(), ["E018"]),  # a config without a list allows nothing
        ("runtime", None, []),  # no config at all: shape only
        ("2d", None, ["E009"]),  # a leading digit: our old schema took it, upstream does not
        ("2d", ALLOWED, ["E009"]),  # a bad shape is E009, not also E018
        ("-x", None, ["E009"]),
        ("Runtime", None, ["E009"]),
        ("runtime\n", None, ["E009"]),
        ("rün", None, ["E009"]),
        ("", None, ["E009"]),
    ],
)
def test_tags_table(tag: str, allowed: frozenset[str] | None, want: list[str]) -> None:
    cfg = Config(Path("."), tags_allowed=allowed)
    assert codes(rule_tags(item(govctl={"tags": [tag]}), cfg)) == want


@settings(max_examples=MAX_EXAMPLES * 5, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(alphabet="az09-_A\n é", max_size=6),
            st.sampled_from(sorted(ALLOWED)),
        ),
        max_size=5,
    ),
    st.one_of(st.none(), st.just(ALLOWED)),
)
def test_tags_match_upstream(tags: list[str], allowed: frozenset[str] | None) -> None:
    want = [
        "E009" if not is_upstream_tag(t) else "E018"
        for t in tags
        if not is_upstream_tag(t) or (allowed is not None and t not in allowed)
    ]
    got = codes(rule_tags(item(govctl={"tags": tags}), Config(Path("."), tags_allowed=allowed)))
    assert got == want


@pytest.mark.parametrize(
    ("defaults", "required", "waivers", "want"),
    [
        ((), ["GUARD-A"], [("GUARD-A", "docs only")], []),
        (("GUARD-A",), [], [("GUARD-A", "docs only")], []),  # a default guard is required
        ((), [], [("GUARD-A", "docs only")], ["E019"]),
        ((), ["GUARD-A"], [("GUARD-A", "   ")], ["E010"]),  # blank reason
        ((), ["GUARD-A"], [("GUARD-A", "")], []),  # empty: the schema's minLength reports it
        ((), ["GUARD-A"], [("GUARD-A", "x"), ("GUARD-A", "y")], ["E010"]),  # waived twice
        ((), [], [("guard-a", "x")], []),  # malformed: the schema's E009, nothing else
    ],
)
def test_waivers_table(defaults, required, waivers, want) -> None:
    wf = item(
        verification={
            "required_guards": required,
            "waivers": [{"guard": g, "reason": r} for g, r in waivers],
        }
    )
    assert codes(rule_waivers(wf, Config(Path("."), default_guards=defaults))) == want


def _guard(gov: Path, name: str, text: str) -> None:
    (gov / "guard").mkdir(parents=True, exist_ok=True)
    (gov / "guard" / f"{name}.toml").write_text(text)


def test_guards_resolve_by_their_id_not_their_file_name(tmp_path: Path) -> None:
    gov = tmp_path / "gov"
    _guard(gov, "tests", '[govctl]\nid = "GUARD-UNIT-TESTS"\n')
    _guard(gov, "broken", '[govctl\nid = "GUARD-BROKEN"\n')  # does not parse: defines nothing
    _guard(gov, "GUARD-NAMED-FILE", '[govctl]\ntitle = "no id"\n')
    wf = item(
        verification={
            "required_guards": ["GUARD-UNIT-TESTS", "GUARD-BROKEN", "GUARD-NAMED-FILE"],
            "waivers": [{"guard": "GUARD-OTHER", "reason": "x"}],
        }
    )
    got = [d.message.split()[2] for d in rule_guards_exist(wf, Artifacts(gov))]
    assert got == ["GUARD-BROKEN", "GUARD-NAMED-FILE", "GUARD-OTHER"]


@pytest.mark.parametrize(
    ("text", "tags", "guards"),
    [
        ("", frozenset(), ()),
        ('[tags]\nallowed = ["a", "b"]\n', frozenset({"a", "b"}), ()),
        ('[verification]\ndefault_guards = ["GUARD-A"]\n', frozenset(), ()),  # not enabled
        (
            '[verification]\nenabled = true\ndefault_guards = ["GUARD-A"]\n',
            frozenset(),
            ("GUARD-A",),
        ),
    ],
)
def test_config_policy(tmp_path: Path, text: str, tags, guards) -> None:
    (tmp_path / "gov").mkdir()
    (tmp_path / "gov" / "config.toml").write_text(text)
    cfg = load_config(tmp_path)
    assert (cfg.tags_allowed, cfg.default_guards) == (tags, guards)


def test_no_config_means_no_vocabulary(tmp_path: Path) -> None:
    assert load_config(tmp_path).tags_allowed is None


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ('tags = ["a"]\n', "'tags' must be a table"),
        ('[tags]\nallowed = "a"\n', "'allowed' = 'a'; expected a list of strings"),
        ("[tags]\nallowed = [1]\n", "expected a list of strings"),
        ('[verification]\nenabled = "yes"\n', "enabled = 'yes'; expected true or false"),
    ],
)
def test_bad_config_is_a_usage_error(tmp_path: Path, text: str, names: str) -> None:
    (tmp_path / "gov").mkdir()
    (tmp_path / "gov" / "config.toml").write_text(text)
    with pytest.raises(UsageError, match=names.replace("[", r"\[")):
        load_config(tmp_path)


def test_guard_pattern_is_the_schemas() -> None:
    """E019/E024 skip exactly the guards the schema's E009 reports."""
    import json

    from _govctl_support import BUNDLED_SCHEMA
    from govctl._policy import GUARD_RE

    schema = json.loads(BUNDLED_SCHEMA.read_text())
    assert schema["definitions"]["guard"]["pattern"] == f"^{GUARD_RE.pattern}$"
