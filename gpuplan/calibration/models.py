"""Per-quantity calibration: fit measured devices, transfer to the others, evaluate.

Each quantity has three steps that the artifact, the cross-validation and the
leave-one-device-out validation all share:

* ``fit_*(records, specs, ...) -> state``: one fitted estimator per measured device (and
  key: dtype, op, algorithm...), stored as a JSON-ready *entry*;
* ``entry_*(state, specs, device, ...) -> entry | None``: the measured entry, or one
  transferred from the measured devices (:mod:`gpuplan.calibration.transfer`), or ``None``
  when the device cannot have the quantity (no fp8 on an A100, no scale-up fabric);
* ``predict_*(entry, records)``: the entry's prediction at the records' features.

An entry is ``{"estimator", "params", "coefficients", "basis", "interval", "n_points",
"machines", "fraction", "transfer"}`` where ``interval`` is ``[low, high]`` as ratios to
the value and ``fraction`` the achieved fraction of the catalog figure it is scaled by.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

import numpy as np

# evaluation (restore, intra_candidates, intra_time) lives in the numpy-only curves module and
# is re-exported here for the fitting code; the scikit-learn estimators are imported by the
# fit_* functions only, so that transferring an entry needs no fitting library
from gpuplan.calibration.curves import (
    AlphaBetaCurve,
    HierarchicalAlphaBetaCurve,
    LatencyBandwidthCurve,
    MatmulRooflineCurve,
    busbw_factor,
    curve_params,
    intra_candidates,
    intra_phase_time,
    intra_time,
    restore,
)
from gpuplan.calibration.dataset import Record
from gpuplan.calibration.specs import DeviceSpec
from gpuplan.calibration.transfer import Sample, Transferred, transfer_fraction
from gpuplan.calibration.units import BYTES_PER_ELEMENT

#: Relative half-width given to a measured value when the data cannot say more (a single
#: published number): the run-to-run spread of repeated benchmark runs is of this order
#: (e.g. the two independent H100 nccl-tests sweeps in the reference set agree within 0.5%
#: at 1 GiB). Recorded in the artifact's params; never a hardware figure.
MEASURED_FLOOR_REL = 0.02
INTERVAL_LEVEL = 0.9
#: Size at which the summary evaluates an all-reduce (DESIGN.md 3.2: 1 GiB).
ALLREDUCE_SUMMARY_BYTES = 2**30


def _jsonable(v: float | None) -> float | None:
    return None if v is None or not math.isfinite(v) else float(v)


def make_entry(
    est: Any,
    *,
    basis: str,
    interval: tuple[float, float],
    n_points: int = 0,
    machines: Sequence[str] = (),
    fraction: float | None = None,
    transfer: dict | None = None,
) -> dict[str, Any]:
    """JSON-ready entry of a fitted estimator or of a curve built from other devices' fits."""
    return {
        "estimator": est.ESTIMATOR,
        "params": curve_params(est),
        "coefficients": {c: _jsonable(getattr(est, c + "_")) for c in est.COEFFICIENTS},
        "basis": basis,
        "interval": [float(interval[0]), float(interval[1])],
        "n_points": int(n_points),
        "machines": sorted(set(machines)),
        "fraction": _jsonable(fraction) if fraction is not None else None,
        "transfer": transfer,
    }


def _measured_interval(
    y: np.ndarray, pred: np.ndarray, spreads: Sequence[float]
) -> tuple[float, float]:
    """Interval of a measured device: the empirical ``INTERVAL_LEVEL`` quantile of the fit's
    absolute log residuals, or the timing spread, whichever is larger (at least the floor).
    Symmetric in log space, so the low end stays positive however noisy the data."""
    resid = np.abs(np.log(pred / y)) if y.size else np.zeros(0)
    q = float(np.quantile(resid, INTERVAL_LEVEL)) if resid.size else 0.0
    spread = float(np.median(spreads)) if len(spreads) else 0.0
    e = max(math.log1p(MEASURED_FLOOR_REL), q, math.log1p(spread))
    return (math.exp(-e), math.exp(e))


def _transfer_interval(tr: Any) -> tuple[float, float]:
    return (tr.low / tr.fraction, tr.high / tr.fraction)


def _group(records: Sequence[Record], key: Callable[[Record], Any]) -> dict[Any, list[Record]]:
    out: dict[Any, list[Record]] = defaultdict(list)
    for r in records:
        out[key(r)].append(r)
    return dict(sorted(out.items(), key=lambda kv: repr(kv[0])))


def _xy(records: Sequence[Record]) -> tuple[np.ndarray, np.ndarray]:
    return np.array([r.x for r in records], dtype=float), np.array(
        [r.y for r in records], dtype=float
    )


def _samples(
    state: dict, specs: dict[str, DeviceSpec], pick: Callable[[Any, dict], bool]
) -> list[Sample]:
    out = []
    for key, entry in state.items():
        dev = key[0]
        if entry.get("fraction") and pick(key, entry) and entry["basis"] == "measured":
            spec = specs.get(dev)
            out.append(
                Sample(
                    dev,
                    spec.vendor if spec else None,
                    spec.generation if spec else None,
                    entry["fraction"],
                )
            )
    return out


# --- bandwidth quantities: membw, h2d, d2h ------------------------------------------------


def _bandwidth_ceiling(quantity: str, spec: DeviceSpec | None) -> float | None:
    if spec is None:
        return None
    if quantity == "membw":
        return spec.memory_bandwidth_bytes_per_s
    return spec.host_link_bandwidth_bytes_per_s


def fit_bandwidth(
    quantity: str,
    records: Sequence[Record],
    specs: dict[str, DeviceSpec],
    pooled_latency: float | None = None,
    _second: bool = False,
) -> dict:
    """Latency-bandwidth fits per device for ``membw`` (copy preferred), ``h2d`` or ``d2h`` (pinned).

    A device measured at one size only cannot separate latency from bandwidth: it gets the
    median latency of the devices measured at several sizes (a second pass).
    """
    if not _second:
        first = fit_bandwidth(quantity, records, specs, None, True)
        lat = [e["coefficients"]["latency_s"] for e in first.values() if e.get("latency_fitted")]
        pooled = float(np.median(lat)) if lat else None
        if pooled is None:
            return first
        return fit_bandwidth(quantity, records, specs, pooled, True)
    from gpuplan.calibration.estimators import LatencyBandwidthRegressor

    state: dict = {}
    for device, recs in _group(records, lambda r: r.device).items():
        if quantity == "membw":
            copies = [r for r in recs if r.key[0] == "copy"]
            recs = copies or recs
        else:
            pinned = [r for r in recs if r.key[0] == "pinned"]
            recs = pinned or recs
        X, y = _xy(recs)
        ceiling = _bandwidth_ceiling(quantity, specs.get(device))
        # the catalog ceiling bounds a GPU; a measured value above it means the catalog figure
        # is per direction while the probe counted both: then only the data bounds it
        cap = ceiling if ceiling and float(np.max(y)) <= ceiling else None
        single = np.unique(X[:, 0]).size < 2
        latency = pooled_latency if single else None
        est = LatencyBandwidthRegressor(latency_s=latency, max_bandwidth_bytes_per_s=cap).fit(X, y)
        pred = est.predict_bandwidth(X[:, 0])
        fraction = est.bandwidth_bytes_per_s_ / ceiling if ceiling else None
        state[(device,)] = make_entry(
            est,
            basis="measured",
            interval=_measured_interval(y, pred, [r.rel_spread for r in recs]),
            n_points=len(recs),
            machines=[r.machine for r in recs],
            fraction=fraction,
        )
        state[(device,)]["latency_fitted"] = not single
    return state


def entry_bandwidth(
    quantity: str,
    state: dict,
    specs: dict[str, DeviceSpec],
    device: str,
    exclude: str | None = None,
) -> dict | None:
    if (device,) in state and device != exclude:
        return state[(device,)]
    spec = specs.get(device)
    ceiling = _bandwidth_ceiling(quantity, spec)
    if not ceiling:
        return None
    samples = [s for s in _samples(state, specs, lambda k, e: True) if s.device != exclude]
    tr = transfer_fraction(samples, spec.vendor, spec.generation, level=INTERVAL_LEVEL)
    latencies = [
        e["coefficients"]["latency_s"]
        for k, e in state.items()
        if k[0] != exclude and e.get("latency_fitted")
    ]
    est = LatencyBandwidthCurve(max_bandwidth_bytes_per_s=ceiling)
    est.latency_s_ = float(np.median(latencies)) if latencies else 0.0
    if tr is None:
        est.bandwidth_bytes_per_s_ = ceiling
        return make_entry(est, basis="spec", interval=(0.0, 1.0), fraction=1.0)
    est.bandwidth_bytes_per_s_ = min(tr.fraction, 1.0) * ceiling
    return make_entry(
        est,
        basis="transferred",
        interval=_transfer_interval(tr),
        fraction=tr.fraction,
        transfer=tr.as_dict(),
    )


def predict_bandwidth(entry: dict, size_bytes: Any) -> Any:
    """Bandwidth an entry predicts at ``size_bytes``."""
    return restore(entry).predict_bandwidth(size_bytes)


# --- matmul --------------------------------------------------------------------------------


#: Where to look when nobody measured a dtype: the nearest dtypes on the same matrix units.
RELATED_DTYPES: dict[str, tuple[str, ...]] = {
    "fp16": ("bf16", "fp8"),
    "bf16": ("fp16", "fp8"),
    "tf32": ("bf16", "fp16", "fp8"),
    "fp32": ("tf32", "bf16", "fp16", "fp8"),
    "fp8": ("bf16", "fp16"),
    "int8": ("fp8", "bf16"),
}


def fit_matmul(
    records: Sequence[Record],
    specs: dict[str, DeviceSpec],
    memory_bandwidth: Callable[[str], float | None],
) -> dict:
    """Roofline fits per (device, dtype)."""
    from gpuplan.calibration.estimators import MatmulRoofline

    state: dict = {}
    for (device, dtype), recs in _group(records, lambda r: (r.device, r.key[0])).items():
        spec = specs.get(device)
        peak = spec.peak(dtype) if spec else None
        X, y = _xy(recs)
        if peak is not None and float(np.max(y)) > peak:
            peak = None  # measured above the catalog peak: the catalog row is wrong; trust data
        est = MatmulRoofline(
            bytes_per_element=BYTES_PER_ELEMENT.get(dtype, 2),
            peak_flops_per_s=peak,
            memory_bandwidth_bytes_per_s=memory_bandwidth(device),
        ).fit(X, y)
        pred = est.predict_flops(X[:, 0], X[:, 1], X[:, 2])
        state[(device, dtype)] = make_entry(
            est,
            basis="measured",
            interval=_measured_interval(y, pred, [r.rel_spread for r in recs]),
            n_points=len(recs),
            machines=[r.machine for r in recs],
            fraction=est.compute_flops_per_s_ / peak if peak else None,
        )
    return state


def _own_dtype_ratio(
    state: dict, specs: dict[str, DeviceSpec], device: str, dtype: str, exclude: str | None
) -> tuple[Transferred | None, str | None]:
    """The device's own measured efficiency on a related dtype of the same matrix units,
    times the ratio of the two dtypes' efficiencies on the devices that measured both.

    What sets a chip's achieved fraction of peak (its clocks under load, power capping,
    the GEMM library of its vendor) acts on every dtype of its matrix units alike, so a
    part measured in bf16 but not fp8 says more about its fp8 than another part's fp8
    does: the MI300X reaches 51% of its bf16 peak (mamf-finder) and 44% of its fp8 peak
    (hipBLASLt), the MI355X 68% of its bf16 peak, so its fp8 is read as 68% x 44/51, not
    as the MI300X's 44%. The ratio pools by vendor and generation like any transfer
    (:func:`~gpuplan.calibration.transfer.transfer_fraction`). ``(None, None)`` when the
    device measured no related dtype or no other device measured both.
    """
    spec = specs.get(device)
    if spec is None:
        return None, None
    measured = {s.device: s for s in _samples(state, specs, lambda k, e: k[1] == dtype)}
    for related in RELATED_DTYPES.get(dtype, ()):
        rel = {
            s.device: s.fraction for s in _samples(state, specs, lambda k, e, r=related: k[1] == r)
        }
        if device not in rel:
            continue
        ratios = [
            replace(s, fraction=s.fraction / rel[d])
            for d, s in measured.items()
            if d in rel and d not in (device, exclude)
        ]
        tr = transfer_fraction(ratios, spec.vendor, spec.generation, level=INTERVAL_LEVEL)
        if tr is None:
            continue
        f = rel[device]
        scaled = Transferred(
            fraction=f * tr.fraction,
            low=f * tr.low,
            high=f * tr.high,
            level=tr.level,
            devices=tr.devices,
        )
        return scaled, f"own {related} efficiency x {dtype}/{related} ratio"
    return None, None


def entry_matmul(
    state: dict,
    specs: dict[str, DeviceSpec],
    device: str,
    dtype: str,
    memory_bandwidth: Callable[[str], float | None],
    exclude: str | None = None,
) -> dict | None:
    if (device, dtype) in state and device != exclude:
        return state[(device, dtype)]
    spec = specs.get(device)
    peak = spec.peak(dtype) if spec else None
    if not peak:
        return None
    tr, note = (
        (None, None)
        if device == exclude
        else _own_dtype_ratio(state, specs, device, dtype, exclude)
    )
    if tr is None:
        same = [
            s for s in _samples(state, specs, lambda k, e: k[1] == dtype) if s.device != exclude
        ]
        tr = transfer_fraction(same, spec.vendor, spec.generation, level=INTERVAL_LEVEL)
    for related in RELATED_DTYPES.get(dtype, ()):
        if tr is not None:
            break
        # nobody measured this dtype: the closest dtype's efficiency on the same units is the
        # evidence (bf16 and fp16 share the tensor-core datapath and peak), the device's own first
        pool = [
            s
            for s in _samples(state, specs, lambda k, e, r=related: k[1] == r)
            if s.device != exclude
        ]
        tr = transfer_fraction(
            pool, spec.vendor, spec.generation, level=INTERVAL_LEVEL, device=device
        )
        note = f"from {related}"
    latencies = [
        e["coefficients"]["latency_s"]
        for k, e in state.items()
        if k[1] == dtype and k[0] != exclude
    ]
    est = MatmulRooflineCurve(
        bytes_per_element=BYTES_PER_ELEMENT.get(dtype, 2),
        peak_flops_per_s=peak,
        memory_bandwidth_bytes_per_s=memory_bandwidth(device),
    )
    est.latency_s_ = float(np.median(latencies)) if latencies else 0.0
    mem = memory_bandwidth(device)
    est.memory_bytes_per_s_ = mem if mem else math.inf
    if tr is None:
        est.compute_flops_per_s_ = peak
        est.peak_fraction_ = 1.0
        return make_entry(est, basis="spec", interval=(0.0, 1.0), fraction=1.0)
    fraction = min(tr.fraction, 1.0)
    est.compute_flops_per_s_ = fraction * peak
    est.peak_fraction_ = fraction
    info = tr.as_dict()
    if note:
        info["note"] = note
    return make_entry(
        est, basis="transferred", interval=_transfer_interval(tr), fraction=fraction, transfer=info
    )


# --- collectives ---------------------------------------------------------------------------


def default_algorithm(spec: DeviceSpec | None, op: str) -> str:
    """What NCCL runs by default inside a node: NVLS all-reduce where the switch reduces."""
    if spec is not None and spec.in_switch_reduction and op == "all_reduce":
        return "nvls"
    return "ring"


def _mesh(spec: DeviceSpec | None) -> int | None:
    if (
        spec is not None
        and spec.mesh
        and spec.scale_up_domain_size
        and spec.scale_up_domain_size > 2
    ):
        return int(spec.scale_up_domain_size)
    return None


def fit_collectives_intra(
    records: Sequence[Record], specs: dict[str, DeviceSpec], pooled_alpha: dict | None = None
) -> dict:
    """Alpha-beta fits per (device, op, algorithm) on single-node records.

    A device measured at one size only gets the median per-step latency of the devices
    measured at several sizes (same algorithm, else any), in a second pass.
    """
    if pooled_alpha is None:
        first = fit_collectives_intra(records, specs, {})
        by_algo: dict[str, list[float]] = defaultdict(list)
        for k, e in first.items():
            if e.get("latency_fitted"):
                by_algo[k[2]].append(e["coefficients"]["alpha_s"])
        every = [a for v in by_algo.values() for a in v]
        if not every:
            return first
        pooled = {a: float(np.median(v)) for a, v in by_algo.items()}
        pooled["*"] = float(np.median(every))
        return fit_collectives_intra(records, specs, pooled)
    from gpuplan.calibration.estimators import AlphaBetaRegressor

    state: dict = {}
    intra = [r for r in records if r.x[2] <= 1 and r.x[1] >= 2]
    for (device, op, algo), recs in _group(intra, lambda r: (r.device, r.key[0], r.key[2])).items():
        spec = specs.get(device)
        algorithm = default_algorithm(spec, op) if algo == "auto" else algo
        if algorithm not in ("ring", "tree", "nvls"):
            algorithm = "ring"
        X, y = _xy(recs)
        link = spec.link_bandwidth() if spec else None
        single = np.unique(X[:, 0]).size < 2
        alpha = pooled_alpha.get(algorithm, pooled_alpha.get("*")) if single else None
        est = AlphaBetaRegressor(
            op=op, algorithm=algorithm, mesh_domain_size=_mesh(spec), alpha_s=alpha
        ).fit(X[:, :2], y)
        pred = est.predict_busbw(X[:, 0], X[:, 1])
        key = (device, op, algorithm)
        entry = make_entry(
            est,
            basis="measured",
            interval=_measured_interval(y, pred, [r.rel_spread for r in recs]),
            n_points=len(recs),
            machines=[r.machine for r in recs],
            fraction=est.bandwidth_bytes_per_s_ / link if link else None,
        )
        entry["max_ranks"] = int(np.max(X[:, 1]))
        entry["latency_fitted"] = not single
        # same algorithm labelled explicitly and by default: keep the larger set
        if key in state and state[key]["n_points"] >= entry["n_points"]:
            continue
        state[key] = entry
    return state


def _library_efficiency(spec: DeviceSpec | None, algorithm: str) -> float | None:
    """The collective library's own efficiency for ``algorithm`` on this device, if it has one.

    NCCL models NVLS (in-switch reduction) bandwidth as the link bandwidth times a factor
    per GPU architecture, ``nvlsEfficiency`` (NVIDIA/nccl src/tuning/nvls.cc: Hopper 0.85,
    Blackwell 0.74; the catalog's fabric rows carry it with that source). Ring and tree
    have no such factor: ``None``.
    """
    if algorithm != "nvls" or spec is None:
        return None
    return spec.in_switch_reduction_efficiency


def _normalise_by_library(
    samples: Sequence[Sample], specs: dict[str, DeviceSpec], target: DeviceSpec, algorithm: str
) -> tuple[list[Sample], float] | None:
    """Fractions of link bandwidth divided by each device's library efficiency.

    Transfer then pools what the library's model does not explain (achieved / (link x
    nvlsEfficiency)) and multiplies the target's efficiency back: a Hopper NVLS fraction
    says nothing directly about Blackwell, whose switch reduction NCCL itself expects to be
    0.74/0.85 as efficient. Returns ``None`` (pool raw fractions) unless the target and every
    sample have an efficiency: mixing normalised and raw fractions would be meaningless.
    """
    mine = _library_efficiency(target, algorithm)
    if mine is None or not samples:
        return None
    effs = [_library_efficiency(specs.get(s.device), algorithm) for s in samples]
    if any(e is None for e in effs):
        return None
    return [replace(s, fraction=s.fraction / e) for s, e in zip(samples, effs, strict=True)], mine


def _groups_by_op_algorithm(
    state: dict, specs: dict[str, DeviceSpec], exclude: str | None
) -> list[list[Sample]]:
    groups: dict[tuple, list[Sample]] = defaultdict(list)
    for k, e in state.items():
        if k[0] != exclude and e.get("fraction") and e["basis"] == "measured":
            sp = specs.get(k[0])
            eff = _library_efficiency(sp, k[2])
            groups[(k[1], k[2], eff is not None)].append(
                Sample(
                    k[0],
                    sp.vendor if sp else None,
                    sp.generation if sp else None,
                    e["fraction"] / eff if eff else e["fraction"],
                )
            )
    return [groups[g] for g in sorted(groups)]


def entries_collective_intra(
    state: dict, specs: dict[str, DeviceSpec], device: str, op: str, exclude: str | None = None
) -> dict[str, dict]:
    """Entries by algorithm for ``op`` on ``device`` (measured, else transferred)."""
    measured = {
        k[2]: e for k, e in state.items() if k[0] == device and k[1] == op and device != exclude
    }
    if measured:
        return measured
    spec = specs.get(device)
    link = spec.link_bandwidth() if spec else None
    if not link:
        return {}
    algorithms = ["ring"] + (["nvls"] if spec.in_switch_reduction and op == "all_reduce" else [])
    out = {}
    for algorithm in algorithms:
        pick_op = [
            s
            for s in _samples(state, specs, lambda k, e, a=algorithm: k[1] == op and k[2] == a)
            if s.device != exclude
        ]
        note = None
        if not pick_op and op != "all_reduce":
            # nobody measured this op with this algorithm: a ring moves the same bytes per link
            # for all-gather/reduce-scatter as for all-reduce (busbw is comparable, nccl-tests
            # PERFORMANCE.md), so the all-reduce ring efficiency is the evidence
            pick_op = [
                s
                for s in _samples(
                    state, specs, lambda k, e: k[1] == "all_reduce" and k[2] == "ring"
                )
                if s.device != exclude
            ]
            note = "from all_reduce ring"
        normalised = _normalise_by_library(pick_op, specs, spec, algorithm)
        tr = transfer_fraction(
            normalised[0] if normalised else pick_op,
            spec.vendor,
            spec.generation,
            level=INTERVAL_LEVEL,
            spread_groups=_groups_by_op_algorithm(state, specs, exclude),
        )
        if tr is None:
            continue
        if normalised:
            eff = normalised[1]
            tr = replace(tr, fraction=tr.fraction * eff, low=tr.low * eff, high=tr.high * eff)
        alphas = [
            e["coefficients"]["alpha_s"]
            for k, e in state.items()
            if k[2] == algorithm and k[0] != exclude and e.get("latency_fitted")
        ]
        if not alphas:  # the per-step latency is a property of the library more than the algorithm
            alphas = [
                e["coefficients"]["alpha_s"]
                for k, e in state.items()
                if k[0] != exclude and e.get("latency_fitted")
            ]
        est = AlphaBetaCurve(op=op, algorithm=algorithm, mesh_domain_size=_mesh(spec))
        est.alpha_s_ = float(np.median(alphas)) if alphas else 0.0
        est.bandwidth_bytes_per_s_ = tr.fraction * link
        # the low-latency line, where measured devices have one: its latency and its
        # bandwidth relative to the large-message line transfer as medians
        ll = [
            (
                e["coefficients"]["alpha_ll_s"],
                e["coefficients"]["bandwidth_ll_bytes_per_s"]
                / e["coefficients"]["bandwidth_bytes_per_s"],
            )
            for k, e in state.items()
            if k[0] != exclude and e["coefficients"].get("bandwidth_ll_bytes_per_s")
        ]
        est.alpha_ll_s_ = float(np.median([a for a, _ in ll])) if ll else None
        est.bandwidth_ll_bytes_per_s_ = (
            float(np.median([r for _, r in ll])) * est.bandwidth_bytes_per_s_ if ll else None
        )
        info = tr.as_dict()
        if note:
            info["note"] = note
        if normalised:
            info["library_efficiency"] = normalised[1]
        out[algorithm] = make_entry(
            est,
            basis="transferred",
            interval=_transfer_interval(tr),
            fraction=tr.fraction,
            transfer=info,
        )
    if not out:
        est = AlphaBetaCurve(op=op, algorithm="ring", mesh_domain_size=_mesh(spec))
        est.alpha_s_ = 0.0
        est.bandwidth_bytes_per_s_ = link
        est.alpha_ll_s_ = est.bandwidth_ll_bytes_per_s_ = None
        out["ring"] = make_entry(est, basis="spec", interval=(0.0, 1.0), fraction=1.0)
    return out


def intra_busbw_asymptote(entries: dict[str, dict], op: str, ranks: float) -> float:
    """Large-message bus bandwidth of the fastest intra-node algorithm over ``ranks`` ranks.

    A node holding one rank has no intra-node phase; its fabric still has a bus bandwidth,
    that of the smallest collective (2 ranks), which is what a 1-rank evaluation would
    otherwise turn into 0 bytes in 0 seconds.
    """
    n = float(max(ranks, 2.0))
    big = 2.0**50
    t, _, _, _ = intra_time(entries, big, n)
    return float(big * busbw_factor(op, n) / t)


def fit_collectives_inter(
    records: Sequence[Record],
    specs: dict[str, DeviceSpec],
    intra_state: dict,
    pooled_alpha: float | None = None,
    _second: bool = False,
) -> dict:
    """Hierarchical fits per (device, op) on multi-node records (single-size devices get the
    median latency of the others, as for the intra-node fits).

    The intra-node phase of each record is the device's calibrated intra-node time of the
    collective on the record's size and ranks per node, so that the fitted inter-node
    latency and bandwidth are what remains once a node's own collective is accounted for.
    """
    if not _second:
        first = fit_collectives_inter(records, specs, intra_state, None, True)
        alphas = [e["coefficients"]["alpha_s"] for e in first.values() if e.get("latency_fitted")]
        if not alphas:
            return first
        return fit_collectives_inter(records, specs, intra_state, float(np.median(alphas)), True)
    from gpuplan.calibration.estimators import HierarchicalAlphaBeta

    state: dict = {}
    inter = [r for r in records if r.x[2] > 1]
    for (device, op), recs in _group(inter, lambda r: (r.device, r.key[0])).items():
        X, y = _xy(recs)
        r_per_node = float(np.median(X[:, 1] / X[:, 2]))
        intra_entries = entries_collective_intra(intra_state, specs, device, op)
        if not intra_entries and op != "all_reduce":
            intra_entries = entries_collective_intra(intra_state, specs, device, "all_reduce")
        b_intra = intra_busbw_asymptote(intra_entries, op, r_per_node) if intra_entries else None
        if op in ("p2p",):
            continue
        single = np.unique(X[:, 0]).size < 2
        t_intra = intra_phase_time(
            intra_candidates(intra_entries), X[:, 0], X[:, 1] / np.maximum(X[:, 2], 1.0)
        )
        est = HierarchicalAlphaBeta(
            op=op,
            intra_bandwidth_bytes_per_s=b_intra,
            alpha_s=(pooled_alpha or 0.0) if single else None,
        ).fit(X, y, intra_time_s=t_intra)
        pred = est.predict_busbw(X[:, 0], X[:, 1], X[:, 2], t_intra)
        nics = [r.extra.get("nic_bandwidth_bytes_per_s_per_gpu") for r in recs]
        nic = float(np.median([n for n in nics if n])) if any(nics) else None
        fraction = est.inter_bandwidth_bytes_per_s_ / nic if nic else None
        entry = make_entry(
            est,
            basis="measured",
            interval=_measured_interval(y, pred, [r.rel_spread for r in recs]),
            n_points=len(recs),
            machines=[r.machine for r in recs],
            fraction=fraction if fraction is not None and fraction <= 1.0 else None,
        )
        entry["nic_bandwidth_bytes_per_s_per_gpu"] = nic
        entry["latency_fitted"] = not single
        state[(device, op)] = entry
    return state


def entry_collective_inter(
    state: dict,
    specs: dict[str, DeviceSpec],
    device: str,
    op: str,
    intra_entries: dict[str, dict],
    ranks_per_node: float,
    exclude: str | None = None,
) -> dict | None:
    """Measured inter-node entry, else one built from the pooled NIC efficiency."""
    if (device, op) in state and device != exclude:
        return state[(device, op)]
    pool = [
        (k, e)
        for k, e in state.items()
        if k[0] != exclude and (k[1] == op or op not in {kk[1] for kk in state})
    ]
    if not pool:
        pool = [(k, e) for k, e in state.items() if k[0] != exclude and k[1] == "all_reduce"]
    if not pool:
        return None
    fractions = [e["fraction"] for _, e in pool if e.get("fraction")]
    absolute = [e["coefficients"]["inter_bandwidth_bytes_per_s"] for _, e in pool]
    alphas = [e["coefficients"]["alpha_s"] for _, e in pool if e.get("latency_fitted")]
    if not alphas:
        # nobody fitted this op's latency from a sweep: the per-step latency is a property
        # of the library and the network more than of the op (as for the intra-node fits)
        alphas = [
            e["coefficients"]["alpha_s"]
            for k, e in state.items()
            if k[0] != exclude and e.get("latency_fitted")
        ] or [0.0]
    b_intra = (
        intra_busbw_asymptote(intra_entries, op if op != "p2p" else "all_reduce", ranks_per_node)
        if intra_entries
        else None
    )
    est = HierarchicalAlphaBetaCurve(
        op=op if op != "p2p" else "broadcast", intra_bandwidth_bytes_per_s=b_intra
    )
    est.alpha_s_ = float(np.median(alphas))
    est.inter_bandwidth_bytes_per_s_ = float(np.median(absolute))
    samples = [
        Sample(k[0], None, None, f)
        for (k, e), f in zip(pool, [e.get("fraction") for _, e in pool], strict=True)
        if f
    ]
    tr = transfer_fraction(samples, None, None, level=INTERVAL_LEVEL)
    lo_hi = _transfer_interval(tr) if tr else (0.5, 2.0)
    entry = make_entry(
        est,
        basis="transferred",
        interval=lo_hi,
        fraction=float(np.exp(np.mean(np.log(fractions)))) if fractions else None,
        transfer={"from_devices": sorted({k[0] for k, _ in pool}), "pool": "all"},
    )
    entry["nic_bandwidth_bytes_per_s_per_gpu"] = None
    return entry


# --- storage -------------------------------------------------------------------------------


def fit_storage(records: Sequence[Record]) -> dict:
    from gpuplan.calibration.estimators import StorageThroughputRegressor

    state: dict = {}
    for (device, rw), recs in _group(records, lambda r: (r.device, r.key[0])).items():
        X, y = _xy(recs)
        est = StorageThroughputRegressor().fit(X, y)
        pred = est.predict_throughput(X[:, 0], X[:, 1], X[:, 2])
        state[(device, rw)] = make_entry(
            est,
            basis="measured",
            interval=_measured_interval(y, pred, [r.rel_spread for r in recs]),
            n_points=len(recs),
            machines=[r.machine for r in recs],
        )
    return state
