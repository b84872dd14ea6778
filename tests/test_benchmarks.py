"""The overhead benchmark's bookkeeping: cells measured in slices add up to one cell."""

from __future__ import annotations

import pytest

from benchmarks.overhead import Sample, slice_sizes


@pytest.mark.parametrize(
    ("total", "slices", "sizes"),
    [(60, 4, [15, 15, 15, 15]), (10, 4, [3, 3, 2, 2]), (2, 4, [1, 1]), (7, 1, [7])],
)
def test_a_cell_is_split_into_nearly_equal_slices_that_add_up(total, slices, sizes):
    assert slice_sizes(total, slices) == sizes


def test_slices_add_up_to_the_cell_they_were_cut_from():
    fast = Sample(count=10, seconds=1.0, latencies=[0.01] * 10, cpu_seconds=0.05)
    slow = Sample(count=30, seconds=1.0, latencies=[0.03] * 29 + [0.3], cpu_seconds=0.35)
    cell = (fast + slow).measured()
    assert cell.rate == pytest.approx(20.0)  # 40 runs in 2 s, not the mean of 10/s and 30/s
    assert cell.cpu_ms == pytest.approx(10.0)  # 400 ms over 40 runs
    assert cell.p50_ms == pytest.approx(30.0)
    assert cell.p99_ms > 30.0  # the slow slice's outlier is in the merged tail
