"""Calibration artifacts on disk: JSON only (DESIGN.md 3.2), validated on load.

The default artifact, calibrated on the reference set alone, ships as package data
(``gpuplan/calibration/data/default_artifact.json``); ``scripts/build_reference.py
--artifact`` (or ``gpuplan calibrate --exclude-local``) rebuilds it, and a test checks it is
current.
"""

from __future__ import annotations

import functools
import json
import math
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


#: ``basis`` of a per-device figure (DESIGN.md 3.2)
BASES = ("measured", "transferred", "spec")
_TOP_TYPES = (
    ("artifact_version", int, "an integer"),
    ("created_at", str, "a string"),
    ("gpuplan_version", str, "a string"),
    ("sklearn_version", str, "a string"),
    ("training_data_sha256", str, "a string"),
    ("inputs", list, "a list"),
    ("models", dict, "a JSON object"),
    ("devices", dict, "a JSON object"),
    ("device_specs", dict, "a JSON object"),
)
_MODEL_TYPES = (
    ("estimator", str, "a string"),
    ("params", dict, "a JSON object"),
    ("coefficients", dict, "a JSON object"),
    ("feature_names", list, "a list"),
    ("cv", dict, "a JSON object"),
)


def default_artifact_path() -> Path:
    """Path of the artifact shipped with the package (calibrated on the reference set)."""
    return Path(__file__).resolve().parent / "data" / "default_artifact.json"


def validate_artifact(data: Any, *, where: str = "artifact") -> dict[str, Any]:
    """Check the shape, field types and per-device figures (finite, > 0, low <= value <=
    high, a known basis) of an artifact; returns it unchanged. Each refusal names the field."""
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
    for key, kind, label in _TOP_TYPES:
        if key in data and not isinstance(data[key], kind):
            raise SchemaError(f"{where}: {key!r} must be {label}, got {type(data[key]).__name__}")
    if not all(isinstance(run_id, str) for run_id in data["inputs"]):
        raise SchemaError(f"{where}: 'inputs' must be a list of run ids (strings)")
    for name, model in data["models"].items():
        if not isinstance(model, dict):
            raise SchemaError(f"{where}: model {name!r} must be a JSON object")
        for key, kind, label in _MODEL_TYPES:
            if key not in model:
                raise SchemaError(f"{where}: model {name!r} lacks {key!r}")
            if not isinstance(model[key], kind):
                raise SchemaError(f"{where}: models.{name}.{key} must be {label}")
    for dev, quantities in data["devices"].items():
        if not isinstance(quantities, dict):
            raise SchemaError(f"{where}: devices.{dev} must be a JSON object")
        for q, est in quantities.items():
            if not isinstance(est, dict) or not all(
                k in est for k in ("value", "low", "high", "basis")
            ):
                raise SchemaError(f"{where}: devices.{dev}.{q} needs value, low, high and basis")
            for k in ("value", "low", "high"):
                v = est[k]
                if v is None:
                    continue
                if isinstance(v, bool) or not isinstance(v, (int, float)):
                    raise SchemaError(f"{where}: devices.{dev}.{q}.{k} must be a number")
                if not (math.isfinite(v) and v > 0):
                    raise SchemaError(
                        f"{where}: devices.{dev}.{q}.{k} must be a finite number > 0 (got {v!r})"
                    )
            lo, v, hi = est["low"], est["value"], est["high"]
            if None not in (lo, v, hi) and not lo <= v <= hi:
                raise SchemaError(
                    f"{where}: devices.{dev}.{q}: low <= value <= high does not hold "
                    f"({lo!r}, {v!r}, {hi!r})"
                )
            if est["basis"] not in BASES:
                raise SchemaError(
                    f"{where}: devices.{dev}.{q}.basis must be one of {', '.join(BASES)}"
                    f" (got {est['basis']!r})"
                )
    return data


def load_artifact(path: str | Path | None = None) -> dict[str, Any]:
    """Load and validate an artifact (``None``: the default one shipped with gpuplan)."""
    if path is None:
        return _default_artifact()
    return _load(Path(path))


def _load(path: Path) -> dict[str, Any]:
    from gpuplan.userfiles import read_text

    if not path.exists() and not path.is_symlink():
        raise InputError(
            f"no calibration artifact at {path}",
            hint="create one with 'gpuplan calibrate --out FILE'",
        )
    text = read_text(
        path, what="calibration artifact", hint="create one with 'gpuplan calibrate --out FILE'"
    )
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SchemaError(
            f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})",
            hint="give an artifact written by 'gpuplan calibrate --out FILE'",
        ) from None
    except RecursionError:
        raise SchemaError(f"{path}: JSON nested too deeply to be an artifact") from None
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


# Relative tolerance of :func:`artifact_differences`. The fits (least squares, isotonic and
# log-space regressions) end in BLAS/LAPACK kernels whose summation order depends on the
# CPU (AVX2 vs AVX-512 vs arm64 NEON code paths in OpenBLAS/MKL): the same inputs give
# values that differ in the last 2-4 of the 12 significant digits the artifact keeps (one
# such case: 6.9973759802e-05 vs ...801e-05, 1.4e-11 relative). A real change of inputs,
# catalog or model moves values by far more than 1e-6 (one reference point moved by 1% moves
# its device's fit by ~1e-3), so 1e-9 separates the two with margin on both sides.
ARTIFACT_REL_TOL = 1e-9


def artifact_differences(
    a: Any, b: Any, *, rel_tol: float = ARTIFACT_REL_TOL, path: str = "$"
) -> list[str]:
    """Where two artifacts (or any JSON values) differ beyond floating-point noise.

    Numbers compare with ``math.isclose(rel_tol=rel_tol, abs_tol=0)`` (integers and
    booleans exactly); strings, keys and list lengths exactly. Returns one line per
    difference, with its JSON path, so an assertion names what moved.

    >>> artifact_differences({"x": 1.0, "y": [1, "a"]}, {"x": 1.0 + 1e-12, "y": [1, "a"]})
    []
    >>> artifact_differences({"x": 1.0}, {"x": 1.001})
    ['$.x: 1.0 != 1.001']
    """
    import math

    if isinstance(a, bool) or isinstance(b, bool) or (isinstance(a, int) and isinstance(b, int)):
        return [] if a == b and type(a) is type(b) else [f"{path}: {a!r} != {b!r}"]
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return (
            [] if math.isclose(a, b, rel_tol=rel_tol, abs_tol=0.0) else [f"{path}: {a!r} != {b!r}"]
        )
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: only in one" for k in sorted(set(a) ^ set(b))]
        for k in sorted(set(a) & set(b)):
            out += artifact_differences(a[k], b[k], rel_tol=rel_tol, path=f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items != {len(b)}"]
        out = []
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            out += artifact_differences(x, y, rel_tol=rel_tol, path=f"{path}[{i}]")
        return out
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]
