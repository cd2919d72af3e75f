"""Calibration artifacts on disk: JSON only (DESIGN.md 3.2), validated on load.

The default artifact, calibrated on the reference set alone, ships as package data
(``gpuplan/calibration/data/default_artifact.json``); ``scripts/build_reference.py
--artifact`` (or ``gpuplan calibrate --exclude-local``) rebuilds it, and a test checks it is
current.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any

from gpuplan.errors import InputError, SchemaError

ARTIFACT_VERSION = 1
_REQUIRED = (
    "artifact_version",
    "created_at",
    "gpuplan_version",
    "sklearn_version",
    "training_data_sha256",
    "inputs",
    "models",
    "devices",
)


def default_artifact_path() -> Path:
    """Path of the artifact shipped with the package (calibrated on the reference set)."""
    return Path(__file__).resolve().parent / "data" / "default_artifact.json"


def validate_artifact(data: Any, *, where: str = "artifact") -> dict[str, Any]:
    """Check the top-level shape of an artifact; returns it unchanged."""
    if not isinstance(data, dict):
        raise SchemaError(f"{where}: expected a JSON object, got {type(data).__name__}")
    missing = [k for k in _REQUIRED if k not in data]
    if missing:
        raise SchemaError(
            f"{where}: not a calibration artifact (missing {', '.join(missing)})",
            hint="create one with 'gpuplan calibrate --out FILE'",
        )
    version = data["artifact_version"]
    if not isinstance(version, int) or version > ARTIFACT_VERSION:
        raise SchemaError(
            f"{where}: artifact_version {version!r} is newer than this gpuplan understands ({ARTIFACT_VERSION})",
            hint="upgrade gpuplan, or recalibrate with this version",
        )
    for name, model in data["models"].items():
        for key in ("estimator", "params", "coefficients", "feature_names", "cv"):
            if key not in model:
                raise SchemaError(f"{where}: model {name!r} lacks {key!r}")
    for dev, quantities in data["devices"].items():
        for q, est in quantities.items():
            if not all(k in est for k in ("value", "low", "high", "basis")):
                raise SchemaError(f"{where}: devices.{dev}.{q} needs value, low, high and basis")
    return data


def load_artifact(path: str | Path | None = None) -> dict[str, Any]:
    """Load and validate an artifact (``None``: the default one shipped with gpuplan)."""
    if path is None:
        return _default_artifact()
    return _load(Path(path))


def _load(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(
            f"no calibration artifact at {path}",
            hint="create one with 'gpuplan calibrate --out FILE'",
        ) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    return validate_artifact(data, where=str(path))


@functools.lru_cache(maxsize=1)
def _default_artifact() -> dict[str, Any]:
    path = default_artifact_path()
    if not path.exists():
        raise InputError(
            f"the default calibration artifact is missing ({path})",
            hint="rebuild it with '.venv/bin/python scripts/build_reference.py --artifact'",
        )
    return _load(path)


def artifact_text(artifact: dict[str, Any]) -> str:
    """Canonical JSON text of an artifact (sorted keys, two-space indent, final newline)."""
    return json.dumps(artifact, indent=1, sort_keys=True, allow_nan=False) + "\n"
