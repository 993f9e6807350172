"""Check every shell command in Markdown against the locked environment.

Per command: the executable exists (a bash builtin or reserved word, a function the block
defines, the venv's bin/, a repository script, a base-system tool or an allowed external tool);
`python -m module` names an importable module (or an allowed external one); `python path.py`
names a file of the repository; and for the workspace's console scripts and
THIRD_PARTY_SUBCOMMAND_CLIS the subcommand path (`govctl work new`) is one the CLI's own
`--help` lists. Flags and arguments are not checked: `--help` is asked only about subcommands.

What cannot be known statically is skipped: a command word holding an expansion (`$V --cp 2`,
`"$@"`), an absolute path (it names a file on the machine the recipe runs on), and relative paths
after a `cd` in the same block. The subcommand is the first word after the executable; one that
starts with `-` ends the check (a global option's value could not be told from a subcommand).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ._commands import PYTHON, Invocation, invocations, python_target
from ._environment import ALLOWED_EXTERNAL, ALLOWED_EXTERNAL_MODULES, LockedEnvironment
from ._markdown import code_blocks
from ._shell import lex, split_commands

__all__ = ["DocumentedCommand", "Problem", "check_markdown", "documented_commands"]

_UNTAGGED_HINT = " (untagged block, read as shell: tag it ```text if it is not a command)"


@dataclass(frozen=True)
class Problem:
    """One broken command: `file:line: message`."""

    file: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


@dataclass
class DocumentedCommand:
    """An invocation found in Markdown, with what its block implies for checking it.

    Attributes:
        untagged: its block has no language tag (so it may be prose read as shell).
        functions: the shell functions its block defines (a call to one runs no executable).
        after_cd: a `cd` ran earlier in the block, so relative paths cannot be resolved.
    """

    file: str
    inv: Invocation
    untagged: bool
    functions: set[str]
    after_cd: bool

    @property
    def line(self) -> int:
        return self.inv.line


def documented_commands(file: str, text: str, env: LockedEnvironment) -> list[DocumentedCommand]:
    """Every invocation in the shell blocks of Markdown `text` (see `_markdown` for the rule)."""
    found = []
    for block in code_blocks(text):
        if not block.is_shell:
            continue
        after_cd = False
        groups = [split_commands(tokens) for tokens in lex(block.script(), block.first_line)]
        functions = set().union(*(fns for _, fns in groups))
        for commands, _ in groups:
            for words in commands:
                for inv in invocations(words, lambda: env.uv_run_value_options):
                    found.append(DocumentedCommand(file, inv, not block.tag, functions, after_cd))
                    after_cd |= inv.exe.text in ("cd", "pushd")
    return found


def _exe_problem(f: DocumentedCommand, env: LockedEnvironment) -> str | None:
    exe, hint = f.inv.exe, _UNTAGGED_HINT if f.untagged else ""
    name = exe.text
    if exe.dynamic or name in f.functions or name in env.shell_words:
        return None
    if "/" in name:
        if os.path.isabs(name) or f.after_cd:
            return None
        path = env.root / name
        if path.is_file() and os.access(path, os.X_OK):
            return None
        what = "not executable" if path.is_file() else "missing"
        return f"command '{name}' — '{name}' is {what} in the repository{hint}"
    if env.venv_exe(name) or name in ALLOWED_EXTERNAL or env.base_system_exe(name):
        return None
    return (
        f"command '{name}' — '{name}' is not in the locked environment ({env.venv.name}/bin), the "
        f"repository, the base system or ALLOWED_EXTERNAL in scripts/doccheck/_environment.py{hint}"
    )


def _python_problem(
    f: DocumentedCommand, env: LockedEnvironment, importable: dict[str, bool]
) -> str | None:
    target = python_target(f.inv.args)
    if target is None or target.word.dynamic:
        return None
    name, shown = target.word.text, f"{f.inv.exe.text} {'-m ' if target.kind == 'module' else ''}"
    if target.kind == "module":
        if importable.get(name, True) or name.split(".")[0] in ALLOWED_EXTERNAL_MODULES:
            return None
        return (
            f"command '{shown}{name}' — module '{name}' is not importable in the locked "
            "environment (nor in ALLOWED_EXTERNAL_MODULES in scripts/doccheck/_environment.py)"
        )
    if os.path.isabs(name) or f.after_cd or (env.root / name).is_file():
        return None
    return f"command '{shown}{name}' — script '{name}' does not exist in the repository"


def _subcommand_words(f: DocumentedCommand, env: LockedEnvironment) -> list[str]:
    """The words after the executable that can only be subcommands (up to the first option)."""
    if f.inv.exe.dynamic or f.inv.exe.text not in env.subcommand_clis:
        return []
    if not env.venv_exe(f.inv.exe.text):
        return []
    words = []
    for w in f.inv.args:
        if w.dynamic or w.text.startswith("-"):
            break
        words.append(w.text)
    return words


def _subcommand_problem(
    f: DocumentedCommand, env: LockedEnvironment
) -> tuple[str, ...] | str | None:
    """None when fine, a problem message, or the help-page key still needed to decide."""
    exe, words = f.inv.exe.text, _subcommand_words(f, env)
    for depth, word in enumerate(words):
        key = (exe, *words[:depth])
        page = env.cached_help(key)
        if page is None:
            return key
        valid = page.subcommands
        if not valid and not page.failure():
            return None  # a command without subcommands: the rest are its arguments
        if word not in valid:
            parent = " ".join(key)
            listed = ", ".join(valid) if valid else f"none; '{parent} --help' {page.failure()}"
            return (
                f"command '{' '.join((*key, word))}' — '{word}' is not a subcommand of {parent} "
                f"(valid: {listed})"
            )
    return None


def check_markdown(files: dict[str, str], env: LockedEnvironment) -> list[Problem]:
    """Problems in the shell commands of `files` ({path shown in messages: Markdown text})."""
    found = [c for file, text in files.items() for c in documented_commands(file, text, env)]
    problems: list[Problem] = []
    pending = []
    modules = set()
    for f in found:
        if message := _exe_problem(f, env):
            problems.append(Problem(f.file, f.line, message))
            continue
        pending.append(f)
        target = python_target(f.inv.args) if PYTHON.fullmatch(f.inv.exe.text) else None
        if target and target.kind == "module" and not target.word.dynamic:
            modules.add(target.word.text)
    importable = env.importable(modules) if modules else {}
    for f in pending:
        if PYTHON.fullmatch(f.inv.exe.text) and (msg := _python_problem(f, env, importable)):
            problems.append(Problem(f.file, f.line, msg))
    while True:  # help pages one subcommand level at a time, each level's pages side by side
        results = {id(f): _subcommand_problem(f, env) for f in pending}
        needed = {r for r in results.values() if isinstance(r, tuple)}
        if not needed:
            break
        env.prefetch_help(needed)
    problems += [Problem(f.file, f.line, results[id(f)]) for f in pending if results[id(f)]]
    return sorted(problems, key=lambda p: (p.file, p.line, p.message))
