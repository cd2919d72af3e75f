"""Transfer achieved fractions of peak to devices nobody measured.

A device that was not measured gets the achieved fraction of its catalog peak from the
devices that were: the same vendor and generation first, then the same vendor, then all.
The interval is a prediction interval for one new member of the pool, in log space
(fractions are positive and spread multiplicatively):

    log f_new ~ mean(log f) +- t_{(1+level)/2, m-1} x s x sqrt(1 + 1/n)

(the classical normal-theory prediction interval, e.g. Geisser 1993, "Predictive
Inference", ch. 2), where the centre comes from the most specific non-empty pool (``n``
devices) and the spread ``s`` from the most specific pool with at least three devices
(``m`` devices): one or two devices say little about how much devices differ. Failing
that, ``s`` is the pooled within-group standard deviation of related quantities.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


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
    samples: Sequence[Sample], vendor: str | None, generation: str | None, device: str | None = None
) -> list[tuple[str, list[Sample]]]:
    same = [s for s in samples if device is not None and s.device == device]
    gen = [
        s
        for s in samples
        if vendor is not None and s.vendor == vendor and s.generation == generation
    ]
    ven = [s for s in samples if vendor is not None and s.vendor == vendor]
    return [("device", same), ("generation", gen), ("vendor", ven), ("all", list(samples))]


def _pooled_within(groups: Sequence[Sequence[Sample]]) -> tuple[float, int]:
    """Pooled within-group standard deviation of log fractions and its degrees of freedom."""
    ss, df = 0.0, 0
    for g in groups:
        if len(g) >= 2:
            logs = np.log([x.fraction for x in g])
            ss += float(np.sum((logs - logs.mean()) ** 2))
            df += len(g) - 1
    return (math.sqrt(ss / df), df) if df else (math.nan, 0)


def transfer_fraction(
    samples: Sequence[Sample],
    vendor: str | None,
    generation: str | None,
    *,
    level: float = 0.9,
    exclude: str | None = None,
    spread_groups: Sequence[Sequence[Sample]] = (),
    device: str | None = None,
) -> Transferred | None:
    """Predicted fraction and interval for a device of ``vendor``/``generation``.

    ``exclude`` drops one device from the pools (leave-one-device-out). When fewer than
    three devices share the quantity, the spread is the pooled within-group standard
    deviation of related quantities ``spread_groups`` (e.g. the other algorithms of a
    collective; each group has its own mean, so differences between groups do not count as
    spread). Returns ``None`` when no sample is left.
    """
    samples = sorted(
        (s for s in samples if s.device != exclude and s.fraction > 0), key=lambda s: s.device
    )
    if not samples:
        return None
    pools = _pools(samples, vendor, generation, device)
    centre_level, centre = next((name, p) for name, p in pools if p)
    logs = np.log([s.fraction for s in centre])
    mean = float(np.mean(logs))
    spread_pool = next((p for _, p in pools if len(p) >= 3), None)
    if spread_pool is not None:
        s = float(np.std(np.log([x.fraction for x in spread_pool]), ddof=1))
        df = len(spread_pool) - 1
    else:
        groups = [[x for x in g if x.device != exclude and x.fraction > 0] for g in spread_groups]
        s, df = _pooled_within([*groups, pools[-1][1]])
    if df >= 1:
        from scipy import stats  # only here: evaluating a stored entry never transfers

        tq = float(stats.t.ppf((1 + level) / 2, df))
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
