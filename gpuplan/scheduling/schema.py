"""The shared-cluster section of a scenario file: teams, their job mix, quotas and classes.

A capacity-plan scenario (``gpuplan plan SCENARIO.yaml``) or a scheduling scenario
(``gpuplan schedule --scenario FILE``) describes a cluster shared by several teams with a
top-level ``teams:`` list and an optional ``scheduling:`` block::

    teams:
      - name: research
        share: 40                       # fair-share shares (Slurm) and DRF weight
        quota_gpus: 64                  # Kueue nominalQuota / ResourceQuota hard limit
        borrowing_limit_gpus: 32        # Kueue borrowingLimit (null: unlimited)
        cohort: ml                      # Kueue cohort (borrowing happens inside it)
        arrival_rate_per_hour: 6        # daily mean of the job arrival rate
        time_of_day_pattern: office-hours   # or 24 multipliers, or "flat"
        gpu_count_distribution: {1: 0.6, 8: 0.3, 32: 0.1}
        duration_distribution: {kind: lognormal, median_s: 3600, sigma: 1.2}
        priority_class: normal
        training_jobs:                  # optional: durations from the training forecast
          - {model: llama3.1-8b, tokens: 2.0e11, gpus: 64, gpu: h100, count: 1}
    scheduling:                         # optional; CLI flags override it
      cluster: {gpus_per_node: 8, nodes: 32}
      policy: fair-share
      horizon_days: 7
      seed: 0
      priority_classes: {high: 1000, normal: 100, low: 10}
      reference_trace: philly           # plan report: the Philly trace's wait-vs-size curve too

Field names are part of the scenario contract: extend, never rename. Every model forbids
unknown keys so that a typo (``qouta_gpus``) is an error naming the field, not a silent
default. Parse a loaded YAML mapping with :func:`parse_teams` or :func:`parse_scenario`
(they raise :class:`gpuplan.errors.SchemaError` with a one-line message).
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpuplan import limits
from gpuplan.errors import SchemaError

#: Named time-of-day patterns: 24 hourly multipliers (hour 0 = midnight of the trace clock),
#: normalised to mean 1 when used. "office-hours" is a modelling choice (busier 09-18 h),
#: not a measured profile; give your own 24 values when you have them (e.g. from a trace).
TIME_OF_DAY_PATTERNS: dict[str, tuple[float, ...]] = {
    "flat": (1.0,) * 24,
    "office-hours": (0.3,) * 8 + (1.0,) + (2.0,) * 9 + (1.0,) + (0.5,) * 5,
}

#: Default priority classes (name -> value; higher runs first). Only their order matters to
#: the simulator; the values are what the emitted Kueue WorkloadPriorityClass / Slurm QoS
#: objects carry.
DEFAULT_PRIORITY_CLASSES: dict[str, int] = {"high": 1000, "normal": 100, "low": 10}

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]*$")


class _Strict(BaseModel):
    # allow_inf_nan=False: ``.inf``/``.nan`` in YAML are floats; no field of a scenario means
    # anything at infinity (a deadline of .inf days would size a fleet of zero GPUs)
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


# --------------------------------------------------------------------------- durations
class LognormalDuration(_Strict):
    """Log-normal job durations: ``ln(duration)`` ~ Normal(ln(median_s), sigma)."""

    kind: Literal["lognormal"]
    median_s: float = Field(gt=0, description="median duration in seconds")
    sigma: float = Field(gt=0, description="standard deviation of ln(duration)")
    min_s: float = Field(1.0, gt=0, description="durations are clipped below at this")
    max_s: float | None = Field(None, gt=0, description="durations are clipped above at this")


class ExponentialDuration(_Strict):
    """Exponential job durations with the given mean."""

    kind: Literal["exponential"]
    mean_s: float = Field(gt=0)
    min_s: float = Field(1.0, gt=0)
    max_s: float | None = Field(None, gt=0)


class FixedDuration(_Strict):
    """Every job lasts ``value_s``."""

    kind: Literal["fixed"]
    value_s: float = Field(gt=0)


class UniformDuration(_Strict):
    """Durations uniform in [low_s, high_s]."""

    kind: Literal["uniform"]
    low_s: float = Field(gt=0)
    high_s: float = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> UniformDuration:
        if self.high_s < self.low_s:
            raise ValueError("high_s must be >= low_s")
        return self


class EmpiricalDuration(_Strict):
    """Durations drawn (with replacement) from the given list, e.g. taken from a trace."""

    kind: Literal["empirical"]
    values_s: list[Annotated[float, Field(gt=0)]] = Field(min_length=1)


DurationDistribution = Annotated[
    LognormalDuration | ExponentialDuration | FixedDuration | UniformDuration | EmpiricalDuration,
    Field(discriminator="kind"),
]


# --------------------------------------------------------------------------- training jobs
class TrainingJobSpec(_Strict):
    """Training runs whose duration comes from ``forecast_training(...)["time_to_train_s"]``.

    ``count`` copies are submitted; ``submit_at_s`` (seconds after the start of the
    simulated window) fixes their submit times, otherwise they are spread uniformly at
    random over the window (seeded).
    """

    model: str = Field(description="catalog model id, e.g. llama3.1-8b")
    tokens: float = Field(gt=0, le=limits.MAX_TOKENS, description="total training tokens")
    gpus: int = Field(gt=0, le=limits.MAX_GPUS, description="GPUs the run uses (gang-scheduled)")
    gpu: str = Field("h100", description="catalog GPU id or alias")
    count: int = Field(1, ge=1, le=limits.MAX_JOBS)
    submit_at_s: list[Annotated[float, Field(ge=0)]] | None = None
    seq_len: int | None = Field(None, gt=0)
    precision: str | None = None
    priority_class: str | None = Field(None, description="defaults to the team's class")

    @model_validator(mode="after")
    def _submits(self) -> TrainingJobSpec:
        if self.submit_at_s is not None and len(self.submit_at_s) != self.count:
            raise ValueError(
                f"submit_at_s has {len(self.submit_at_s)} values but count is {self.count}"
            )
        return self


# --------------------------------------------------------------------------- teams
class TeamSpec(_Strict):
    """One team (Kubernetes namespace / Slurm account) sharing the cluster."""

    name: str = Field(description="team name; becomes the namespace / account name")
    share: float = Field(1.0, gt=0, description="fair-share shares and DRF weight")
    quota_gpus: int | None = Field(
        None,
        ge=0,
        description="nominal quota (Kueue) or hard limit (ResourceQuota); "
        "null: derived from the share",
    )
    borrowing_limit_gpus: int | None = Field(
        None, ge=0, description="Kueue borrowingLimit; null: may borrow all idle cohort quota"
    )
    lending_limit_gpus: int | None = Field(
        None, ge=0, description="Kueue lendingLimit; null: all unused quota can be lent"
    )
    cohort: str | None = Field(None, description="Kueue cohort; teams borrow only inside it")
    parent: str | None = Field(
        None, description="parent Slurm account for the fair-share tree (default: the cohort)"
    )
    arrival_rate_per_hour: float = Field(0.0, ge=0, description="daily mean arrival rate")
    time_of_day_pattern: str | list[Annotated[float, Field(ge=0)]] = Field(
        "flat", description="'flat', 'office-hours' or 24 hourly multipliers"
    )
    gpu_count_distribution: dict[int, Annotated[float, Field(ge=0)]] = Field(
        default_factory=lambda: {1: 1.0}, description="GPUs per job -> relative weight"
    )
    duration_distribution: DurationDistribution | None = None
    priority_class: str = "normal"
    node_type: str | None = Field(None, description="restrict the team's jobs to one node type")
    training_jobs: list[TrainingJobSpec] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(
                f"team name {v!r} must start with a letter or digit and contain only "
                "letters, digits, '-', '_' or '.'"
            )
        return v

    @field_validator("time_of_day_pattern")
    @classmethod
    def _pattern(cls, v: str | list[float]) -> str | list[float]:
        if isinstance(v, str):
            if v not in TIME_OF_DAY_PATTERNS:
                raise ValueError(
                    f"unknown time_of_day_pattern {v!r}; use one of "
                    f"{', '.join(TIME_OF_DAY_PATTERNS)} or a list of 24 multipliers"
                )
        elif len(v) != 24 or sum(v) <= 0:
            raise ValueError("time_of_day_pattern needs 24 non-negative values, not all zero")
        return v

    @field_validator("gpu_count_distribution")
    @classmethod
    def _gpu_dist(cls, v: dict[int, float]) -> dict[int, float]:
        if not v:
            raise ValueError("gpu_count_distribution is empty; give e.g. {1: 0.8, 8: 0.2}")
        if any(k <= 0 for k in v):
            raise ValueError("gpu_count_distribution keys are GPU counts and must be >= 1")
        if sum(v.values()) <= 0:
            raise ValueError("gpu_count_distribution weights must not all be zero")
        return v

    @model_validator(mode="after")
    def _needs_durations(self) -> TeamSpec:
        if self.arrival_rate_per_hour > 0 and self.duration_distribution is None:
            raise ValueError(
                f"team {self.name!r} has arrival_rate_per_hour but no duration_distribution "
                "(e.g. {kind: lognormal, median_s: 3600, sigma: 1.0})"
            )
        return self

    def hourly_pattern(self) -> tuple[float, ...]:
        """The 24 hourly rate multipliers, normalised to mean 1."""
        raw = (
            TIME_OF_DAY_PATTERNS[self.time_of_day_pattern]
            if isinstance(self.time_of_day_pattern, str)
            else tuple(self.time_of_day_pattern)
        )
        mean = sum(raw) / 24.0
        return tuple(x / mean for x in raw)


# --------------------------------------------------------------------------- cluster
class NodeTypeSpec(_Strict):
    """A pool of identical nodes (a Kueue ResourceFlavor / a Slurm partition)."""

    name: str
    gpus_per_node: int = Field(gt=0, le=limits.MAX_GPUS)
    nodes: int = Field(ge=0, le=limits.MAX_GPUS)
    gpu: str | None = Field(None, description="catalog GPU id, for labels and reports")

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not _NAME_RE.match(v):
            raise ValueError(f"node type name {v!r} may contain only letters, digits, '-_.'")
        return v


class ClusterSpec(_Strict):
    """GPUs per node and node count, or a list of node types."""

    gpus_per_node: int | None = Field(None, gt=0, le=limits.MAX_GPUS)
    nodes: int | None = Field(None, ge=0, le=limits.MAX_GPUS)
    gpu: str | None = None
    node_types: list[NodeTypeSpec] | None = None

    @model_validator(mode="after")
    def _one_form(self) -> ClusterSpec:
        if self.node_types:
            if self.nodes is not None or self.gpus_per_node is not None:
                raise ValueError("give either node_types or gpus_per_node + nodes, not both")
            names = [n.name for n in self.node_types]
            if len(set(names)) != len(names):
                raise ValueError(f"node type names must be unique: {names}")
        elif self.gpus_per_node is None or self.nodes is None:
            raise ValueError("cluster needs gpus_per_node and nodes (or node_types)")
        total = (
            sum(n.gpus_per_node * n.nodes for n in self.node_types)
            if self.node_types
            else (self.gpus_per_node or 0) * (self.nodes or 0)  # both set: checked above
        )
        if total > limits.MAX_GPUS:
            raise ValueError(
                f"a cluster of {total:,} GPUs is more than the {limits.MAX_GPUS:,} gpuplan "
                "simulates (gpuplan/limits.py)"
            )
        return self


# --------------------------------------------------------------------------- scheduling block
PolicyName = Literal["fifo", "backfill", "fair-share", "priority", "drf"]


class SchedulingSpec(_Strict):
    """Options of the shared-cluster simulation; CLI flags override them."""

    cluster: ClusterSpec | None = None
    policy: PolicyName = "backfill"
    fairshare_algorithm: Literal["classic", "fair-tree"] = "classic"
    preemption: bool = False
    quota_mode: Literal["none", "kueue", "resourcequota"] = "none"
    horizon_days: float = Field(7.0, gt=0, description="length of the generated window")
    seed: int = 0
    priority_classes: dict[str, int] = Field(default_factory=lambda: dict(DEFAULT_PRIORITY_CLASSES))
    checkpoint_interval_s: float | None = Field(
        None, gt=0, description="work saved every this many seconds (null: never)"
    )
    restart_cost_s: float = Field(0.0, ge=0, description="restore time after a preemption")
    p95_wait_target_s: float | None = Field(None, gt=0)
    sizes_gpus: list[Annotated[int, Field(gt=0, le=limits.MAX_GPUS)]] | None = None
    reference_trace: Literal["philly"] | None = Field(
        None,
        description="plan report only: also draw this trace's wait-vs-size curve "
        "(philly: the shipped Microsoft Philly trace under EASY backfill, printed with its "
        "CC BY 4.0 citation; about 15 s of CPU); null: none",
    )
    starvation_wait_s: float = Field(86400.0, gt=0)
    starvation_runtime_multiple: float = Field(10.0, gt=0)


class SharedClusterScenario(_Strict):
    """The parts of a scenario file this package reads (other top-level keys are ignored)."""

    teams: list[TeamSpec] = Field(min_length=1)
    scheduling: SchedulingSpec = Field(default_factory=lambda: SchedulingSpec.model_validate({}))

    @model_validator(mode="after")
    def _consistent(self) -> SharedClusterScenario:
        names = [t.name for t in self.teams]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ValueError(f"team names must be unique; repeated: {', '.join(dupes)}")
        classes = self.scheduling.priority_classes
        for t in self.teams:
            used = [t.priority_class] + [
                j.priority_class for j in t.training_jobs if j.priority_class
            ]
            for c in used:
                if c not in classes:
                    raise ValueError(
                        f"team {t.name!r} uses priority class {c!r}, not one of "
                        f"{', '.join(classes)} (declare it under scheduling.priority_classes)"
                    )
        cluster = self.scheduling.cluster
        if cluster is not None and cluster.node_types:
            types = {n.name for n in cluster.node_types}
            for t in self.teams:
                if t.node_type is not None and t.node_type not in types:
                    raise ValueError(
                        f"team {t.name!r} asks for node type {t.node_type!r}; cluster has "
                        f"{', '.join(sorted(types))}"
                    )
        return self


# --------------------------------------------------------------------------- parsing
def _first_error(exc: ValidationError, where: str) -> SchemaError:
    err = exc.errors()[0]
    loc = ".".join(str(p) for p in err.get("loc", ()) if p not in ("function-after",))
    msg = err.get("msg", "invalid value").removeprefix("Value error, ")
    more = len(exc.errors()) - 1
    extra = f" (and {more} more problem{'s' if more > 1 else ''})" if more else ""
    return SchemaError(
        f"{where}: {loc or 'document'}: {msg}{extra}",
        hint="see docs/scheduling.md for the teams/scheduling schema",
    )


def parse_scenario(data: object, *, where: str = "scenario") -> SharedClusterScenario:
    """Validate a loaded scenario mapping (keys other than teams/scheduling are ignored).

    Raises
    ------
    SchemaError
        With one line naming the first offending field, e.g.
        ``scenario: teams.0.quota_gpus: Input should be greater than or equal to 0``.
    """
    if not isinstance(data, dict):
        raise SchemaError(f"{where}: expected a mapping with a 'teams' list", hint=None)
    if "teams" not in data:
        raise SchemaError(
            f"{where}: no 'teams' list", hint="add teams: [{name: ..., ...}] (docs/scheduling.md)"
        )
    subset = {k: data[k] for k in ("teams", "scheduling") if k in data}
    if subset.get("scheduling") is None:
        subset.pop("scheduling", None)
    try:
        return SharedClusterScenario.model_validate(subset)
    except ValidationError as exc:
        raise _first_error(exc, where) from None


def parse_teams(data: object, *, where: str = "teams") -> list[TeamSpec]:
    """Validate a ``teams:`` list alone (what the plan scenario embeds)."""
    return parse_scenario({"teams": data}, where=where).teams


def derived_quotas(teams: list[TeamSpec], total_gpus: int) -> dict[str, int]:
    """Nominal GPU quota per team: ``quota_gpus`` where given, else the share of the rest.

    Teams without ``quota_gpus`` split the GPUs not already assigned in proportion to their
    ``share`` by the largest-remainder (Hamilton) method, so the quotas sum to the cluster.

    >>> from gpuplan.scheduling.schema import TeamSpec
    >>> derived_quotas([TeamSpec(name="a", share=1), TeamSpec(name="b", share=2)], 10)
    {'a': 3, 'b': 7}
    """
    fixed = {t.name: int(t.quota_gpus) for t in teams if t.quota_gpus is not None}
    rest = [t for t in teams if t.quota_gpus is None]
    left = max(0, total_gpus - sum(fixed.values()))
    out = dict(fixed)
    if rest:
        total_share = sum(t.share for t in rest)
        exact = [left * t.share / total_share for t in rest]
        floors = [math.floor(x) for x in exact]
        remaining = left - sum(floors)
        order = sorted(range(len(rest)), key=lambda i: (-(exact[i] - floors[i]), i))
        for i in order[:remaining]:
            floors[i] += 1
        out.update({t.name: f for t, f in zip(rest, floors, strict=True)})
    return {t.name: out[t.name] for t in teams}
