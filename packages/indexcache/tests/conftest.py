"""Test setup: the helper module on sys.path, a fixed seed per test."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # _indexcache_helpers


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
