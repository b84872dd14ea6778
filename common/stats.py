"""The one percentile the load tests, the summaries and every benchmark report.

Exact (no buckets) and linearly interpolated between the closest ranks: numpy's default
("linear", Hyndman and Fan's type 7). A nearest-rank p99 of 60 samples is the slowest sample or
the one before it depending on rounding; this one moves smoothly between them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable


def percentile(values: Iterable[float], p: float) -> float:
    """The p-th percentile (0–100) of `values`; NaN for no values."""
    ordered = sorted(values)
    if not ordered:
        return math.nan
    if not 0 <= p <= 100:
        raise ValueError(f"a percentile is between 0 and 100, not {p}")
    rank = (len(ordered) - 1) * p / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)
