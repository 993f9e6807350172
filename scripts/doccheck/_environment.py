"""What exists in the locked environment: executables, Python modules, CLI subcommands.

The locked environment is the repository's `.venv` after `uv sync --frozen` (or
`$UV_PROJECT_ENVIRONMENT`, where uv puts it then). A documented command may also run a bash
builtin, a script of the repository, a tool of the base system (`/usr/bin` …, found on every
Linux host the docs address) or one of the external tools below, each allowed for a reason.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import tomllib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from glob import glob
from pathlib import Path

from ._help import listed_subcommands

__all__ = [
    "ALLOWED_EXTERNAL",
    "ALLOWED_EXTERNAL_MODULES",
    "BASE_SYSTEM_DIRS",
    "THIRD_PARTY_SUBCOMMAND_CLIS",
    "HelpPage",
    "LockedEnvironment",
]

# Tools a documented command may run although the locked environment does not hold them.
ALLOWED_EXTERNAL = {
    "nvidia-smi": "GPU recipes query the driver; it comes with the NVIDIA driver on the GPU node",
    "docker": "container recipes run on hosts that have Docker, never inside the venv",
    "curl": "talking to a running server's HTTP API from any host",
    "git": "the repository's own version control",
    "uv": "it builds the locked environment, so it lives outside it",
    "pip": "GPU recipes install wheels with the node's own interpreter (uv venvs have no pip)",
}
# Modules `python -m` may run although the locked environment does not hold them.
ALLOWED_EXTERNAL_MODULES = {
    "pip": "uv venvs ship without pip; GPU recipes run `python3 -m pip` with the node's python",
    "sglang_router": "the PD router is the separate sglang-router package, installed on the "
    "router host (packages/sglang-integration/docs/deploy.md says so)",
}
# Third-party CLIs whose subcommands are checked like those of the workspace's own scripts.
THIRD_PARTY_SUBCOMMAND_CLIS = {
    "hf": "the deploy docs fetch checkpoints with `hf download`",
    "huggingface-cli": "huggingface_hub 1.x still installs it, but without any subcommand",
}
# The base system: present on every Linux host, unlike the author's ~/.local/bin or pyenv shims.
BASE_SYSTEM_DIRS = ("/usr/bin", "/bin", "/usr/sbin", "/sbin")

HELP_TIMEOUT_S = 120  # `cpkv-serve --help` imports SGLang: over a minute on a loaded 2-core box
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# `  -p, --python <PYTHON>` in `uv run --help`: an option that takes a value.
_UV_OPTION = re.compile(r"^\s+(?:(-\w), )?(--[\w-]+)(\s+<[^>]+>)?", re.MULTILINE)
# Prints, for each module name on stdin, whether it is importable, without importing it: only the
# top-level package is located by the import system, submodules by path, so `a.b.c` runs nothing.
_FIND_MODULES = r"""
import importlib.machinery, importlib.util, sys
for name in sys.stdin.read().split():
    head, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(head)
    except (ImportError, ValueError):
        spec = None
    for part in rest:
        locations = spec and spec.submodule_search_locations
        spec = locations and importlib.machinery.PathFinder.find_spec(part, list(locations))
    print(name, "yes" if spec else "no")
"""


@dataclass(frozen=True)
class HelpPage:
    """`<exe> [subcommand …] --help`: its exit status (None on timeout) and ANSI-free output."""

    returncode: int | None
    text: str

    @property
    def subcommands(self) -> tuple[str, ...]:
        return listed_subcommands(self.text) if self.returncode == 0 else ()

    def failure(self) -> str:
        """Why the page lists nothing, or "" when it ran fine."""
        if self.returncode is None:
            return f"did not finish in {HELP_TIMEOUT_S} s"
        if self.returncode:
            first = next((ln.strip() for ln in self.text.splitlines() if ln.strip()), "")
            return f"exits {self.returncode}: {first}"
        return ""


class LockedEnvironment:
    """Answers "does this exist?" for the repository at `root`; every answer is cached."""

    def __init__(self, root: Path) -> None:
        self.root = root
        venv = os.environ.get("UV_PROJECT_ENVIRONMENT")
        self.venv = (root / venv) if venv else root / ".venv"
        self._help: dict[tuple[str, ...], HelpPage] = {}
        self._modules: dict[str, bool] = {}
        self._lock = threading.Lock()

    def missing_venv(self) -> str:
        """One line saying the environment is absent and how to build it, or ""."""
        if (self.venv / "bin" / "python").exists():
            return ""
        return f"no locked environment at {self.venv}: run `uv sync --frozen` first"

    def venv_exe(self, name: str) -> Path | None:
        path = self.venv / "bin" / name
        return path if os.access(path, os.X_OK) and path.is_file() else None

    @staticmethod
    def base_system_exe(name: str) -> str | None:
        for d in BASE_SYSTEM_DIRS:
            path = os.path.join(d, name)
            if os.access(path, os.X_OK) and os.path.isfile(path):
                return path
        return None

    @cached_property
    def shell_words(self) -> frozenset[str]:
        """bash's own builtins and reserved words (`cd`, `export`, `[`, `for`, …)."""
        out = subprocess.run(
            ["bash", "-c", "compgen -b; compgen -k"], capture_output=True, text=True, check=True
        ).stdout
        return frozenset(out.split())

    @cached_property
    def subcommand_clis(self) -> frozenset[str]:
        """The workspace members' console scripts, plus THIRD_PARTY_SUBCOMMAND_CLIS.

        Read from each member's pyproject.toml, so a script moved to another package is still
        found and a new package's script is checked without editing this file.
        """
        root_cfg = tomllib.loads((self.root / "pyproject.toml").read_text())
        members = root_cfg.get("tool", {}).get("uv", {}).get("workspace", {}).get("members", [])
        names = set(THIRD_PARTY_SUBCOMMAND_CLIS)
        for pattern in members:
            for member in glob(str(self.root / pattern / "pyproject.toml")):
                project = tomllib.loads(Path(member).read_text()).get("project", {})
                names.update(project.get("scripts", {}))
        return frozenset(names)

    @cached_property
    def uv_run_value_options(self) -> frozenset[str]:
        """`uv run`'s options that take a value (`--with`, `-p`, …), read from `uv run --help`."""
        uv = os.environ.get("UV", "uv")
        try:
            text = subprocess.run(
                [uv, "run", "--help"], capture_output=True, text=True, timeout=60, check=True
            ).stdout
        except (OSError, subprocess.SubprocessError) as exc:
            sys.exit(f"check-doc-links: `{uv} run --help` failed ({exc}); install uv or set $UV")
        names = set()
        for short, long, value in _UV_OPTION.findall(text):
            if value:
                names.update(n for n in (short, long) if n)
        return frozenset(names)

    def help_page(self, exe: str, path: tuple[str, ...] = ()) -> HelpPage:
        """`<exe> <path…> --help` run from the venv (cached per exe and path)."""
        key = (exe, *path)
        with self._lock:
            if key in self._help:
                return self._help[key]
        env = dict(os.environ, NO_COLOR="1", TERM="dumb", COLUMNS="200", HF_HUB_OFFLINE="1")
        try:
            proc = subprocess.run(
                [str(self.venv / "bin" / exe), *path, "--help"],
                capture_output=True,
                text=True,
                timeout=HELP_TIMEOUT_S,
                cwd=self.root,
                env=env,
                stdin=subprocess.DEVNULL,
            )
            page = HelpPage(proc.returncode, _ANSI.sub("", proc.stdout + proc.stderr))
        except subprocess.TimeoutExpired:
            page = HelpPage(None, "")
        with self._lock:
            self._help[key] = page
        return page

    def cached_help(self, key: tuple[str, ...]) -> HelpPage | None:
        """The help page of `key` = (exe, *subcommands) if it was run already, else None."""
        with self._lock:
            return self._help.get(key)

    def prefetch_help(self, keys: set[tuple[str, ...]]) -> None:
        """Run the help pages not cached yet side by side (each is mostly interpreter start-up)."""
        todo = [k for k in keys if k not in self._help]
        with ThreadPoolExecutor(max_workers=min(8, len(todo) or 1)) as pool:
            list(pool.map(lambda k: self.help_page(k[0], k[1:]), todo))

    def importable(self, modules: set[str]) -> dict[str, bool]:
        """Whether each dotted module name resolves in the venv's interpreter (nothing imported)."""
        todo = sorted(m for m in modules if m not in self._modules)
        if todo:
            out = subprocess.run(
                [str(self.venv / "bin" / "python"), "-c", _FIND_MODULES],
                input="\n".join(todo),
                capture_output=True,
                text=True,
                timeout=60,
                check=True,
            ).stdout
            self._modules.update(
                (n, ok == "yes") for n, ok in (ln.split() for ln in out.splitlines())
            )
        return {m: self._modules[m] for m in modules}
