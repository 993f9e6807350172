"""p50 with p20/p80 of timing samples: the one quantile definition every benchmark reports."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

#: The quantiles a benchmark row reports, in the order DeepGEMM/Liger-style tables print them.
QUANTILES = (0.5, 0.2, 0.8)

#: Seconds per unit of the units rows are written in.
UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6}


@dataclass(frozen=True)
class Quantiles:
    """p50, p20 and p80 of a set of samples, in the samples' unit."""

    p50: float
    p20: float
    p80: float

    def to(self, unit: str) -> dict[str, float | str]:
        """The row fields ``p50, p20, p80, unit`` for samples taken in seconds.

        Args:
            unit: one of :data:`UNITS` (``"s"``, ``"ms"``, ``"us"``).
        """
        if unit not in UNITS:
            raise ValueError(f"unit {unit!r} is not one of {sorted(UNITS)}; pick one of those")
        per = UNITS[unit]
        return {"p50": self.p50 / per, "p20": self.p20 / per, "p80": self.p80 / per, "unit": unit}


def quantiles(samples: Iterable[float]) -> Quantiles:
    """p50, p20 and p80 by linear interpolation between the closest ranks.

    This is the definition every benchmark of the repo used before the harness existed: Python's
    ``statistics.quantiles(method="inclusive")`` deciles with ``statistics.median`` (which are
    numpy's and ``torch.quantile``'s default "linear" method, and what ``triton.testing.do_bench``
    computes). It is computed with ``statistics`` itself, so records stay bit-for-bit comparable.
    One sample gives that sample for all three.

    Raises:
        ValueError: no samples, or a sample that is not finite (a failed timing).
    """
    xs = sorted(float(x) for x in samples)
    if not xs:
        raise ValueError("samples is empty: time at least one call (reps >= 1)")
    if not all(math.isfinite(x) for x in xs):
        raise ValueError(f"samples hold a non-finite value ({xs}); drop the failed measurement")
    if len(xs) == 1:
        return Quantiles(xs[0], xs[0], xs[0])
    deciles = statistics.quantiles(xs, n=10, method="inclusive")
    return Quantiles(p50=statistics.median(xs), p20=deciles[1], p80=deciles[7])
