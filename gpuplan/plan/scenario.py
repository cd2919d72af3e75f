"""The scenario file: workloads, candidate hardware, constraints and money assumptions.

A scenario is YAML, validated with pydantic. Errors name the file, the line and the field
(``examples/x.yaml line 14: workloads.training[0].tokens: must be > 0``): the loader keeps
the YAML node marks, so every validation error maps back to the line the user wrote.
Unknown keys are refused with the closest known name.

Every numeric field has its unit in the name (SI, or the unit people quote for money and
site figures: ``_kw``, ``_usd_per_kwh``, ``_days``). Defaults are modelling choices, never
hardware figures or prices; the report marks every default it used as such.

See ``docs/plan.md`` for a commented example of every field.
"""

from __future__ import annotations

import datetime as _dt
import difflib
import hashlib
import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from gpuplan import limits
from gpuplan.catalogs.names import names_every_gpu
from gpuplan.errors import SchemaError
from gpuplan.scheduling.schema import SchedulingSpec, SharedClusterScenario, TeamSpec

if TYPE_CHECKING:
    from gpuplan.forecast.speculative import Speculation

SCENARIO_VERSION: Literal[1] = 1

Precision = Literal["bf16", "fp16", "fp8", "fp4", "int8", "int4"]
#: a serving workload's weights may also be INT8 weight-only or MXFP4 (``forecast infer
#: --precision``); other spellings (awq, w8a8, nvfp4, ...) are read as these
ServingPrecision = Literal["bf16", "fp16", "fp8", "fp4", "mxfp4", "int8", "w8a16", "int4"]


class _Strict(BaseModel):
    # allow_inf_nan=False: ``.inf``/``.nan`` in YAML are floats; no field of a scenario means
    # anything at infinity (a deadline of .inf days would size a fleet of zero GPUs)
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


class Checkpointing(_Strict):
    """How training checkpoints are kept and written."""

    retained: int = Field(2, ge=1, description="checkpoints kept on the storage tier")
    write_budget_s: float = Field(
        300.0,
        gt=0,
        description="time allowed to write one checkpoint; sizes the storage write bandwidth",
    )
    bytes_per_param: float = Field(
        14.0,
        gt=0,
        description=(
            "bytes saved per parameter: bf16 weights (2) + fp32 master weights, Adam m and v "
            "(12), the mixed-precision Adam state of Rajbhandari et al. 2020 (ZeRO) sec. 3.1 "
            "without gradients"
        ),
    )
    restart_s: float | None = Field(
        None, ge=0, description="time to restart from a checkpoint after an interruption"
    )


class TrainingWorkload(_Strict):
    """One training run to plan for."""

    name: str
    model: str = Field(description="catalog model id, e.g. llama3.1-70b")
    tokens: float = Field(gt=0, le=limits.MAX_TOKENS, description="total training tokens")
    deadline_days: float | None = Field(None, gt=0, description="wall-clock budget for the run")
    num_gpus: int | None = Field(
        None,
        gt=0,
        le=limits.MAX_GPUS,
        description="fixed cluster size instead of sizing for the deadline",
    )
    seq_len: int = Field(gt=0)
    global_batch: int | None = Field(
        None, gt=0, le=limits.MAX_BATCH_SEQUENCES, description="sequences per step"
    )
    global_batch_tokens: float | None = Field(None, gt=0, le=limits.MAX_BATCH_TOKENS)
    precision: Precision = "bf16"
    parallelism: dict[str, Any] | None = None
    bytes_per_token: float | None = Field(
        None, gt=0, description="stored bytes per token (default: from the vocabulary size)"
    )
    bytes_per_sample: float | None = Field(
        None, gt=0, description="stored bytes per sample for non-token data (overrides tokens)"
    )
    dataset_bytes: float | None = Field(
        None, gt=0, description="dataset size on the storage tier (default tokens x bytes/token)"
    )
    epochs: float = Field(
        1.0, gt=0, description="passes over the dataset (dataset = tokens/epochs)"
    )
    checkpoint: Checkpointing = Field(default_factory=lambda: Checkpointing.model_validate({}))
    sizes: list[Annotated[int, Field(gt=0, le=limits.MAX_GPUS)]] | None = Field(
        None, description="cluster sizes (GPUs) for the time-to-train curve"
    )

    @model_validator(mode="after")
    def _size_or_deadline(self) -> TrainingWorkload:
        if self.deadline_days is None and self.num_gpus is None:
            raise ValueError("give deadline_days (the GPUs are sized for it) or num_gpus")
        if self.global_batch is not None and self.global_batch_tokens is not None:
            raise ValueError("give global_batch or global_batch_tokens, not both")
        return self


class LengthDistribution(_Strict):
    """Token lengths of requests: the mean and optional percentiles (lognormal; ``max``
    clips), or ``min`` and ``max`` alone: every whole length between equally likely, a
    serving benchmark's random dataset (``forecast infer --min-length-ratio``)."""

    mean: float | None = Field(None, gt=0)
    p50: float | None = Field(None, gt=0)
    p90: float | None = Field(None, gt=0)
    p99: float | None = Field(None, gt=0)
    max: float | None = Field(None, gt=0)
    min: float | None = Field(None, ge=1)

    @model_validator(mode="after")
    def _consistent(self) -> LengthDistribution:
        # the forecast's own check (``forecast infer --input-tokens-p99`` uses the same one):
        # a p99 above the mean and within what a lognormal can have
        from gpuplan.errors import GpuplanError
        from gpuplan.forecast.serving import LengthDist

        if self.min is not None:
            if self.max is None or any(v is not None for v in (self.p50, self.p90, self.p99)):
                raise ValueError(
                    "min makes uniform lengths from min to max: give min and max alone"
                )
            if self.max < self.min:
                raise ValueError(f"max ({self.max:g}) must not be below min ({self.min:g})")
            try:
                mid = LengthDist.uniform(int(self.min), int(self.max)).mean
            except GpuplanError as exc:
                raise ValueError(exc.one_line()) from None
            if self.mean is not None and abs(self.mean - mid) > 0.5:
                raise ValueError(
                    f"uniform lengths from {self.min:g} to {self.max:g} have the mean {mid:g}, "
                    f"not {self.mean:g}: drop mean"
                )
            return self
        if self.mean is None:
            raise ValueError("give the mean length (a number), or min and max for uniform lengths")
        given = [(k, getattr(self, k)) for k in ("p50", "p90", "p99", "max")]
        given = [(k, v) for k, v in given if v is not None]
        for (k1, v1), (k2, v2) in itertools.pairwise(given):
            if v2 < v1:
                raise ValueError(f"{k2} ({v2:g}) must not be below {k1} ({v1:g})")
        try:
            LengthDist(self.mean, self.p99)
        except GpuplanError as exc:
            raise ValueError(exc.one_line()) from None
        return self

    def at(self, percentile: str) -> float | None:
        return getattr(self, percentile, None)


def _as_distribution(v: object) -> object:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return {"mean": v}
    return v


class SpeculativeDecoding(_Strict):
    """Speculative decoding of a serving workload (``forecast infer --spec-tokens``)."""

    draft_tokens: int = Field(gt=0, le=16, description="draft tokens per step (MTP/EAGLE)")
    acceptance_length: float | None = Field(
        None,
        ge=1,
        description=(
            "tokens a step emits on average, the bonus token included (the engine's logged "
            "acceptance length); absent: a DeepSeek MTP head's published acceptance"
        ),
    )
    draft_layers: float | None = Field(None, gt=0, le=64, description="draft head depth")
    draft_model: str | None = Field(
        None,
        description=(
            "a separate draft model (catalog id, e.g. llama3.2-1b) instead of a draft head; "
            "needs acceptance_length"
        ),
    )
    tree_width: int | None = Field(
        None, ge=1, le=16, description="a draft tree's tokens per step (SGLang eagle topk)"
    )
    verify_tokens: int | None = Field(
        None, ge=2, description="tokens verified per sequence (SGLang num draft tokens)"
    )

    @model_validator(mode="after")
    def _consistent(self) -> SpeculativeDecoding:
        self.speculation()
        return self

    def speculation(self) -> Speculation:
        from gpuplan.errors import GpuplanError
        from gpuplan.forecast.speculative import speculation

        try:
            out = speculation(
                self.draft_tokens,
                self.acceptance_length,
                self.draft_layers,
                self.draft_model,
                self.tree_width,
                self.verify_tokens,
            )
        except GpuplanError as exc:
            raise ValueError(exc.one_line()) from None
        assert out is not None  # draft_tokens > 0
        return out


class InferenceService(_Strict):
    """One serving workload."""

    name: str
    model: str
    qps: float = Field(gt=0, description="requests per second at peak")
    input_tokens: LengthDistribution
    output_tokens: LengthDistribution
    ttft_slo_s: float | None = Field(None, gt=0)
    tpot_slo_s: float | None = Field(None, gt=0)
    slo_percentile: Literal["p50", "p90", "p99"] = "p99"
    precision: ServingPrecision = "bf16"
    tp: int | None = Field(None, gt=0)
    pp: int = Field(1, gt=0)
    engine: str | None = Field(
        None,
        description=(
            "serving engine profile (trtllm, vllm, sglang, or versioned: vllm@0.6.0); "
            "absent: the forecast's default profile"
        ),
    )
    hours_per_month: float = Field(
        730.0, gt=0, le=744, description="hours served per month (730 = 8760/12, always on)"
    )
    speculative: SpeculativeDecoding | None = None

    @field_validator("input_tokens", "output_tokens", mode="before")
    @classmethod
    def _scalar_is_mean(cls, v: object) -> object:
        return _as_distribution(v)

    @field_validator("precision", mode="before")
    @classmethod
    def _precision_spelling(cls, v: object) -> object:
        from gpuplan.forecast.inference_arch import canonical_precision

        return canonical_precision(v) if isinstance(v, str) else v

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, v: str | None) -> str | None:
        if v is None:
            return v
        from gpuplan.errors import GpuplanError
        from gpuplan.forecast.inference_step import engine_profile

        try:
            engine_profile(v)
        except GpuplanError as exc:
            raise ValueError(exc.one_line()) from None
        return v


class Workloads(_Strict):
    training: list[TrainingWorkload] = Field(default_factory=list)
    inference: list[InferenceService] = Field(default_factory=list)

    @model_validator(mode="after")
    def _some(self) -> Workloads:
        if not self.training and not self.inference:
            raise ValueError("give at least one training or inference workload")
        names = [w.name for w in self.training] + [w.name for w in self.inference]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"workload names must be unique (repeated: {', '.join(dup)})")
        return self


class Candidates(_Strict):
    """Hardware to compare. ``None`` means every catalog row that fits; ``[]`` means none.

    ``gpus: all`` takes every catalog accelerator: each instance of the candidate clouds and
    each on-premises node (the listed ones, else every catalog row) is an option."""

    gpus: list[str] = Field(
        min_length=1,
        description="catalog accelerator ids to compare (gpuplan catalog ls gpus), or 'all'",
    )
    clouds: list[str] | None = None
    instances: list[str] | None = None
    onprem_nodes: list[str] | None = None

    @field_validator("gpus", mode="before")
    @classmethod
    def _all(cls, v: Any) -> Any:
        return [v] if isinstance(v, str) and names_every_gpu([v]) else v


class Constraints(_Strict):
    """Limits of the site and the purse. Absent means unconstrained."""

    region: str | None = Field(
        None,
        description="cloud region whose prices are used, for every cloud that regions does not "
        "name (scenario version 1's single region; still accepted)",
    )
    regions: dict[str, str] = Field(
        default_factory=dict,
        description="region per cloud whose prices are used ({aws: us-east-1, azure: eastus}); "
        "a cloud not named here uses region, or any region when region is absent",
    )
    power_per_rack_kw: float | None = Field(None, gt=0, description="IT power per rack")
    rack_units_per_rack: int | None = Field(None, gt=0)
    rack_weight_limit_kg: float | None = Field(
        None,
        gt=0,
        description="most a loaded rack may weigh (the rack's static load rating or the floor's "
        "limit per rack footprint, from your facility); nodes per rack are capped by it",
    )
    max_racks: int | None = Field(None, gt=0)
    floor_space_m2: float | None = Field(None, gt=0)
    floor_m2_per_rack: float | None = Field(
        None, gt=0, description="floor area one rack takes, aisles included"
    )
    site_power_kw: float | None = Field(None, gt=0, description="facility power incl. cooling")
    budget_usd_per_month: float | None = Field(None, gt=0)
    budget_usd_per_run: float | None = Field(None, gt=0)
    max_gpus: int | None = Field(None, gt=0, le=limits.MAX_GPUS)

    @field_validator("regions")
    @classmethod
    def _regions(cls, v: dict[str, str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for cloud, region in v.items():
            key = str(cloud).strip().lower()
            if not key or not str(region).strip():
                raise ValueError("regions maps a cloud name to a region name (aws: us-east-1)")
            if key in out:
                raise ValueError(f"regions names cloud {key!r} twice")
            out[key] = str(region).strip()
        return out

    def region_for(self, cloud: str) -> str | None:
        """The region whose prices are used for ``cloud``: ``regions[cloud]``, else ``region``."""
        return self.regions.get(cloud.lower(), self.region)

    @model_validator(mode="after")
    def _floor(self) -> Constraints:
        if (self.floor_space_m2 is None) != (self.floor_m2_per_rack is None):
            raise ValueError("floor_space_m2 and floor_m2_per_rack go together")
        return self


class CommitmentDiscounts(_Strict):
    """Fractions off the on-demand price, used only where the catalog has no such price."""

    reserved_1y: float | None = Field(None, ge=0, lt=1)
    reserved_3y: float | None = Field(None, ge=0, lt=1)


class Quote(_Strict):
    """A price the user supplies (a vendor quote), with where it comes from."""

    usd: float = Field(gt=0)
    source: str | None = Field(None, description="who quoted it / where it was published")
    as_of: str | None = Field(None, description="date of the quote (YYYY-MM-DD, YYYY-MM, YYYY-H1)")

    @field_validator("as_of", mode="before")
    @classmethod
    def _as_of(cls, v: object) -> object:
        # YAML reads 2026-11-20 as a date; the plan keeps the text (dates age stale prices)
        return v.isoformat() if isinstance(v, (_dt.date, _dt.datetime)) else v


def _as_quote(v: object) -> object:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        return {"usd": v}
    return v


class PriceOverride(_Strict):
    """Negotiated prices of one cloud instance type, USD per instance-hour; each replaces the
    catalog's price of that purchasing model (a number or ``{usd, source, as_of}``)."""

    on_demand: Quote | None = None
    spot: Quote | None = None
    reserved_1y: Quote | None = None
    reserved_3y: Quote | None = None
    savings_plan_1y: Quote | None = None
    savings_plan_3y: Quote | None = None
    cud_1y: Quote | None = None
    cud_3y: Quote | None = None
    capacity_block: Quote | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _quote(cls, v: object) -> object:
        return _as_quote(v)


class Costs(_Strict):
    """Money assumptions. What is absent stays missing in the plan; nothing is invented."""

    commitment_discounts: CommitmentDiscounts = Field(
        default_factory=lambda: CommitmentDiscounts.model_validate({})
    )
    utilisation: float = Field(
        1.0, gt=0, le=1, description="busy fraction of a committed or owned fleet"
    )
    electricity_usd_per_kwh: float | None = Field(None, ge=0)
    pue: float | None = Field(None, ge=1, description="power usage effectiveness of the site")
    depreciation_years: float | None = Field(None, gt=0)
    ops_usd_per_node_per_year: float | None = Field(
        None, ge=0, description="maintenance, support contracts, colocation per node"
    )
    staff_usd_per_year: float | None = Field(None, ge=0)
    onprem_node_prices_usd: dict[str, Quote] = Field(
        default_factory=dict,
        description="quotes per node id where the catalog has no price: a number or "
        "{usd, source, as_of}",
    )
    network_prices_usd: dict[str, Quote] = Field(
        default_factory=dict, description="quotes per switch/optic id (number or {usd, source})"
    )
    storage_usd_per_gib_month: dict[str, Quote] = Field(
        default_factory=dict,
        description="storage prices (USD per GiB-month) per tier id where the catalog has none",
    )
    price_overrides: dict[str, PriceOverride] = Field(
        default_factory=dict,
        description="negotiated cloud prices per instance id or alias (USD per instance-hour), "
        "used instead of the catalog's: {p5.48xlarge: {on_demand: 40.0, reserved_1y: "
        "{usd: 30.0, source: 'AWS EDP quote', as_of: 2026-11-01}}}",
    )
    price_max_age_days: int = Field(
        365,
        gt=0,
        description="a catalog or quoted price older than this is flagged stale in the plan",
    )
    spot_interruptions_per_node_hour: float | None = Field(
        None, ge=0, description="rate at which one spot instance is reclaimed"
    )
    node_failures_per_node_hour: float | None = Field(
        None, ge=0, description="hardware/software failures per node-hour (all options)"
    )
    restart_s: float | None = Field(
        None, ge=0, description="time to get going again after an interruption"
    )

    @field_validator(
        "onprem_node_prices_usd", "network_prices_usd", "storage_usd_per_gib_month", mode="before"
    )
    @classmethod
    def _quotes(cls, v: object) -> object:
        if isinstance(v, dict):
            return {k: _as_quote(x) for k, x in v.items()}
        return v


class FabricSpec(_Strict):
    """The scale-out network to build (on premises) or check (cloud)."""

    topology: Literal["rail_optimized", "fat_tree"] = "rail_optimized"
    oversubscription: float = Field(
        1.0, ge=1, description="leaf down:up bandwidth ratio (1 = non-blocking)"
    )
    switch: str | None = Field(None, description="catalog switch id")
    nic: str | None = Field(None, description="catalog NIC id (default: the node's NICs)")
    optic: str | None = Field(None, description="catalog transceiver id")
    host_links: Literal["optical", "copper"] = Field(
        "optical", description="node-to-leaf links: optics at both ends, or copper DAC"
    )


class StorageSpec(_Strict):
    tier: str | None = Field(None, description="catalog storage tier id (default: compare all)")


class Sensitivity(_Strict):
    """How far to move each factor when testing the ranking (modelling choices)."""

    price_fraction: float = Field(
        0.2, ge=0, lt=1, description="prices moved down and up by this fraction"
    )
    mfu_fraction: float = Field(
        0.15,
        ge=0,
        lt=1,
        description="achieved throughput moved by this fraction beyond the forecast interval",
    )
    utilisation: list[float] = Field(
        default_factory=lambda: [0.5, 0.9], description="utilisations to try"
    )

    @field_validator("utilisation")
    @classmethod
    def _fractions(cls, v: list[float]) -> list[float]:
        if any(not 0 < u <= 1 for u in v):
            raise ValueError("utilisations are fractions in (0, 1]")
        return v


class Scenario(_Strict):
    """A whole scenario file."""

    scenario_version: Literal[1] = SCENARIO_VERSION
    name: str
    description: str | None = None
    workloads: Workloads
    candidates: Candidates
    constraints: Constraints = Field(default_factory=lambda: Constraints.model_validate({}))
    costs: Costs = Field(default_factory=lambda: Costs.model_validate({}))
    fabric: FabricSpec = Field(default_factory=lambda: FabricSpec.model_validate({}))
    storage: StorageSpec = Field(default_factory=lambda: StorageSpec.model_validate({}))
    rank_by: Literal["auto", "run", "month", "mtok"] = Field(
        "auto",
        description="rank options by cost per training run, per month or per million tokens "
        "(auto: run for training only, mtok for serving only, month for both)",
    )
    sensitivity: Sensitivity = Field(default_factory=lambda: Sensitivity.model_validate({}))
    teams: list[TeamSpec] | None = Field(
        None, description="teams sharing the cluster (docs/scheduling.md)"
    )
    scheduling: SchedulingSpec | None = None

    @model_validator(mode="after")
    def _shared_cluster(self) -> Scenario:
        if self.scheduling is not None and not self.teams:
            raise ValueError("a scheduling block needs teams")
        if self.teams:
            # the scheduling part's own cross-checks (priority classes, node types, names)
            SharedClusterScenario.model_validate(
                {
                    "teams": [t.model_dump(by_alias=True) for t in self.teams],
                    **(
                        {"scheduling": self.scheduling.model_dump(by_alias=True)}
                        if self.scheduling is not None
                        else {}
                    ),
                }
            )
        return self


# ------------------------------------------------------------------ YAML with line marks


class _Loader(yaml.SafeLoader):
    """SafeLoader that reads ``1e12`` as a float (YAML 1.1 needs ``1.0e+12``)."""


_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(
        r"""^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?(?:[0-9][0-9_]*)(?:[eE][-+]?[0-9]+)
        |\.[0-9_]+(?:[eE][-+]?[0-9]+)?
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""",
        re.X,
    ),
    list("-+0123456789."),
)

#: A field path in a scenario: keys and list indices.
Path_ = tuple[str | int, ...]


def _marks(node: yaml.Node, here: Path_, out: dict[Path_, int], where: str) -> None:
    """Record the 1-based line of every key/item; refuse duplicate keys."""
    out.setdefault(here, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen: dict[str, int] = {}
        for key_node, value_node in node.value:
            key = key_node.value
            line = key_node.start_mark.line + 1
            if key in seen:
                raise SchemaError(
                    f"{where} line {line}: key '{key}' repeats the one on line {seen[key]}",
                    hint="keep one of them",
                )
            seen[key] = line
            child = (*here, key)
            out[child] = line
            _marks(value_node, child, out, where)
            out[child] = line
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            child = (*here, i)
            out[child] = item.start_mark.line + 1
            _marks(item, child, out, where)


@dataclass
class LoadedScenario:
    """A validated scenario plus what is needed to cite its inputs."""

    scenario: Scenario
    path: Path | None
    lines: dict[Path_, int]
    sha256: str
    text: str

    @property
    def display_path(self) -> str:
        return str(self.path) if self.path is not None else "<scenario>"

    def line(self, *path: str | int) -> int | None:
        """Line of ``path`` in the file, or None when the field was not written."""
        return self.lines.get(tuple(path))

    def given(self, *path: str | int) -> bool:
        return tuple(path) in self.lines

    def ref(self, *path: str | int) -> str:
        """``"file:LINE a.b[0].c"`` for an input, ``"default a.b"`` for a default."""
        dotted = dotted_path(path)
        line = self.line(*path)
        if line is None:
            return f"default {dotted}"
        return f"{Path(self.display_path).name}:{line} {dotted}"


def dotted_path(path: Path_) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out or "(top level)"


def _nearest_line(lines: dict[Path_, int], loc: Path_) -> int | None:
    loc = tuple(loc)
    while loc:
        if loc in lines:
            return lines[loc]
        loc = loc[:-1]
    return lines.get(())


def _known_fields(model: type[BaseModel], loc: Path_) -> list[str]:
    """Field names valid at ``loc`` (for 'did you mean' on unknown keys)."""
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int) or current is None:
            continue
        fields = getattr(current, "model_fields", None)
        if not fields or part not in fields:
            current = None
            break
        current = _inner_model(fields[part].annotation)
    fields = getattr(current, "model_fields", None)
    return list(fields) if fields else []


def _inner_model(annotation: object) -> type[BaseModel] | None:
    import typing

    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _inner_model(arg)
        if found is not None:
            return found
    return None


def _format_error(err: Mapping[str, Any], lines: dict[Path_, int], where: str) -> str:
    loc = tuple(err.get("loc", ()))
    line = _nearest_line(lines, loc)
    field_name = dotted_path(loc)
    kind = err.get("type", "")
    msg = str(err.get("msg", "invalid"))
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind == "extra_forbidden":
        parent = loc[:-1]
        known = _known_fields(Scenario, parent)
        close = difflib.get_close_matches(str(loc[-1]), known, n=1)
        msg = f"unknown field '{loc[-1]}'" + (f" (did you mean '{close[0]}'?)" if close else "")
        if known and not close:
            msg += f"; known fields here: {', '.join(known)}"
    elif kind == "missing":
        msg = "required field is missing"
    else:
        given = err.get("input")
        if kind not in ("model_type", "dict_type") and isinstance(given, (int, float, str)):
            msg += f" (got {given!r})"
    at = f" line {line}" if line else ""
    return f"{where}{at}: {field_name}: {msg}"


def parse_scenario(text: str, *, path: Path | None = None) -> LoadedScenario:
    """Validate scenario YAML ``text``; errors name the line and the field.

    Raises
    ------
    SchemaError
        YAML syntax errors, duplicate keys, and validation errors (one line each, the first
        error first, with how many more follow).
    """
    where = str(path) if path is not None else "<scenario>"
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            raise SchemaError(f"{where}: the scenario file is empty", hint="see examples/")
        lines: dict[Path_, int] = {}
        _marks(node, (), lines, where)
        data = loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f" line {mark.line + 1}" if mark is not None else ""
        problem = " ".join(str(exc.problem or exc).split())
        raise SchemaError(
            f"{where}{line}: not valid YAML: {problem}",
            hint="check indentation and quoting on that line",
        ) from None
    except RecursionError:
        raise SchemaError(
            f"{where}: nested too deeply to be a scenario", hint="see examples/ for the layout"
        ) from None
    finally:
        loader.dispose()
    if not isinstance(data, dict):
        raise SchemaError(
            f"{where} line 1: a scenario is a mapping of keys (name, workloads, candidates, ...)",
            hint="see examples/ for the layout",
        )
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as exc:
        # an unknown key is usually a typo of a field reported missing: say that first
        errors = sorted(exc.errors(), key=lambda e: e.get("type") != "extra_forbidden")
        first = _format_error(errors[0], lines, where)
        more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
        raise SchemaError(
            first + more, hint="fix the field (docs/plan.md lists every field)"
        ) from None
    digest = hashlib.sha256(text.encode()).hexdigest()
    return LoadedScenario(scenario, path, lines, digest, text)


def load_scenario(path: str | Path) -> LoadedScenario:
    """Read and validate a scenario file (see :func:`parse_scenario`)."""
    from gpuplan.userfiles import read_text

    p = Path(path)
    text = read_text(
        p, what="scenario file", hint="give a path such as examples/llama-pretrain.yaml"
    )
    return parse_scenario(text, path=p)
