"""Test setup: the helper module ``_sglang_env`` on sys.path, and the plugin loaded by SGLang."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # _sglang_env


@pytest.fixture(scope="module")
def plugin() -> tuple[str, ...]:
    """Load plugins the way every SGLang process does (``load_plugins()``, idempotent).

    Returns:
        The names of the hooks the cpkv plugin registered.
    """
    from sglang_cpkv.plugin.entry import activate

    return activate()
