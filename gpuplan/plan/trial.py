"""What the trial node measured: the probe results the plan and its report use.

Reads result files (DESIGN.md 3.1) and summarises the latest run of this machine (or a given
run): best dense matmul throughput per dtype with the GEMM points for the roofline, best
device-memory bandwidth, power drawn under matmul load (NVML), and fio sequential read and
write bandwidth. Every value is a measurement :class:`Figure` citing the run id and probe.
Published reference runs (``source`` set) are not a trial node and are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan.plan.provenance import Figure, FigureDict, derived, measured_fig

_DTYPE_BYTES = {
    "float32": 4,
    "fp32": 4,
    "tf32": 4,
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "fp8": 1,
    "float64": 8,
}


def dtype_key(name: str | None) -> str:
    """``bfloat16`` -> ``bf16`` (catalog spelling); unknown names pass through lower-cased."""
    if not name:
        return "fp32"
    from gpuplan.catalogs.schema import normalise_dtype
    from gpuplan.errors import InputError

    try:
        return normalise_dtype(name)
    except InputError:  # a spelling the catalog does not know stays as it is
        return str(name).lower()


def gemm_intensity(m: int, n: int, k: int, bytes_per_element: float) -> float:
    """Arithmetic intensity of a GEMM: 2mnk FLOP over (mk + kn + mn) elements moved once.

    This is the roofline model's operational intensity (Williams, Waterman and Patterson
    2009, "Roofline", CACM 52(4)) for an ideal GEMM that reads A and B and writes C once.

    >>> round(gemm_intensity(4096, 4096, 4096, 2), 1)
    1365.3
    """
    return 2.0 * m * n * k / (bytes_per_element * (m * k + k * n + m * n))


@dataclass
class TrialNode:
    """Summary of one probe run of the trial node."""

    run_id: str
    path: str
    started_at: str
    machine_id: str
    device: str
    accelerator_name: str | None
    catalog_id: str | None
    matmul_flops_per_s: dict[str, Figure] = field(default_factory=dict)
    matmul_points: list[FigureDict] = field(default_factory=list)
    memory_bandwidth_bytes_per_s: Figure | None = None
    gpu_power_w: Figure | None = None
    storage_read_bytes_per_s: Figure | None = None
    storage_write_bytes_per_s: Figure | None = None
    probes: dict[str, str] = field(default_factory=dict)

    @property
    def ref(self) -> str:
        return f"run {self.run_id[:8]}"

    def best_dtype(self) -> str | None:
        """bf16 when measured, else the dtype with the highest measured throughput."""
        if "bf16" in self.matmul_flops_per_s:
            return "bf16"
        if not self.matmul_flops_per_s:
            return None
        return max(self.matmul_flops_per_s, key=lambda d: self.matmul_flops_per_s[d].value)

    def to_json(self) -> FigureDict:
        return {
            "run_id": self.run_id,
            "path": self.path,
            "started_at": self.started_at,
            "machine_id": self.machine_id,
            "device": self.device,
            "accelerator_name": self.accelerator_name,
            "catalog_id": self.catalog_id,
            "matmul_flops_per_s": self.matmul_flops_per_s,
            "matmul_points": self.matmul_points,
            "memory_bandwidth_bytes_per_s": self.memory_bandwidth_bytes_per_s,
            "gpu_power_w": self.gpu_power_w,
            "storage_read_bytes_per_s": self.storage_read_bytes_per_s,
            "storage_write_bytes_per_s": self.storage_write_bytes_per_s,
            "probes": self.probes,
        }


def summarise_run(path: Path, doc: Any) -> TrialNode:
    """Summarise one :class:`gpuplan.results.schema.ResultDocument`."""
    accel = doc.host.accelerators[0] if doc.host.accelerators else None
    ref = f"run {doc.run_id[:8]}"
    src = str(path)
    node = TrialNode(
        run_id=doc.run_id,
        path=src,
        started_at=doc.started_at,
        machine_id=doc.host.machine_id,
        device="cpu",
        accelerator_name=getattr(accel, "name", None),
        catalog_id=getattr(accel, "catalog_id", None),
    )
    for probe in doc.probes:
        node.probes[probe.probe] = probe.status
        if probe.status != "ok":
            continue
        if probe.probe == "matmul":
            node.device = str(probe.params.get("device", node.device))
            dtype = dtype_key(probe.params.get("dtype"))
            nbytes = _DTYPE_BYTES.get(str(probe.params.get("dtype", "")).lower(), 4)
            best = None
            for m in probe.typed():
                if m.correct is False:
                    continue
                ai = gemm_intensity(m.shape.m, m.shape.n, m.shape.k, nbytes)
                shape = f"{m.shape.m}x{m.shape.n}x{m.shape.k}"
                node.matmul_points.append(
                    {
                        "dtype": dtype,
                        "shape": shape,
                        "intensity_flop_per_byte": derived(
                            ai,
                            "FLOP/B",
                            f"intensity of the {shape} {dtype} GEMM",
                            "2mnk / (bytes per element x (mk + kn + mn)) (Williams et al. 2009)",
                            [],
                        ),
                        "flops_per_s": measured_fig(
                            m.flops_per_s,
                            "FLOP/s",
                            f"trial node {dtype} matmul {shape}",
                            f"{ref} matmul {dtype} {shape}",
                            source=src,
                        ),
                    }
                )
                if best is None or m.flops_per_s > best.flops_per_s:
                    best = m
            if best is not None:
                prev = node.matmul_flops_per_s.get(dtype)
                if prev is None or best.flops_per_s > prev.value:
                    shape = f"{best.shape.m}x{best.shape.n}x{best.shape.k}"
                    node.matmul_flops_per_s[dtype] = measured_fig(
                        best.flops_per_s,
                        "FLOP/s",
                        f"trial node best {dtype} matmul",
                        f"{ref} matmul {dtype} {shape}",
                        source=src,
                    )
            if probe.power_w is not None and probe.power_w.median:
                node.gpu_power_w = measured_fig(
                    probe.power_w.median,
                    "W",
                    "trial node GPU power under matmul load",
                    f"{ref} matmul power_w.median (NVML)",
                    source=src,
                )
        elif probe.probe == "membw":
            best = max(probe.typed(), key=lambda m: m.bytes_per_s, default=None)
            if best is not None and (
                node.memory_bandwidth_bytes_per_s is None
                or best.bytes_per_s > node.memory_bandwidth_bytes_per_s.value
            ):
                node.memory_bandwidth_bytes_per_s = measured_fig(
                    best.bytes_per_s,
                    "B/s",
                    "trial node memory bandwidth",
                    f"{ref} membw {best.op} {best.size_bytes} B",
                    source=src,
                )
        elif probe.probe == "storage":
            for m in probe.typed():
                target = None
                if m.rw == "read":
                    target = "storage_read_bytes_per_s"
                elif m.rw == "write":
                    target = "storage_write_bytes_per_s"
                if target is None:
                    continue
                prev = getattr(node, target)
                if prev is None or m.bw_bytes_per_s > prev.value:
                    setattr(
                        node,
                        target,
                        measured_fig(
                            m.bw_bytes_per_s,
                            "B/s",
                            f"trial node fio sequential {m.rw}",
                            f"{ref} storage fio {m.rw} bs={m.block_size_bytes} "
                            f"iodepth={m.iodepth} numjobs={m.numjobs}",
                            source=src,
                        ),
                    )
    return node


def find_trial_run(
    paths: Iterable[Path | str], run: str | None = None, *, peaks: Any = None
) -> TrialNode | None:
    """The latest trial-node run under ``paths`` (or the run whose id starts with ``run``).

    Files are read by the shared loader (:func:`gpuplan.results.loader.load_result_files`,
    with ``peaks`` for its plausibility check, default: the catalog's): files it refuses
    are skipped with one stderr line each, reference runs (published measurements, ``source`` set) too. Returns
    None when there is no run and none was asked for.

    Raises
    ------
    NotFoundError
        ``run`` is given and no run under ``paths`` matches it.
    """
    import sys

    from gpuplan.errors import NotFoundError
    from gpuplan.results.loader import load_result_files

    if peaks is None:
        from gpuplan.calibration.dataset import catalog_peaks
        from gpuplan.catalogs import get_catalog

        peaks = catalog_peaks(get_catalog())
    best: tuple[str, Path, Any] | None = None
    existing = [Path(p) for p in paths if Path(p).exists()]
    loaded = load_result_files(existing, peaks=peaks, strict_single=False)
    for line in loaded.warnings():
        # one stderr line per refused file, as 'results ls' prints them: a trial run that
        # was silently ignored made a plan look measured when it was not
        sys.stderr.write(f"gpuplan: warning: {line}\n")
    for file, doc in loaded.documents:
        if "reference" in file.parts or doc.source:
            continue
        if run is not None and not doc.run_id.startswith(run) and file.name != run:
            continue
        key = doc.started_at
        if best is None or key > best[0]:
            best = (key, file, doc)
    if best is None:
        if run is not None:
            where = ", ".join(str(p) for p in paths) or "(no folder)"
            skipped = (
                f"; {len(loaded.skipped)} unreadable file(s) skipped" if loaded.skipped else ""
            )
            raise NotFoundError(
                f"--trial {run}: no probe run with that id under {where}{skipped}",
                hint="list runs with 'gpuplan results ls', or pass --results DIR",
            )
        return None
    return summarise_run(best[1], best[2])
