"""The public namespace: every name in __all__ resolves, is documented, and nothing else leaks."""

from __future__ import annotations

import inspect
import re
import subprocess
import sys
from pathlib import Path

import benchkit
import pytest

README = Path(__file__).parents[1] / "README.md"


def test_all_is_the_public_namespace():
    public = {n for n in vars(benchkit) if not n.startswith("_")}
    assert set(benchkit.__all__) == public
    assert len(benchkit.__all__) == len(set(benchkit.__all__))


@pytest.mark.parametrize("name", benchkit.__all__)
def test_every_public_name_is_documented(name):
    obj = getattr(benchkit, name)
    if callable(obj):
        assert inspect.getdoc(obj), f"benchkit.{name} has no docstring"


def test_no_package_source_imports_benchkit():
    root = Path(__file__).parents[3]
    found = [
        str(p.relative_to(root))
        for p in root.glob("packages/*/src/**/*.py")
        if re.search(r"^\s*(import|from)\s+benchkit\b", p.read_text(), re.M)
    ]
    assert found == [], "benchkit is dev-only: library code must not import it"


def test_readme_example_runs(tmp_path):
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True
    ).stdout
    assert out.startswith("<!-- demo cpu:begin -->\n| case | p50 |\n|---|---:|\n| n=1000 | ")
    assert out.count("| n=") == 3
