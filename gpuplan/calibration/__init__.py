"""Calibration: fit what was measured into device models that forecasts use.

Public entry points (see docs/dev/INTERFACES.md): :func:`device_perf` returns a
:class:`gpuplan.calibration.api.DevicePerf` for a catalog accelerator, calibrated from the
default artifact shipped with the package or from a given one.
"""
