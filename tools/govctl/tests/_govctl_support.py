"""Constants shared by govctl's tests (on sys.path via conftest.py)."""

from __future__ import annotations

import os
from pathlib import Path

FIXTURES = Path(__file__).parent / "fixtures"
BUNDLED_SCHEMA = Path(__file__).parents[1] / "src" / "govctl" / "work.schema.json"
REPO_SCHEMA = Path(__file__).parents[3] / "gov" / "schema" / "work.schema.json"
# property tests: more examples in CI (CI=true), fewer locally; set per test with @settings so
# the hypothesis profile other packages load does not change them
MAX_EXAMPLES = 300 if os.environ.get("CI", "").lower() in {"1", "true", "yes"} else 80
