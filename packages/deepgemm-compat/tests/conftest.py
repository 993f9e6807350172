"""Shared fixtures: the wheel-surface fixture, stand-in modules, a clean facade state."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))  # --import-mode=importlib: helpers are imported by path

import _dgc_standins as _standins  # noqa: E402
from deepgemm_compat import _load, _schedule  # noqa: E402

# One release of each family whose surface differs (docs/design.md, "DeepGEMM facade and warmup").
FAMILIES = ("0.1.1", "0.1.2", "0.1.4.post1", "0.2.2", "0.2.3.post2", "0.2.5")


@pytest.fixture(autouse=True)
def _m_list_from_the_copy(monkeypatch):
    """This leaf package's tests read SGLang's warmup list from the copy, never from sglang
    (packages other than sglang-integration do not import it); the copy is held equal to SGLang
    by ``sglang-integration/tests/test_upstream_warmup_list.py``."""
    monkeypatch.setenv("DEEPGEMM_COMPAT_M_LIST", "copy")


@pytest.fixture(scope="session")
def surfaces() -> dict:
    """tests/fixtures/surfaces.json: {version: facts} for every published wheel."""
    return json.loads((HERE / "fixtures" / "surfaces.json").read_text())["versions"]


@pytest.fixture
def standin(surfaces):
    """Install the stand-in deep_gemm of a release into the facade; returns its State."""
    installed = []

    def install(version: str) -> _standins.State:
        module, state = _standins.build(version, surfaces[version])
        _load.use_module(module)
        _schedule.DEFAULT_CACHE.clear()
        installed.append(module)
        return state

    yield install
    _load.use_module(None)
    _schedule.DEFAULT_CACHE.clear()


@pytest.fixture(params=FAMILIES)
def family(request, standin):
    """Each release family in turn: (version, State)."""
    return request.param, standin(request.param)
