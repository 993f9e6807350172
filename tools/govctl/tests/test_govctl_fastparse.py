"""The fast TOML subset parser against tomllib as the oracle: None, or exactly tomllib's result."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from _govctl_support import FIXTURES, MAX_EXAMPLES
from govctl._fastparse import fast_loads
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

REPO_WORK = Path(__file__).parents[3] / "gov" / "work"
CORPUS = [p for p in sorted(FIXTURES.rglob("*.toml")) + sorted(REPO_WORK.glob("*.toml"))
          if "E003" not in p.parts]  # fmt: skip


def _oracle(text: str) -> object:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        return "syntax error"


@pytest.mark.parametrize("path", CORPUS, ids=lambda p: p.name)
def test_corpus(path: Path) -> None:
    text = path.read_text()
    got = fast_loads(text)
    assert got is None or got == _oracle(text)


def test_typical_items_take_the_fast_path(gov_repo: Path, run_line) -> None:
    new = ["work", "new", "A", "--date", "2026-11-29", "-d", "x\ny", "-c", "fix: z", "--tag", "t"]
    run_line(new, cwd=gov_repo)
    run_line(
        ["work", "journal", "add", "WI-2026-11-29-001", "j", "--date", "2026-11-29"], cwd=gov_repo
    )
    (item,) = (gov_repo / "gov/work").glob("*.toml")
    assert fast_loads(item.read_text()) == tomllib.loads(item.read_text())
    assert fast_loads((FIXTURES / "positive/2026-08-01-full-done-item.toml").read_text())


@pytest.mark.parametrize(
    "text",
    [
        'a = "x"\na = "y"\n',  # duplicate key
        "[t]\n[t]\n",  # table defined twice
        "a = []\n[[a]]\n",  # static array then array of tables
        "[a]\n[[a]]\n",
        "[[a]]\n[a]\n",
        "[a.b]\nc = 1\n[a]\nd = 1\n",  # super-table after its sub-table (valid, but tomllib's call)
        'a = "x"\n[a.b]\n',
        'a = "x" y\n',
        'a = "\\n"\n',  # escapes go to tomllib
        'a = """\nx\\\ny"""\n',
        'a = """x""""\n',
        'a = """unclosed\n',
        "a = 01\n",
        "a = 2026-01-01\n",
        "a = [1, 2]\n",
        'a.b = "x"\n',
        'a = "x"\r\n',
        "\ufeffa = 1\n",
        'a = "tab\there"\n',
    ],
)
def test_edge_cases(text: str) -> None:
    got = fast_loads(text)
    assert got is None or got == _oracle(text)


KEYS = st.sampled_from(["a", "b", "content", "govctl", "x-y", "k_1", "a.b", '"q"', ""])
CHARS = st.text(alphabet=st.sampled_from(list("ab #\"\\\t'=[],.é\x01\x7f")), max_size=8)
SCALARS = st.one_of(
    CHARS.map(lambda s: f'"{s}"'),
    CHARS.map(lambda s: f"'{s}'"),
    st.sampled_from(["0", "1", "01", "-1", "1_0", "99999999999999999999", "true", "false", "True",
                     "2026-01-01", "1.5", "[]", "[,]", "{}", '""', '"""x"""', '""""""']),
)  # fmt: skip
VALUES = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=3).map(lambda xs: "[" + ", ".join(xs) + st_trailing(xs)),
    st.tuples(CHARS, st.lists(CHARS, max_size=3), CHARS).map(
        lambda t: '"""' + t[0] + "".join("\n" + x for x in t[1]) + '"""' + t[2]
    ),
)


def st_trailing(xs: list[str]) -> str:
    return ",]" if len(xs) % 2 else "]"


LINES = st.one_of(
    st.tuples(KEYS, VALUES, st.sampled_from(["", " ", "\t", " # c", "#", " x"])).map(
        lambda t: f"{t[0]} = {t[1]}{t[2]}"
    ),
    st.tuples(st.sampled_from(["[", "[[", "[ "]), st.lists(KEYS, min_size=1, max_size=3),
              st.sampled_from(["]", "]]", "] # c", "]x"])).map(
        lambda t: t[0] + ".".join(t[1]) + t[2]),
    st.sampled_from(["", "# comment", "   ", "\t# x", "\r", "x", "[a]", "[[a]]", 'a = "v"']),
)  # fmt: skip


@settings(
    max_examples=MAX_EXAMPLES * 6, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(st.lists(LINES, max_size=8), st.sampled_from(["", "\n"]), st.sampled_from(["", "  "]))
def test_fast_parse_is_none_or_tomllib(lines: list[str], end: str, indent: str) -> None:
    text = "\n".join(indent + line for line in lines) + end
    got = fast_loads(text)
    assert got is None or got == _oracle(text)


# Mostly-valid documents: stresses table/array-of-tables/key bookkeeping rather than syntax.
NAMES = st.sampled_from(["a", "b", "c"])
PLAIN = st.text(alphabet=st.sampled_from(list("ab #é\t[]=.")), max_size=6)
VALID_LINES = st.one_of(
    st.tuples(NAMES, st.one_of(
        PLAIN.map(lambda s: f'"{s}"'),
        st.sampled_from(["1", "0", "true", "false", "[]", '["x", "y",]', '[ "z" ]']),
        st.lists(PLAIN, min_size=1, max_size=3).map(lambda xs: '"""' + "\n".join(xs) + '"""'),
    )).map(lambda t: f"{t[0]} = {t[1]}"),
    st.lists(NAMES, min_size=1, max_size=2).map(lambda ks: "[" + ".".join(ks) + "]"),
    st.lists(NAMES, min_size=1, max_size=2).map(lambda ks: "[[" + ".".join(ks) + "]]"),
)  # fmt: skip


@settings(
    max_examples=MAX_EXAMPLES * 6, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
@given(st.lists(VALID_LINES, max_size=10))
def test_fast_parse_table_rules_match_tomllib(lines: list[str]) -> None:
    text = "\n".join(lines) + "\n"
    got = fast_loads(text)
    assert got is None or got == _oracle(text)
