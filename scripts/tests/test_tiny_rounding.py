"""``scripts/serve/tiny_rounding.py``'s pieces that decide its answer: the fp8 rounding of the
latent KV (one e4m3 scale per 128 values, as SGLang's fp8 DSA cache stores it) and where two runs
first differ. The model runs themselves take minutes and are run by hand
(``docs/benchmarks/serve-checks.md`` has the result)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[1] / "serve" / "tiny_rounding.py"
spec = importlib.util.spec_from_file_location("tiny_rounding", SCRIPT)
tiny_rounding = importlib.util.module_from_spec(spec)
spec.loader.exec_module(tiny_rounding)


def test_each_tile_keeps_its_own_scale():
    """A tile of small values beside a tile of large ones keeps e4m3's relative precision (3
    mantissa bits: error at most 1/16 of the value), and each tile's largest value comes back
    (to float32 precision: the rounding computes in float32)."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 256, generator=g, dtype=torch.float64)
    x[:, 128:] *= 1e-6
    y = tiny_rounding.fp8_round(x)
    assert y.dtype == x.dtype and y.shape == x.shape
    assert torch.all((y - x).abs() <= x.abs() / 16 + 1e-12)
    for tile in (slice(0, 128), slice(128, 256)):
        i = x[:, tile].abs().argmax(-1, keepdim=True)
        assert torch.allclose(x[:, tile].gather(-1, i), y[:, tile].gather(-1, i), rtol=1e-6)
    assert not torch.equal(x, y)  # it rounds


def test_mutation_one_scale_per_row_loses_the_small_tile():
    x = torch.ones(1, 256, dtype=torch.float64)
    x[:, 128:] = 1e-6
    tiny_rounding.TILE, old = 256, tiny_rounding.TILE
    try:
        y = tiny_rounding.fp8_round(x)
    finally:
        tiny_rounding.TILE = old
    assert (y[:, 128:] - x[:, 128:]).abs().max() > 1e-6 / 16  # under e4m3's range: flushed
    assert torch.allclose(tiny_rounding.fp8_round(x), x, rtol=1e-6)  # per 128: both exact


def test_first_differences_reports_position_gaps_and_confidence():
    a = [([1, 2, 3], [0.5, 0.5, 0.5]), ([4, 5, 6], [0.9, 0.05, 0.9])]
    b = [([1, 2, 3], [0.5, 0.5, 0.5]), ([4, 7, 6], [0.9, 0.04, 0.9])]
    rows = tiny_rounding.first_differences(a, b, 0.1)
    assert rows == [{"prompt": 1, "token": 1, "gaps": [0.05, 0.04], "confident": False}]
    b[1][1][1] = 0.4  # tied in one run, sure in the other: the harness's rule calls it a leak
    assert tiny_rounding.first_differences(a, b, 0.1)[0]["confident"] is True


def test_bad_input_is_one_line_and_exit_2():
    out = subprocess.run(
        [sys.executable, str(SCRIPT), "--tokens", "0"], capture_output=True, text=True
    )
    assert out.returncode == 2 and out.stderr.count("\n") == 1, out.stderr
