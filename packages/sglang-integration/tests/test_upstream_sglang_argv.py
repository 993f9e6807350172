"""``_sglang_argv`` reads SGLang's arguments as sglang 0.5.23's own parser does.

cpkv-serve checks ``--tp``, ``--attn-cp-size``, ``--model-path``... before importing SGLang, so
it reads them without SGLang's parser. Held equal here to that parser (``prepare_server_args``
builds it as ``argparse.ArgumentParser`` + ``ServerArgs.add_cli_args``): every prefix of every
option string (SGLang allows abbreviations), random command lines, ``sglang serve``'s positional
model path, and the one SGLang fact the ``--attn-cp-size 0`` refusal rests on.
"""

from __future__ import annotations

import argparse
import contextlib
import io

import _sglang_env as env
import pytest
from cpkv_cli import InputError as BadInput
from hypothesis import given, settings
from hypothesis import strategies as st
from sglang_cpkv.serve._sglang_argv import (
    FLAG_DESTS,
    INT_DESTS,
    OPTIONS,
    SGLangArgs,
    option_of,
    positional_model_path,
    read_sglang_args,
)

pytestmark = [*env.SGLANG_IMPORT_WARNINGS, pytest.mark.slow]
_BASE = ["--model-path", "m0"]  # SGLang's parser requires one


@pytest.fixture(scope="module")
def sglang_parser() -> argparse.ArgumentParser:
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser


def _sglang_dest(parser: argparse.ArgumentParser, token: str) -> str | None:
    """The dest SGLang's parser sets for ``token`` (given a value after it), None if none/error."""
    defaults = vars(parser.parse_known_args(_BASE)[0])
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            ns, _ = parser.parse_known_args([*_BASE, token, "7"])
    except SystemExit:  # ambiguous, or "7" is not a value it takes
        return None
    changed = [k for k, v in vars(ns).items() if v != defaults.get(k)]
    return changed[0] if len(changed) == 1 else None


def test_option_strings_are_sglangs(sglang_parser):
    by_dest = {a.dest: set(a.option_strings) for a in sglang_parser._actions}
    for dest, strings in OPTIONS.items():
        assert set(strings) == by_dest[dest], dest
        action = next(a for a in sglang_parser._actions if a.dest == dest)
        assert (action.type is int) == (dest in INT_DESTS), dest
        assert (action.nargs == 0) == (dest in FLAG_DESTS), dest
        assert SGLangArgs.__dataclass_fields__[dest].default == action.default or (
            dest == "json_model_override_args"  # SGLang's default is the string "{}" too
        ), dest


def test_every_prefix_resolves_like_sglang(sglang_parser):
    """Each prefix of each option string: ours iff SGLang's parser gives it to the same option."""
    checked = 0
    for strings in OPTIONS.values():
        for full in strings:
            for n in range(3, len(full) + 1):
                token = full[:n]
                assert option_of(token) == _sglang_dest(sglang_parser, token), token
                assert option_of(token + "=7") == option_of(token)
                checked += 1
    assert checked  # 271 prefixes with sglang 0.5.23


_SPELLINGS = sorted(
    {full[:n] for strings in OPTIONS.values() for full in strings for n in range(3, len(full) + 1)}
    - {""}
)
_OTHER = [
    ["--kv-cache-dtype", "fp8_e4m3"],
    ["--chunked-prefill-size", "4096"],
    ["--trust-remote-code"],
]


@st.composite
def _argv(draw) -> list[str]:
    argv: list[str] = []
    for _ in range(draw(st.integers(0, 8))):
        if draw(st.booleans()):
            argv += draw(st.sampled_from(_OTHER))
            continue
        token = draw(st.sampled_from(_SPELLINGS))
        dest = option_of(token)
        if dest is None:
            continue  # ambiguous or another option's prefix: SGLang's business
        if dest in FLAG_DESTS:
            argv.append(token)
            continue
        value = (
            str(draw(st.integers(-3, 64)))
            if dest in INT_DESTS
            else draw(st.sampled_from(["./m", "org/name", "main", "cuda", "{}"]))
        )
        argv += [f"{token}={value}"] if draw(st.booleans()) else [token, value]
    return argv


@settings(max_examples=300, deadline=None)
@given(argv=_argv())
def test_random_command_lines_read_like_sglang(sglang_parser, argv):
    ns, _ = sglang_parser.parse_known_args([*_BASE, *argv])
    ours = read_sglang_args([*_BASE, *argv])
    for dest in OPTIONS:
        assert getattr(ours, dest) == getattr(ns, dest), (dest, argv)


@pytest.mark.parametrize(
    "argv",
    [
        ["./glm51", "--tp", "8"],
        ["--model-path", "./glm51"],
        ["zai-org/GLM-5.1-FP8"],
        [],
        ["-h"],
        ["--tp", "8", "./glm51"],
    ],
)
def test_positional_model_path_as_sglang_serve(argv):
    from sglang.cli.serve import _normalize_positional_model_path

    assert positional_model_path(argv) == _normalize_positional_model_path(argv)[0]


def test_bad_integers_are_one_line(sglang_parser):
    for argv in (["--tp", "eight"], ["--attn-cp-size", ""], ["--nnodes=1.5"], ["--tp"]):
        with pytest.raises(BadInput) as info:
            read_sglang_args(argv)
        assert "\n" not in str(info.value)
        with contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit):
            sglang_parser.parse_args([*_BASE, *argv])  # SGLang refuses them too


def test_attn_cp_size_documents_no_zero(sglang_parser):
    """SGLang's help names no 0/auto value; a change here reopens the refusal of 0."""
    (action,) = [a for a in sglang_parser._actions if a.dest == "attn_cp_size"]
    assert action.help == "The attention context parallelism size."
    assert action.default == 1


def test_sglang_silently_widens_attn_cp_zero():
    """What the refusal prevents: under DSA prefill CP, SGLang reads 0 as tp / attention dp."""
    argv = env.glm51_argv("--enable-prefill-cp", "--cp-strategy", "interleave")
    server_args = env.resolve([*argv, "--attn-cp-size", "0"], env.SM90)
    assert env.resolved(server_args, "attn_cp_size") == 8
