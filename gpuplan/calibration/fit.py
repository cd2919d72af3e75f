"""Fit result documents into a calibration artifact (DESIGN.md 3.2), with held-out error.

:func:`calibrate_documents` is the one entry point: it merges the given documents with the
reference set (published measurements, rebuilt from the packaged table), refuses to pool
different probe versions, fits every quantity per device, transfers to the catalog devices
nobody measured, cross-validates by machine (group k-fold: a machine's points are never
both in the training and the test fold) and returns the artifact as a plain dict.

The result is deterministic for the same inputs and catalog (apart from ``created_at``):
inputs are sorted, folds are assigned by sorted machine id, and every float is rounded to
12 significant digits so that a last-bit BLAS difference between two machines cannot
change the file (the results service recomputes the artifact server-side and compares).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuplan.calibration import models as M
from gpuplan.calibration.curves import COLLECTIVE_OPS, busbw_factor, intra_phase_time
from gpuplan.calibration.dataset import Dataset, Record, extract
from gpuplan.calibration.specs import DTYPES, DeviceSpec, device_specs
from gpuplan.errors import InputError

ARTIFACT_VERSION = 1
CV_SCHEME = "group k-fold by machine"
MAX_FOLDS = 5


@dataclass
class Calibration:
    """Fitted state of every quantity (see :mod:`gpuplan.calibration.models`)."""

    specs: dict[str, DeviceSpec]
    membw: dict = field(default_factory=dict)
    h2d: dict = field(default_factory=dict)
    d2h: dict = field(default_factory=dict)
    matmul: dict = field(default_factory=dict)
    coll_intra: dict = field(default_factory=dict)
    coll_inter: dict = field(default_factory=dict)
    storage: dict = field(default_factory=dict)

    def memory_entry(self, device: str) -> dict | None:
        return M.entry_bandwidth("membw", self.membw, self.specs, device)

    def memory_bandwidth(self, device: str) -> float | None:
        entry = self.memory_entry(device)
        return entry["coefficients"]["bandwidth_bytes_per_s"] if entry else None

    def matmul_entry(self, device: str, dtype: str) -> dict | None:
        return M.entry_matmul(self.matmul, self.specs, device, dtype, self.memory_bandwidth)

    def intra_entries(self, device: str, op: str) -> dict[str, dict]:
        return M.entries_collective_intra(self.coll_intra, self.specs, device, op)

    def inter_entry(self, device: str, op: str, ranks_per_node: float) -> dict | None:
        intra = self.intra_entries(device, op) or self.intra_entries(device, "all_reduce")
        return M.entry_collective_inter(
            self.coll_inter, self.specs, device, op, intra, ranks_per_node
        )


def fit_dataset(ds: Dataset, specs: dict[str, DeviceSpec]) -> Calibration:
    """Fit every quantity on ``ds``."""
    cal = Calibration(specs=specs)
    cal.membw = M.fit_bandwidth("membw", ds.select("membw"), specs)
    cal.h2d = M.fit_bandwidth("h2d", ds.select("h2d"), specs)
    cal.d2h = M.fit_bandwidth("d2h", ds.select("d2h"), specs)
    cal.matmul = M.fit_matmul(ds.select("matmul"), specs, cal.memory_bandwidth)
    coll = ds.select("collective")
    cal.coll_intra = M.fit_collectives_intra(coll, specs)
    cal.coll_inter = M.fit_collectives_inter(coll, specs, cal.coll_intra)
    cal.storage = M.fit_storage(ds.select("storage"))
    return cal


def _override_key(r: Record) -> tuple:
    if r.quantity == "matmul":
        return (r.device, "matmul", r.key[0])
    if r.quantity == "collective":
        return (r.device, "collective", r.key[0], "intra" if r.x[2] <= 1 else "inter")
    return (r.device, r.quantity, r.key[0])


def local_overrides_reference(records: list[Record]) -> list[Record]:
    """Drop published records of a (device, quantity) that the user measured locally.

    The user's own runs describe their machines; the reference set only stands in where
    they measured nothing (issue 4: measured values from local runs override it).
    """
    local = {_override_key(r) for r in records if not r.published}
    return [r for r in records if not (r.published and _override_key(r) in local)]


def without_device(ds: Dataset, device: str) -> Dataset:
    """``ds`` with every record of ``device`` removed (leave-one-device-out)."""
    return Dataset(
        records=[r for r in ds.records if r.device != device],
        devices={d: v for d, v in ds.devices.items() if d != device},
        run_ids=list(ds.run_ids),
    )


# --- prediction of records (for held-out error) -------------------------------------------


def predict_records(
    cal: Calibration, quantity: str, records: Sequence[Record]
) -> list[tuple[float, float, float, str]]:
    """(value, low, high, basis) predicted for each record by ``cal``."""
    out = []
    for r in records:
        pred = _predict_one(cal, quantity, r)
        out.append(pred if pred is not None else (math.nan, math.nan, math.nan, "none"))
    return out


def _predict_one(
    cal: Calibration, quantity: str, r: Record
) -> tuple[float, float, float, str] | None:
    if quantity == "matmul":
        entry = cal.matmul_entry(r.device, r.key[0])
        if entry is None:
            return None
        v = float(M.restore(entry).predict_flops(*r.x))
        peak = cal.specs[r.device].peak(r.key[0]) if r.device in cal.specs else None
        hi = v * entry["interval"][1]
        return v, v * entry["interval"][0], min(hi, peak) if peak else hi, entry["basis"]
    if quantity in ("membw", "h2d", "d2h"):
        entry = M.entry_bandwidth(quantity, getattr(cal, quantity), cal.specs, r.device)
        if entry is None:
            return None
        v = float(M.predict_bandwidth(entry, r.x[0]))
        return v, v * entry["interval"][0], v * entry["interval"][1], entry["basis"]
    if quantity == "collective":
        op = r.key[0]
        size, ranks, nodes = r.x
        if nodes <= 1:
            entries = cal.intra_entries(r.device, op)
            if not entries:
                return None
            t, t_lo, t_hi, basis = M.intra_time(entries, size, ranks)
        else:
            entry = cal.inter_entry(r.device, op, ranks / nodes)
            if entry is None:
                return None
            est = M.restore(entry)
            nic = r.extra.get("nic_bandwidth_bytes_per_s_per_gpu")
            b_inter = None
            if entry["basis"] != "measured" and nic and entry.get("fraction"):
                # what a forecast does for an unmeasured device: the cluster's NIC share per
                # GPU at the calibrated NIC efficiency
                b_inter = nic * entry["fraction"]
            intra = cal.intra_entries(r.device, op) or cal.intra_entries(r.device, "all_reduce")
            t_intra = intra_phase_time(M.intra_candidates(intra), size, ranks / nodes)
            t = est.predict_time(size, ranks, nodes, b_inter, t_intra)
            t_lo, t_hi, basis = (
                t / entry["interval"][1],
                t / max(entry["interval"][0], 1e-12),
                entry["basis"],
            )
        f = float(busbw_factor(op, max(ranks, 2)))
        return float(size * f / t), float(size * f / t_hi), float(size * f / t_lo), basis
    if quantity == "storage":
        entry = cal.storage.get((r.device, r.key[0]))
        if entry is None:
            return None
        v = float(M.restore(entry).predict_throughput(*r.x))
        return v, v * entry["interval"][0], v * entry["interval"][1], entry["basis"]
    raise ValueError(quantity)


def _quantity_groups(ds: Dataset) -> dict[str, list[Record]]:
    """Records per reported model name (``matmul_bf16``, ``collective_all_reduce_intra``...)."""
    groups: dict[str, list[Record]] = {}
    for r in ds.records:
        if r.quantity == "matmul":
            name = f"matmul_{r.key[0]}"
        elif r.quantity == "membw":
            name = "memory_bandwidth"
        elif r.quantity in ("h2d", "d2h"):
            name = f"{r.quantity}_bandwidth"
        elif r.quantity == "collective":
            name = f"collective_{r.key[0]}_{'intra' if r.x[2] <= 1 else 'inter'}"
        else:
            name = f"storage_{r.key[0]}"
        groups.setdefault(name, []).append(r)
    return dict(sorted(groups.items()))


def cross_validate(
    ds: Dataset, specs: dict[str, DeviceSpec], *, max_folds: int = MAX_FOLDS
) -> dict[str, dict]:
    """Held-out error per model name, folds grouping whole machines.

    Each fold refits everything on the other machines' documents and predicts the held-out
    machine's points; a device seen only on held-out machines is predicted by transfer, as
    an unmeasured device would be. MAPE is the mean of |predicted / measured - 1|; coverage
    the share of held-out points inside the predicted interval.
    """
    groups = _quantity_groups(ds)
    machines = sorted({r.machine for r in ds.records})
    out: dict[str, dict] = {}
    if len(machines) < 2:
        for name, recs in groups.items():
            out[name] = {
                "mape": None,
                "coverage": None,
                "n_points": len(recs),
                "n_folds": 0,
                "scheme": CV_SCHEME,
                "note": "one machine only: no held-out error",
            }
        return out
    n_folds = min(max_folds, len(machines))
    fold_of = {m: i % n_folds for i, m in enumerate(machines)}
    errors: dict[str, list[float]] = {n: [] for n in groups}
    inside: dict[str, list[bool]] = {n: [] for n in groups}
    for fold in range(n_folds):
        train = Dataset(
            records=[r for r in ds.records if fold_of[r.machine] != fold], devices=ds.devices
        )
        test_names = {
            n: [r for r in recs if fold_of[r.machine] == fold] for n, recs in groups.items()
        }
        if not any(test_names.values()):
            continue
        cal = fit_dataset(train, specs)
        for name, recs in test_names.items():
            if not recs:
                continue
            quantity = recs[0].quantity
            for r, (v, lo, hi, _) in zip(recs, predict_records(cal, quantity, recs), strict=True):
                if math.isfinite(v):
                    errors[name].append(abs(v / r.y - 1.0))
                    inside[name].append(bool(lo <= r.y <= hi))
    for name, recs in groups.items():
        errs = errors[name]
        n_machines = len({r.machine for r in recs})
        out[name] = {
            "mape": float(np.mean(errs)) if errs else None,
            "coverage": float(np.mean(inside[name])) if inside[name] else None,
            "n_points": len(errs),
            "n_machines": n_machines,
            "n_folds": n_folds,
            "scheme": CV_SCHEME,
        }
        if not errs:
            out[name]["note"] = "no held-out point could be predicted (no other device measured it)"
    return out


# --- inputs ---------------------------------------------------------------------------------


def _as_documents(docs: Iterable[Any]) -> list[Any]:
    from gpuplan.results.schema import ResultDocument
    from gpuplan.results.store import parse_result

    out = []
    for i, d in enumerate(docs):
        if isinstance(d, ResultDocument):
            out.append(d)
        elif isinstance(d, dict):
            out.append(parse_result(d, where=f"document {i}"))
        else:
            raise InputError(
                f"document {i} is a {type(d).__name__}, not a result",
                hint="pass ResultDocument objects or dicts",
            )
    return out


def reference_documents(catalog: Any = None) -> list[Any]:
    """The reference set (published measurements) as result documents."""
    from gpuplan.calibration.reference import build_reference_documents, read_microbench
    from gpuplan.results.store import parse_result

    docs, _, _ = build_reference_documents(read_microbench(), catalog=catalog)
    return [parse_result(d, where="reference") for d in docs]


def check_probe_versions(docs: Sequence[Any]) -> None:
    """Refuse to pool local runs of one probe measured with different probe versions.

    Published reference documents are exempt: they were not measured by gpuplan's probes,
    their method is recorded per measurement (``tool``).
    """
    seen: dict[str, dict[int, list[str]]] = {}
    for doc in docs:
        if doc.source is not None:
            continue
        for p in doc.probes:
            if p.status != "ok":
                continue
            seen.setdefault(p.probe, {}).setdefault(p.probe_version, []).append(doc.run_id)
    for probe, versions in sorted(seen.items()):
        if len(versions) > 1:
            detail = "; ".join(
                f"version {v}: {', '.join(sorted(ids)[:3])}{' ...' if len(ids) > 3 else ''}"
                for v, ids in sorted(versions.items())
            )
            raise InputError(
                f"cannot pool '{probe}' results of different probe versions ({detail})",
                hint="calibrate each version separately, or re-run the older probes with this gpuplan",
            )


def _round(obj: Any, digits: int = 12) -> Any:
    if isinstance(obj, float):
        if not math.isfinite(obj):
            return None
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: _round(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_round(v, digits) for v in obj]
    if isinstance(obj, np.generic):
        return _round(obj.item(), digits)
    return obj


def training_data_sha256(docs: Sequence[Any]) -> str:
    """SHA-256 of the canonical JSON of the input documents, sorted by run id."""
    h = hashlib.sha256()
    for doc in sorted(docs, key=lambda d: d.run_id):
        h.update(
            json.dumps(doc.model_dump(mode="json"), sort_keys=True, separators=(",", ":")).encode()
        )
        h.update(b"\n")
    return h.hexdigest()


# --- summary --------------------------------------------------------------------------------


def _estimate(
    value: float, interval: Sequence[float], basis: str, cap: float | None = None
) -> dict[str, Any]:
    high = value * interval[1]
    if cap is not None:
        high = min(high, cap)
    return {"value": value, "low": value * interval[0], "high": high, "basis": basis}


def device_summary(cal: Calibration, device: str) -> dict[str, dict[str, Any]]:
    """The per-device quantities of DESIGN.md 3.2 for ``device``."""
    spec = cal.specs.get(device)
    out: dict[str, dict[str, Any]] = {}
    for dtype in DTYPES:
        entry = cal.matmul_entry(device, dtype)
        if entry is not None:
            value = entry["coefficients"]["compute_flops_per_s"]
            out[f"matmul_{dtype}_flops_per_s"] = _estimate(
                value, entry["interval"], entry["basis"], spec.peak(dtype) if spec else None
            )
    for quantity, name in (
        ("membw", "memory_bandwidth_bytes_per_s"),
        ("h2d", "h2d_bandwidth_bytes_per_s"),
        ("d2h", "d2h_bandwidth_bytes_per_s"),
    ):
        entry = M.entry_bandwidth(quantity, getattr(cal, quantity), cal.specs, device)
        if entry is not None:
            out[name] = _estimate(
                entry["coefficients"]["bandwidth_bytes_per_s"], entry["interval"], entry["basis"]
            )
    ranks = spec.scale_up_domain_size if spec and spec.scale_up_domain_size else None
    if ranks is None:  # not a catalog device: the largest single-node run measured
        measured = [e for k, e in cal.coll_intra.items() if k[0] == device and k[1] == "all_reduce"]
        ranks = max((int(e.get("max_ranks") or 2) for e in measured), default=None)
    entries = cal.intra_entries(device, "all_reduce")
    if entries and ranks and ranks >= 2:
        size = float(M.ALLREDUCE_SUMMARY_BYTES)
        t, t_lo, t_hi, basis = M.intra_time(entries, size, ranks)
        f = float(busbw_factor("all_reduce", ranks))
        out["allreduce_busbw_bytes_per_s"] = {
            "value": float(size * f / t),
            "low": float(size * f / t_hi),
            "high": float(size * f / t_lo),
            "basis": basis,
            "ranks": int(ranks),
            "size_bytes": int(size),
        }
    entry = cal.storage.get((device, "read"))
    if entry is not None:
        out["storage_read_bytes_per_s"] = _estimate(
            entry["coefficients"]["max_bytes_per_s"], entry["interval"], entry["basis"]
        )
    return out


# --- the artifact ---------------------------------------------------------------------------

_ESTIMATOR_PATH = "gpuplan.calibration.estimators."
_FEATURES = {
    "MatmulRoofline": ["m", "n", "k"],
    "LatencyBandwidthRegressor": ["size_bytes"],
    "AlphaBetaRegressor": ["size_bytes", "ranks"],
    "HierarchicalAlphaBeta": ["size_bytes", "ranks", "num_nodes"],
    "StorageThroughputRegressor": ["block_size_bytes", "iodepth", "numjobs"],
}


def _model(
    estimator: str, devices: dict[str, Any], cv: dict | None, **params: Any
) -> dict[str, Any]:
    return {
        "estimator": _ESTIMATOR_PATH + estimator,
        "params": {
            "measured_floor_rel": M.MEASURED_FLOOR_REL,
            "interval_level": M.INTERVAL_LEVEL,
            **params,
        },
        "coefficients": {"devices": devices},
        "feature_names": _FEATURES[estimator],
        "cv": cv or {"mape": None, "scheme": CV_SCHEME, "note": "no measurement of this quantity"},
    }


def build_models(cal: Calibration, cv: dict[str, dict], devices: Sequence[str]) -> dict[str, Any]:
    """The ``models`` section: every device's entry per quantity (measured or transferred)."""
    models: dict[str, Any] = {}
    for dtype in DTYPES:
        per = {d: e for d in devices if (e := cal.matmul_entry(d, dtype)) is not None}
        if per:
            models[f"matmul_{dtype}"] = _model(
                "MatmulRoofline", per, cv.get(f"matmul_{dtype}"), dtype=dtype
            )
    for quantity, name in (
        ("membw", "memory_bandwidth"),
        ("h2d", "h2d_bandwidth"),
        ("d2h", "d2h_bandwidth"),
    ):
        per = {
            d: e
            for d in devices
            if (e := M.entry_bandwidth(quantity, getattr(cal, quantity), cal.specs, d)) is not None
        }
        if per:
            models[name] = _model("LatencyBandwidthRegressor", per, cv.get(name))
    # every op, measured or not: forecasts read the entries and never transfer on the fly
    for op in COLLECTIVE_OPS:
        per = {d: e for d in devices if (e := cal.intra_entries(d, op))}
        if per:
            models[f"collective_{op}_intra"] = _model(
                "AlphaBetaRegressor", per, cv.get(f"collective_{op}_intra"), op=op
            )
    for op in COLLECTIVE_OPS if cal.coll_inter else ():
        per = {}
        for d in devices:
            spec = cal.specs.get(d)
            rpn = float(spec.scale_up_domain_size) if spec and spec.scale_up_domain_size else 8.0
            e = cal.inter_entry(d, op, rpn)
            if e is not None:
                per[d] = e
        if per:
            models[f"collective_{op}_inter"] = _model(
                "HierarchicalAlphaBeta", per, cv.get(f"collective_{op}_inter"), op=op
            )
    for rw in sorted({k[1] for k in cal.storage}):
        per = {k[0]: e for k, e in cal.storage.items() if k[1] == rw}
        models[f"storage_{rw}"] = _model(
            "StorageThroughputRegressor", per, cv.get(f"storage_{rw}"), rw=rw
        )
    return models


def calibrate_documents(
    docs: Iterable[Any],
    include_reference: bool = True,
    *,
    catalog: Any = None,
    created_at: str | None = None,
    cross_validation: bool = True,
) -> dict[str, Any]:
    """Calibration artifact (DESIGN.md 3.2) from result documents.

    Parameters
    ----------
    docs:
        result documents (``ResultDocument`` or dicts of the result schema).
    include_reference:
        merge the published reference set (``results/reference/``, rebuilt from the table
        shipped with the package).
    catalog:
        the GPU catalog (default: :func:`gpuplan.catalogs.get_catalog`).
    created_at:
        ISO timestamp to write (default: now); the only field that differs between two
        calibrations of the same inputs.
    cross_validation:
        compute the held-out error (group k-fold by machine). Off only for speed in tests.

    Raises
    ------
    InputError
        no usable measurement, or one probe's local runs with different probe versions.
    """
    from gpuplan import __version__

    if catalog is None:
        from gpuplan.catalogs import get_catalog

        catalog = get_catalog()
    documents = _as_documents(docs)
    if include_reference:
        known = {d.run_id for d in documents}
        documents += [d for d in reference_documents(catalog) if d.run_id not in known]
    by_id: dict[str, Any] = {}
    for d in documents:
        by_id.setdefault(d.run_id, d)
    documents = sorted(by_id.values(), key=lambda d: d.run_id)
    check_probe_versions(documents)
    ds = extract(documents, catalog)
    if not ds.records:
        raise InputError(
            "no usable measurement in the given results",
            hint="run 'gpuplan probe --quick' first, or leave out --exclude-reference",
        )
    ds.records = local_overrides_reference(ds.records)
    ds.records.sort(key=lambda r: (r.machine, r.run_id, r.quantity, repr(r.key), r.x))
    specs = device_specs(catalog, ds.devices)
    cal = fit_dataset(ds, specs)
    cv = cross_validate(ds, specs) if cross_validation else {}
    devices = sorted(specs)
    import sklearn

    artifact = {
        "artifact_version": ARTIFACT_VERSION,
        "created_at": created_at
        or _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "gpuplan_version": __version__,
        "sklearn_version": sklearn.__version__,
        "training_data_sha256": training_data_sha256(documents),
        "inputs": [d.run_id for d in documents],
        "models": build_models(cal, cv, devices),
        "devices": {d: s for d in devices if (s := device_summary(cal, d))},
        "device_specs": {d: specs[d].as_dict() for d in devices},
    }
    from gpuplan.calibration.serving import serving_points

    serving = serving_points(documents, catalog)  # the serve probe's runs, per (device, engine)
    if serving:
        artifact["serving"] = serving
    from gpuplan.calibration.training_step import training_points

    # the train probe's runs, per (device, framework)
    training = training_points(documents, catalog)
    if training:
        artifact["training"] = training
    return _round(artifact)
