"""Small statistics shared by the evaluator, the reports and the evolution loop."""

from __future__ import annotations

import statistics
from typing import Iterable


def geomean(values: Iterable[float | None]) -> float | None:
    """Geometric mean of the positive values; None when there are none.

    The computation is `statistics.geometric_mean`; this wrapper only adds what the callers need on top of it:
    missing measurements (None, e.g. a config that failed to time) and non-positive values are skipped instead
    of raising, and an empty input gives None instead of StatisticsError.
    """
    vals = [v for v in values if v is not None and v > 0]
    return statistics.geometric_mean(vals) if vals else None
