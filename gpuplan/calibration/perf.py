"""``DevicePerf`` from a calibration artifact: what forecasts call (see ``api.py``).

Every method evaluates closed-form fitted curves with numpy (:mod:`gpuplan.calibration.curves`),
so thousands of layouts cost one vectorised call. Scalars in give floats out; arrays in give
arrays of the broadcast shape. Intervals come from the entry of each quantity (measured <
transferred < spec).

Reading a device the artifact lists imports neither scikit-learn nor scipy: the artifact
holds an entry for every catalog device and quantity, and an entry is evaluated, never
refitted. Only a device added to the catalog after the calibration is transferred on the
fly, through :mod:`gpuplan.calibration.fit`.
"""

from __future__ import annotations

import math
from dataclasses import fields
from typing import Any

import numpy as np

from gpuplan.calibration import curves as C
from gpuplan.calibration.api import Estimate, worst_basis
from gpuplan.calibration.specs import DTYPES, DeviceSpec, device_specs
from gpuplan.calibration.units import short_dtype
from gpuplan.errors import InputError, NotFoundError

_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "p2p")


def _out(x: Any, scalar: bool) -> Any:
    arr = np.asarray(x, dtype=float)
    return float(arr) if scalar else arr


def _is_scalar(*xs: Any) -> bool:
    return all(np.ndim(x) == 0 for x in xs)


#: Scalar collective queries kept per device (a sweep over many sizes stops adding).
_SCALAR_CACHE_MAX = 4096

_BANDWIDTH_MODELS = {"membw": "memory_bandwidth", "h2d": "h2d_bandwidth", "d2h": "d2h_bandwidth"}


class _ArtifactState:
    """The artifact's catalog figures, and (built on first use) its measured entries as a
    :class:`gpuplan.calibration.fit.Calibration`, so that a catalog device added after the
    calibration is still transferred on the fly."""

    def __init__(self, artifact: dict[str, Any], catalog: Any) -> None:
        specs = device_specs(catalog) if catalog is not None else {}
        known = {f.name for f in fields(DeviceSpec)}
        for dev, raw in (artifact.get("device_specs") or {}).items():
            if dev not in specs:
                # fields are only ever added within an artifact version: ignore ones this
                # version does not know, and missing ones take their defaults
                specs[dev] = DeviceSpec(**{k: v for k, v in raw.items() if k in known})
        self.specs = specs
        self.models = artifact["models"]
        self.devices = set(artifact.get("device_specs") or ()) | set(artifact["devices"])
        self._cal: Any = None

    @property
    def cal(self) -> Any:
        if self._cal is None:
            self._cal = self._calibration()
        return self._cal

    def _calibration(self) -> Any:
        from gpuplan.calibration.fit import Calibration

        cal = Calibration(specs=self.specs)
        for name, model in self.models.items():
            per = model["coefficients"]["devices"]
            for dev, entry in per.items():
                if name.startswith("matmul_"):
                    if entry["basis"] == "measured":
                        cal.matmul[(dev, name.removeprefix("matmul_"))] = entry
                elif name in _BANDWIDTH_MODELS.values():
                    if entry["basis"] == "measured":
                        q = next(k for k, v in _BANDWIDTH_MODELS.items() if v == name)
                        getattr(cal, q)[(dev,)] = entry
                elif name.startswith("collective_") and name.endswith("_intra"):
                    op = name.removeprefix("collective_").removesuffix("_intra")
                    for algorithm, e in entry.items():
                        if e["basis"] == "measured":
                            cal.coll_intra[(dev, op, algorithm)] = e
                elif name.startswith("collective_") and name.endswith("_inter"):
                    if entry["basis"] == "measured":
                        cal.coll_inter[
                            (dev, name.removeprefix("collective_").removesuffix("_inter"))
                        ] = entry
                elif name.startswith("storage_"):
                    cal.storage[(dev, name.removeprefix("storage_"))] = entry
        return cal


class CalibratedDevicePerf:
    """Achieved performance of one device from a calibration artifact (implements
    :class:`gpuplan.calibration.api.DevicePerf`)."""

    def __init__(self, gpu_id: str, artifact: dict[str, Any], state: _ArtifactState) -> None:
        self.gpu_id = gpu_id
        self._artifact = artifact
        self._state = state
        self.spec: DeviceSpec | None = state.specs.get(gpu_id)
        self._source = f"calibration {artifact.get('training_data_sha256', '')[:12]} ({len(artifact.get('inputs', []))} runs)"
        self._cache: dict[Any, Any] = {}

    def __repr__(self) -> str:
        return f"CalibratedDevicePerf({self.gpu_id!r})"

    # -- entries (artifact first, on-the-fly transfer for devices it does not list) --------
    def _stored(self, model: str) -> tuple[bool, Any]:
        """(whether the artifact answers, its entry or ``None``). It answers for the devices
        it calibrated and the quantities it has: a missing entry then means the device
        cannot have the quantity (no fp8 on an A100), not that it was never transferred."""
        m = self._state.models.get(model)
        if m is None:
            return False, None
        entry = m["coefficients"]["devices"].get(self.gpu_id)
        return entry is not None or self.gpu_id in self._state.devices, entry

    def _entry(self, key: Any) -> Any:
        if key in self._cache:
            return self._cache[key]
        kind = key[0]
        if kind == "matmul":
            name = f"matmul_{key[1]}"
        elif kind in _BANDWIDTH_MODELS:
            name = _BANDWIDTH_MODELS[kind]
        elif kind in ("intra", "inter"):
            name = f"collective_{key[1]}_{kind}"
        else:
            raise KeyError(key)
        found, entry = self._stored(name)
        if not found:
            entry = self._transferred(key)
        if isinstance(entry, dict) and "estimator" in entry:
            entry = {**entry, "_est": C.restore(entry)}
        elif isinstance(entry, dict):
            entry = {a: {**e, "_est": C.restore(e)} for a, e in entry.items()}
        self._cache[key] = entry
        return entry

    def _transferred(self, key: Any) -> Any:
        """The entry of a quantity the artifact does not hold for this device, transferred
        from the artifact's measured devices now (needs the fitting modules)."""
        cal = self._state.cal
        kind = key[0]
        if kind == "matmul":
            return cal.matmul_entry(self.gpu_id, key[1])
        if kind in _BANDWIDTH_MODELS:
            from gpuplan.calibration import models as M

            return M.entry_bandwidth(kind, getattr(cal, kind), cal.specs, self.gpu_id)
        if kind == "intra":
            return cal.intra_entries(self.gpu_id, key[1])
        return cal.inter_entry(self.gpu_id, key[1], key[2])

    def _intra_candidates(self, op: str) -> list:
        """Algorithms of the scale-up domain for ``op`` (the all-reduce's where the device
        has no model of ``op``), each with its curve."""
        key = ("candidates", op)
        if key not in self._cache:
            entries = self._entry(("intra", op)) or self._entry(("intra", "all_reduce")) or {}
            plain = {a: {k: v for k, v in e.items() if k != "_est"} for a, e in entries.items()}
            self._cache[key] = C.intra_candidates(plain)
        return self._cache[key]

    # -- DevicePerf ------------------------------------------------------------------------
    def peak_flops_per_s(self, dtype: str) -> float | None:
        return self.spec.peak(short_dtype(dtype)) if self.spec else None

    def matmul_flops_per_s(self, m: Any, n: Any, k: Any, dtype: str) -> Estimate:
        dt = short_dtype(dtype)
        entry = self._entry(("matmul", dt))
        if entry is None:
            raise InputError(
                f"{self.gpu_id} has no {dt} matmul (no catalog peak and no measurement)",
                hint=f"use a dtype it supports: {', '.join(d for d in DTYPES if self._entry(('matmul', d)))}",
            )
        scalar = _is_scalar(m, n, k)
        v = entry["_est"].predict_flops(m, n, k)
        lo_r, hi_r = entry["interval"]
        peak = self.peak_flops_per_s(dt)
        hi = v * hi_r if peak is None else np.minimum(v * hi_r, peak)
        return Estimate(
            _out(v, scalar), _out(v * lo_r, scalar), _out(hi, scalar), entry["basis"], self._source
        )

    def _bandwidth(self, kind: str, size_bytes: Any) -> Estimate:
        entry = self._entry((kind,))
        if entry is None:
            raise InputError(
                f"{self.gpu_id}: no {kind} bandwidth (not measured, and the catalog has no figure to scale)",
                hint="probe it with 'gpuplan probe', or add the figure to the catalog row",
            )
        est = entry["_est"]
        if size_bytes is None:
            v = est.bandwidth_bytes_per_s_
            scalar = True
        else:
            scalar = _is_scalar(size_bytes)
            v = est.predict_bandwidth(size_bytes)
        lo_r, hi_r = entry["interval"]
        return Estimate(
            _out(v, scalar),
            _out(v * lo_r, scalar),
            _out(v * hi_r, scalar),
            entry["basis"],
            self._source,
        )

    def memory_bandwidth_bytes_per_s(self, size_bytes: Any = None) -> Estimate:
        return self._bandwidth("membw", size_bytes)

    def h2d_bandwidth_bytes_per_s(self, size_bytes: Any = None) -> Estimate:
        return self._bandwidth("h2d", size_bytes)

    def d2h_bandwidth_bytes_per_s(self, size_bytes: Any = None) -> Estimate:
        return self._bandwidth("d2h", size_bytes)

    def collective_time_s(
        self,
        op: str,
        size_bytes: Any,
        ranks: Any,
        *,
        ranks_per_node: Any = None,
        inter_node_bandwidth_bytes_per_s: float | None = None,
    ) -> Estimate:
        """Time of one collective (nccl-tests ``size`` convention); see ``api.DevicePerf``.

        Inside one scale-up domain the alpha-beta model of each algorithm the device has is
        evaluated and the fastest taken (NCCL's tuner does the same). Across nodes the
        hierarchical model (:class:`gpuplan.calibration.curves.HierarchicalAlphaBetaCurve`)
        runs the intra-node phase as that same intra-node collective on the node's ranks,
        pipelined with the inter-node phase at ``inter_node_bandwidth_bytes_per_s`` x the
        calibrated NIC efficiency (default: the calibrated per-GPU inter-node bandwidth).
        At a fixed size per rank the time never decreases with the number of full nodes.
        """
        if op not in _OPS:
            raise InputError(f"unknown collective {op!r}", hint=f"use one of {', '.join(_OPS)}")
        scalar = _is_scalar(size_bytes, ranks, ranks_per_node)
        if scalar:
            # a scalar query recurs (the forecast asks each group's basis and 1 GiB bus
            # bandwidth once per pass): the Estimate is frozen, so it is kept
            key = (
                "coll",
                op,
                float(size_bytes),
                float(ranks),
                None if ranks_per_node is None else float(ranks_per_node),
                inter_node_bandwidth_bytes_per_s,
            )
            hit = self._cache.get(key)
            if hit is None:
                hit = self._collective_time_s(
                    op, size_bytes, ranks, ranks_per_node, inter_node_bandwidth_bytes_per_s
                )
                if len(self._cache) < _SCALAR_CACHE_MAX:
                    self._cache[key] = hit
            return hit
        return self._collective_time_s(
            op, size_bytes, ranks, ranks_per_node, inter_node_bandwidth_bytes_per_s
        )

    def _collective_time_s(
        self,
        op: str,
        size_bytes: Any,
        ranks: Any,
        ranks_per_node: Any,
        inter_node_bandwidth_bytes_per_s: float | None,
    ) -> Estimate:
        scalar = _is_scalar(size_bytes, ranks, ranks_per_node)
        size = np.asarray(size_bytes, dtype=float)
        n = np.asarray(ranks, dtype=float)
        if np.any(n < 1) or np.any(size < 0):
            raise InputError("collective_time_s needs ranks >= 1 and size_bytes >= 0")
        domain = (
            self.spec.scale_up_domain_size if self.spec and self.spec.scale_up_domain_size else None
        )
        rpn = np.asarray(
            ranks_per_node if ranks_per_node is not None else (domain or n), dtype=float
        )
        rpn = np.maximum(np.minimum(rpn, n), 1.0)
        size, n, rpn = np.broadcast_arrays(size, n, rpn)
        nodes = np.ceil(n / rpn)
        t = np.zeros(size.shape)
        t_lo = np.zeros(size.shape)
        t_hi = np.zeros(size.shape)
        bases: list[str] = []
        intra_mask = (nodes <= 1) & (n >= 2)
        inter_mask = nodes > 1
        coll_op = "all_reduce" if op == "p2p" else op
        if np.any(intra_mask):
            entries = self._entry(("intra", coll_op)) or self._entry(("intra", "all_reduce"))
            if not entries:
                raise InputError(
                    f"{self.gpu_id}: no collective model (no scale-up fabric in the catalog and nothing measured)",
                    hint=(
                        "measure its collectives on a node (gpuplan probe, then gpuplan "
                        "calibrate) or give its scale-up fabric in the catalog; from the "
                        "API, ranks_per_node=1 models every rank on its own node"
                    ),
                )
        if np.any(intra_mask):
            sel = intra_mask
            if op == "p2p":
                ring = entries.get("ring") or next(iter(entries.values()))
                est = ring["_est"]
                tt = est.alpha_s_ + size[sel] / est.bandwidth_bytes_per_s_
                lo_r, hi_r = ring["interval"]
                t[sel], t_lo[sel] = tt, tt / hi_r
                t_hi[sel] = tt / lo_r if lo_r > 0 else np.inf
                bases.append(ring["basis"])
            else:
                tt, lo, hi, basis = C.intra_time(self._intra_candidates(coll_op), size[sel], n[sel])
                t[sel], t_lo[sel], t_hi[sel] = tt, lo, hi
                bases.append(basis)
        if np.any(inter_mask):
            rpn_med = float(np.median(rpn[inter_mask]))
            entry = self._entry(("inter", coll_op, rpn_med))
            if entry is None and inter_node_bandwidth_bytes_per_s is None:
                raise InputError(
                    f"{self.gpu_id}: no inter-node collective calibration",
                    hint="pass inter_node_bandwidth_bytes_per_s (the NIC share per GPU)",
                )
            sel = inter_mask
            t_intra = (
                None
                if op == "p2p"
                else C.intra_phase_time(
                    self._intra_candidates(coll_op), size[sel], n[sel] / nodes[sel]
                )
            )
            if entry is None:
                curve = C.HierarchicalAlphaBetaCurve(op=coll_op)
                curve.alpha_s_ = 0.0
                curve.inter_bandwidth_bytes_per_s_ = inter_node_bandwidth_bytes_per_s
                tt = curve.predict_time(size[sel], n[sel], nodes[sel], None, t_intra)
                t[sel], t_lo[sel], t_hi[sel] = tt, tt, tt * 2.0
                bases.append("spec")
            else:
                est = entry["_est"]
                b_inter = None
                if inter_node_bandwidth_bytes_per_s is not None:
                    eff = entry.get("fraction") or self._pooled_nic_fraction()
                    b_inter = inter_node_bandwidth_bytes_per_s * (eff if eff else 1.0)
                if op == "p2p":
                    b = b_inter if b_inter is not None else est.inter_bandwidth_bytes_per_s_
                    tt = est.alpha_s_ + size[sel] / b
                else:
                    tt = est.predict_time(size[sel], n[sel], nodes[sel], b_inter, t_intra)
                lo_r, hi_r = entry["interval"]
                t[sel], t_lo[sel] = tt, tt / hi_r
                t_hi[sel] = tt / lo_r if lo_r > 0 else np.inf
                bases.append(entry["basis"])
        basis = worst_basis(*bases) if bases else "measured"
        return Estimate(
            _out(t, scalar), _out(t_lo, scalar), _out(t_hi, scalar), basis, self._source
        )

    def _pooled_nic_fraction(self) -> float | None:
        fr = []
        for name, model in self._state.models.items():
            if name.endswith("_inter"):
                fr += [
                    e["fraction"]
                    for e in model["coefficients"]["devices"].values()
                    if e.get("fraction") and e["basis"] == "measured"
                ]
        return float(np.exp(np.mean(np.log(fr)))) if fr else None

    def summary(self) -> dict[str, Estimate]:
        stored = self._artifact["devices"].get(self.gpu_id)
        if stored is None:
            from gpuplan.calibration.fit import device_summary

            stored = device_summary(self._state.cal, self.gpu_id)
        return {
            q: Estimate(v["value"], v["low"], v["high"], v["basis"], self._source)
            for q, v in stored.items()
        }


_STATES: dict[int, tuple[dict, _ArtifactState]] = {}


def _state(artifact: dict[str, Any], catalog: Any) -> _ArtifactState:
    key = id(artifact)
    hit = _STATES.get(key)
    if hit is not None and hit[0] is artifact:
        return hit[1]
    state = _ArtifactState(artifact, catalog)
    if len(_STATES) > 16:
        _STATES.clear()
    _STATES[key] = (artifact, state)
    return state


def resolve_device(gpu: str, artifact: dict[str, Any], catalog: Any) -> str:
    """Device id for a catalog name/alias, or a non-catalog device id present in the artifact."""
    if gpu in artifact["devices"] or gpu in (artifact.get("device_specs") or {}):
        return gpu
    if catalog is not None:
        return catalog.gpu(gpu).id
    raise NotFoundError(f"unknown device {gpu!r}", hint="list them with 'gpuplan catalog ls gpus'")


def device_perf(
    gpu: str, artifact: dict[str, Any] | str | None = None, *, catalog: Any = None
) -> CalibratedDevicePerf:
    """Calibrated performance of ``gpu`` (catalog name or alias, or a measured device id such
    as ``cpu:<model>``) from ``artifact`` (a dict, a path, or ``None`` for the default)."""
    from gpuplan.calibration.artifact import load_artifact

    if artifact is None or isinstance(artifact, (str, bytes)) or hasattr(artifact, "__fspath__"):
        artifact = load_artifact(artifact)  # type: ignore[arg-type]
    if catalog is None:
        from gpuplan.catalogs import get_catalog

        catalog = get_catalog()
    gpu_id = resolve_device(gpu, artifact, catalog)
    return CalibratedDevicePerf(gpu_id, artifact, _state(artifact, catalog))


def calibrated_summary(
    gpu_id: str, artifact: dict[str, Any] | str | None = None, *, catalog: Any = None
) -> dict[str, Any]:
    """Spec vs calibrated value per quantity, for ``gpuplan catalog show ID --calibrated``.

    Returns ``{quantity: {"spec", "value", "low", "high", "basis"}}`` in SI units; ``spec``
    is the catalog figure the quantity is compared with (dense peak, memory bandwidth, host
    link per direction, scale-up bandwidth per direction for the all-reduce bus bandwidth)
    or ``None`` where the catalog has none.
    """
    perf = device_perf(gpu_id, artifact, catalog=catalog)
    spec = perf.spec
    out: dict[str, Any] = {}
    for q, est in perf.summary().items():
        ref = None
        if spec is not None:
            if q.startswith("matmul_"):
                ref = spec.peak(q.split("_")[1])
            elif q == "memory_bandwidth_bytes_per_s":
                ref = spec.memory_bandwidth_bytes_per_s
            elif q in ("h2d_bandwidth_bytes_per_s", "d2h_bandwidth_bytes_per_s"):
                ref = spec.host_link_bandwidth_bytes_per_s
            elif q == "allreduce_busbw_bytes_per_s":
                ref = spec.scale_up_bandwidth_bytes_per_s
        value = est.value
        out[q] = {
            "spec": ref,
            "value": value,
            "low": est.low,
            "high": est.high,
            "basis": est.basis,
            "fraction_of_spec": (value / ref)
            if ref and value is not None and math.isfinite(value)
            else None,
        }
    return out
