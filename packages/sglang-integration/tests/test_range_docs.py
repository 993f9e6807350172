"""The supported SGLang range is written once (``sglang_cpkv.plugin._releases``); the docs agree.

The version guard reads ``_releases`` itself. What cannot read it, the package README's release
table, ``docs/design.md``, ``docs/deploy.md``, the environment-variable table and the ``sglang``
extra of ``pyproject.toml``, is held to it here, so a release added to (or dropped from) the range
fails until every statement of it is changed.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from sglang_cpkv.plugin._releases import SHARED_KV_FIRST, TESTED, release
from sglang_cpkv.plugin._version_guard import SUPPORTED_RANGE

PACKAGE = Path(__file__).parents[1]
ROOT = PACKAGE.parents[1]
FIRST, LAST = TESTED[0], TESTED[-1]


def test_the_guard_reads_the_range():
    expected = f"{FIRST} <= sglang <= {LAST}"
    assert expected == SUPPORTED_RANGE


def test_the_readme_table_lists_each_release_and_the_shared_kv_floor():
    text = (PACKAGE / "README.md").read_text()
    table = text.split("<!-- sglang-range:start -->")[1].split("<!-- sglang-range:end -->")[0]
    rows = re.findall(r"^\| ([\d.]+)(?: \(locked\))? \| yes \| (.*) \|$", table, re.M)
    assert [v for v, _ in rows] == list(TESTED)
    for version, shared_kv in rows:
        has_pool = release(version) >= release(SHARED_KV_FIRST)
        assert shared_kv == ("yes" if has_pool else "refused: no sharded KV pool"), version
    assert f"cpkv for SGLang {FIRST}–{LAST}:" in text
    assert f"loads the plugin on an SGLang outside {FIRST}–{LAST}" in text


def test_design_and_deploy_state_the_range():
    design = " ".join((ROOT / "docs" / "design.md").read_text().split())
    assert f"Supported SGLang: {FIRST} (the first release" in design and f") to {LAST}," in design
    assert f"`--cpkv-shared-kv` needs {SHARED_KV_FIRST} or later" in design
    deploy = " ".join((PACKAGE / "docs" / "deploy.md").read_text().split())
    assert f"(SGLang {FIRST} to {LAST})" in deploy
    assert f"`--cpkv-shared-kv` (SGLang {SHARED_KV_FIRST} or later" in deploy
    assert f"an sglang outside {FIRST}-{LAST}" in deploy


def test_the_sglang_extra_is_the_range():
    meta = tomllib.loads((PACKAGE / "pyproject.toml").read_text())["project"]
    major, minor, patch = release(LAST)
    extra = f"sglang>={FIRST},<{major}.{minor}.{patch + 1}"
    assert meta["optional-dependencies"]["sglang"] == [extra]


def test_the_lock_pins_the_newest_release():
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert f"sglang=={LAST}" in root["dependency-groups"]["dev"]
