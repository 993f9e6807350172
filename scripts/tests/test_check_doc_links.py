"""Markdown snippets through the command check, against the real CLIs of the locked environment.

Expected subcommand lists are read from the CLIs' own sources (govctl's parser declares
`{check,work}` and `new, move, tick, journal, add, list, show, render`), not from this checker.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from doccheck import check_markdown, documented_commands
from hypothesis import given, settings
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[2]
MISSING = "no-such-tool-xyz"


def bash(body: str, tag: str = "bash") -> str:
    """A Markdown file: a heading, then `body` fenced (the first body line is Markdown line 3)."""
    return f"# doc\n```{tag}\n{body}\n```\n"


def problems(env, text: str) -> list[str]:
    return [str(p) for p in check_markdown({"doc.md": text}, env)]


def not_in_env(name: str) -> str:
    return f"command '{name}' — '{name}' is not in the locked environment (.venv/bin)"


GOVCTL_FROB = "command 'govctl frob' — 'frob' is not a subcommand of govctl (valid: check, work)"

# (id, Markdown, [(line, text the problem at that line contains), ...])
CASES = [
    (
        "good_commands",
        bash(
            "govctl check\n"
            'uv run --frozen govctl work new "Title" --date 2026-01-01\n'
            "hf download zai-org/GLM-5.1-FP8 config.json --local-dir ./glm51\n"
            "scripts/test-all\n"
            "python3 -m pytest packages -q\n"
            "glm-config show /models/GLM-5.2 --check\n"
            "govctl work journal add WI-1 'text'\n"
            "govctl --version"
        ),
        [],
    ),
    ("unknown_executable", bash(f"{MISSING} --flag"), [(3, not_in_env(MISSING))]),
    ("unknown_subcommand", bash("govctl frob --x"), [(3, GOVCTL_FROB)]),
    (
        "unknown_nested_subcommand",
        bash("govctl work frob WI-1"),
        [(3, "'frob' is not a subcommand of govctl work (valid: new, move, tick, journal, add, ")],
    ),
    (
        "subcommand_removed_upstream",
        bash("huggingface-cli download zai-org/GLM-5.1-FP8 config.json"),
        [(3, "'download' is not a subcommand of huggingface-cli (valid: none; 'huggingface-cli")],
    ),
    ("third_party_subcommand", bash("hf frobnicate x"), [(3, "'frobnicate' is not a subcommand")]),
    ("continuation_lines", bash("govctl \\\n  frob \\\n  --x"), [(3, GOVCTL_FROB)]),
    (
        "chains",
        bash(f"true && govctl frob; {MISSING} | cat\nls || govctl frob &"),
        [(3, GOVCTL_FROB), (3, not_in_env(MISSING)), (4, GOVCTL_FROB)],
    ),
    (
        "env_prefixes",
        bash("A=1 B='x y' govctl frob\nenv -u X C=2 timeout -s KILL 5 nohup govctl frob"),
        [(3, GOVCTL_FROB), (4, GOVCTL_FROB)],
    ),
    (
        "uv_run",
        bash(
            "uv run --frozen --with pytest --package govctl govctl frob\n"
            "uv run -m no_such_module_xyz\n"
            f"uv run --frozen {MISSING}"
        ),
        [(3, GOVCTL_FROB), (4, "module 'no_such_module_xyz' is not importable"), (5, MISSING)],
    ),
    (
        "python",
        bash(
            "python3 -m no_such_module_xyz.cli\n"
            "python3 -W ignore -u -m pytest -q\n"
            "python3 scripts/no-such-script.py --x\n"
            "python3 packages/cpkv-validate/benchmarks/bench_prefill.py --cp 2\n"
            "python -c 'import no_such_module_xyz'"
        ),
        [
            (3, "module 'no_such_module_xyz.cli' is not importable in the locked environment"),
            (5, "script 'scripts/no-such-script.py' does not exist in the repository"),
        ],
    ),
    ("repo_script", bash("scripts/no-such-script --x"), [(3, "is missing in the repository")]),
    (
        "comments_and_prompts",
        bash(
            "$ govctl frob   # a trailing comment\n"
            "output-that-is-not-a-command --x\n"
            "$ # only a comment\n"
            "$ govctl \\\n"
            "    check",
            tag="console",
        ),
        [(3, GOVCTL_FROB)],
    ),
    (
        "non_shell_blocks_ignored",
        "".join(bash(f"{MISSING} = 1", tag=t) for t in ("toml", "python", "text", "json", "yaml")),
        [],
    ),
    (
        "untagged_block_is_shell",
        bash("pyproject.toml   the workspace root", tag=""),
        [(3, "(untagged block, read as shell: tag it ```text if it is not a command)")],
    ),
    (
        "dynamic_words_functions_loops",
        bash(
            't() { local n=$1; shift; timeout 5 "$@" > "$n.log" 2>&1; }\n'
            "for x in a b; do t x govctl check; done\n"
            'V="python3 -m no_such_module_xyz"\n'
            "$V --cp 2\n"
            "export P=$(printf '%s:' $PWD/packages/*/src)\n"
            '[ -n "$P" ] && echo ok\n'
            "function u { govctl check; }\n"
            "u 1"
        ),
        [],
    ),
    ("command_substitution", bash(f'X="$({MISSING} --x)" govctl check'), [(3, MISSING)]),
    ("here_document", bash(f"cat <<'EOF' > out.txt\n{MISSING}\nEOF\ngovctl frob"), [(6, "frob")]),
    ("after_cd", bash("cd /tmp && python3 no-such.py && ./no-such-script"), []),
    (
        "allowed_external",
        bash(
            "nvidia-smi --query-gpu=name --format=csv\ndocker ps\npython3 -m pip install x\n"
            "python -m sglang_router.launch_router --help\nuv sync --frozen"
        ),
        [],
    ),
    (
        "placeholder_does_not_open_a_quote",
        bash("cpkv-serve --model-path ./m <the node's flags> --dry-run\ngovctl frob"),
        [(4, GOVCTL_FROB)],
    ),
    ("indented_fence", "- step one:\n\n  ```bash\n  govctl frob\n  ```\n", [(4, GOVCTL_FROB)]),
]


_TABLE, _IDS = [c[1:] for c in CASES], [c[0] for c in CASES]


@pytest.mark.parametrize(("markdown", "expected"), _TABLE, ids=_IDS)
def test_documented_commands(env, markdown: str, expected: list[tuple[int, str]]) -> None:
    found = problems(env, markdown)
    assert len(found) == len(expected), "\n".join(found)
    for (line, fragment), problem in zip(sorted(expected), sorted(found, key=_line), strict=True):
        assert problem.startswith(f"doc.md:{line}: command '"), problem
        assert fragment in problem, problem


def _line(problem: str) -> int:
    return int(problem.split(":")[1])


def test_subcommand_problem_reads_as_specified(env) -> None:
    """The exact one-line form the docs promise: `file:line: command 'x y' — 'y' is not …`."""
    assert problems(env, bash("govctl frob")) == [f"doc.md:3: {GOVCTL_FROB}"]


_NAME = st.from_regex(r"[A-Z_][A-Z0-9_]{0,6}", fullmatch=True)
_VALUE = st.text(st.sampled_from("ab1/.:-"), max_size=5)
_JOIN = st.sampled_from([" ", "  ", "\t", " \\\n  ", " \\\n"])


@settings(max_examples=200, deadline=None)
@given(
    assignments=st.lists(st.tuples(_NAME, _VALUE, st.booleans()), max_size=3),
    wrappers=st.lists(
        st.sampled_from([["env"], ["timeout", "600"], ["nohup"], ["uv", "run", "--frozen"]]),
        max_size=3,
    ),
    sub=st.sampled_from(["check", "work", "frob"]),
    joins=st.lists(_JOIN, min_size=14, max_size=14),  # 3 + 3 x 3 + 3 words at most
)
def test_prefixes_and_continuations_reach_the_command(env, assignments, wrappers, sub, joins):
    """However a command is prefixed and wrapped over lines, the innermost executable is found,
    on the line where the command starts, with its subcommand as its first argument."""
    words = [f"{n}='{v}'" if quote else f"{n}={v}" for n, v, quote in assignments]
    words += [w for wrapper in wrappers for w in wrapper] + ["govctl", sub, "--x"]
    text = words[0] + "".join(
        j + w for j, w in zip(joins[: len(words) - 1], words[1:], strict=True)
    )
    found = documented_commands("doc.md", bash(text), env)
    assert [f.inv.exe.text for f in found] == [w[0] for w in wrappers] + ["govctl"]
    assert {f.line for f in found} == {3}
    assert found[-1].inv.args[0].text == sub


def _run_script(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "check-doc-links"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )


def test_script_reports_file_line_and_exits_1(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(bash("govctl frob") + "[gone](no-such-file.md)\n")
    result = _run_script(str(doc))
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stdout.splitlines() == [
        f"{doc}:5: broken link no-such-file.md",
        f"{doc}:3: {GOVCTL_FROB}",
    ]


def test_script_exits_0_on_good_docs_and_2_on_a_missing_file(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(bash("govctl check"))
    good = _run_script(str(doc))
    assert (good.returncode, good.stdout.strip()) == (
        0,
        "1 Markdown files: links resolve, every documented command exists",
    )
    missing = _run_script(str(tmp_path / "absent.md"))
    assert missing.returncode == 2
    assert "no such Markdown file" in missing.stderr
