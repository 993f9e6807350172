"""docs/benchmarks/validate.md states the main command's environment as the README does.

The README's count of distributions is held to the environment uv builds by
``test_readme_commands.py`` (it builds one); the benchmark page said 37 where uv installs 38.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _distributions(text: str, where: str) -> int:
    found = re.findall(r"(\d+) distributions", text)
    assert len(found) == 1, f"{where}: one count of distributions expected, got {found}"
    return int(found[0])


def test_validate_page_states_the_readme_count_of_distributions():
    readme = _distributions((ROOT / "README.md").read_text(), "README.md")
    page = ROOT / "docs" / "benchmarks" / "validate.md"
    assert _distributions(page.read_text(), str(page.relative_to(ROOT))) == readme
