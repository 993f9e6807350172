"""``_sglang_options`` restates SGLang's argument parser; held equal to the installed SGLang's.

cpkv-serve refuses a misspelt SGLang argument, an ambiguous abbreviation, a missing or extra
value, a bad number or a bad choice before importing SGLang, from a table read out of SGLang's
parser by ``scripts/gen_sglang_options.py``, and prints SGLang's help from the text stored beside
it. Here: the table and the help are the installed SGLang's (a bump of the locked sglang fails
until the script is run again), and on fixed and generated command lines our check refuses
exactly what SGLang's own parser refuses, with SGLang's message, except values of options whose
converter is SGLang's own (``human_readable_int``, JSON...), which only SGLang checks.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import _sglang_env as env
import pytest
from cpkv_cli import InputError as BadInput
from hypothesis import given, settings
from hypothesis import strategies as st
from sglang_cpkv.serve._sglang_options import (
    TABLE,
    check_sglang_argv,
    options_table,
    sglang_help,
)

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]

_GEN = Path(__file__).parents[1] / "scripts" / "gen_sglang_options.py"
_spec = importlib.util.spec_from_file_location("gen_sglang_options", _GEN)
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)
BASE = ["--model-path", "m0"]  # SGLang's parser requires one


class _Refused(Exception):
    pass


@pytest.fixture(scope="module")
def sglang_parser() -> argparse.ArgumentParser:
    parser = gen.sglang_parser()

    def error(message: str):
        raise _Refused(message)

    parser.error = error  # argparse reports every parse error through self.error
    return parser


@pytest.fixture(scope="module")
def fresh() -> dict[str, str]:
    """The script's reading of SGLang's parser in a fresh process (``--print``)."""
    proc = subprocess.run(
        [sys.executable, str(_GEN), "--print"], capture_output=True, text=True, check=True
    )
    return json.loads(proc.stdout)


def test_the_table_is_the_installed_sglangs(fresh):
    assert options_table()["sglang"] == importlib.metadata.version("sglang"), "run the script"
    assert TABLE.read_text() == fresh["table"], "run scripts/gen_sglang_options.py"


def test_the_help_lists_every_option_of_sglangs_parser(fresh):
    """cpkv-serve --help lists SGLang's options from the table (no SGLang text is stored): every
    option string of SGLang's parser as a fresh process builds it, with the checked choices."""
    listed = sglang_help()
    fresh_options = json.loads(fresh["table"])["options"]
    assert fresh_options
    for opt in fresh_options:
        for s in opt["strings"]:
            if s not in ("-h", "--help"):
                assert f" {s}" in listed or f"{s}," in listed, s
        if opt["choices"]:
            assert "{" + ",".join(map(str, opt["choices"])) + "}" in listed, opt["strings"]


def test_registry_choices_are_left_to_sglang(sglang_parser):
    """Choices a plugin can extend are not checked here (the parser a plugin-loaded SGLang
    builds may list more): those options take any value in our check."""
    for action in sglang_parser._actions:
        if gen.REGISTRIES & set(action.option_strings):
            assert action.choices, action.option_strings  # SGLang does restrict them
    options = {o["strings"][0]: o for o in options_table()["options"]}
    assert all(options[name]["choices"] is None for name in gen.REGISTRIES)


def _sglang_verdict(parser: argparse.ArgumentParser, argv: list[str]) -> str | None:
    try:
        parser.parse_args([*BASE, *argv])
    except _Refused as err:
        return str(err)
    return None


def _our_verdict(argv: list[str]) -> str | None:
    try:
        check_sglang_argv([*BASE, *argv], options_table()["sglang"])
    except BadInput as err:
        return str(err)
    return None


#: argparse's own messages about an option's values (the rest come from a converter).
_STRUCTURAL = ("expected ", "ignored explicit argument", "invalid choice", "not allowed with")


def _converted_by_sglang(message: str) -> bool:
    """SGLang refused a value through one of its own converters or registries (left to SGLang
    by design)."""
    if not message.startswith("argument "):
        return False
    names, _, said = message.removeprefix("argument ").partition(": ")
    named = set(names.split("/"))
    others = {s for o in options_table()["options"] if o["type"] == "other" for s in o["strings"]}
    if said.startswith("invalid choice"):  # converted first, then compared: SGLang's to do
        return bool(named & (others | gen.REGISTRIES))
    return bool(named & others) and not said.startswith(_STRUCTURAL)


def _same(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    theirs, ours = _sglang_verdict(parser, argv), _our_verdict(argv)
    if ours is None:
        assert theirs is None or _converted_by_sglang(theirs), (argv, theirs)
    else:
        assert theirs is not None, (argv, ours)
        if _converted_by_sglang(theirs):
            return  # SGLang stopped at its own converter first; ours at the next problem
        # the choices of a set print in hash order, different in each process
        said = " ".join(theirs.split()).split(" (choose from ")[0][:150]
        assert said in ours, (argv, theirs, ours)
        assert ours.startswith("SGLang would refuse this: ") and "\n" not in ours


CASES = {
    "misspelt": ["--cp-stratgy", "interleave"],
    "bad_choice": ["--cp-strategy", "bogus"],
    "good_choice": ["--cp-strategy", "interleave"],
    "ambiguous": ["--cp", "interleave"],
    "abbreviated": ["--cp-str", "zigzag"],
    "equals": ["--cp-strategy=zigzag"],
    "flag_with_value": ["--enable-prefill-cp=1"],
    "missing_value": ["--tp-size"],
    "value_is_an_option": ["--tp-size", "--enable-prefill-cp"],
    "not_an_int": ["--tp-size", "eight"],
    "negative_int": ["--tp-size", "-8"],
    "not_a_float": ["--mem-fraction-static", "most"],
    "int_choice": ["--log-requests-level", "7"],
    "stray_positional": ["extra"],
    "after_double_dash": ["--", "--tp-size", "8"],
    "single_dash": ["-x"],
    "boolean_optional_no": ["--no-enable-tf32-matmul"],
    "nargs_plus_empty": ["--cuda-graph-bs"],
    "nargs_plus": ["--cuda-graph-bs", "1", "2", "4"],
    "own_converter": ["--context-length", "4k"],
    "space_in_token": ["--tp size"],
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fixed_command_lines(sglang_parser, case):
    _same(sglang_parser, CASES[case])


def _token(strings: list[str]) -> st.SearchStrategy[str]:
    option = st.sampled_from(strings)
    cut = st.tuples(option, st.integers(2, 40)).map(lambda t: t[0][: max(3, t[1])])
    typo = st.tuples(option, st.integers(2, 40), st.sampled_from("-abcxyz")).map(
        lambda t: t[0][: t[1]] + t[2] + t[0][t[1] + 1 :]
    )
    value = st.one_of(
        st.sampled_from(["1", "8", "-1", "0.5", "nan", "auto", "zigzag", "fp8_e4m3", "x"]),
        st.text("abcdef-=0123456789", min_size=0, max_size=6),
    )
    with_value = st.tuples(option, value).map(lambda t: f"{t[0]}={t[1]}")
    return st.one_of(option, cut, typo, value, with_value)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_generated_command_lines(sglang_parser, data):
    strings = [s for o in options_table()["options"] for s in o["strings"] if s not in ("-h",)]
    strings = [s for s in strings if s != "--help"]
    argv = data.draw(st.lists(_token(strings), min_size=1, max_size=5))
    if any(a in ("-h", "--help") or a.startswith("--help") or a.startswith("-h") for a in argv):
        return  # help is printed, not parsed
    _same(sglang_parser, argv)
