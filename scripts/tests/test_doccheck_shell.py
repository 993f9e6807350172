"""The shell reader: a fixed table, and random words held equal to bash's own word splitting."""

from __future__ import annotations

import subprocess

import pytest
from doccheck import Op, Word, lex, split_commands
from hypothesis import given, settings
from hypothesis import strategies as st


def commands(text: str) -> list[list[str]]:
    """Every simple command's words (command substitutions' commands after the outer ones)."""
    return [[w.text for w in c] for tokens in lex(text) for c in split_commands(tokens)[0]]


TABLE = [
    ("plain", "a b  c", [["a", "b", "c"]]),
    ("continuation", "a \\\n  b\\\nc", [["a", "bc"]]),
    ("quotes", """a 'b c' "d \\"e\\" \\$f" g\\ h""", [["a", "b c", 'd "e" $f', "g h"]]),
    ("comment", "a b # c d\ne #f", [["a", "b"], ["e"]]),
    ("hash_inside_word", "a b#c", [["a", "b#c"]]),
    ("operators", "a&&b||c;d|e&f", [["a"], ["b"], ["c"], ["d"], ["e"], ["f"]]),
    ("redirections_dropped", "a >out 2>&1 <in b &>> log c", [["a", "b", "c"]]),
    ("subshell", "(a; b)", [["a"], ["b"]]),
    ("substitution", "a $(b $(c)) `d`", [["a", "$(b $(c))", "`d`"], ["b", "$(c)"], ["c"], ["d"]]),
    ("here_document", "cat <<-X\n\tnot a command\n\tX\nb", [["cat"], ["b"]]),
    ("placeholder", "a <the node's flags> b\nc", [["a", "<the node's flags>", "b"], ["c"]]),
    ("unclosed_quote_ends_with_line", "a 'b\nc", [["a", "b"], ["c"]]),
    ("arithmetic", "echo $((1 + (2)))", [["echo", "$((1 + (2)))"]]),
    ("ansi_c_quote", "a $'b\\'c' d", [["a", "b\\'c", "d"]]),
]


@pytest.mark.parametrize(("text", "expected"), [c[1:] for c in TABLE], ids=[c[0] for c in TABLE])
def test_commands_table(text: str, expected: list[list[str]]) -> None:
    assert commands(text) == expected


def test_words_know_their_line_and_whether_they_expand() -> None:
    [tokens] = lex("A=1 b \\\n  $C '$d' \"$e\"", first_line=10)
    words = [t for t in tokens if isinstance(t, Word)]
    assert [(w.text, w.line, w.dynamic, w.assignment) for w in words] == [
        ("A=1", 10, False, True),
        ("b", 10, False, False),
        ("$C", 11, True, False),
        ("$d", 11, False, False),
        ("$e", 11, True, False),
    ]


def test_function_definitions_are_named() -> None:
    [tokens] = lex("t() { x; }\nfunction u { y; }\nfunction v () { z; }")
    assert Op("(", 1) in tokens
    found, functions = split_commands(tokens)
    assert functions == {"t", "u", "v"}
    bodies = [[w.text for w in c] for c in found]
    assert bodies == [["{", "x"], ["}"], ["{", "y"], ["}"], ["{", "z"], ["}"]]


# Random words, written with every quoting bash offers, joined by blanks and continuations.
# Left out: expansions and globs (`$`, `` ` ``, `*?[`, `~`, `{}`), whose values bash computes.
_SAFE = "abcXYZ019_-./=:,@%+#"
_LITERAL = st.text(st.sampled_from(_SAFE + " '\"\\;&|<>()!"), min_size=1, max_size=8)


def _render(word: str, style: str) -> str:
    if style == "single" and "'" not in word:
        return f"'{word}'"
    if style == "double":
        return '"' + word.replace("\\", "\\\\").replace('"', '\\"').replace("!", '"\\!"') + '"'
    return "".join(c if c in _SAFE.replace("#", "") else "\\" + c for c in word)


_PIECES = st.lists(
    st.tuples(_LITERAL, st.sampled_from(["single", "double", "escaped"])), min_size=1, max_size=3
)


@settings(max_examples=150, deadline=None)
@given(
    words=st.lists(_PIECES, min_size=1, max_size=6),
    joins=st.lists(st.sampled_from([" ", "\t", "  ", " \\\n", " \\\n   "]), min_size=6),
)
def test_words_match_bash(words: list[list[tuple[str, str]]], joins: list[str]) -> None:
    """`set -- TEXT` makes bash split TEXT into words exactly as it splits a command's."""
    rendered = ["".join(_render(w, s) for w, s in pieces) for pieces in words]
    text = rendered[0] + "".join(j + w for j, w in zip(joins, rendered[1:], strict=False))
    script = f"set -- {text}\nprintf '%s\\0' \"$@\""
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    ours = [t.text for t in lex(text)[0] if isinstance(t, Word)]
    assert ours == out.stdout.split("\0")[:-1]


_WORD = st.lists(st.tuples(_LITERAL, st.sampled_from(["single", "double", "escaped"])), max_size=2)
_SEPARATOR = st.sampled_from([";", " ; ", " && ", "\n", " &&\\\n", " # note\n"])
_REDIRECT = st.sampled_from(["", " 2>/dev/null", " </dev/null", " >/dev/stdout", " 2>&1"])


@settings(max_examples=100, deadline=None)
@given(
    cmds=st.lists(st.tuples(st.lists(_WORD, max_size=3), _REDIRECT), min_size=1, max_size=4),
    seps=st.lists(_SEPARATOR, min_size=4, max_size=4),
)
def test_commands_match_bash(cmds, seps) -> None:
    """Commands joined by `;`, `&&`, newlines and comments, with redirections: bash runs `p`
    once per command, which prints that command's arguments; ours must be the same words."""
    lines = []
    for (words, redirect), sep in zip(cmds, seps, strict=False):
        rendered = ["".join(_render(w, s) for w, s in pieces) or "''" for pieces in words]
        lines.append(" ".join(["p", *rendered]) + redirect + sep)
    text = "".join(lines).rstrip(" &\\\n;")
    script = "p() { for a; do printf '%s\\0' \"$a\"; done; printf '\\1'; }\n" + text
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    theirs = [record.split("\0")[:-1] for record in out.stdout.split("\1")[:-1]]
    assert [c[1:] for c in commands(text)] == theirs
