"""Plausibility checks of an uploaded run: catalog bounds and the pooled runs of its device.

A measurement above what the hardware can physically do is a measuring error (a timer that
did not synchronise, a wrong byte count, a unit slip) or a forged upload; so is one a
thousand times below what the same device measures everywhere else. Such a run is
*flagged* (the "pending" state): it is stored and listed, but kept out of the calibration
until a token with the ``admin`` scope approves it (``POST /v1/results/{run_id}/approve``),
so that one upload cannot move the shared calibration.

Checked, per measurement on an accelerator the catalog knows (:func:`check_document`):

* matmul ``flops_per_s`` above the dense peak of its dtype (``gpu.peak_flops_per_s``). A
  ``float32`` matmul may run on TF32 tensor cores when the framework allows it, so it is
  checked against the larger of the fp32 and tf32 peaks;
* membw ``bytes_per_s`` (bytes read + written per second) above the memory bandwidth;
* pcie ``bytes_per_s`` above the host link bandwidth (one direction);
* any of these below :data:`CATALOG_FLOOR_FRACTION` of the same figure.

Against the pool (:func:`pool_flags`, :class:`RunPool`): per quantity and shape class
(:func:`run_values`), the run's best value must lie within a median/MAD band of the logs of
the same key over the already included (accepted or approved) runs of the same catalog
device plus the shipped reference runs; the band needs :data:`POOL_MIN_RUNS` uploaded
runs, or one reference run (a published measurement, trusted: this is what stops the
very first poisoned upload of a device from replacing the reference in the calibration).
Collectives are checked only against the pool: NVLink SHARP (NVLS) reduces in the
switch, so all-reduce bus bandwidth legitimately exceeds the per-GPU link bandwidth
(nccl-tests doc/PERFORMANCE.md defines busbw for a ring, not for in-network reduction).
The peaks come from the catalog rows (each with its ``source``), never from this code.
"""

from __future__ import annotations

import functools
import json
import math
import re
import statistics
import threading
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
        floor = CATALOG_FLOOR_FRACTION * limit
        if floor <= measured <= limit:
            return
        above = measured > limit
        bound = limit if above else floor
        flags.append(
            {
                "probe": probe,
                "index": i,
                "quantity": quantity,
                "measured": measured,
                "limit": bound,
                "limit_field": field if above else f"{CATALOG_FLOOR_FRACTION:g} * {field}",
                "gpu_id": str(gpu.id),
                "source": getattr(gpu, "source", None),
                "kind": "catalog_peak" if above else "catalog_floor",
                "message": f"{probe} measurement {i}: {quantity} {measured:.4g} is "
                + (
                    f"above the catalog {field} {limit:.4g} of {gpu.id}"
                    if above
                    else f"below {CATALOG_FLOOR_FRACTION:g} of the catalog {field} {limit:.4g} "
                    f"of {gpu.id}"
                ),
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
                if math.isfinite(value):
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
                if math.isfinite(value):
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
                if math.isfinite(value):
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


# ---------------------------------------------------------------------------------------------
# the pooled runs of the same device: robust band in log space

#: Pool check parameters. A value is suspicious when its log lies more than
#: ``max(POOL_MAD_K * 1.4826 * MAD, log(POOL_MIN_FACTOR))`` from the median of the logs of the
#: same quantity and shape class over the pooled runs of its device (Hampel's identifier on
#: log values: F. R. Hampel, "The influence curve and its role in robust estimation", JASA
#: 69 (1974); 1.4826 makes the MAD a consistent estimate of a normal sigma). The factor floor
#: keeps honest spread (power caps, clocks, drivers) in the band when the pool agrees closely.
POOL_MAD_K = 5.0
POOL_MIN_FACTOR = 3.0
#: fewest pooled uploads (with a value for the same key) before the band is applied; a key
#: that a shipped reference run (a published measurement) covers has a band from one run on
POOL_MIN_RUNS = 3
#: a value below this fraction of the catalog figure is a unit slip or a broken timer
CATALOG_FLOOR_FRACTION = 1e-3

#: collectives smaller than this are latency-bound (bus bandwidth far from the link's and
#: set by NCCL's protocol and algorithm choice, which differ between versions): not pooled
POOL_MIN_COLLECTIVE_BYTES = 64 * 2**20

PoolKey = tuple[Any, ...]


def _size_class(value: float, per_octaves: int) -> int:
    """Bucket of a size in steps of ``2**per_octaves`` (shape classes compare like with like)."""
    return round(math.log2(max(float(value), 1.0)) / per_octaves)


def run_values(doc: ResultDocument) -> dict[PoolKey, tuple[float, str, int]]:
    """Per pool key, the run's best value with its probe name and measurement index.

    Keys: matmul ``(dtype, class of m*n*k in steps of 8x)`` on ``flops_per_s``; membw
    ``(op, size class 4x)`` and pcie ``(direction, memory, size class 4x)`` on
    ``bytes_per_s``; collectives ``(op, ranks, nodes, scope, size class 4x)`` on
    ``busbw_bytes_per_s``, from :data:`POOL_MIN_COLLECTIVE_BYTES` up. Only probes with ``status: ok`` on the run's first accelerator
    (the device the run is filed under) count.
    """
    out: dict[PoolKey, tuple[float, str, int]] = {}
    first = doc.host.accelerators[0] if doc.host.accelerators else None
    for probe in doc.probes:
        if probe.status != "ok" or probe.probe not in ("matmul", "membw", "pcie", "collectives"):
            continue
        if (
            probe.probe != "collectives"
            and _accelerator_for(doc, probe.params.get("device")) is not first
        ):
            continue
        dtype = str(probe.params.get("dtype", "")).replace("torch.", "").lower()
        for i, m in enumerate(probe.measurements):
            try:
                if probe.probe == "matmul":
                    s = m["shape"]
                    key: PoolKey = ("matmul", "/".join(_DTYPES.get(dtype, (dtype,))),
                                    _size_class(s["m"] * s["n"] * s["k"], 3))  # fmt: skip
                    value = float(m["flops_per_s"])
                elif probe.probe == "membw":
                    key = ("membw", m["op"], _size_class(m["size_bytes"], 2))
                    value = float(m["bytes_per_s"])
                elif probe.probe == "pcie":
                    key = ("pcie", m["direction"], m["memory"], _size_class(m["size_bytes"], 2))
                    value = float(m["bytes_per_s"])
                else:
                    if int(m["size_bytes"]) < POOL_MIN_COLLECTIVE_BYTES:
                        continue  # latency-bound: NCCL's protocol choice varies it widely
                    key = ("collectives", m["op"], m["ranks"], m.get("num_nodes", 1),
                           m.get("scope", "intra"), _size_class(m["size_bytes"], 2))  # fmt: skip
                    value = float(m["busbw_bytes_per_s"])
            except (KeyError, TypeError, ValueError):
                continue
            if not (value > 0 and math.isfinite(value)):
                continue
            if key not in out or value > out[key][0]:
                out[key] = (value, probe.probe, i)
    return out


@dataclass(frozen=True)
class Band:
    """The accepted range of one pool key: ``[low, high]`` around ``median`` of ``runs``."""

    median: float
    low: float
    high: float
    runs: int


def band(values: list[float], min_runs: int = POOL_MIN_RUNS) -> Band | None:
    """Median/MAD band of positive ``values`` in log space, or None with too few values.

    >>> b = band([1.0, 1.1, 0.9, 1.05, 0.95])
    >>> round(b.median, 3), b.low < 0.4, b.high > 2.9
    (1.0, True, True)
    """
    if not values or len(values) < min_runs:
        return None
    logs = sorted(math.log(v) for v in values)
    med = statistics.median(logs)
    mad = statistics.median(abs(x - med) for x in logs)
    half = max(POOL_MAD_K * 1.4826 * mad, math.log(POOL_MIN_FACTOR))
    return Band(math.exp(med), math.exp(med - half), math.exp(med + half), len(values))


def pool_flags(
    doc: ResultDocument,
    device_id: str,
    pooled: dict[PoolKey, list[float]],
    trusted: frozenset[PoolKey] | set[PoolKey] = frozenset(),
) -> list[dict[str, Any]]:
    """Flags for the run's values outside the band of the pooled runs of ``device_id``.

    ``trusted``: keys whose pool holds a reference run; they need one run, the others
    :data:`POOL_MIN_RUNS` (so that the first uploads of a new device cannot set the band).
    """
    flags: list[dict[str, Any]] = []
    quantity = {"matmul": "flops_per_s", "collectives": "busbw_bytes_per_s"}
    for key, (value, probe, i) in sorted(run_values(doc).items(), key=lambda kv: repr(kv[0])):
        b = band(pooled.get(key, []), 1 if key in trusted else POOL_MIN_RUNS)
        if b is None or b.low <= value <= b.high:
            continue
        side, limit = ("below", b.low) if value < b.low else ("above", b.high)
        q = quantity.get(probe, "bytes_per_s")
        flags.append(
            {
                "probe": probe,
                "index": i,
                "quantity": q,
                "measured": value,
                "limit": limit,
                "limit_field": f"pool_{'low' if side == 'below' else 'high'}",
                "gpu_id": device_id,
                "source": f"median of {b.runs} pooled runs of {device_id}",
                "kind": "pool",
                "pool_median": b.median,
                "pool_runs": b.runs,
                "message": f"{probe} measurement {i}: {q} {value:.4g} is {side} the band "
                f"[{b.low:.4g}, {b.high:.4g}] of {b.runs} pooled runs of {device_id} "
                f"(median {b.median:.4g}, {'/'.join(str(k) for k in key[1:])})",
            }
        )
    return flags


@functools.lru_cache(maxsize=1)
def _reference_values() -> dict[str, list[dict[PoolKey, float]]]:
    """Pool values of the shipped reference runs, by device id (computed once)."""
    out: dict[str, list[dict[PoolKey, float]]] = {}
    try:
        from gpuplan.calibration.fit import reference_documents

        docs = reference_documents()
    except Exception:  # no reference set (a broken install): the pool is the uploads alone
        return out
    for d in docs:
        device = identify_device(d)
        if device.in_catalog:
            values = {k: v for k, (v, _, _) in run_values(d).items()}
            if values:
                out.setdefault(device.device_id, []).append(values)
    return out


class RunPool:
    """Pool values of the runs a calibration includes, read from the database per device.

    Documents are parsed once per (run id, content hash) and only their values are kept in
    memory, so an upload costs one indexed query plus the runs stored since the last one.
    Several server processes on one database each keep their own cache; the query decides
    which runs count (accepted or approved: flagged runs never enter the pool).
    """

    def __init__(self, *, include_reference: bool = True) -> None:
        self.include_reference = include_reference
        self._cache: dict[tuple[str, str], dict[PoolKey, float]] = {}
        self._lock = threading.Lock()

    def pooled(
        self, db: Any, device_id: str
    ) -> tuple[dict[PoolKey, list[float]], frozenset[PoolKey]]:
        """``(values by key, keys a reference run covers)`` for ``device_id``."""
        from sqlalchemy import select

        from gpuplan.results.store import parse_result
        from gpuplan.service.db import RunRow
        from gpuplan.service.recalibrate import INCLUDED_STATUSES

        with db.read() as s:
            ids = s.execute(
                select(RunRow.run_id, RunRow.content_sha256).where(
                    RunRow.device_id == device_id, RunRow.status.in_(INCLUDED_STATUSES)
                )
            ).all()
        keys = [(r[0], r[1]) for r in ids]
        with self._lock:
            missing = [k for k in keys if k not in self._cache]
        for start in range(0, len(missing), 50):
            chunk = missing[start : start + 50]
            with db.read() as s:
                rows = s.execute(
                    select(RunRow.run_id, RunRow.content_sha256, RunRow.document).where(
                        RunRow.run_id.in_([rid for rid, _ in chunk])
                    )
                ).all()
            for rid, sha, text in rows:
                try:
                    values = {
                        k: v for k, (v, _, _) in run_values(parse_result(json.loads(text))).items()
                    }
                except Exception:  # a stored document that no longer parses adds nothing
                    values = {}
                with self._lock:
                    self._cache[(rid, sha)] = values
        pooled: dict[PoolKey, list[float]] = {}
        with self._lock:
            runs = [self._cache.get(k, {}) for k in keys]
        reference = _reference_values().get(device_id, []) if self.include_reference else []
        for values in runs + reference:
            for k, v in values.items():
                pooled.setdefault(k, []).append(v)
        return pooled, frozenset(k for values in reference for k in values)
