"""Plausibility checks of an uploaded run against the catalog's vendor figures.

A measurement above what the hardware can physically do is a measuring error (a timer that
did not synchronise, a wrong byte count, a unit slip) or a forged upload. Such a run is
*flagged*: it is stored and listed, but kept out of the calibration until a token with the
``admin`` scope approves it (``POST /v1/results/{run_id}/approve``).

Checked, per measurement on an accelerator the catalog knows:

* matmul ``flops_per_s`` above the dense peak of its dtype (``gpu.peak_flops_per_s``). A
  ``float32`` matmul may run on TF32 tensor cores when the framework allows it, so it is
  checked against the larger of the fp32 and tf32 peaks;
* membw ``bytes_per_s`` (bytes read + written per second) above the memory bandwidth;
* pcie ``bytes_per_s`` above the host link bandwidth (one direction).

Collectives are not checked against a link figure: NVLink SHARP (NVLS) reduces in the
switch, so all-reduce bus bandwidth legitimately exceeds the per-GPU link bandwidth
(nccl-tests doc/PERFORMANCE.md defines busbw for a ring, not for in-network reduction).
The peaks come from the catalog rows (each with its ``source``), never from this code.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any

from gpuplan.results.schema import ResultDocument

# torch dtype names (ProbeResult.params["dtype"]) -> catalog dtype keys
_DTYPES: dict[str, tuple[str, ...]] = {
    "float64": ("fp64",),
    "fp64": ("fp64",),
    "float32": ("fp32", "tf32"),
    "fp32": ("fp32", "tf32"),
    "tf32": ("tf32",),
    "bfloat16": ("bf16",),
    "bf16": ("bf16",),
    "float16": ("fp16",),
    "half": ("fp16",),
    "fp16": ("fp16",),
    "float8_e4m3fn": ("fp8",),
    "float8_e5m2": ("fp8",),
    "float8_e4m3fnuz": ("fp8",),
    "float8_e5m2fnuz": ("fp8",),
    "fp8": ("fp8",),
    "int8": ("int8",),
    "fp4": ("fp4",),
}
_CUDA_INDEX = re.compile(r"^(?:cuda|rocm|hip|gpu|xpu)(?::(\d+))?$")


@dataclass(frozen=True)
class DeviceIdentity:
    """The accelerator a run was measured on, as the catalog knows it (or not)."""

    device_id: str
    device_name: str | None
    in_catalog: bool


def _catalog():
    try:
        from gpuplan.catalogs import get_catalog
    except ImportError:
        return None
    try:
        return get_catalog()
    except Exception:  # a broken catalog must not take the upload path down
        return None


@functools.lru_cache(maxsize=1024)
def _lookup(name: str | None):
    """The catalog row for an accelerator name (cached: the catalog does not change while a
    server runs), or None."""
    if not name:
        return None
    cat = _catalog()
    if cat is None:
        return None
    try:
        return cat.gpu(name)
    except Exception:  # NotFoundError (unknown or ambiguous name)
        return None


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:100] or "unknown"


def identify_device(doc: ResultDocument) -> DeviceIdentity:
    """Catalog id of the run's first accelerator (``cpu`` when there is none)."""
    accs = doc.host.accelerators
    if not accs:
        return DeviceIdentity("cpu", doc.host.cpu_model, in_catalog=False)
    acc = accs[0]
    for key in (acc.catalog_id, acc.name):
        gpu = _lookup(key)
        if gpu is not None:
            return DeviceIdentity(str(gpu.id), acc.name, in_catalog=True)
    return DeviceIdentity(_slug(acc.catalog_id or acc.name), acc.name, in_catalog=False)


def resolve_device_query(text: str) -> str:
    """The device id a ``?device=`` filter means: a catalog alias resolves to its id."""
    gpu = _lookup(text)
    return str(gpu.id) if gpu is not None else _slug(text)


def _accelerator_for(doc: ResultDocument, device: Any):
    accs = doc.host.accelerators
    if not accs:
        return None
    index = 0
    if isinstance(device, str):
        m = _CUDA_INDEX.match(device.strip().lower())
        if m is None:
            return None  # "cpu", "mps", ...: not an accelerator of the catalog
        index = int(m.group(1) or 0)
    return accs[index] if index < len(accs) else accs[0]


def check_document(doc: ResultDocument) -> tuple[list[dict[str, Any]], list[str]]:
    """Flags (values above a catalog figure) and notes (what could not be checked).

    Returns
    -------
    flags:
        one dict per implausible measurement: ``probe``, ``index``, ``quantity``,
        ``measured``, ``limit``, ``limit_field`` and the catalog ``gpu_id``/``source``.
    notes:
        human-readable lines about skipped checks (unknown device, missing figure).
    """
    flags: list[dict[str, Any]] = []
    notes: list[str] = []
    gpus: dict[int, Any] = {}

    def gpu_for(probe_params: dict[str, Any]):
        acc = _accelerator_for(doc, probe_params.get("device"))
        if acc is None:
            return None
        key = id(acc)
        if key not in gpus:
            gpus[key] = _lookup(acc.catalog_id) or _lookup(acc.name)
            if gpus[key] is None:
                notes.append(f"accelerator {acc.name!r} is not in the catalog: not checked")
        return gpus[key]

    def flag(
        probe: str, i: int, quantity: str, measured: float, limit: float, field: str, gpu
    ) -> None:
        flags.append(
            {
                "probe": probe,
                "index": i,
                "quantity": quantity,
                "measured": measured,
                "limit": limit,
                "limit_field": field,
                "gpu_id": str(gpu.id),
                "source": getattr(gpu, "source", None),
                "message": f"{probe} measurement {i}: {quantity} {measured:.4g} is above the catalog "
                f"{field} {limit:.4g} of {gpu.id}",
            }
        )

    for probe in doc.probes:
        if probe.status != "ok" or probe.probe not in ("matmul", "membw", "pcie"):
            continue
        gpu = gpu_for(probe.params)
        if gpu is None:
            continue
        if probe.probe == "matmul":
            dtype = str(probe.params.get("dtype", "")).replace("torch.", "").lower()
            keys = _DTYPES.get(dtype)
            peaks = [p for p in (gpu.peak_flops_per_s(k) for k in keys or ()) if p]
            if not peaks:
                notes.append(
                    f"no catalog peak for {gpu.id} at dtype {dtype or '?'}: matmul not checked"
                )
                continue
            limit = max(peaks)
            for i, m in enumerate(probe.measurements):
                value = float(m.get("flops_per_s") or 0.0)
                if value > limit:
                    flag(
                        "matmul",
                        i,
                        "flops_per_s",
                        value,
                        limit,
                        f"peak_flops_per_s({'/'.join(keys)})",
                        gpu,
                    )
        elif probe.probe == "membw":
            limit = getattr(gpu, "memory_bandwidth_bytes_per_s", None)
            if not limit:
                notes.append(f"no catalog memory bandwidth for {gpu.id}: membw not checked")
                continue
            for i, m in enumerate(probe.measurements):
                value = float(m.get("bytes_per_s") or 0.0)
                if value > limit:
                    flag(
                        "membw", i, "bytes_per_s", value, limit, "memory_bandwidth_bytes_per_s", gpu
                    )
        elif probe.probe == "pcie":
            limit = getattr(gpu, "host_link_bandwidth_bytes_per_s", None)
            if not limit:
                notes.append(f"no catalog host link bandwidth for {gpu.id}: pcie not checked")
                continue
            for i, m in enumerate(probe.measurements):
                value = float(m.get("bytes_per_s") or 0.0)
                if value > limit:
                    flag(
                        "pcie",
                        i,
                        "bytes_per_s",
                        value,
                        limit,
                        "host_link_bandwidth_bytes_per_s",
                        gpu,
                    )
    return flags, sorted(set(notes))
