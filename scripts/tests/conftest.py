"""`doccheck` importable from scripts/, and the repository's locked environment, built once."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from doccheck import LockedEnvironment  # noqa: E402


@pytest.fixture(scope="session")
def env() -> LockedEnvironment:
    """The worktree's `.venv`: the real CLIs, whose help pages are cached across tests."""
    environment = LockedEnvironment(ROOT)
    if environment.missing_venv():
        pytest.fail(environment.missing_venv())
    return environment
