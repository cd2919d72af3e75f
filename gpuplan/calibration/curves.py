"""Closed-form evaluation of the calibration models, with numpy only.

A calibration artifact stores each fitted model as an *entry*: the estimator's parameters
and its fitted coefficients (DESIGN.md 3.2). Evaluating an entry is a formula, not a fit,
so forecasts read them through the light curve objects of this module and never import
scikit-learn or scipy. The scikit-learn estimators of :mod:`gpuplan.calibration.estimators`
inherit their prediction methods from these classes and add only the fitting; every
formula therefore has one implementation, shared by the fit and by the forecasts.

* :class:`LatencyBandwidthCurve`: ``t = latency + bytes / bandwidth`` (Hockney 1994, "The
  communication challenge for MPP", Parallel Computing 20(3)).
* :class:`MatmulRooflineCurve`: ``t = latency + max(2mnk / compute, bytes (mk+kn+mn) /
  memory)`` (Williams, Waterman and Patterson 2009, "Roofline", CACM 52(4), eq. 1).
* :class:`AlphaBetaCurve`: ``t = alpha steps(op, n) + size data_factor(op, n) / B`` (Thakur,
  Rabenseifner and Gropp 2005, "Optimization of collective communication operations in
  MPICH", IJHPCA 19(1), section 2; nccl-tests doc/PERFORMANCE.md for the factors).
* :class:`HierarchicalAlphaBetaCurve`: multi-node collectives, an intra-node phase and an
  inter-node phase pipelined (Thakur et al. 2005 section 4).
* :class:`StorageThroughputCurve`: ``1/thr = 1/B_max + L / (block iodepth jobs)`` (Little
  1961, Operations Research 9(3)).

:func:`restore` builds the curve an entry describes; :func:`intra_time` evaluates the
algorithms of one scale-up domain and takes the fastest, as NCCL's tuner does.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar

import numpy as np

from gpuplan.units import busbw_factor  # the one nccl-tests table; re-exported here

COLLECTIVE_OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce")
ALGORITHMS = ("ring", "tree", "nvls")


# --- collective factors ----------------------------------------------------------------------


def latency_steps(op: str, ranks: Any, algorithm: str = "ring") -> Any:
    """Number of sequential message steps of a collective (the multiplier of alpha).

    Ring (Thakur et al. 2005, sec. 2): all-reduce ``2(n-1)``, all-gather / reduce-scatter /
    all-to-all / broadcast / reduce ``n-1``. Tree (binary/double-binary): ``2 ceil(log2 n)``
    for all-reduce, ``ceil(log2 n)`` otherwise. NVLS (in-switch reduction): a constant 2 for
    all-reduce (push to the switch, pull the reduced result), 1 otherwise. p2p: 1.

    >>> float(latency_steps("all_reduce", 8)), float(latency_steps("all_reduce", 8, "tree"))
    (14.0, 6.0)
    """
    n = np.asarray(ranks, dtype=float)
    if op == "p2p":
        return np.ones_like(n)
    if algorithm == "nvls":
        return np.full_like(n, 2.0 if op == "all_reduce" else 1.0)
    if algorithm == "tree":
        steps = np.ceil(np.log2(np.maximum(n, 2.0)))
        return 2.0 * steps if op == "all_reduce" else steps
    if op == "all_reduce":
        return 2.0 * (n - 1.0)
    return n - 1.0


def data_factor(op: str, ranks: Any, algorithm: str = "ring", mesh_domain_size: Any = None) -> Any:
    """Bytes each rank sends per byte of ``size``, relative to the per-rank bandwidth.

    Ring and tree move ``busbw_factor(op, n)`` x size per rank (nccl-tests PERFORMANCE.md:
    that is why busbw is comparable to link bandwidth). With in-switch reduction (NVLS) each
    rank pushes its buffer once and pulls the result once: factor 1 per direction, so the
    *bus* bandwidth can exceed the link bandwidth by ``2(n-1)/n``. On a switchless full
    mesh of ``D`` devices (AMD Infinity Fabric), ``n`` ranks reach only ``n-1`` of the
    ``D-1`` peer links, so the same data takes ``(D-1)/(n-1)`` times longer.
    """
    n = np.asarray(ranks, dtype=float)
    if algorithm == "nvls" and op == "all_reduce":
        return np.ones_like(n)
    factor = busbw_factor(op, n)
    if mesh_domain_size is not None:
        D = float(mesh_domain_size)
        factor = factor * (D - 1.0) / np.clip(n - 1.0, 1.0, D - 1.0)
    return factor


def inter_node_data_factor(op: str, num_nodes: Any, ranks_per_node: Any) -> Any:
    """Bytes through each GPU's share of the node's NICs per byte of ``size`` (nccl-tests size).

    Hierarchical collectives (Thakur et al. 2005 sec. 4) with one NIC share per GPU, ``N``
    nodes of ``r`` ranks:

    * all-reduce, reduce-scatter, all-gather: after (or before) the intra-node phase each
      GPU owns ``size / r`` of the node's data and runs the same collective with its peers
      of the other nodes: ``busbw_factor(op, N) / r``. For an all-gather of ``size`` (the
      gathered output, ``s = size / n`` per rank) that is ``(N-1) s`` bytes per GPU: it
      grows with the nodes at a fixed size per rank.
    * broadcast, reduce: the buffer crosses every node boundary once, split over the
      node's ``r`` NICs: ``1 / r``.
    * all-to-all: each rank sends ``size / n`` to each of the ``n - r`` ranks on other
      nodes; that data is personal to its destination and cannot be combined inside the
      node, so every GPU's NIC share carries ``(N-1)/N x size`` whatever ``r`` is.

    >>> float(inter_node_data_factor("all_reduce", 4, 8)), float(inter_node_data_factor("all_to_all", 4, 8))
    (0.1875, 0.75)
    """
    N = np.maximum(np.asarray(num_nodes, dtype=float), 2.0)
    r = np.maximum(np.asarray(ranks_per_node, dtype=float), 1.0)
    if op == "all_to_all":
        return busbw_factor(op, N) + 0.0 * r
    return busbw_factor(op, N) / r


def gemm_work(m: Any, n: Any, k: Any, bytes_per_element: float) -> tuple[Any, Any]:
    """(FLOPs, minimal bytes moved) of a GEMM: ``2mnk`` and ``bytes x (mk + kn + mn)``."""
    m = np.asarray(m, dtype=float)
    n = np.asarray(n, dtype=float)
    k = np.asarray(k, dtype=float)
    return 2.0 * m * n * k, bytes_per_element * (m * k + k * n + m * n)


# --- curves ----------------------------------------------------------------------------------


class Curve:
    """Parameters and fitted coefficients of one model, and its closed-form prediction.

    ``PARAMS`` are the constructor parameters of the scikit-learn estimator that fits the
    curve (named ``ESTIMATOR``) with their defaults; ``COEFFICIENTS`` the fitted values,
    stored on the object with a trailing underscore as the estimator stores them.
    """

    ESTIMATOR: ClassVar[str] = ""
    PARAMS: ClassVar[dict[str, Any]] = {}
    COEFFICIENTS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **params: Any) -> None:
        unknown = set(params) - set(self.PARAMS)
        if unknown:
            raise TypeError(f"{type(self).__name__}: unknown parameters {sorted(unknown)}")
        for name, default in self.PARAMS.items():
            setattr(self, name, params.get(name, default))


def curve_params(curve: Any) -> dict[str, Any]:
    """The parameters of a curve or of the estimator that fits it (same names)."""
    return {name: getattr(curve, name) for name in sorted(curve.PARAMS)}


class LatencyBandwidthCurve(Curve):
    """Achieved bandwidth of a transfer: ``size / (latency + size / bandwidth)`` (Hockney 1994)."""

    ESTIMATOR = "LatencyBandwidthRegressor"
    PARAMS: ClassVar[dict[str, Any]] = {"latency_s": None, "max_bandwidth_bytes_per_s": None}
    COEFFICIENTS = ("latency_s", "bandwidth_bytes_per_s")

    def predict_bandwidth(self, size_bytes: Any) -> Any:
        """Bandwidth for sizes (scalar or array; no validation: the hot path)."""
        size = np.asarray(size_bytes, dtype=float)
        return size / (self.latency_s_ + size / self.bandwidth_bytes_per_s_)


class MatmulRooflineCurve(Curve):
    """Achieved GEMM FLOP/s: ``2mnk / (latency + max(2mnk / compute, bytes / memory))``."""

    ESTIMATOR = "MatmulRoofline"
    PARAMS: ClassVar[dict[str, Any]] = {
        "bytes_per_element": 2,
        "peak_flops_per_s": None,
        "memory_bandwidth_bytes_per_s": None,
        "min_shapes_for_memory": 4,
    }
    COEFFICIENTS = ("latency_s", "compute_flops_per_s", "memory_bytes_per_s")

    @staticmethod
    def work(m: Any, n: Any, k: Any, bytes_per_element: float) -> tuple[Any, Any]:
        """(FLOPs, minimal bytes moved) of a GEMM (see :func:`gemm_work`)."""
        return gemm_work(m, n, k, bytes_per_element)

    def predict_flops(self, m: Any, n: Any, k: Any) -> Any:
        """Achieved FLOP/s for shapes (scalars or broadcastable arrays; the hot path)."""
        flops, nbytes = gemm_work(m, n, k, self.bytes_per_element)
        inv_mem = 0.0 if math.isinf(self.memory_bytes_per_s_) else 1.0 / self.memory_bytes_per_s_
        t = self.latency_s_ + np.maximum(flops / self.compute_flops_per_s_, nbytes * inv_mem)
        return flops / t


class AlphaBetaCurve(Curve):
    """One collective inside one scale-up domain (Thakur et al. 2005; nccl-tests busbw).

    ``t = alpha steps(op, n, algorithm) + size data_factor(op, n, algorithm) / bandwidth``,
    and the faster of that line and the low-latency line (NCCL's LL protocol) where fitted.
    """

    ESTIMATOR = "AlphaBetaRegressor"
    PARAMS: ClassVar[dict[str, Any]] = {
        "op": "all_reduce",
        "algorithm": "ring",
        "max_bandwidth_bytes_per_s": None,
        "mesh_domain_size": None,
        "alpha_s": None,
        "protocols": 2,
    }
    COEFFICIENTS = ("alpha_s", "bandwidth_bytes_per_s", "alpha_ll_s", "bandwidth_ll_bytes_per_s")

    def _data_factor(self, ranks: Any) -> Any:
        return data_factor(self.op, ranks, self.algorithm, self.mesh_domain_size)

    def predict_time(self, size_bytes: Any, ranks: Any) -> Any:
        """Collective time in seconds (vectorised, no validation)."""
        size = np.asarray(size_bytes, dtype=float)
        steps = latency_steps(self.op, ranks, self.algorithm)
        data = size * self._data_factor(ranks)
        t = self.alpha_s_ * steps + data / self.bandwidth_bytes_per_s_
        ll_bw = getattr(self, "bandwidth_ll_bytes_per_s_", None)
        if ll_bw:
            t = np.minimum(t, self.alpha_ll_s_ * steps + data / ll_bw)
        return t

    def predict_busbw(self, size_bytes: Any, ranks: Any) -> Any:
        """nccl-tests busbw (bytes/s) for sizes and rank counts (vectorised)."""
        size = np.asarray(size_bytes, dtype=float)
        return (
            size
            * busbw_factor(self.op, np.asarray(ranks, dtype=float))
            / self.predict_time(size, ranks)
        )


class HierarchicalAlphaBetaCurve(Curve):
    """A collective over ``N`` nodes of ``r = n / N`` ranks (Thakur et al. 2005 sec. 4).

    Each node runs the collective inside its scale-up domain while the inter-node phase
    moves the node's share over the NICs, pipelined, so the slower phase sets the pace::

        t = alpha x steps(N) + max(t_intra, size x inter_node_data_factor(op, N, r) / B_inter)

    ``t_intra`` is the time of the same collective on ``size`` inside one node of ``r``
    ranks: the calibrated intra-node model where the caller passes it (``intra_time_s``;
    its latency included, so a collective never gets faster by spilling onto a second
    node), else ``size x busbw_factor(op, r) / B_intra``. For an all-to-all this is the
    NVLink traffic with NCCL's PXN routing (NCCL 2.12), which forwards each message over
    NVLink to the GPU on the destination's rail: ``(r-1)/r x size`` per GPU, as inside one
    node. ``B_inter`` is the achieved inter-node bandwidth per GPU (its NIC share).
    """

    ESTIMATOR = "HierarchicalAlphaBeta"
    PARAMS: ClassVar[dict[str, Any]] = {
        "op": "all_reduce",
        "intra_bandwidth_bytes_per_s": None,
        "alpha_s": None,
    }
    COEFFICIENTS = ("alpha_s", "inter_bandwidth_bytes_per_s")

    def _phases(self, size: Any, ranks: Any, nodes: Any) -> tuple[Any, Any, Any]:
        """(intra-node bytes at the bus bandwidth, inter-node bytes per GPU, latency steps)."""
        size = np.asarray(size, dtype=float)
        n = np.asarray(ranks, dtype=float)
        N = np.maximum(np.asarray(nodes, dtype=float), 1.0)
        r = np.maximum(n / N, 1.0)
        intra = size * np.where(r > 1, busbw_factor(self.op, np.maximum(r, 2.0)), 0.0)
        inter = size * inter_node_data_factor(self.op, N, r)
        steps = latency_steps(self.op, N, "ring")
        return intra, inter, steps

    def _intra_time(self, intra_bytes: Any, intra_time_s: Any) -> Any:
        if intra_time_s is not None:
            return np.asarray(intra_time_s, dtype=float)
        b = self.intra_bandwidth_bytes_per_s
        return intra_bytes / b if b else np.zeros_like(np.asarray(intra_bytes, dtype=float))

    @staticmethod
    def _combine(alpha: float, steps: Any, t_intra: Any, t_inter: Any) -> Any:
        return alpha * steps + np.maximum(t_intra, t_inter)

    def predict_time(
        self,
        size_bytes: Any,
        ranks: Any,
        num_nodes: Any,
        inter_bandwidth_bytes_per_s: Any = None,
        intra_time_s: Any = None,
    ) -> Any:
        """Time in seconds; ``inter_bandwidth_bytes_per_s`` overrides the fitted one and
        ``intra_time_s`` gives the intra-node phase (see the class docstring)."""
        intra, inter, steps = self._phases(size_bytes, ranks, num_nodes)
        b_inter = (
            self.inter_bandwidth_bytes_per_s_
            if inter_bandwidth_bytes_per_s is None
            else inter_bandwidth_bytes_per_s
        )
        return self._combine(
            self.alpha_s_, steps, self._intra_time(intra, intra_time_s), inter / b_inter
        )

    def predict_busbw(
        self, size_bytes: Any, ranks: Any, num_nodes: Any, intra_time_s: Any = None
    ) -> Any:
        """nccl-tests busbw over all ``ranks`` (bytes/s)."""
        size = np.asarray(size_bytes, dtype=float)
        t = self.predict_time(size, ranks, num_nodes, None, intra_time_s)
        return size * busbw_factor(self.op, np.maximum(np.asarray(ranks, dtype=float), 2.0)) / t


class StorageThroughputCurve(Curve):
    """Read/write throughput: ``1 / (1 / B_max + L / (block x iodepth x jobs))`` (Little 1961)."""

    ESTIMATOR = "StorageThroughputRegressor"
    PARAMS: ClassVar[dict[str, Any]] = {}
    COEFFICIENTS = ("max_bytes_per_s", "latency_s")

    def predict_throughput(self, block_size_bytes: Any, iodepth: Any = 1, numjobs: Any = 1) -> Any:
        inflight = (
            np.asarray(block_size_bytes, dtype=float)
            * np.asarray(iodepth, dtype=float)
            * np.asarray(numjobs, dtype=float)
        )
        return 1.0 / (1.0 / self.max_bytes_per_s_ + self.latency_s_ / inflight)


CURVES: dict[str, type[Curve]] = {
    c.ESTIMATOR: c
    for c in (
        LatencyBandwidthCurve,
        MatmulRooflineCurve,
        AlphaBetaCurve,
        HierarchicalAlphaBetaCurve,
        StorageThroughputCurve,
    )
}


def restore(entry: dict[str, Any]) -> Any:
    """The curve an artifact entry describes (its parameters and fitted coefficients)."""
    curve = CURVES[entry["estimator"]](**entry["params"])
    for c, v in entry["coefficients"].items():
        if v is None and "_ll_" in c + "_":
            setattr(curve, c + "_", None)  # no low-latency line
        else:
            setattr(curve, c + "_", math.inf if v is None else float(v))
    if isinstance(curve, MatmulRooflineCurve):
        peak = curve.peak_flops_per_s
        curve.peak_fraction_ = curve.compute_flops_per_s_ / peak if peak else math.nan
    return curve


# --- the algorithms of one scale-up domain ---------------------------------------------------


def intra_candidates(entries: dict[str, dict]) -> list[tuple[dict, Any]]:
    """(entry, curve) of every algorithm to consider inside one scale-up domain.

    Each ring entry also yields a double-binary-tree variant with the same per-step latency
    and bandwidth: NCCL's tree moves the same bytes per rank as the ring at full bandwidth
    with log2(n) latency steps (Sanders, Speck and Traeff 2009, "Two-tree algorithms for full
    bandwidth broadcast, reduction and scan", Parallel Computing 35(12)); it wins for many
    ranks and small messages. A switchless mesh has no tree.
    """
    out = []
    for entry in entries.values():
        curve = restore(entry)
        out.append((entry, curve))
        if curve.algorithm == "ring" and curve.mesh_domain_size is None:
            tree = AlphaBetaCurve(op=curve.op, algorithm="tree")
            tree.alpha_s_, tree.bandwidth_bytes_per_s_ = (
                curve.alpha_s_,
                curve.bandwidth_bytes_per_s_,
            )
            tree.alpha_ll_s_, tree.bandwidth_ll_bytes_per_s_ = (
                curve.alpha_ll_s_,
                curve.bandwidth_ll_bytes_per_s_,
            )
            out.append((entry, tree))
    return out


def intra_time(
    entries: dict[str, dict] | list, size_bytes: Any, ranks: Any
) -> tuple[Any, Any, Any, str]:
    """(time, low, high, basis) of the fastest algorithm at each size (NCCL's tuner picks it).

    ``entries`` are the entries by algorithm, or the output of :func:`intra_candidates`.
    """
    candidates = intra_candidates(entries) if isinstance(entries, dict) else entries
    best_t = best_lo = best_hi = None
    basis = "measured"
    for entry, curve in candidates:
        t = curve.predict_time(size_bytes, ranks)
        lo_r, hi_r = entry["interval"]
        # a lower throughput bound is a longer time: time interval = t / [high, low]
        t_lo = t / hi_r
        t_hi = t / lo_r if lo_r > 0 else np.full_like(np.asarray(t, dtype=float), np.inf)
        if best_t is None:
            best_t, best_lo, best_hi = t, t_lo, t_hi
        else:
            better = t < best_t
            best_t = np.where(better, t, best_t)
            best_lo = np.where(better, t_lo, best_lo)
            best_hi = np.where(better, t_hi, best_hi)
        if entry["basis"] != "measured":
            basis = entry["basis"] if basis == "measured" or entry["basis"] == "spec" else basis
    return best_t, best_lo, best_hi, basis


def intra_phase_time(candidates: list, size_bytes: Any, ranks_per_node: Any) -> Any:
    """Time of the intra-node phase of a multi-node collective: the fastest intra-node
    algorithm on ``size_bytes`` over ``ranks_per_node`` ranks, 0 where a node holds one rank."""
    r = np.asarray(ranks_per_node, dtype=float)
    if not candidates:
        return None
    t, _, _, _ = intra_time(candidates, size_bytes, np.maximum(r, 2.0))
    return np.where(r >= 2.0, t, 0.0)
