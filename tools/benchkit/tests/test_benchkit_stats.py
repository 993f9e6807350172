"""Quantiles: a fixed table worked by hand, and numpy/torch (their "linear" method) as oracles."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from benchkit import UNITS, Quantiles, quantiles
from hypothesis import given, settings
from hypothesis import strategies as st

# (samples, p50, p20, p80), positions q * (n - 1) interpolated by hand
TABLE = [
    ([7.0], 7.0, 7.0, 7.0),
    ([1.0, 2.0], 1.5, 1.2, 1.8),
    ([5.0, 1.0, 4.0, 2.0, 3.0], 3.0, 1.8, 4.2),  # unsorted input
    ([0.0, 10.0, 20.0, 30.0], 15.0, 6.0, 24.0),
    ([2.0] * 6, 2.0, 2.0, 2.0),
]


@pytest.mark.parametrize(("samples", "p50", "p20", "p80"), TABLE)
def test_fixed_table(samples, p50, p20, p80):
    got = quantiles(samples)
    assert (got.p50, got.p20, got.p80) == pytest.approx((p50, p20, p80), rel=1e-15)


finite = st.floats(min_value=-1e9, max_value=1e9, allow_nan=False, allow_infinity=False)


# deadline=None: torch's first quantile call sets up its kernels (about 1 s on a loaded 2-core
# runner: the first example ran 993 ms against hypothesis's 200 ms); this test is about values
@settings(deadline=None)
@given(st.lists(finite, min_size=1, max_size=60))
def test_agrees_with_numpy_and_torch_linear(samples):
    got = quantiles(samples)
    want_np = np.percentile(np.array(samples, dtype=np.float64), [50, 20, 80], method="linear")
    q = torch.tensor([0.5, 0.2, 0.8], dtype=torch.float64)
    want_torch = torch.quantile(torch.tensor(samples, dtype=torch.float64), q).tolist()
    for want in (want_np, want_torch):
        assert (got.p50, got.p20, got.p80) == pytest.approx(tuple(want), rel=1e-9, abs=1e-6)
    # ordered and within the samples, up to statistics' rounding (p80 of [0, x, x] is x - 1 ulp)
    lo, hi = min(samples), max(samples)
    slack = 1e-12 * max(abs(lo), abs(hi))
    assert lo - slack <= got.p20 <= got.p50 + slack and got.p50 <= got.p80 + slack
    assert got.p80 <= hi + slack


@pytest.mark.parametrize(
    ("samples", "match"),
    [([], "samples is empty"), ([1.0, math.nan], "non-finite"), ([math.inf], "non-finite")],
)
def test_rejects_no_or_failed_samples(samples, match):
    with pytest.raises(ValueError, match=match):
        quantiles(samples)


def test_to_scales_seconds_into_the_row_unit():
    q = Quantiles(p50=2e-3, p20=1e-3, p80=4e-3)
    assert q.to("s") == {"p50": 2e-3, "p20": 1e-3, "p80": 4e-3, "unit": "s"}
    assert q.to("ms") == pytest.approx({"p50": 2.0, "p20": 1.0, "p80": 4.0, "unit": "ms"})
    assert q.to("us")["p50"] == pytest.approx(2000.0)
    assert set(UNITS) == {"s", "ms", "us"}
    with pytest.raises(ValueError, match="unit 'ns' is not one of"):
        q.to("ns")


@pytest.fixture(scope="module")
def triton_quantile():
    """triton.testing's quantile helper, which do_bench's ``quantiles=`` uses."""
    return pytest.importorskip("triton.testing")._quantile


@given(st.lists(finite, min_size=1, max_size=60))
def test_agrees_with_triton_do_bench_quantiles(triton_quantile, samples):
    """The kernels' eager timing used triton's do_bench quantiles: the same definition."""
    got = quantiles(samples)
    want = triton_quantile(samples, [0.5, 0.2, 0.8])
    assert (got.p50, got.p20, got.p80) == pytest.approx(tuple(want), rel=1e-9, abs=1e-6)
