"""Reading subcommands off help pages: a fixed table, and the real CLIs held to their parsers."""

from __future__ import annotations

import argparse
import io
import subprocess
from contextlib import redirect_stdout

import click
import pytest
from doccheck import listed_subcommands
from hypothesis import given, settings
from hypothesis import strategies as st


def argparse_help(build) -> str:
    """The help page argparse itself prints for the parser `build(parser)` sets up."""
    parser = argparse.ArgumentParser(prog="tool")
    build(parser)
    out = io.StringIO()
    with redirect_stdout(out), pytest.raises(SystemExit):
        parser.parse_args(["--help"])
    return out.getvalue()


def _subparsers(metavar=None, helps=True, aliases=False):
    def build(parser):
        sub = parser.add_subparsers(dest="cmd", metavar=metavar)
        for name in ("alpha", "beta"):
            kwargs = {"help": f"{name} help"} if helps else {}
            sub.add_parser(name, aliases=["b"] if aliases and name == "beta" else [], **kwargs)

    return build


def _choices_positional(parser):
    parser.add_argument("id")
    parser.add_argument("state", choices=["queue", "done"])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--split", choices=["zigzag", "interleave"])


ARGPARSE = [
    ("braces", _subparsers(), ("alpha", "beta")),
    ("metavar", _subparsers(metavar="VERB"), ("alpha", "beta")),
    ("no_help_strings", _subparsers(helps=False), ("alpha", "beta")),
    ("aliases", _subparsers(aliases=True), ("alpha", "beta", "b")),
    ("choices_are_not_subcommands", _choices_positional, ()),
]


@pytest.mark.parametrize(
    ("build", "expected"), [c[1:] for c in ARGPARSE], ids=[c[0] for c in ARGPARSE]
)
def test_argparse_pages(build, expected) -> None:
    assert listed_subcommands(argparse_help(build)) == expected


def click_help(group: click.Group) -> str:
    """The help page click itself prints for `group`."""
    with click.Context(group, info_name="tool") as ctx:
        return group.get_help(ctx)


def test_click_page() -> None:
    @click.group()
    def tool() -> None:
        """A tool."""

    @tool.command()
    @click.option("--flag")
    def download() -> None:
        """Download files."""

    @tool.command(name="upload-large-folder")
    def upload() -> None:
        """Upload [alias: ulf, up]."""

    @tool.command(hidden=True)
    def secret() -> None:
        """Hidden."""

    assert listed_subcommands(click_help(tool)) == ("download", "upload-large-folder", "ulf", "up")


def test_rich_box_page() -> None:
    page = (
        "Usage: tool [OPTIONS] COMMAND [ARGS]...\n\n"
        "╭─ Options ──────────────────────────╮\n"
        "│ --help          Show this message. │\n"
        "╰────────────────────────────────────╯\n"
        "╭─ Commands ─────────────────────────╮\n"
        "│ download   Download files.         │\n"
        "│ upload     Upload files.           │\n"
        "╰────────────────────────────────────╯\n"
    )
    assert listed_subcommands(page) == ("download", "upload")


def test_a_page_without_subcommands() -> None:
    assert listed_subcommands(argparse_help(lambda p: p.add_argument("--cp", type=int))) == ()


@settings(max_examples=50, deadline=None)
@given(
    names=st.lists(
        st.from_regex(r"[a-z][a-z0-9-]{0,10}", fullmatch=True), min_size=1, max_size=6, unique=True
    ),
    metavar=st.sampled_from([None, "VERB", "COMMAND"]),
    helps=st.booleans(),
)
def test_any_argparse_group(names: list[str], metavar: str | None, helps: bool) -> None:
    """Whatever the names, argparse's own page lists them all (help strings or not)."""

    def build(parser):
        sub = parser.add_subparsers(dest="cmd", metavar=metavar)
        for name in names:
            sub.add_parser(name, **({"help": "h"} if helps else {}))

    found = listed_subcommands(argparse_help(build))
    assert set(found) == set(names) or (metavar and not helps and found == ())


# The real CLIs: what we read off each page is exactly what the CLI accepts.
ARGPARSE_CLIS = [("govctl",), ("govctl", "work"), ("glm-config",), ("deepgemm-compat",)]


@pytest.mark.parametrize("key", ARGPARSE_CLIS, ids=" ".join)
def test_listed_subcommands_are_accepted(env, key: tuple[str, ...]) -> None:
    page = env.help_page(key[0], key[1:])
    assert page.subcommands, page.text
    exe = env.venv_exe(key[0])
    for name in page.subcommands:
        ok = subprocess.run([exe, *key[1:], name, "--help"], capture_output=True, timeout=120)
        assert ok.returncode == 0, (name, ok.stderr)
    bad = subprocess.run([exe, *key[1:], "no-such-subcommand", "--help"], capture_output=True)
    assert bad.returncode == 2, bad.stdout


def test_hf_page_matches_its_click_group(env) -> None:
    """`hf`'s page lists each visible command of its click group (hidden ones are deprecated
    spellings) and the aliases the group resolves."""
    listed = env.help_page("hf").subcommands
    script = (
        "import click\n"
        "from huggingface_hub.cli.hf import app\n"
        "ctx = click.Context(app)\n"
        "import sys\n"
        "names = sys.stdin.read().split()\n"
        "visible = [n for n in app.list_commands(ctx) if not app.get_command(ctx, n).hidden]\n"
        "print(' '.join(sorted(visible)))\n"
        "print(' '.join(n for n in names if app.get_command(ctx, n) is None))\n"
    )
    out = subprocess.run(
        [env.venv / "bin" / "python", "-c", script],
        input=" ".join(listed),
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    ).stdout.split("\n")
    visible, unresolved = out[0].split(), out[1].split()
    assert set(visible) <= set(listed)
    assert unresolved == []
