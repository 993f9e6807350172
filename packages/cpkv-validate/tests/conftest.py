"""Test setup: this directory on ``sys.path`` for the shared helper module ``_servers``."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # _servers (tests run with --import-mode=importlib)
