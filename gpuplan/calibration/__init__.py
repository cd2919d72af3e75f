"""Calibration: fit what was measured into device models that forecasts use.

Public entry points (see docs/dev/INTERFACES.md): :func:`device_perf` returns a
:class:`gpuplan.calibration.api.DevicePerf` for a catalog accelerator, calibrated from the
default artifact shipped with the package or from a given one; :func:`calibrated_summary`
gives spec vs calibrated values for ``gpuplan catalog show --calibrated``;
:func:`gpuplan.calibration.fit.calibrate_documents` builds an artifact from result documents.

Imports are lazy so that ``import gpuplan.calibration`` stays cheap (no scikit-learn).
"""

from __future__ import annotations

from typing import Any

__all__ = ["calibrated_summary", "default_artifact_path", "device_perf", "load_artifact"]


def device_perf(gpu: str, artifact: Any = None, **kwargs: Any) -> Any:
    """Calibrated :class:`~gpuplan.calibration.api.DevicePerf` of ``gpu`` (see ``perf.device_perf``)."""
    from gpuplan.calibration.perf import device_perf as _device_perf

    return _device_perf(gpu, artifact, **kwargs)


def calibrated_summary(gpu_id: str, artifact: Any = None, **kwargs: Any) -> dict[str, Any]:
    """Spec vs calibrated value, interval and basis per quantity (see ``perf.calibrated_summary``)."""
    from gpuplan.calibration.perf import calibrated_summary as _summary

    return _summary(gpu_id, artifact, **kwargs)


def load_artifact(path: Any = None) -> dict[str, Any]:
    """Load and validate a calibration artifact (``None``: the default shipped one)."""
    from gpuplan.calibration.artifact import load_artifact as _load

    return _load(path)


def default_artifact_path() -> Any:
    """Path of the default artifact shipped with the package."""
    from gpuplan.calibration.artifact import default_artifact_path as _path

    return _path()
