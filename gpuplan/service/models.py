"""Request/response models of the HTTP API (they make the exported OpenAPI schema)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ErrorResponse(BaseModel):
    """Every 4xx/5xx answer except 422: what is wrong and how to fix it."""

    detail: str
    hint: str | None = None


class FieldError(BaseModel):
    loc: list[str | int] = Field(
        description="path of the offending field, starting with 'body' or 'query'"
    )
    msg: str
    type: str


class ValidationErrorResponse(BaseModel):
    """422: the document or a parameter does not validate; ``detail[*].loc`` names the field."""

    detail: list[FieldError]
    message: str | None = Field(None, description="the first problem, as one line")


class Flag(BaseModel):
    probe: str
    index: int
    quantity: str
    measured: float
    limit: float = Field(description="the bound the value crossed")
    limit_field: str
    gpu_id: str
    source: str | None = None
    message: str
    kind: str | None = Field(
        None,
        description="catalog_peak (above the vendor figure), catalog_floor (below 1e-3 of it) "
        "or pool (outside the median/MAD band of the pooled runs of the device)",
    )
    pool_median: float | None = Field(None, description="pool: median of the pooled runs")
    pool_runs: int | None = Field(None, description="pool: how many runs the band is built on")


# --- length limits of an upload's identifying fields (422 naming the field) ------------------
# They match the database columns (db.RunRow): a value that would not fit is refused, never
# truncated. Anything else in a document is bounded by the body limits of the upload.


class _Limits(BaseModel):
    model_config = ConfigDict(extra="allow")


class AcceleratorLimits(_Limits):
    name: str = Field(max_length=200)
    uuid: str | None = Field(None, max_length=100)
    catalog_id: str | None = Field(None, max_length=100)


class HostLimits(_Limits):
    machine_id: str = Field(max_length=200)
    hostname: str | None = Field(None, max_length=255)
    cpu_model: str | None = Field(None, max_length=200)
    accelerators: list[AcceleratorLimits] = Field(default_factory=list, max_length=1024)


class ProbeLimits(_Limits):
    measurements: list[dict[str, Any]] = Field(default_factory=list, max_length=100_000)


class UploadLimits(_Limits):
    """Upper bounds on the strings of a result document the service stores in columns."""

    run_id: str = Field(max_length=64)
    started_at: str = Field(max_length=64)
    ended_at: str | None = Field(None, max_length=64)
    gpuplan_version: str = Field(max_length=64)
    source: str | None = Field(None, max_length=2000)
    host: HostLimits
    probes: list[ProbeLimits] = Field(default_factory=list, max_length=1000)


class SanitizeInfo(BaseModel):
    env_removed: list[str] = Field(description="environment keys dropped (secrets, host names)")
    hostname_removed: bool
    machine_id_pseudonymised: bool


class UploadResponse(BaseModel):
    """Answer to an upload; the same ``id`` for a repeated identical upload (200)."""

    id: int = Field(description="server row id of the run")
    run_id: str
    content_sha256: str
    created: bool = Field(description="true on the first upload (201), false for a repeat (200)")
    status: str = Field(description="accepted | flagged (kept out of the calibration) | approved")
    team: str
    device_id: str
    flags: list[Flag]
    notes: list[str]
    sanitized: SanitizeInfo | None = None


class RunSummary(BaseModel):
    id: int
    run_id: str
    team: str
    device_id: str
    device_name: str | None
    num_accelerators: int
    machine_id: str | None
    started_at: str | None
    uploaded_at: str
    status: str
    num_flags: int
    content_sha256: str
    size_bytes: int
    uploaded_schema_version: int


class RunList(BaseModel):
    total: int
    limit: int
    offset: int
    runs: list[RunSummary]


class RunDetail(RunSummary):
    flags: list[Flag]
    approved_by: str | None
    approved_at: str | None
    document: dict[str, Any]


class Provenance(BaseModel):
    artifact_id: int
    created_at: str
    inputs_sha256: str
    num_runs: int
    run_ids: list[str]
    gpuplan_version: str
    duration_s: float


class CalibrationResponse(Provenance):
    artifact: dict[str, Any] = Field(description="the calibration artifact (DESIGN.md 3.2)")


class RecalibrationState(BaseModel):
    mode: str
    running: bool
    pending: bool
    last_started_at: str | None
    last_finished_at: str | None
    last_error: str | None
    fits: int


class CalibrationStatus(BaseModel):
    recalibration: RecalibrationState
    latest: Provenance | None
    included_runs: int
    flagged_runs: int


class CalibrationInputs(BaseModel):
    """One page of the documents the calibration is fitted on, in run id order."""

    inputs_sha256: str = Field(
        description="hash of the whole input set: the same on every page of one set"
    )
    total: int = Field(description="number of runs in the whole input set")
    limit: int
    cursor: str | None = Field(None, description="the cursor this page was asked for")
    next_cursor: str | None = Field(
        None, description="pass as ?cursor= for the next page; null on the last page"
    )
    run_ids: list[str] = Field(description="the run ids of this page's documents")
    documents: list[dict[str, Any]]


class WhoAmI(BaseModel):
    token_id: str
    team: str
    scopes: list[str]


class Health(BaseModel):
    status: str
    database: str = Field(
        description="ok | unavailable (unreachable) | unwritable (reads work, writes fail)"
    )
    database_error: str | None = Field(None, description="first line of the database error")
    schema_revision: str | None
    version: str
    max_upload_bytes: int = Field(description="largest accepted upload body")
