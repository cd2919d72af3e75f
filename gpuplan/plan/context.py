"""What one planning run carries around: the scenario, the catalog, the evidence ledger.

:class:`PlanContext` turns scenario fields, catalog fields and forecast fields into
:class:`~gpuplan.plan.provenance.Figure` objects and records each use in the
:class:`~gpuplan.plan.provenance.Ledger`, so the report can list every input, catalog row,
calibration and measurement the plan used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from gpuplan.forecast.band import Band
from gpuplan.plan.provenance import (
    Figure,
    Ledger,
    Provenance,
    catalog_fig,
    forecast_fig,
    input_fig,
)
from gpuplan.plan.scenario import LoadedScenario, Path_, Scenario, dotted_path

if TYPE_CHECKING:
    from gpuplan.catalogs.catalog import Catalog
    from gpuplan.catalogs.schema import Instance, PriceObservation, Row
    from gpuplan.errors import GpuplanError
    from gpuplan.forecast.infer import ServingFleet
    from gpuplan.forecast.train import TrainForecast
    from gpuplan.plan.trial import TrialNode
    from gpuplan.scheduling.workload import Job

#: Key of a cached training forecast: workload, GPU, GPUs, target days, platform, bandwidth.
TrainKey = tuple[str, str, int | None, float | None, tuple[str, str] | None, float | None]
TrainEntry = tuple["TrainForecast | None", str | None]
ServingEntry = tuple["ServingFleet | None", str | None]


def _get(obj: object, path: Path_) -> object:
    """The scenario value at ``path`` (attributes, dict keys, list indices); None if absent."""
    for part in path:
        if obj is None:
            return None
        if isinstance(obj, dict):
            obj = obj.get(part)
        elif isinstance(part, int):
            obj = obj[part] if isinstance(obj, (list, tuple)) and 0 <= part < len(obj) else None
        else:
            obj = getattr(obj, part, None)
    return obj


@dataclass
class PlanContext:
    """Scenario + catalog + calibration + trial node of one plan, and its evidence ledger."""

    loaded: LoadedScenario
    catalog: Catalog
    artifact: dict[str, Any] | None = None
    artifact_path: str | None = None
    trial: TrialNode | None = None
    ledger: Ledger = field(default_factory=Ledger)
    inputs: dict[str, Figure] = field(default_factory=dict)
    on_progress: Callable[[str], None] | None = None
    training_cache: dict[TrainKey, TrainEntry] = field(default_factory=dict)
    serving_cache: dict[tuple[str, str, int | None], ServingEntry] = field(default_factory=dict)
    """Serving sizings by (workload, GPU, GPUs per machine)."""
    shared_jobs: dict[tuple[float, int], list[Job]] = field(default_factory=dict)
    shared_smallest: dict[tuple[object, ...], dict[str, Any] | GpuplanError] = field(
        default_factory=dict
    )

    @property
    def scenario(self) -> Scenario:
        return self.loaded.scenario

    def progress(self, message: str) -> None:
        if self.on_progress is not None:
            self.on_progress(message)

    # ----------------------------------------------------------- scenario inputs
    def inp(
        self, path: Path_, unit: str, label: str | None = None, *, fallback: object = None
    ) -> Figure:
        """The scenario value at ``path`` as an input (or default) figure; recorded.

        ``fallback`` is the schema default to use when a parent block is absent.
        """
        value = _get(self.scenario, path)
        if value is None:
            value = fallback
        dotted = dotted_path(path)
        fig = input_fig(
            value,
            unit,
            label or dotted,
            self.loaded.ref(*path),
            default=not self.loaded.given(*path),
        )
        if value is None:
            fig = Figure(
                None,
                unit,
                fig.label,
                fig.prov,
                missing=f"not given: add {dotted} to the scenario",
            )
        self.inputs.setdefault(dotted, fig)
        return fig

    def quote(self, path: Path_, unit: str, label: str) -> Figure:
        """A user's price quote (``{usd, source, as_of}``) as an input figure."""
        q = _get(self.scenario, path)
        ref = self.loaded.ref(*path)
        prov = Provenance(
            "input",
            ref,
            source=getattr(q, "source", None),
            retrieved=getattr(q, "as_of", None),
        )
        fig = Figure(getattr(q, "usd", None), unit, label, prov)
        self.inputs.setdefault(dotted_path(path), fig)
        return fig

    # ----------------------------------------------------------- catalog rows
    def cat(
        self,
        row_kind: str,
        row: Row,
        field_name: str,
        unit: str,
        label: str,
        *,
        value: object = ...,
        missing: str | None = None,
    ) -> Figure:
        """A catalog field as a figure; records the row in the ledger."""
        if value is ...:
            value = getattr(row, field_name, None)
        unverified = bool(getattr(row, "is_unverified", lambda f: False)(field_name))
        self.ledger.use_row(row_kind, row, [field_name])
        if value is None and missing is None:
            missing = f"the catalog row {row_kind}/{row.id} has no {field_name}"
        return catalog_fig(
            value,
            unit,
            label,
            row_kind=row_kind,
            row_id=row.id,
            field_name=field_name,
            source=getattr(row, "source", None),
            retrieved=str(getattr(row, "retrieved", "") or "") or None,
            unverified=unverified,
            missing=missing if value is None else None,
        )

    def price(self, instance: Instance, obs: PriceObservation, label: str) -> Figure:
        """A price observation of an instance row as a catalog figure."""
        self.ledger.use_row("instance", instance, [f"prices.{obs.model}"])
        unverified = bool(instance.is_unverified("prices")) or bool(
            instance.is_unverified(f"prices.{obs.model}")
        )
        prov = Provenance(
            "catalog",
            f"catalog instance/{instance.id} prices.{obs.model} ({obs.region or 'any region'})",
            source=obs.source,
            retrieved=str(obs.as_of),
            unverified=unverified,
        )
        return Figure(obs.usd_per_hour, "USD/node-hour", label, prov)

    # ----------------------------------------------------------- forecasts
    def fc(
        self,
        value: Band | float | None,
        key: str,
        unit: str,
        label: str,
        ref: str,
        *,
        interval: tuple[float, float] | None = None,
    ) -> Figure:
        """A forecast field (DESIGN.md 3.3 ``key``) with its interval where the forecast
        gives one: a :class:`~gpuplan.forecast.band.Band`'s, or ``interval``."""
        if isinstance(value, Band):
            interval = (value.low, value.high)
            value = value.value
        elif interval is not None:
            interval = (float(interval[0]), float(interval[1]))
        src = self.artifact_path or "default calibration artifact"
        fig = forecast_fig(value, unit, label, f"{ref}: {key}", interval=interval, source=src)
        if value is None:
            fig = Figure(None, unit, label, fig.prov, missing=f"the forecast gave no {key}")
        return fig
