"""``cpkv_cli.environment``: each variable's parser, the one-line refusal, the ``--help`` section,
and that the declarations cover every variable the packages' sources name."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cpkv_cli import InputError, OneLineParser, check_environment
from cpkv_cli.environment import (
    CPKV_BACKEND,
    CPKV_CACHE_DIR,
    CPKV_CP_SPLIT_MAX_BYTES,
    CPKV_DEBUG,
    CPKV_DEBUG_FAULT_ACK,
    CPKV_DISABLE_HOOKS,
    CPKV_EXTRA_BACKENDS,
    CPKV_SHARED_KV,
    DEEPGEMM_COMPAT_MIN_SGL_KERNEL,
    READ_BY,
    VARIABLES,
    environment_help,
)

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("var", "value", "parsed"),
    [
        (CPKV_BACKEND, " Triton ", "triton"),
        (CPKV_BACKEND, "", "auto"),
        (CPKV_DEBUG, "yes", True),
        (CPKV_DEBUG, "OFF", False),
        (CPKV_DEBUG, "  ", False),
        (CPKV_CP_SPLIT_MAX_BYTES, "8589934592", 8589934592),
        (CPKV_CP_SPLIT_MAX_BYTES, "0", 0),
        (CPKV_CP_SPLIT_MAX_BYTES, str(2**63 - 1), 2**63 - 1),
        (CPKV_EXTRA_BACKENDS, "a.b:c, d:e.f ,", ("a.b:c", "d:e.f")),
        (
            CPKV_DISABLE_HOOKS,
            "deepgemm-warmup,ragged-offsets",
            ("deepgemm-warmup", "ragged-offsets"),
        ),
        (CPKV_DEBUG_FAULT_ACK, "i-want-wrong-output", "i-want-wrong-output"),
        (CPKV_SHARED_KV, "1", True),
        (CPKV_SHARED_KV, "0", False),
        (DEEPGEMM_COMPAT_MIN_SGL_KERNEL, "0.5.1.post2", "0.5.1.post2"),
    ],
)
def test_good_values_parse(var, value, parsed):
    assert var.read({var.name: value}) == parsed


@pytest.mark.parametrize(
    ("var", "value"),
    [
        (CPKV_BACKEND, "nonsense"),
        (CPKV_DEBUG, "maybe"),
        (CPKV_DEBUG, "2"),
        (CPKV_CP_SPLIT_MAX_BYTES, "abc"),
        (CPKV_CP_SPLIT_MAX_BYTES, "-5"),
        (CPKV_CP_SPLIT_MAX_BYTES, "8G"),
        (CPKV_CP_SPLIT_MAX_BYTES, "1e9"),
        (CPKV_CP_SPLIT_MAX_BYTES, "²"),  # str.isdigit says yes, int() says no
        (CPKV_CP_SPLIT_MAX_BYTES, str(2**63)),
        (CPKV_CP_SPLIT_MAX_BYTES, "9" * 5000),  # past int()'s 4300 digits
        (CPKV_EXTRA_BACKENDS, "a.b"),
        (CPKV_EXTRA_BACKENDS, "a:b c"),
        (CPKV_DISABLE_HOOKS, "deepgemm warmup"),
        (CPKV_DEBUG_FAULT_ACK, "yes"),
        (CPKV_SHARED_KV, "yes"),  # only 1 turns it on, as cpkv-serve sets it
        (DEEPGEMM_COMPAT_MIN_SGL_KERNEL, "newest"),
    ],
)
def test_a_bad_value_is_one_line_naming_the_variable_and_what_it_accepts(var, value):
    with pytest.raises(InputError) as info:
        var.read({var.name: value})
    message = str(info.value)
    assert "\n" not in message and len(message) < 300, message
    assert message.startswith(f"{var.name}=") and f"expected {var.accepts}" in message


def test_the_error_class_is_the_callers():
    class LayoutError(ValueError):
        pass

    with pytest.raises(LayoutError, match="CPKV_BACKEND='x': expected"):
        CPKV_BACKEND.read({"CPKV_BACKEND": "x"}, error=LayoutError)


def test_a_directory_variable_refuses_a_file(tmp_path: Path):
    (tmp_path / "file").write_text("")
    assert CPKV_CACHE_DIR.read({"CPKV_CACHE_DIR": str(tmp_path / "new")}) == tmp_path / "new"
    with pytest.raises(InputError, match="expected a directory"):
        CPKV_CACHE_DIR.read({"CPKV_CACHE_DIR": str(tmp_path / "file")})


def test_check_environment_stops_at_the_first_bad_value():
    env = {"CPKV_BACKEND": "torch", "CPKV_DEBUG": "maybe", "CPKV_CP_SPLIT_MAX_BYTES": "x"}
    with pytest.raises(InputError, match=r"^CPKV_DEBUG="):
        check_environment(READ_BY["cpkv-validate"], env)
    check_environment(READ_BY["cpkv-validate"], {})


def test_help_lists_each_variable_once_under_the_epilog():
    parser = OneLineParser(prog="x", epilog="the epilog.", environment=READ_BY["cpkv-validate"])
    text = parser.format_help()
    section = text.split("the epilog.")[1]
    assert section.startswith("\n\nenvironment (each checked at start")
    for var in READ_BY["cpkv-validate"]:
        assert len(re.findall(rf"^  {var.name}$", section, re.MULTILINE)) == 1
    assert all(len(line) <= 80 for line in section.splitlines())
    sub = parser.add_subparsers().add_parser("sub")
    assert sub.format_help().endswith(environment_help(READ_BY["cpkv-validate"]) + "\n")
    assert "environment" not in OneLineParser(prog="y").format_help()


def test_every_variable_the_sources_name_is_declared():
    """A new ``CPKV_*`` or ``DEEPGEMM_COMPAT_*`` variable fails here until it is declared (and so
    checked at start and listed in ``--help`` by the commands that read it)."""
    named = set()
    declarations = ROOT / "packages/cpkv-cli/src/cpkv_cli/environment.py"
    for source in [*ROOT.glob("packages/*/src/**/*.py"), *ROOT.glob("tools/*/src/**/*.py")]:
        if source == declarations:
            continue
        named |= set(
            re.findall(r"\b(?:CPKV|DEEPGEMM_COMPAT)_[A-Z0-9_]*[A-Z0-9]\b", source.read_text())
        )
    assert named - set(VARIABLES) == set()
    assert set(VARIABLES) - named == set()  # no declaration outlives its reader
    read = {v.name for vs in READ_BY.values() for v in vs}
    assert set(VARIABLES) - read == {"DEEPGEMM_COMPAT_SKIP_KERNEL_CHECK"}  # the library alone
