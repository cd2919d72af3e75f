"""Transfer achieved fractions of peak to devices nobody measured.

A device that was not measured gets the achieved fraction of its catalog peak from the
devices that were: the same vendor and generation first, then the same vendor, then all.
The interval is a prediction interval for one new member of the pool, in log space
(fractions are positive and spread multiplicatively):

    log f_new ~ mean(log f) +- t_{(1+level)/2, m-1} x s x sqrt(1 + 1/n)

(the classical normal-theory prediction interval, e.g. Geisser 1993, "Predictive
Inference", ch. 2), where the centre comes from the most specific non-empty pool (``n``
devices) and the spread ``s`` from the most specific pool with at least three devices
(``m`` devices): one or two devices say little about how much devices differ.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Sample:
    device: str
    vendor: str | None
    generation: str | None
    fraction: float


@dataclass(frozen=True)
class Transferred:
    fraction: float
    low: float
    high: float
    level: str  # "generation" | "vendor" | "all"
    devices: tuple[str, ...]  # the pool of the centre

    def as_dict(self) -> dict:
        return {
            "fraction": self.fraction,
            "low_fraction": self.low,
            "high_fraction": self.high,
            "pool": self.level,
            "from_devices": list(self.devices),
        }


def _pools(
    samples: Sequence[Sample], vendor: str | None, generation: str | None
) -> list[tuple[str, list[Sample]]]:
    gen = [
        s
        for s in samples
        if vendor is not None and s.vendor == vendor and s.generation == generation
    ]
    ven = [s for s in samples if vendor is not None and s.vendor == vendor]
    return [("generation", gen), ("vendor", ven), ("all", list(samples))]


def transfer_fraction(
    samples: Sequence[Sample],
    vendor: str | None,
    generation: str | None,
    *,
    level: float = 0.9,
    exclude: str | None = None,
    spread_samples: Sequence[Sample] = (),
) -> Transferred | None:
    """Predicted fraction and interval for a device of ``vendor``/``generation``.

    ``exclude`` drops one device from the pools (leave-one-device-out).
    ``spread_samples`` are related measurements (e.g. the other algorithms of a collective)
    used for the spread when fewer than three devices share the quantity itself. Returns
    ``None`` when no sample is left.
    """
    samples = sorted(
        (s for s in samples if s.device != exclude and s.fraction > 0), key=lambda s: s.device
    )
    if not samples:
        return None
    pools = _pools(samples, vendor, generation)
    centre_level, centre = next((name, p) for name, p in pools if p)
    logs = np.log([s.fraction for s in centre])
    mean = float(np.mean(logs))
    spread_pool = next((p for _, p in pools if len(p) >= 3), None)
    if spread_pool is None:
        related = [x for x in spread_samples if x.device != exclude and x.fraction > 0]
        spread_pool = related if len(related) > len(pools[-1][1]) else pools[-1][1]
    spread_logs = np.log([s.fraction for s in spread_pool])
    m = len(spread_logs)
    if m >= 2:
        s = float(np.std(spread_logs, ddof=1))
        tq = float(stats.t.ppf((1 + level) / 2, m - 1))
    else:
        # a single device anywhere: no spread is known; say so with an interval that spans
        # a factor of two either way rather than pretending to know
        s, tq = math.log(2.0), 1.0
    half = tq * s * math.sqrt(1 + 1 / len(centre))
    return Transferred(
        fraction=math.exp(mean),
        low=math.exp(mean - half),
        high=math.exp(mean + half),
        level=centre_level,
        devices=tuple(x.device for x in centre),
    )
