"""Known departures of published serving runs from the forecast's physics: caveats, not fits.

Some hardware and model combinations run slower in every published serving run than the
physics of :mod:`gpuplan.forecast.inference_step` says, by more than the engine profiles'
held-out error, and no independent source isolates why well enough to fit a constant that
would transfer (the project fits only on sources it can hold out). A buyer comparing those
GPUs must still hear it. Each entry of ``data/serving_deviations.yaml`` names the
accelerators and model features it covers, the ratios gpuplan's own validator measured on a
shipped, cited table (recomputed by the tests), and a corroborating source; a forecast that
matches carries the entry's one-line caveat (``forecast infer``: stderr and the JSON's
``caveats``; ``plan``: the summary notes). The user's own serving calibration of the engine
on that GPU (``gpuplan probe --workload serve`` then ``gpuplan calibrate``) replaces the
shipped constants, and then no caveat is said.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

DEVIATIONS_PATH = Path(__file__).parent / "data" / "serving_deviations.yaml"


@dataclass(frozen=True)
class Ratio:
    """Spread of a ratio over the measured rows."""

    min: float
    median: float
    max: float

    def text(self) -> str:
        return f"{self.min:.2f}x to {self.max:.2f}x (median {self.median:.2f}x)"


@dataclass(frozen=True)
class Measured:
    """What the validator measured, on which shipped table and engine profile."""

    table: str
    engine: str
    rows: int
    throughput_ratio: Ratio
    """forecast / published output tokens per second"""
    tpot_ratio: Ratio
    """published / forecast median time per output token"""
    by: str


@dataclass(frozen=True)
class ServingDeviation:
    """One known departure (a row of ``data/serving_deviations.yaml``)."""

    id: str
    what: str
    accelerators: tuple[str, ...]
    attention: str | None
    moe: bool | None
    measured: Measured
    corroborated_by: str
    """a source apart from the measured table, in a few words (said in the caveat)"""
    corroboration: str
    """what that source found, against what this forecast gives (documentation)"""
    why: str
    """why the departure is said and not fitted"""

    def matches(self, gpu_id: str, attention: str, num_experts: int) -> bool:
        """Whether a forecast of a model with ``attention`` and ``num_experts`` routed
        experts on catalog GPU ``gpu_id`` falls under this entry."""
        if gpu_id not in self.accelerators:
            return False
        if self.attention is not None and attention != self.attention:
            return False
        return self.moe is None or (num_experts > 1) == self.moe

    def caveat(self, gpu_ids: list[str]) -> str:
        """The one line a matching forecast says (naming the GPUs of that forecast)."""
        m = self.measured
        return (
            f"{self.what} ({', '.join(gpu_ids)}) ran slower in every published serving run "
            f"than this forecast: it gives {m.rows} {m.engine} runs ({m.table}) "
            f"{m.throughput_ratio.text()} the output tokens/s they measured, and "
            f"{self.corroborated_by}. Treat it as optimistic, or calibrate it with your own "
            "server: gpuplan probe --workload serve --endpoint URL --model NAME, then "
            "gpuplan calibrate"
        )


def _ratio(d: dict[str, float]) -> Ratio:
    return Ratio(float(d["min"]), float(d["median"]), float(d["max"]))


@lru_cache(maxsize=1)
def serving_deviations() -> tuple[ServingDeviation, ...]:
    """The shipped entries (read once)."""
    out = []
    for e in yaml.safe_load(DEVIATIONS_PATH.read_text()) or []:
        m = e["measured"]
        out.append(
            ServingDeviation(
                id=e["id"],
                what=e["what"],
                accelerators=tuple(e["accelerators"]),
                attention=e.get("attention"),
                moe=e.get("moe"),
                measured=Measured(
                    table=m["table"],
                    engine=m["engine"],
                    rows=int(m["rows"]),
                    throughput_ratio=_ratio(m["throughput_ratio"]),
                    tpot_ratio=_ratio(m["tpot_ratio"]),
                    by=m["by"],
                ),
                corroborated_by=e["corroborated_by"],
                corroboration=e["corroboration"],
                why=e["why"],
            )
        )
    return tuple(out)


def serving_caveats(gpu_ids: list[str], attention: str, num_experts: int) -> list[str]:
    """The caveats of a forecast of that model on those GPUs (one per matching entry)."""
    out = []
    for d in serving_deviations():
        hit = [g for g in gpu_ids if d.matches(g, attention, num_experts)]
        if hit:
            out.append(d.caveat(hit))
    return out
