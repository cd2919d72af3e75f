"""The result document written by ``gpuplan probe`` (DESIGN.md section 3.1).

One file per probe run: ``results/<machine_id>/<started_at>_<run_id8>.json``. Scripts outside
the package read these files, so field names only ever grow; any change that is not a pure
addition bumps :data:`SCHEMA_VERSION` and adds an upgrade step in ``migrations.py``.

Format history
--------------
* version 1 (gpuplan 0.1): first release. Raw timing samples kept (``samples_s``), warmups
  stored apart (``warmup_s``); SI units in every name; ``source`` set on published
  measurements converted into results (``results/reference/``).

Measurements are typed per probe (``MatmulMeasurement`` ...). Unknown extra keys are kept
(``extra="allow"``) so that a newer minor addition survives a round trip through older code.
"""

from __future__ import annotations

import statistics
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

SCHEMA_VERSION = 1

ProbeName = Literal["matmul", "membw", "pcie", "collectives", "storage", "inventory"]
Status = Literal["ok", "failed", "skipped"]


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)


class Accelerator(_Model):
    """One accelerator as the node's management library reports it (NVML, amdsmi or torch)."""

    name: str
    uuid: str | None = None
    vendor: str | None = None
    memory_bytes: int | None = None
    sm_clock_max_mhz: float | None = None
    mem_clock_max_mhz: float | None = None
    power_limit_w: float | None = None
    pcie_gen: int | None = None
    pcie_width: int | None = None
    nvlink_links: int | None = None
    ecc: bool | None = None
    catalog_id: str | None = Field(None, description="catalog accelerator id this resolved to, if any")


class Host(_Model):
    machine_id: str
    hostname: str | None = None
    cpu_model: str | None = None
    cpu_count: int | None = None
    memory_bytes: int | None = None
    accelerators: list[Accelerator] = Field(default_factory=list)
    driver_version: str | None = None
    cuda_version: str | None = None
    nccl_version: str | None = None
    torch_version: str | None = None
    fio_version: str | None = None
    topology: str | None = None
    os: str | None = None
    python_version: str | None = None


class Timing(_Model):
    """Timing of one measured point (pyperf's method: warmups kept apart, raw samples kept).

    ``samples_s`` are the durations of one call each (total time of ``loops`` calls divided
    by ``loops``). Published measurements converted to results may carry no samples.
    """

    loops: int | None = None
    warmup_s: list[float] = Field(default_factory=list)
    samples_s: list[float] = Field(default_factory=list)
    median_s: float | None = None

    @model_validator(mode="after")
    def _median_from_samples(self) -> Timing:
        if self.median_s is None and self.samples_s:
            self.median_s = statistics.median(self.samples_s)
        return self


class GemmShape(_Model):
    m: int = Field(gt=0)
    n: int = Field(gt=0)
    k: int = Field(gt=0)


class MatmulMeasurement(Timing):
    shape: GemmShape
    flops_per_s: float = Field(ge=0)
    spec_flops_per_s: float | None = None
    correct: bool | None = None
    max_rel_error: float | None = None
    label: str | None = Field(None, description="e.g. 'square' or 'llama-70b qkv tp8'")


class MembwMeasurement(Timing):
    op: Literal["copy", "triad", "read", "write", "scale", "add"]
    size_bytes: int = Field(gt=0, description="size of one array")
    bytes_moved: int | None = Field(None, description="bytes read + written per call")
    bytes_per_s: float = Field(ge=0)


class PcieMeasurement(Timing):
    direction: Literal["h2d", "d2h"]
    memory: Literal["pinned", "pageable"]
    size_bytes: int = Field(gt=0)
    bytes_per_s: float = Field(ge=0)


class CollectiveMeasurement(Timing):
    op: Literal["all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce"]
    size_bytes: int = Field(gt=0, description="nccl-tests 'size': bytes of the full buffer")
    dtype: str = "float32"
    ranks: int = Field(gt=0)
    num_nodes: int = Field(1, gt=0)
    scope: Literal["intra", "inter"] = "intra"
    algbw_bytes_per_s: float = Field(ge=0)
    busbw_bytes_per_s: float = Field(ge=0)
    correct: bool | None = None


class ClatPercentiles(_Model):
    p50_s: float | None = None
    p90_s: float | None = None
    p99_s: float | None = None
    p99_9_s: float | None = None


class StorageMeasurement(Timing):
    rw: Literal["read", "randread", "write", "randwrite"]
    block_size_bytes: int = Field(gt=0)
    iodepth: int = Field(gt=0)
    numjobs: int = Field(1, gt=0)
    size_bytes: int | None = None
    runtime_s: float | None = None
    bw_bytes_per_s: float = Field(ge=0)
    iops: float | None = None
    clat: ClatPercentiles | None = None
    direct: bool | None = None
    gds: bool = False


_MEASUREMENT_TYPES: dict[str, type[_Model]] = {
    "matmul": MatmulMeasurement,
    "membw": MembwMeasurement,
    "pcie": PcieMeasurement,
    "collectives": CollectiveMeasurement,
    "storage": StorageMeasurement,
}


class PowerSummary(_Model):
    median: float | None = None
    max: float | None = None
    samples: int | None = None


class ProbeResult(_Model):
    """One probe of a run: its status, parameters and measurements."""

    probe: ProbeName
    probe_version: int = Field(ge=1)
    status: Status
    error: str | None = None
    params: dict[str, Any] = Field(default_factory=dict)
    measurements: list[dict[str, Any]] = Field(default_factory=list)
    power_w: PowerSummary | None = None
    duration_s: float | None = None

    @model_validator(mode="after")
    def _typed_measurements(self) -> ProbeResult:
        kind = _MEASUREMENT_TYPES.get(self.probe)
        if kind is not None:
            # validate (raises with the field named) but keep plain dicts for extensibility
            self.measurements = [kind.model_validate(m).model_dump(exclude_none=False) for m in self.measurements]
        if self.status == "failed" and not self.error:
            raise ValueError("a failed probe must say why in 'error'")
        return self

    def typed(self) -> list[Any]:
        """Measurements as typed models (``MatmulMeasurement`` ...)."""
        kind = _MEASUREMENT_TYPES.get(self.probe)
        return [kind.model_validate(m) for m in self.measurements] if kind else list(self.measurements)


class ResultDocument(_Model):
    """A whole probe run (DESIGN.md 3.1)."""

    schema_version: Literal[1] = SCHEMA_VERSION
    run_id: str
    started_at: str
    ended_at: str | None = None
    gpuplan_version: str
    host: Host
    argv: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    probes: list[ProbeResult] = Field(default_factory=list)
    source: str | None = Field(
        None, description="for published measurements converted to results: where they come from"
    )
    interrupted: bool = False

    def probe(self, name: str) -> list[ProbeResult]:
        return [p for p in self.probes if p.probe == name]


def json_schema() -> dict[str, Any]:
    """The JSON Schema of the result document (committed as ``result.schema.json``)."""
    schema = ResultDocument.model_json_schema()
    schema["$id"] = f"https://gpuplan.dev/schemas/result-v{SCHEMA_VERSION}.json"
    schema["title"] = "gpuplan probe result"
    return schema
