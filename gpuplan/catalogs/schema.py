"""Typed, validated rows of the catalogs (accelerators, instances, nodes, storage, network, models).

Every row carries its provenance: ``id`` (lowercase, hyphens), ``aliases`` (names people
type), ``source`` (URL, paper + table, or repository + path @commit), ``retrieved`` (the date
the source was read), ``notes`` and ``unverified`` (the fields whose value has no primary
source yet; every output that uses such a value says so). Numbers are SI, or carry their
unit in the field name. A value nobody has published stays ``None``: it is never guessed.

The rows are frozen pydantic models; the loader (:mod:`gpuplan.catalogs.loader`) turns any
validation failure into a :class:`gpuplan.errors.SchemaError` naming file, row and field.
"""

from __future__ import annotations

import datetime as _dt
import re
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from gpuplan.catalogs.kv_cache import kv_cache_bytes_per_token
from gpuplan.catalogs.params import ArchParams, DSAConfig, MambaConfig, MLAConfig, model_params
from gpuplan.errors import InputError

ID_PATTERN = r"^[a-z0-9][a-z0-9.\-]*[a-z0-9]$"

#: Dtype names of :meth:`Accelerator.peak_flops_per_s` (``int8`` counts operations).
DTYPES: tuple[str, ...] = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp6", "fp4", "int8")

# torch / numpy / vendor spellings of the dtypes above.
_DTYPE_SYNONYMS: dict[str, str] = {
    "float64": "fp64",
    "double": "fp64",
    "float32": "fp32",
    "float": "fp32",
    "tensorfloat32": "tf32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float8": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e4m3fnuz": "fp8",
    "float8_e5m2": "fp8",
    "float8_e5m2fnuz": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "float4": "fp4",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
    "fp4_e2m1": "fp4",
    "float4_e2m1fn_x2": "fp4",
    "mxfp6": "fp6",
    "int8": "int8",
    "i8": "int8",
}


def normalise_dtype(dtype: str) -> str:
    """Map a dtype spelling (``bfloat16``, ``torch.float8_e4m3fn``, ``BF16``) to a catalog key.

    >>> normalise_dtype("torch.bfloat16")
    'bf16'
    """
    key = str(dtype).strip().lower().removeprefix("torch.")
    key = _DTYPE_SYNONYMS.get(key, key)
    if key not in DTYPES:
        raise InputError(
            f"unknown dtype {dtype!r}",
            hint=f"use one of {', '.join(DTYPES)} (or torch names such as bfloat16)",
        )
    return key


_DATE_PERIOD = re.compile(r"^(\d{4})(?:-(\d{2})(?:-(\d{2}))?|-([HQ])([1-4]))?$")


def period_start(text: str) -> _dt.date:
    """First day of a date or period written ``YYYY-MM-DD``, ``YYYY-MM``, ``YYYY-Q3``, ``YYYY-H1``
    or ``YYYY``.

    >>> period_start("2025-H2")
    datetime.date(2025, 7, 1)
    """
    m = _DATE_PERIOD.match(text)
    if not m:
        raise ValueError(
            f"{text!r} is not a date (YYYY-MM-DD) or period (YYYY-MM, YYYY-Q1, YYYY-H1)"
        )
    year, month, day, kind, num = m.groups()
    if day:
        return _dt.date(int(year), int(month), int(day))
    if month:
        return _dt.date(int(year), int(month), 1)
    if kind == "Q":
        return _dt.date(int(year), 3 * (int(num) - 1) + 1, 1)
    if kind == "H":
        if int(num) not in (1, 2):
            raise ValueError(f"{text!r}: a half-year is H1 or H2")
        return _dt.date(int(year), 1 if num == "1" else 7, 1)
    return _dt.date(int(year), 1, 1)


def _period_text(v: Any) -> str | None:
    if v is None:
        return None
    if isinstance(v, _dt.date):
        v = v.isoformat()
    period_start(str(v))
    return str(v)


class Row(BaseModel):
    """Fields common to every catalog row."""

    model_config = ConfigDict(
        frozen=True, extra="forbid", populate_by_name=True, serialize_by_alias=True
    )

    kind: ClassVar[str] = "row"

    id: str = Field(pattern=ID_PATTERN, description="lowercase id with hyphens")
    aliases: tuple[str, ...] = Field(default=(), description="names people type for this row")
    source: str = Field(
        min_length=8, description="URL, paper + table, or repository + path @commit"
    )
    retrieved: _dt.date = Field(description="date the source was read")
    notes: str = ""
    unverified: tuple[str, ...] = Field(
        default=(), description="fields whose value has no primary source yet"
    )

    @field_validator("source")
    @classmethod
    def _source_not_placeholder(cls, v: str) -> str:
        if v.strip().lower() in {"todo", "tbd", "unknown", "n/a", "none", "recalled"}:
            raise ValueError("source must name a URL, paper + table or repository + path")
        return v.strip()

    @model_validator(mode="after")
    def _unverified_are_fields(self) -> Row:
        names = set(type(self).model_fields) | {
            f.alias for f in type(self).model_fields.values() if f.alias
        }
        for item in self.unverified:
            head = item.split(".", 1)[0]
            if head not in names:
                raise ValueError(f"unverified names {item!r}, which is not a field of this row")
        return self

    def is_unverified(self, field: str) -> bool:
        """True when ``field`` (or a sub-key such as ``peak_flops_per_s.fp8``) lacks a primary source."""
        return any(
            field == u or field.startswith(u + ".") or u.startswith(field + ".")
            for u in self.unverified
        )

    #: Fields whose ``None`` means "no source publishes it" (listed by :meth:`missing_fields`);
    #: other optional fields are simply not applicable when empty.
    reportable: ClassVar[tuple[str, ...]] = ()

    def missing_fields(self) -> list[str]:
        """Fields left empty because no source publishes them (never guessed)."""
        out = []
        for name in self.reportable:
            info = type(self).model_fields[name]
            value = getattr(self, name)
            key = info.alias or name
            if value is None:
                out.append(key)
            elif isinstance(value, dict):
                out.extend(f"{key}.{k}" for k, v in value.items() if v is None)
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (aliases as keys, dates as ISO strings) plus ``missing``."""
        data = self.model_dump(mode="json", by_alias=True)
        data["missing"] = self.missing_fields()
        return data


def _positive(v: float | None, what: str) -> float | None:
    if v is not None and not v > 0:
        raise ValueError(f"{what} must be > 0 (or null when unknown), got {v}")
    return v


Vendor = Literal["nvidia", "amd", "intel", "google", "aws"]


class Accelerator(Row):
    """One accelerator (GPU, TPU chip, Trainium chip, Gaudi card).

    Peak FLOP/s are *dense* (no 2:4 sparsity); sparse figures, where published, are kept
    apart in ``sparse_flops_per_s`` and never used as dense. ``fp64`` is the best fp64
    matrix rate (tensor cores where present; ``fp64_vector_flops_per_s`` keeps the vector
    rate). ``int8`` counts operations per second. Memory capacities printed as "GB" by the
    vendors are binary (GiB), as HBM stacks are: H200 "141 GB" is 144384 MiB.
    """

    kind: ClassVar[str] = "accelerator"
    reportable: ClassVar[tuple[str, ...]] = (
        "memory_bytes",
        "memory_bandwidth_bytes_per_s",
        "dense_flops_per_s",
        "tdp_w",
        "scale_up_bandwidth_bytes_per_s",
        "scale_up_domain_size",
        "host_link_bandwidth_bytes_per_s",
    )

    name: str
    vendor: Vendor
    generation: str = Field(
        description="architecture; calibration transfers within vendor+generation"
    )
    form_factor: str
    memory_bytes: int | None
    memory_type: str | None = None
    memory_bandwidth_bytes_per_s: float | None
    dense_flops_per_s: dict[str, float | None] = Field(
        alias="peak_flops_per_s", description="dense peak by dtype"
    )
    sparse_flops_per_s: dict[str, float | None] = Field(default_factory=dict)
    fp64_vector_flops_per_s: float | None = None
    tdp_w: float | None
    scale_up_interconnect: str
    scale_up_bandwidth_bytes_per_s: float | None = Field(description="per GPU, per direction")
    scale_up_domain_size: int | None = Field(description="accelerators in one scale-up domain")
    cluster_unit: int | None = Field(
        None,
        gt=0,
        description=(
            "accelerators in the smallest unit a cluster is built from (NVL72 compute tray, TPU"
            " host); None = the scale-up domain"
        ),
    )
    purchase_unit: int | None = Field(
        None,
        gt=0,
        description=(
            "accelerators in the unit the hardware is bought or deployed in when that is more"
            " than cluster_unit (an NVL72 rack); deadline sizing reports the units to buy"
        ),
    )
    pcie_server_size: int | None = Field(
        None,
        gt=0,
        description=(
            "accelerators one server holds on PCIe, where that is more than the scale-up"
            " domain (PCIe cards without NVLink): tensor parallelism up to it stays inside"
            " the server, its all-reduces over PCIe; None = the scale-up domain"
        ),
    )
    scale_up_in_switch_reduction: bool = Field(
        default=False, description="in-network reduction on the scale-up fabric (NVLink SHARP)"
    )
    scale_up_fabric_id: str | None = None
    host_link: str | None = None
    host_link_bandwidth_bytes_per_s: float | None = Field(description="per direction")
    last_level_cache_bytes: int | None = Field(
        None,
        gt=0,
        description=(
            "the largest on-chip cache in front of device memory (L2 on NVIDIA, Infinity"
            " Cache on AMD CDNA 3/4), bytes as the vendor states it; the memory-bandwidth"
            " probe sizes its arrays past 4x it (torch reports only the L2)"
        ),
    )
    confidence: Literal["high", "medium", "low"] = "medium"

    @field_validator("dense_flops_per_s", "sparse_flops_per_s")
    @classmethod
    def _dtype_keys(cls, v: dict[str, float | None]) -> dict[str, float | None]:
        for k, x in v.items():
            if k not in DTYPES:
                raise ValueError(f"unknown dtype {k!r}; use one of {', '.join(DTYPES)}")
            _positive(x, f"FLOP/s for {k}")
        return v

    @field_validator(
        "memory_bytes",
        "memory_bandwidth_bytes_per_s",
        "tdp_w",
        "host_link_bandwidth_bytes_per_s",
        "fp64_vector_flops_per_s",
    )
    @classmethod
    def _pos(cls, v: float | None) -> float | None:
        return _positive(v, "value")

    @model_validator(mode="after")
    def _dense_not_above_sparse(self) -> Accelerator:
        for k, sparse in self.sparse_flops_per_s.items():
            dense = self.dense_flops_per_s.get(k)
            if sparse is not None and dense is not None and dense > sparse:
                raise ValueError(f"dense {k} peak {dense:g} is above the sparse peak {sparse:g}")
        return self

    def peak_flops_per_s(self, dtype: str) -> float | None:
        """Dense peak FLOP/s for ``dtype`` (``bf16``, ``bfloat16``, ``fp8``...); ``None`` when
        the accelerator does not support it or no source publishes it."""
        return self.dense_flops_per_s.get(normalise_dtype(dtype))


#: Purchase kinds of a cloud price, named as each cloud sells them: AWS Savings Plans and
#: Reserved Instances, GCP committed use discounts (CUDs), Azure reservations, AWS EC2
#: Capacity Blocks for ML. ``reserved`` is a commitment whose term the source does not state.
PURCHASE_KINDS: tuple[str, ...] = (
    "on_demand",
    "spot",
    "reserved_1y",
    "reserved_3y",
    "savings_plan_1y",
    "savings_plan_3y",
    "cud_1y",
    "cud_3y",
    "reserved",
    "capacity_block",
)

PurchaseKind = Literal[
    "on_demand",
    "spot",
    "reserved_1y",
    "reserved_3y",
    "savings_plan_1y",
    "savings_plan_3y",
    "cud_1y",
    "cud_3y",
    "reserved",
    "capacity_block",
]


class PriceObservation(BaseModel):
    """One published price of an instance, with where and when it was seen.

    ``usd_per_hour`` is per instance-hour; it is empty only for a documented gap (a kind the
    provider sells but whose rate no opened source gives), which then needs ``notes`` saying
    what was looked for. Capacity blocks carry their booking rules: ``duration_increments``
    (``[[step_days, up_to_days], ...]``: 1-day steps up to 14 days, then 7-day steps up to
    182) and ``max_instances`` per block.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: PurchaseKind
    usd_per_hour: float | None = Field(gt=0)
    region: str | None
    as_of: str = Field(
        description="YYYY-MM-DD, or a period YYYY-MM / YYYY-Q1 / YYYY-H1 when undated"
    )
    source: str = Field(min_length=8)
    currency: Literal["USD"] = "USD"
    notes: str = ""
    duration_increments: tuple[tuple[int, int], ...] | None = Field(
        None, description="capacity block: [[step_days, up_to_days], ...] in increasing order"
    )
    max_instances: int | None = Field(None, gt=0, description="capacity block: instances per block")

    @field_validator("as_of", mode="before")
    @classmethod
    def _as_of(cls, v: Any) -> str:
        if isinstance(v, _dt.date):
            v = v.isoformat()
        period_start(str(v))
        return str(v)

    @model_validator(mode="after")
    def _gap_and_terms(self) -> PriceObservation:
        if self.usd_per_hour is None and not self.notes.strip():
            raise ValueError("a price with no usd_per_hour needs notes saying why it is absent")
        if self.duration_increments is not None:
            if self.model != "capacity_block":
                raise ValueError("duration_increments belong to capacity_block prices")
            last = 0
            for step, up_to in self.duration_increments:
                if step <= 0 or up_to <= last or up_to % step:
                    raise ValueError(
                        "duration_increments: each [step_days, up_to_days] needs step > 0 and"
                        " up_to above the previous, a multiple of step"
                    )
                last = up_to
        return self

    @property
    def as_of_date(self) -> _dt.date:
        """First day of ``as_of`` (for sorting observations by time)."""
        return period_start(self.as_of)

    @property
    def max_duration_days(self) -> int | None:
        """The longest booking a capacity block allows (its last increment's limit)."""
        return self.duration_increments[-1][1] if self.duration_increments else None


class Instance(Row):
    """A cloud instance type (or TPU slice) with its accelerators and published prices."""

    kind: ClassVar[str] = "instance"
    reportable: ClassVar[tuple[str, ...]] = (
        "vcpus",
        "memory_bytes",
        "local_nvme_bytes",
        "network_bandwidth_bits_per_s",
    )

    cloud: Literal["aws", "gcp", "azure", "coreweave", "lambda", "nebius", "oci"]
    accelerator_id: str
    accelerators_per_node: int = Field(gt=0)
    vcpus: int | None
    memory_bytes: int | None
    local_nvme_bytes: int | None
    network_bandwidth_bits_per_s: float | None
    network_detail: str | None = None
    nic_id: str | None = None
    nics_per_node: int | None = None
    instance_multiple: int | None = Field(
        None,
        gt=1,
        description=(
            "sold only in whole groups of this many instances (an UltraServer: p6e-gb200 = 18"
            " instances, one NVL72 rack); the plan rounds a fleet up to a multiple of it"
        ),
    )
    prices: tuple[PriceObservation, ...] = ()

    def price(self, model: str = "on_demand", region: str | None = None) -> PriceObservation | None:
        """Latest priced observation of ``model`` (optionally in ``region``); None if unpublished."""
        obs = [
            p
            for p in self.prices
            if p.model == model
            and p.usd_per_hour is not None
            and (region is None or p.region == region)
        ]
        return max(obs, key=lambda p: p.as_of_date) if obs else None

    def price_gap(self, model: str) -> PriceObservation | None:
        """The latest documented gap for ``model`` (an observation with no rate and a note)."""
        obs = [p for p in self.prices if p.model == model and p.usd_per_hour is None]
        return max(obs, key=lambda p: p.as_of_date) if obs else None

    def price_kinds(self) -> tuple[str, ...]:
        """The purchase kinds this row has an observation of (priced or a documented gap)."""
        return tuple(k for k in PURCHASE_KINDS if any(p.model == k for p in self.prices))


class NicCount(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    nic_id: str
    count: int = Field(gt=0)
    role: Literal["compute", "storage", "frontend", "management"] = "compute"


class Node(Row):
    """An on-premises node type (HGX/DGX, OEM MI300X platforms)."""

    kind: ClassVar[str] = "node"
    reportable: ClassVar[tuple[str, ...]] = (
        "max_power_w",
        "price_usd",
        "rack_units",
        "weight_kg",
        "cooling",
    )

    name: str
    vendor: str
    accelerator_id: str
    accelerators_per_node: int = Field(gt=0)
    max_power_w: float | None = Field(description="the system's maximum input power")
    typical_power_w: float | None = Field(
        None, description="power under a typical AI load, where the vendor publishes it"
    )
    weight_kg: float | None = Field(None, description="system weight, maximum configuration")
    cooling: Literal["air", "liquid"] | None = Field(
        None, description="air, or direct liquid cooling of the GPUs (hybrid counts as liquid)"
    )
    rack_scale: bool = Field(
        False, description="the node is a whole rack (NVL72): exactly one per rack, never two"
    )
    rack_power_w: float | None = Field(
        None,
        description=(
            "power one rack of this node type may draw in the vendor's reference design for"
            " its cooling type (the default rack power limit when a scenario gives none)"
        ),
    )
    nics: tuple[NicCount, ...] = ()
    price_usd: float | None = None
    price_as_of: str | None = None
    rack_units: int | None = None
    cpu: str | None = None
    memory_bytes: int | None = None
    local_nvme_bytes: int | None = None

    @field_validator("max_power_w", "typical_power_w", "weight_kg", "rack_power_w", "price_usd")
    @classmethod
    def _pos(cls, v: float | None) -> float | None:
        return _positive(v, "value")

    @field_validator("price_as_of", mode="before")
    @classmethod
    def _as_of(cls, v: Any) -> str | None:
        return _period_text(v)

    @model_validator(mode="after")
    def _price_dated(self) -> Node:
        if self.price_usd is not None and self.price_as_of is None:
            raise ValueError("price_usd needs price_as_of (when the price was published)")
        if (
            self.typical_power_w is not None
            and self.max_power_w is not None
            and self.typical_power_w > self.max_power_w
        ):
            raise ValueError(
                f"typical_power_w {self.typical_power_w:g} is above max_power_w {self.max_power_w:g}"
            )
        return self


class StorageTier(Row):
    """A storage service tier or file system, sized by throughput per TiB or per appliance.

    Cloud tiers scale with provisioned capacity (``*_per_tib``); on-premises tiers are bought
    in whole appliances (building blocks) with a datasheet's per-appliance throughput, usable
    capacity, height and power (``*_per_appliance``). A row is one or the other. Per-client
    figures (``*_per_node``) cap what one client node moves. Every price needs
    ``price_as_of``; a figure no primary source gives is left empty (the plan names it).
    """

    kind: ClassVar[str] = "storage"
    reportable: ClassVar[tuple[str, ...]] = ("price_usd_per_tib_month", "gpudirect_storage")
    #: the per-appliance figures a whole-appliance sizing needs (missing ones are named)
    APPLIANCE_SIZING: ClassVar[tuple[str, ...]] = (
        "read_bytes_per_s_per_appliance",
        "write_bytes_per_s_per_appliance",
        "capacity_bytes_per_appliance",
    )

    name: str
    provider: str
    kind_of_storage: Literal["parallel_fs", "nfs", "object", "local_nvme", "block"] = Field(
        alias="type"
    )
    read_bytes_per_s_per_tib: float | None = None
    write_bytes_per_s_per_tib: float | None = None
    read_bytes_per_s_per_node: float | None = None
    write_bytes_per_s_per_node: float | None = None
    throughput_increment_bytes_per_s: float | None = None
    capacity_min_bytes: int | None = None
    capacity_max_bytes: int | None = None
    capacity_step_bytes: int | None = None
    sold_in_appliances: bool = Field(
        False,
        description=(
            "bought in whole appliances (on premises): sized from the per-appliance figures,"
            " naming those the catalog lacks"
        ),
    )
    read_bytes_per_s_per_appliance: float | None = Field(
        None, description="sequential read of one appliance (building block), B/s"
    )
    write_bytes_per_s_per_appliance: float | None = Field(
        None, description="sequential write of one appliance, B/s"
    )
    capacity_bytes_per_appliance: float | None = Field(
        None, description="usable capacity of one appliance, bytes"
    )
    rack_units_per_appliance: float | None = Field(None, description="height of one appliance, U")
    min_appliances: int | None = Field(
        None, ge=1, description="fewest appliances the vendor sells as one system"
    )
    power_w_per_appliance: float | None = Field(
        None, description="power of one appliance (datasheet maximum), W"
    )
    price_usd_per_tib_month: float | None = None
    price_usd_per_appliance: float | None = Field(
        None, description="purchase price of one appliance (capex), USD"
    )
    price_usd_per_tib: float | None = Field(
        None, description="purchase price per usable TiB (capex), USD"
    )
    price_as_of: str | None = None
    price_not_published: str | None = Field(
        None,
        description=(
            "why the catalog has no price for the tier (the vendor sells by quote only, the"
            " provider's pricing page was not retrieved, ...): the plan prints it and leaves"
            " the tier out of the cost until the scenario quotes a rate"
        ),
    )
    gpudirect_storage: bool | None = None

    @field_validator(
        "read_bytes_per_s_per_appliance",
        "write_bytes_per_s_per_appliance",
        "capacity_bytes_per_appliance",
        "rack_units_per_appliance",
        "power_w_per_appliance",
        "price_usd_per_appliance",
        "price_usd_per_tib",
        "price_usd_per_tib_month",
    )
    @classmethod
    def _pos(cls, v: float | None) -> float | None:
        return _positive(v, "value")

    @field_validator("price_as_of", mode="before")
    @classmethod
    def _as_of(cls, v: Any) -> str | None:
        return _period_text(v)

    def missing_fields(self) -> list[str]:
        """Unpublished fields; for an appliance tier also the per-appliance sizing figures."""
        out = super().missing_fields()
        if self.per_appliance:
            # bought, not rented: the price that matters is per appliance (or per TiB)
            out = [f for f in out if f != "price_usd_per_tib_month"]
            if self.price_usd_per_appliance is None and self.price_usd_per_tib is None:
                out.append("price_usd_per_appliance")
            out += [f for f in self.APPLIANCE_SIZING if getattr(self, f) is None]
        return out

    @property
    def per_appliance(self) -> bool:
        """True when the tier is sized in whole appliances."""
        return self.sold_in_appliances or any(
            getattr(self, f) is not None
            for f in (*self.APPLIANCE_SIZING, "rack_units_per_appliance", "power_w_per_appliance")
        )

    @model_validator(mode="after")
    def _price_dated(self) -> StorageTier:
        for name in ("price_usd_per_tib_month", "price_usd_per_appliance", "price_usd_per_tib"):
            if getattr(self, name) is not None and self.price_as_of is None:
                raise ValueError(f"{name} needs price_as_of (when the price was published)")
            if getattr(self, name) is not None and self.price_not_published:
                raise ValueError(
                    f"{name} is set but price_not_published says there is no price: drop one"
                )
        if self.per_appliance and (
            self.read_bytes_per_s_per_tib is not None or self.write_bytes_per_s_per_tib is not None
        ):
            raise ValueError(
                "a tier is sized per TiB or per appliance, not both: drop the *_per_tib or the"
                " *_per_appliance fields"
            )
        return self


class Fabric(Row):
    """A link technology or network fabric generation (NVLink 4, InfiniBand NDR, EFA v2...)."""

    kind: ClassVar[str] = "fabric"

    name: str
    scope: Literal["scale_up", "scale_out", "host"]
    port_bandwidth_bits_per_s: float | None = Field(None, description="per port, per direction")
    lane_bandwidth_bits_per_s: float | None = None
    per_gpu_bandwidth_bytes_per_s: float | None = Field(None, description="per GPU, per direction")
    node_bandwidth_bits_per_s: float | None = Field(None, description="per node, per direction")
    domain_size: int | None = None
    in_network_reduction: bool | None = None
    in_network_reduction_efficiency: float | None = Field(
        None,
        gt=0,
        le=1,
        description=(
            "the collective library's modelled efficiency of in-network reduction for the"
            " GPUs on this fabric (NCCL nvlsEfficiency), relative to the link bandwidth"
        ),
    )
    collective_library: str | None = Field(
        None, description="collective library of this fabric's GPUs (nccl, rccl)"
    )
    collective_base_latency_s: float | None = Field(
        None, gt=0, description="library's fixed latency of one low-latency-protocol collective"
    )
    collective_hop_latency_s: float | None = Field(
        None, gt=0, description="library's latency per algorithm step over this fabric"
    )
    collective_net_hop_latency_s: float | None = Field(
        None, gt=0, description="library's latency per step that leaves this domain (network)"
    )
    latency_source: str | None = Field(None, description="source of the collective_* latencies")


class Switch(Row):
    """A network switch model with its radix and port speed."""

    kind: ClassVar[str] = "switch"
    reportable: ClassVar[tuple[str, ...]] = ("ports", "port_bandwidth_bits_per_s")

    name: str
    vendor: str
    fabric_id: str
    ports: int | None = Field(description="radix at port_bandwidth_bits_per_s")
    port_bandwidth_bits_per_s: float | None
    alt_ports: int | None = Field(None, description="radix when split (e.g. 128 x 200G)")
    alt_port_bandwidth_bits_per_s: float | None = None
    switching_capacity_bits_per_s: float | None = None
    rack_units: int | None = None
    in_network_reduction: bool | None = None
    max_power_w: float | None = None


class Nic(Row):
    """A network adapter (ConnectX, EFA, ...)."""

    kind: ClassVar[str] = "nic"
    reportable: ClassVar[tuple[str, ...]] = ("bandwidth_bits_per_s",)

    name: str
    vendor: str
    fabric_ids: tuple[str, ...] = ()
    bandwidth_bits_per_s: float | None = Field(description="per adapter, per direction")
    host_link: str | None = None


class Optic(Row):
    """An optics or cable class (DAC, AOC, transceiver) with its reach."""

    kind: ClassVar[str] = "optic"

    name: str
    medium: Literal["copper", "optical"]
    bandwidth_bits_per_s: float | None
    max_reach_m: float | None = None
    power_w: float | None = None


class ModelArch(Row):
    """A transformer language model's architecture, from its config file or paper.

    ``ffn_hidden`` is the width of the dense MLP; ``moe_ffn_hidden`` the width of one expert.
    ``first_dense_layers`` leading layers are dense; after them every ``moe_layer_interval``-th
    layer is an MoE layer (1 = all, 2 = every other layer as in Llama 4 Maverick).
    """

    kind: ClassVar[str] = "model"

    name: str
    family: str
    layers: int = Field(gt=0)
    hidden: int = Field(gt=0)
    heads: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim_: int | None = Field(None, alias="head_dim")
    ffn_hidden: int = Field(gt=0)
    vocab: int = Field(gt=0)
    max_context: int = Field(gt=0)
    tied_embeddings: bool
    gated_mlp: bool
    attention: Literal["mha", "gqa", "mqa", "mla"]
    mla: MLAConfig | None = None
    dsa: DSAConfig | None = Field(
        None,
        description=(
            "DeepSeek Sparse Attention on the MLA layers (DeepSeek-V3.2: index_n_heads,"
            " index_head_dim, index_topk)"
        ),
    )
    activation: str = "silu"
    norm: Literal["rmsnorm", "layernorm"] = "rmsnorm"
    norm_bias: bool = False
    attention_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    attention_output_gate: bool = Field(
        False,
        description=(
            "gated attention: the query projection also writes a per-head gate on the"
            " attention output (Qwen3-Next, Qwen3.5: attn_output_gate)"
        ),
    )
    parallel_attention: bool = False
    norms_per_layer: int = 2
    learned_positions: int = Field(0, description="learned absolute position embeddings (rows)")
    lm_head_bias: bool = False
    num_experts: int = 0
    top_k: int = 0
    num_shared_experts: int = 0
    moe_ffn_hidden: int | None = None
    shared_expert_ffn_hidden: int | None = None
    first_dense_layers: int = 0
    moe_layer_interval: int = 1
    router_bias: bool = False
    max_nodes_per_token: int | None = Field(
        None,
        gt=0,
        description=(
            "node-limited routing: a token's experts are on at most this many nodes"
            " (DeepSeek-V3: topk_group 4 of n_group 8)"
        ),
    )
    sliding_window: int | None = Field(
        None, gt=0, description="tokens a local (sliding-window) attention layer attends to"
    )
    attention_chunk: int | None = Field(
        None,
        gt=0,
        description=(
            "chunked local attention (Llama 4: attention_chunk_size 8192): a local layer attends"
            " within its block of this many tokens"
        ),
    )
    released_precision: Literal["fp8", "mxfp4"] | None = Field(
        None,
        description=(
            "the weight precision of the checkpoint its makers released, where it is not 16-bit"
            " (DeepSeek-V3/R1: block-scaled fp8; gpt-oss: MXFP4 experts; config.json"
            " quantization_config); a forecast at another precision says so"
        ),
    )
    mamba_layers: int = Field(
        0,
        ge=0,
        description=(
            "hybrid models: blocks with a Mamba-2 mixer; with it every one of the layers is a"
            " single block (Megatron hybrid_override_pattern: Mamba, attention or MLP)"
        ),
    )
    attention_layers: int | None = Field(
        None, ge=0, description="hybrid models: self-attention blocks (the rest are MLP blocks)"
    )
    mamba: MambaConfig | None = None
    full_attention_interval: int | None = Field(
        None,
        gt=0,
        description=(
            "with sliding_window or attention_chunk: every N-th layer (1-based) attends to the"
            " full context and the others locally (Gemma 3: 6, five local to one global; GPT-OSS:"
            " 2; Llama 4: 4); None = every layer local"
        ),
    )
    published_params: float = Field(gt=0, description="parameter count as its source states it")
    published_active_params: float | None = None
    published_params_source: str = Field(min_length=8)

    @property
    def head_dim(self) -> int:
        """Per-head query/key dimension: as the config states it, else ``hidden // heads``;
        for MLA the decoupled ``qk_nope_head_dim + qk_rope_head_dim`` (DeepSeek-V2 Sec. 2.1)."""
        if self.head_dim_ is not None:
            return self.head_dim_
        if self.mla is not None:
            return self.mla.qk_nope_head_dim + self.mla.qk_rope_head_dim
        return self.hidden // self.heads

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @model_validator(mode="after")
    def _consistent(self) -> ModelArch:
        if self.heads % self.kv_heads:
            raise ValueError(
                f"heads ({self.heads}) must be a multiple of kv_heads ({self.kv_heads})"
            )
        if self.attention == "mla" and self.mla is None:
            raise ValueError("attention 'mla' needs the mla block (kv_lora_rank, ...)")
        if self.attention != "mla" and self.mla is not None:
            raise ValueError("an mla block is only valid with attention 'mla'")
        if self.dsa is not None and (
            self.mla is None or self.sliding_window is not None or self.attention_chunk is not None
        ):
            raise ValueError("a dsa block needs attention 'mla' and no local attention")
        if self.attention == "mha" and self.kv_heads != self.heads:
            raise ValueError("attention 'mha' needs kv_heads == heads")
        if self.attention == "mqa" and self.kv_heads != 1:
            raise ValueError("attention 'mqa' needs kv_heads == 1")
        if self.attention == "gqa" and not 1 < self.kv_heads < self.heads:
            raise ValueError("attention 'gqa' needs 1 < kv_heads < heads")
        if self.num_experts:
            if not 0 < self.top_k <= self.num_experts:
                raise ValueError("top_k must be between 1 and num_experts")
            if self.moe_ffn_hidden is None:
                raise ValueError("an MoE model needs moe_ffn_hidden (width of one expert)")
        elif self.top_k or self.num_shared_experts:
            raise ValueError("top_k / num_shared_experts need num_experts > 0")
        if self.first_dense_layers >= self.layers:
            raise ValueError("first_dense_layers must be below layers")
        if self.full_attention_interval is not None and (
            self.sliding_window is None and self.attention_chunk is None
        ):
            raise ValueError("full_attention_interval needs sliding_window or attention_chunk")
        if self.sliding_window is not None and self.attention_chunk is not None:
            raise ValueError("give sliding_window or attention_chunk, not both")
        if self.mamba_layers and self.mamba is None:
            raise ValueError("mamba_layers needs the mamba block (heads, head_dim, state, ...)")
        if self.mamba_layers + (self.attention_layers or 0) > self.layers:
            raise ValueError("mamba_layers + attention_layers must be at most layers")
        if (
            self.is_hybrid
            and self.num_experts
            and (self.first_dense_layers or self.moe_layer_interval != 1)
        ):
            raise ValueError(
                "a hybrid model with experts has every MLP block an MoE block: drop"
                " first_dense_layers and moe_layer_interval"
            )
        return self

    @property
    def is_hybrid(self) -> bool:
        return self.mamba_layers > 0 or self.attention_layers is not None

    def arch_params(self) -> ArchParams:
        """The fields the one parameter count reads (:mod:`gpuplan.catalogs.params`)."""
        return ArchParams(
            layers=self.layers,
            hidden=self.hidden,
            heads=self.heads,
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            ffn_hidden=self.ffn_hidden,
            vocab=self.vocab,
            gated_mlp=self.gated_mlp,
            tied_embeddings=self.tied_embeddings,
            mla=self.mla,
            dsa=self.dsa,
            attention_bias=self.attention_bias,
            mlp_bias=self.mlp_bias,
            qk_norm=self.qk_norm,
            attention_output_gate=self.attention_output_gate,
            norm_bias=self.norm_bias,
            norms_per_layer=self.norms_per_layer,
            num_experts=self.num_experts,
            top_k=self.top_k,
            num_shared_experts=self.num_shared_experts,
            moe_ffn_hidden=self.moe_ffn_hidden or 0,
            shared_expert_ffn_hidden=self.shared_expert_ffn_hidden or 0,
            moe_layers=len(self.moe_layer_indices()),
            router_bias=self.router_bias,
            learned_positions=self.learned_positions,
            lm_head_bias=self.lm_head_bias,
            mamba=self.mamba,
            mamba_layers=self.mamba_layers,
            attention_layers=self.attention_layers,
        )

    def moe_layer_indices(self) -> list[int]:
        """0-based indices of the MoE layers (empty for a dense model). A hybrid model's
        MoE blocks are its MLP blocks, whose places the catalog does not record: their
        count, numbered from 0."""
        if not self.num_experts:
            return []
        if self.is_hybrid:
            return list(range(self.layers - self.mamba_layers - (self.attention_layers or 0)))
        return [
            i
            for i in range(self.first_dense_layers, self.layers)
            if (i - self.first_dense_layers + 1) % self.moe_layer_interval == 0
        ]

    def params_total(self) -> int:
        """All parameters, from the architecture: embeddings, attention (MHA/GQA/MQA/MLA with
        biases and QK-norm), MLP (gated: 3 matrices, else 2), every MoE expert with router and
        shared experts, norms, and the LM head when untied.

        Counting follows the layer definitions of the models' reference implementations
        (e.g. HF transformers ``LlamaDecoderLayer``, ``DeepseekV3Attention``); the tests
        compare it with each model's published size.
        """
        return model_params(self.arch_params(), active=False)

    def params_active(self) -> int:
        """Parameters used per token: as :meth:`params_total` but only ``top_k`` routed
        experts per MoE layer (shared experts and the router always count)."""
        return model_params(self.arch_params(), active=True)

    def released_precision_note(self, precision: str) -> str | None:
        """What to say when ``precision`` is not the one the model was released at (None
        when it is, or when the catalog records no released precision).

        A 16-bit forecast of an fp8 release plans twice its weights: DeepSeek-R1 at bf16
        takes 16 H200 in two nodes, the released fp8 model one node of 8.
        """
        released = self.released_precision
        asked = precision.strip().lower()
        if released is None or released == asked:
            return None
        if released == "mxfp4" and asked in ("fp4", "int4"):
            # an FP4 run of it, or its 4-bit weights dequantised into 16-bit GEMMs where the
            # GPU has no FP4 math (vLLM's and TensorRT-LLM's Hopper path for gpt-oss)
            return None
        return f"{self.name} was released with {released} weights; forecasting {precision}"

    def released_precision_hint(self, how: str) -> str:
        """How to forecast the released checkpoint, ``how`` naming the setting ("--precision"
        or "precision:"): its own precision (an MXFP4 release runs at mxfp4 on a GPU without
        FP4 tensor cores too, its weights in 16-bit GEMMs)."""
        out = f"{how} {self.released_precision} to match"
        if self.released_precision == "mxfp4":
            out += " (on a GPU without FP4 tensor cores: 4-bit weights, 16-bit math)"
        return out

    def kv_cache_bytes_per_token(self, bytes_per_element: float = 2.0) -> float:
        """KV-cache bytes per token, by the one formula
        :func:`gpuplan.catalogs.kv_cache.kv_cache_bytes_per_token` (MLA: the latent), over
        the layers that cache K/V: every layer, or a hybrid's attention blocks only (its
        Mamba-2 blocks keep a fixed-size state, Dao & Gu 2024)."""
        hybrid = self.is_hybrid and self.mla is None
        return kv_cache_bytes_per_token(
            kv_layers=(self.attention_layers or 0) if hybrid else self.layers,
            kv_heads=self.kv_heads,
            head_dim=self.head_dim,
            bytes_per_element=bytes_per_element,
            mla_kv_lora_rank=self.mla.kv_lora_rank if self.mla is not None else None,
            mla_qk_rope_head_dim=self.mla.qk_rope_head_dim if self.mla is not None else None,
        )

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["head_dim"] = self.head_dim
        data["params_total"] = self.params_total()
        data["params_active"] = self.params_active()
        return data


ROW_TYPES: dict[str, type[Row]] = {
    cls.kind: cls
    for cls in (Accelerator, Instance, Node, StorageTier, Fabric, Switch, Nic, Optic, ModelArch)
}
