"""Leave-one-device-out validation on the published microbenchmarks (issue 4, "Done when").

For each device class with a published value, every measurement of that catalog device is
removed, the calibration is refitted on the rest, and the device is predicted by transfer,
exactly as an unmeasured catalog device would be:

* the best dense bf16 matmul of each NVIDIA data-centre GPU, at the published best shape
  (target: within 10%);
* the 8-GPU intra-node all-reduce bus bandwidth at 1 GiB (the published size nearest to
  1 GiB where a class has no 1 GiB point; the table says which), for every device class
  with 8-GPU single-node all-reduce data (target: within 15%);

and whether the predicted interval contains the published value (target: 80% of cases).
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import numpy as np

from gpuplan.calibration import fit as F
from gpuplan.calibration import models as M
from gpuplan.calibration.dataset import Dataset, extract
from gpuplan.calibration.reference import busbw_factor
from gpuplan.calibration.specs import device_specs

MATMUL_TARGET = 0.10
ALLREDUCE_TARGET = 0.15
COVERAGE_TARGET = 0.80
ALLREDUCE_SIZE_BYTES = 2**30
ALLREDUCE_RANKS = 8


def _cases_matmul(ds: Dataset, specs: dict) -> list[dict[str, Any]]:
    cases = []
    for r in ds.select("matmul"):
        spec = specs.get(r.device)
        if r.key[0] != "bf16" or not r.published or spec is None or spec.vendor != "nvidia":
            continue
        cases.append({"quantity": "matmul_bf16_flops_per_s", "device": r.device, "record": r})
    return cases


def _cases_allreduce(ds: Dataset) -> list[dict[str, Any]]:
    by_device: dict[str, list] = defaultdict(list)
    for r in ds.select("collective"):
        size, ranks, nodes = r.x
        if (
            r.key[0] == "all_reduce"
            and ranks == ALLREDUCE_RANKS
            and nodes == 1
            and r.published
            and r.key[2] == "auto"
        ):
            by_device[r.device].append(r)
    cases = []
    for device, recs in sorted(by_device.items()):
        sizes = sorted(
            {r.x[0] for r in recs}, key=lambda s: (abs(math.log2(s / ALLREDUCE_SIZE_BYTES)), s)
        )
        size = sizes[0]
        at = [r for r in recs if r.x[0] == size]
        published = float(np.mean([r.y for r in at]))
        cases.append(
            {
                "quantity": "allreduce_busbw_bytes_per_s",
                "device": device,
                "size_bytes": int(size),
                "published": published,
                "sources": sorted({r.extra.get("bench_id", r.run_id) for r in at}),
            }
        )
    return cases


def leave_one_device_out(docs: list[Any] | None = None, *, catalog: Any = None) -> dict[str, Any]:
    """The leave-one-device-out table and its summary (see the module docstring).

    ``docs`` default to the reference set. Returns ``{"rows": [...], "summary": {...}}``
    where each row has device, quantity, published, predicted, low, high, error (relative),
    within_target, in_interval, basis, pool and note.
    """
    if catalog is None:
        from gpuplan.catalogs import get_catalog

        catalog = get_catalog()
    if docs is None:
        docs = F.reference_documents(catalog)
    ds = extract(docs, catalog)
    specs = device_specs(catalog, ds.devices)
    rows: list[dict[str, Any]] = []
    fits: dict[str, F.Calibration] = {}

    def fitted_without(device: str) -> F.Calibration:
        if device not in fits:
            fits[device] = F.fit_dataset(F.without_device(ds, device), specs)
        return fits[device]

    for case in _cases_matmul(ds, specs):
        r = case["record"]
        cal = fitted_without(r.device)
        entry = cal.matmul_entry(r.device, "bf16")
        est = M.restore(entry)
        value = float(est.predict_flops(*r.x))
        peak = specs[r.device].peak("bf16")
        low, high = value * entry["interval"][0], min(value * entry["interval"][1], peak)
        rows.append(
            _row(
                r.device,
                "matmul_bf16_flops_per_s",
                r.y,
                value,
                low,
                high,
                entry,
                MATMUL_TARGET,
                note=f"best shape {int(r.x[0])}x{int(r.x[1])}x{int(r.x[2])}",
                sources=[r.extra.get("bench_id", "")],
            )
        )
    for case in _cases_allreduce(ds):
        device = case["device"]
        cal = fitted_without(device)
        entries = cal.intra_entries(device, "all_reduce")
        size = float(case["size_bytes"])
        t, t_lo, t_hi, basis = M.intra_time(entries, size, float(ALLREDUCE_RANKS))
        f = float(busbw_factor("all_reduce", ALLREDUCE_RANKS))
        value, low, high = size * f / float(t), size * f / float(t_hi), size * f / float(t_lo)
        chosen = min(
            entries.values(), key=lambda e: float(M.restore(e).predict_time(size, ALLREDUCE_RANKS))
        )
        note = f"{_size_text(size)}, {ALLREDUCE_RANKS} GPUs, {chosen['params']['algorithm']}"
        if case["size_bytes"] != ALLREDUCE_SIZE_BYTES:
            note += " (no published 1 GiB point: nearest size)"
        rows.append(
            _row(
                device,
                "allreduce_busbw_bytes_per_s",
                case["published"],
                value,
                low,
                high,
                {**chosen, "basis": basis},
                ALLREDUCE_TARGET,
                note=note,
                sources=case["sources"],
            )
        )
    return {"rows": rows, "summary": summarise(rows)}


def _size_text(size: float) -> str:
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size:g} B"


def _row(
    device: str,
    quantity: str,
    published: float,
    value: float,
    low: float,
    high: float,
    entry: dict,
    target: float,
    *,
    note: str,
    sources: list[str],
) -> dict[str, Any]:
    error = value / published - 1.0
    transfer = entry.get("transfer") or {}
    return {
        "device": device,
        "quantity": quantity,
        "published": published,
        "predicted": value,
        "low": low,
        "high": high,
        "error": error,
        "target": target,
        "within_target": abs(error) <= target,
        "in_interval": low <= published <= high,
        "basis": entry.get("basis"),
        "pool": transfer.get("pool"),
        "from_devices": transfer.get("from_devices", []),
        "note": note,
        "sources": sources,
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for quantity in sorted({r["quantity"] for r in rows}):
        sel = [r for r in rows if r["quantity"] == quantity]
        errs = [abs(r["error"]) for r in sel]
        out[quantity] = {
            "cases": len(sel),
            "within_target": sum(r["within_target"] for r in sel),
            "target": sel[0]["target"],
            "median_abs_error": float(np.median(errs)),
            "max_abs_error": float(np.max(errs)),
        }
    coverage = float(np.mean([r["in_interval"] for r in rows])) if rows else None
    out["interval_coverage"] = coverage
    out["coverage_target"] = COVERAGE_TARGET
    out["all_targets_met"] = (
        bool(rows) and all(r["within_target"] for r in rows) and coverage >= COVERAGE_TARGET
    )
    return out
