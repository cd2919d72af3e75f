"""Request/response models of the HTTP API (they make the exported OpenAPI schema)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


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
    limit: float
    limit_field: str
    gpu_id: str
    source: str | None = None
    message: str


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
    inputs_sha256: str
    run_ids: list[str]
    documents: list[dict[str, Any]]


class WhoAmI(BaseModel):
    token_id: str
    team: str
    scopes: list[str]


class Health(BaseModel):
    status: str
    database: str
    schema_revision: str | None
    version: str
    max_upload_bytes: int = Field(description="largest accepted upload body")
