"""What every probe shares: the run context, the recorder of one probe, device resolution.

A probe is a function ``run(ctx: ProbeContext) -> None`` that opens one or more
:class:`ProbeRecorder` (one per dtype, per GPU ...) with :meth:`ProbeContext.record`, adds
measurements point by point and closes each with ``ok``/``fail``/``skip``. The suite
(``gpuplan.probes.suite``) owns the recorders, so whatever was measured before an error,
a timeout or Ctrl-C is still in the document.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from gpuplan.errors import EnvironmentProblem
from gpuplan.probes.timing import TimingConfig


class ProgressTask(Protocol):
    def advance(self, n: int = 1) -> None: ...


class Progress(Protocol):
    """Where probes report progress (the CLI draws bars on stderr; tests pass nothing)."""

    def task(self, description: str, total: int) -> ProgressTask: ...


class _NullTask:
    def advance(self, n: int = 1) -> None:
        return None


class NullProgress:
    def task(self, description: str, total: int) -> ProgressTask:
        return _NullTask()


class ProbeTimeout(Exception):
    """A probe ran past its time budget (it is recorded as failed, the suite goes on)."""


class PointFailed(Exception):
    """One point of a sweep failed (OOM at the largest size ...); the sweep goes on."""


@dataclass
class ProbeRecorder:
    """Collects one ``ProbeResult`` (see ``gpuplan.results.schema``) while a probe runs."""

    probe: str
    probe_version: int
    params: dict[str, Any] = field(default_factory=dict)
    measurements: list[dict[str, Any]] = field(default_factory=list)
    status: str | None = None  # None while running; ok|failed|skipped|interrupted
    error: str | None = None
    warnings: list[str] = field(default_factory=list)
    power_w: dict[str, Any] | None = None
    started: float = field(default_factory=time.perf_counter)
    duration_s: float | None = None

    def add(self, measurement: dict[str, Any]) -> None:
        self.measurements.append(measurement)

    def warn(self, message: str) -> None:
        self.warnings.append(" ".join(str(message).split()))

    def _close(self, status: str, error: str | None) -> None:
        if self.status is None:
            self.status = status
            self.error = None if error is None else " ".join(str(error).split())
            self.duration_s = time.perf_counter() - self.started

    def ok(self) -> None:
        """Close as ``ok``; ``failed`` instead when no point could be measured."""
        if not self.measurements:
            reason = "; ".join(self.warnings) or "no point could be measured"
            self._close("failed", reason)
        else:
            self._close("ok", None)

    def fail(self, reason: str) -> None:
        self._close("failed", reason)

    def skip(self, reason: str) -> None:
        self._close("skipped", reason)

    def interrupt(self, reason: str) -> None:
        """Close as ``interrupted`` (SIGINT/SIGTERM): every measurement kept is complete."""
        self._close("interrupted", reason)

    @property
    def open(self) -> bool:
        return self.status is None

    def as_dict(self) -> dict[str, Any]:
        """The ``ProbeResult`` dict; a recorder still open reads as ``interrupted`` (a
        checkpoint of a run that is killed now says so, with its points)."""
        return {
            "probe": self.probe,
            "probe_version": self.probe_version,
            "status": self.status or "interrupted",
            "error": self.error
            if self.status
            else f"the run stopped while this probe ran ({len(self.measurements)} points kept)",
            "params": self.params,
            "measurements": self.measurements,
            "power_w": self.power_w,
            "duration_s": self.duration_s,
            "warnings": self.warnings,
        }


@dataclass(frozen=True)
class DeviceInfo:
    """The compute device the probes run on."""

    kind: str  # "cuda" (NVIDIA or AMD under ROCm) or "cpu"
    count: int  # accelerators visible (0 on CPU)
    vendor: str | None = None  # "nvidia", "amd" or None
    names: tuple[str, ...] = ()

    @property
    def is_gpu(self) -> bool:
        return self.kind == "cuda"


def import_torch() -> Any:
    """Import torch or say how to install it."""
    try:
        import torch
    except ImportError:
        raise EnvironmentProblem(
            "the probes need PyTorch, which is not installed",
            hint="pip install 'gpuplan[probes]' (or run scripts/setup.sh)",
        ) from None
    return torch


def resolve_device(request: str = "auto") -> DeviceInfo:
    """``auto``: the GPUs when torch sees any, else the CPU; ``cuda``: GPUs or an error.

    AMD GPUs under PyTorch's ROCm build also answer to ``torch.cuda`` (HIP).
    """
    torch = import_torch()
    has_gpu = bool(torch.cuda.is_available()) and torch.cuda.device_count() > 0
    if request == "cpu" or (request == "auto" and not has_gpu):
        return DeviceInfo(kind="cpu", count=0)
    if not has_gpu:
        cpu_build = torch.version.cuda is None and getattr(torch.version, "hip", None) is None
        hint = (
            f"torch {torch.__version__} is a CPU build: install a CUDA or ROCm build of torch, or use --device cpu"
            if cpu_build
            else "check the driver (nvidia-smi / rocm-smi) and CUDA_VISIBLE_DEVICES, or use --device cpu"
        )
        raise EnvironmentProblem("--device cuda was asked for but torch sees no GPU", hint=hint)
    count = torch.cuda.device_count()
    vendor = "amd" if getattr(torch.version, "hip", None) else "nvidia"
    names = tuple(torch.cuda.get_device_name(i) for i in range(count))
    return DeviceInfo(kind="cuda", count=count, vendor=vendor, names=names)


def timer_for(device: DeviceInfo, index: int = 0) -> Any:
    """The right timer for ``device``: CUDA events on GPUs, perf_counter on CPUs."""
    from gpuplan.probes.timing import CudaEventTimer, WallTimer

    if device.is_gpu:
        torch = import_torch()
        return CudaEventTimer(torch, torch.device("cuda", index))
    return WallTimer()


@dataclass
class ProbeContext:
    """Everything a probe needs from the run: options, device, progress, recorders."""

    device: DeviceInfo
    quick: bool = False
    timing: TimingConfig = field(default_factory=TimingConfig)
    progress: Progress = field(default_factory=NullProgress)
    storage_path: str | None = None
    storage_size_bytes: int | None = None
    out_dir: str = "results"
    run_id: str = ""  # names the run's scratch files (gpuplan.probes.scratch)
    machine_id: str = ""
    gloo_ranks: int = 2
    probe_timeout_s: float | None = None
    power: Any = None  # gpuplan.probes.power.PowerSampler or None
    spec_lookup: Callable[[int, str], float | None] | None = None
    accelerators: list[dict[str, Any]] = field(default_factory=list)
    """The inventory rows (``host.accelerators``), matched to torch indices."""
    workload: dict[str, Any] = field(default_factory=dict)
    """Options of a workload probe (``serve``: endpoint, model, concurrency levels ...)."""
    recorders: list[ProbeRecorder] = field(default_factory=list)
    on_point: Callable[[], None] | None = None
    _deadline: float | None = None

    def record(self, probe: str, probe_version: int, **params: Any) -> ProbeRecorder:
        """Open the recorder of one ``ProbeResult`` (kept by the suite, even on errors)."""
        rec = ProbeRecorder(probe=probe, probe_version=probe_version, params=dict(params))
        self.recorders.append(rec)
        return rec

    def catalog_row(self, index: int) -> Any | None:
        """The catalog accelerator row of torch device ``index``, or None."""
        from gpuplan.probes.inventory import catalog_gpu

        acc = accelerator_for(self.accelerators, index)
        return catalog_gpu(acc["name"]) if acc else None

    def start_deadline(self) -> None:
        self._deadline = (
            None if self.probe_timeout_s is None else time.monotonic() + self.probe_timeout_s
        )

    def check_deadline(self) -> None:
        """Raise :class:`ProbeTimeout` once the probe's time budget is spent."""
        if self._deadline is not None and time.monotonic() > self._deadline:
            raise ProbeTimeout(
                f"timeout: the probe ran past its budget of {self.probe_timeout_s:g} s"
            )

    def remaining_s(self, default: float) -> float:
        """Seconds left in the probe's budget (``default`` when it has none)."""
        if self._deadline is None:
            return default
        return max(1.0, self._deadline - time.monotonic())

    @contextlib.contextmanager
    def power_sampling(self, rec: ProbeRecorder, devices: list[int]) -> Iterator[None]:
        """Sample board power of ``devices`` while the block runs; store it on ``rec``."""
        if self.power is None or not devices:
            yield
            return
        sampling = self.power.sampling(devices)
        samples = sampling.__enter__()
        try:
            yield
        finally:
            sampling.__exit__(None, None, None)
            rec.power_w = self.power.summary(samples, devices)

    def point_done(self) -> None:
        if self.on_point is not None:
            self.on_point()


def accelerator_for(accelerators: list[dict[str, Any]], index: int) -> dict[str, Any] | None:
    """The inventory row of torch device ``index`` (matched by UUID/PCI id, not position)."""
    for acc in accelerators:
        if acc.get("torch_index") == index:
            return acc
    if any(acc.get("torch_index") is not None for acc in accelerators):
        return None
    return accelerators[index] if index < len(accelerators) else None
