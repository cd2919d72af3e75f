"""One interval type for forecast figures: :class:`Band` (value, low, high), in that order.

Job of this module: the typed records of :mod:`gpuplan.forecast.train` and
:mod:`gpuplan.forecast.infer` carry every figure that has an interval as one ``Band``; the
DESIGN.md 3.3 JSON keeps the value and the ``[low, high]`` pair apart (``intervals.<key>``),
and :meth:`Band.pair` gives that pair back. Pure: no I/O, no numpy.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Band:
    """A central value and its interval ``[low, high]``; ``low <= high`` is not forced.

    The forecast JSON writes intervals as they were computed (a throughput band taken at
    the slow and fast step times), so a band keeps the two ends as given.
    """

    value: float
    low: float
    high: float

    @classmethod
    def of(cls, value: float, interval: Sequence[float] | None) -> Band:
        """``value`` with ``interval`` (``[low, high]``); no interval = a point band."""
        v = float(value)
        if interval is None:
            return cls(v, v, v)
        lo, hi = interval
        return cls(v, float(lo), float(hi))

    def pair(self) -> list[float]:
        """The ``[low, high]`` list of the JSON."""
        return [self.low, self.high]

    def interval(self) -> tuple[float, float]:
        """``(low, high)``."""
        return (self.low, self.high)
