"""Imports point one way: cpkv-validate runs where SGLang cannot be imported, and no library of
the workspace imports the SGLang integration (only the integration imports SGLang).
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]

# Runs first in a fresh interpreter: any attempt to import sglang (or a submodule) fails loudly.
BLOCK_SGLANG = """
import importlib.abc, sys
class _NoSGLang(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "sglang" or name.startswith("sglang."):
            raise ImportError(f"blocked: {name} (cpkv-validate must not import SGLang)")
        return None
sys.meta_path.insert(0, _NoSGLang())
"""


def _blocked(code: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", BLOCK_SGLANG + code],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
    )


def test_the_blocker_really_blocks_sglang():
    """The negative control: the same interpreter setup cannot import sglang."""
    proc = _blocked("import sglang")
    assert proc.returncode != 0
    assert "blocked: sglang" in proc.stderr


def test_cpkv_validate_imports_and_runs_without_sglang():
    code = (
        "import runpy, sys\n"
        "import cpkv_validate, cpkv_validate.refserver, cpkv_validate.cli\n"
        "sys.argv = ['cpkv-validate', '--help']\n"
        "try:\n"
        "    runpy.run_module('cpkv_validate.cli', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "from cpkv_validate import main\n"
        "code = main(['--cp', '1', '--scenario', 'tiny_extends', '--no-progress'])\n"
        "bad = sorted(m for m in sys.modules if m == 'sglang' or m.startswith('sglang.'))\n"
        "assert not bad, bad\n"
        "sys.exit(code)\n"
    )
    proc = _blocked(code)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "usage: cpkv-validate" in proc.stdout
    assert "tiny_extends" in proc.stdout and "PASS" in proc.stdout


def _python_files(kind: str) -> list[Path]:
    """Library (``src``) or test files of every workspace member."""
    members = [*ROOT.glob("packages/*"), *ROOT.glob("tools/*")]
    return sorted(f for m in members if (m / kind).is_dir() for f in (m / kind).rglob("*.py"))


def _imported_roots(path: Path) -> set[str]:
    roots = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(a.name.split(".")[0] for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def _outside_integration(files: list[Path]) -> list[Path]:
    integ = ROOT / "packages" / "sglang-integration"
    return [f for f in files if integ not in f.parents]


def test_the_scan_sees_the_workspace():
    libs = _python_files("src")
    assert any(f.match("cpkv_validate/_engine.py") for f in libs)
    assert any("sglang" in _imported_roots(f) for f in libs), "the integration imports sglang"


@pytest.mark.parametrize("kind", ["src", "tests"])
def test_only_the_integration_imports_sglang_or_sglang_cpkv(kind):
    bad = {
        str(f.relative_to(ROOT)): sorted(_imported_roots(f) & {"sglang", "sglang_cpkv"})
        for f in _outside_integration(_python_files(kind))
        if _imported_roots(f) & {"sglang", "sglang_cpkv"}
    }
    assert not bad, bad


def test_no_package_depends_on_the_integration():
    members = [*ROOT.glob("packages/*/pyproject.toml"), *ROOT.glob("tools/*/pyproject.toml")]
    for pyproject in members:
        project = tomllib.loads(pyproject.read_text())["project"]
        deps = list(project.get("dependencies", []))
        for extra in project.get("optional-dependencies", {}).values():
            deps += extra
        names = {re.match(r"[A-Za-z0-9_.-]+", d).group() for d in deps}
        assert "sglang-integration" not in names, pyproject
        if project["name"] == "cpkv-validate":
            assert "sglang" not in names and "cpkv-runtime" in names
