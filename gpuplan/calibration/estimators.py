"""Physically shaped regressors for calibration, held to scikit-learn's estimator contract.

Each model is a time model whose pieces are linear in non-negative coefficients (a max or
min of such pieces where the physics has two regimes), fitted by non-negative least squares
on the *relative* error of the time, so every measurement counts alike whether it took a
microsecond or a second. Throughputs are then ``work / time``: they saturate, never exceed
the fitted (and, where given, the catalog) ceiling, and are monotone in the work where
physics says so.

* :class:`LatencyBandwidthRegressor`: ``t = latency + bytes / bandwidth`` (Hockney 1994,
  "The communication challenge for MPP", Parallel Computing 20(3)); memory copies and
  host-device transfers.
* :class:`MatmulRoofline`: ``t = latency + max(flops / compute_rate, bytes / memory_rate)``,
  the roofline model of Williams, Waterman and Patterson 2009 ("Roofline", CACM 52(4)) with
  the minimal GEMM traffic ``(mk + kn + mn) x bytes``.
* :class:`AlphaBetaRegressor`: ``t = alpha x steps(n) + size x factor(n) / bandwidth``, the
  alpha-beta cost of ring / tree / in-switch collectives (Thakur, Rabenseifner and Gropp
  2005, "Optimization of collective communication operations in MPICH", IJHPCA 19(1),
  section 2), with nccl-tests' bus-bandwidth factors (nccl-tests doc/PERFORMANCE.md).
* :class:`HierarchicalAlphaBeta`: multi-node collectives as a pipelined intra-node phase
  and inter-node phase, ``t = alpha x steps + max(t_intra, t_inter)`` (the hierarchical
  decomposition of Thakur et al. 2005 section 4 and NCCL's tree/ring across nodes).
* :class:`StorageThroughputRegressor`: ``1/throughput = 1/B_max + L / (Q x block)`` with
  ``Q = iodepth x numjobs`` outstanding requests (Little's law, Little 1961, Operations
  Research 9(3): throughput = requests in flight x block / latency, capped by the device).

The closed-form predictions (``predict_flops``, ``predict_bandwidth``, ``predict_time``,
``predict_busbw``, ``predict_throughput``) and the collective factors are inherited from
the numpy-only curves of :mod:`gpuplan.calibration.curves`, which forecasts use without
importing this module; an estimator here adds the fit, the parameter constraints and the
scikit-learn contract.
"""

from __future__ import annotations

import math
from numbers import Integral, Real
from typing import Any

import numpy as np
from scipy.optimize import nnls
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.validation import check_is_fitted

from gpuplan.calibration.curves import (
    ALGORITHMS,
    AlphaBetaCurve,
    HierarchicalAlphaBetaCurve,
    LatencyBandwidthCurve,
    MatmulRooflineCurve,
    StorageThroughputCurve,
    busbw_factor,
    data_factor,
    latency_steps,
)

__all__ = [
    "ALGORITHMS",
    "AlphaBetaRegressor",
    "HierarchicalAlphaBeta",
    "LatencyBandwidthRegressor",
    "MatmulRoofline",
    "StorageThroughputRegressor",
    "data_factor",
    "latency_steps",
]

try:  # scikit-learn >= 1.6
    from sklearn.utils.validation import validate_data as _validate_data
except ImportError:  # pragma: no cover - older scikit-learn

    def _validate_data(
        est: Any, X: Any, y: Any = "no_validation", reset: bool = True, **kw: Any
    ) -> Any:
        return est._validate_data(X, y, reset=reset, **kw)


def _relative_nnls(
    A: np.ndarray, t: np.ndarray, fixed: dict[int, float] | None = None
) -> np.ndarray:
    """Non-negative ``c`` minimising ``sum(((A @ c) / t - 1)^2)``; ``fixed`` pins coefficients.

    Dividing each row by its measured time makes the loss the relative error of the time
    (equivalently of the throughput to first order), so small and large transfers weigh alike.
    """
    fixed = fixed or {}
    n_coef = A.shape[1]
    free = [j for j in range(n_coef) if j not in fixed]
    rhs = np.ones_like(t, dtype=float)
    W = A / t[:, None]
    for j, v in fixed.items():
        rhs = rhs - W[:, j] * v
    coef = np.zeros(n_coef)
    for j, v in fixed.items():
        coef[j] = v
    if free:
        sub = W[:, free]
        scale = np.where(np.abs(sub).max(axis=0) > 0, np.abs(sub).max(axis=0), 1.0)
        sol, _ = nnls(sub / scale, rhs)
        coef[free] = sol / scale
    return coef


class _TimeModel(RegressorMixin, BaseEstimator):
    """Shared plumbing: input validation, positivity checks, the sklearn tags."""

    _n_columns: int = 1
    _column_names: tuple[str, ...] = ()

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.positive_only = True
        return tags

    def _check_X(self, X: Any, y: Any = "no_validation", *, reset: bool) -> Any:
        if y is None:
            raise ValueError(
                f"{type(self).__name__} requires y to be passed, but the target y is None"
            )
        if isinstance(y, str) and y == "no_validation":
            y = None
            X = _validate_data(self, X, reset=reset, dtype=np.float64)
        else:
            X, y = _validate_data(self, X, y, reset=reset, dtype=np.float64, y_numeric=True)
        if X.shape[1] != self._n_columns:
            raise ValueError(
                f"{type(self).__name__} expects {self._n_columns} column(s) "
                f"({', '.join(self._column_names)}), got {X.shape[1]}"
            )
        if np.any(X <= 0):
            raise ValueError(f"{type(self).__name__}: {', '.join(self._column_names)} must be > 0")
        if y is not None and np.any(np.asarray(y) <= 0):
            raise ValueError(f"{type(self).__name__}: measured throughputs must be > 0")
        return X if y is None else (X, np.asarray(y, dtype=float))


class LatencyBandwidthRegressor(_TimeModel, LatencyBandwidthCurve):
    """Achieved bandwidth of a transfer of ``size`` bytes: ``size / (latency + size / bandwidth)``.

    Hockney 1994: the time of a transfer is a start-up latency plus the size over the
    asymptotic bandwidth. The predicted bandwidth rises monotonically with the size towards
    :attr:`bandwidth_bytes_per_s_`, and never exceeds ``max_bandwidth_bytes_per_s`` when given.

    Parameters
    ----------
    latency_s:
        fixed start-up latency; ``None`` fits it (which needs two distinct sizes; with one
        size it is 0).
    max_bandwidth_bytes_per_s:
        physical ceiling (e.g. the catalog link or memory bandwidth); ``None`` = unbounded.

    Attributes
    ----------
    latency_s_, bandwidth_bytes_per_s_:
        fitted start-up time (s) and asymptotic bandwidth (bytes/s).

    Examples
    --------
    >>> import numpy as np
    >>> sizes = np.array([[1e3], [1e6], [1e9]])
    >>> bw = sizes[:, 0] / (1e-5 + sizes[:, 0] / 5e10)
    >>> m = LatencyBandwidthRegressor().fit(sizes, bw)
    >>> round(m.bandwidth_bytes_per_s_ / 1e9, 3), round(m.latency_s_ * 1e6, 3)
    (50.0, 10.0)
    """

    _n_columns = 1
    _column_names = ("size_bytes",)
    _parameter_constraints: dict = {  # noqa: RUF012 - sklearn convention
        "latency_s": [Interval(Real, 0, None, closed="left"), None],
        "max_bandwidth_bytes_per_s": [Interval(Real, 0, None, closed="neither"), None],
    }

    def __init__(
        self, latency_s: float | None = None, max_bandwidth_bytes_per_s: float | None = None
    ):
        self.latency_s = latency_s
        self.max_bandwidth_bytes_per_s = max_bandwidth_bytes_per_s

    def fit(self, X: Any, y: Any) -> LatencyBandwidthRegressor:
        self._validate_params()
        X, y = self._check_X(X, y, reset=True)
        size = X[:, 0]
        t = size / y
        A = np.column_stack([np.ones_like(size), size])
        fixed: dict[int, float] = {}
        if self.latency_s is not None:
            fixed[0] = float(self.latency_s)
        elif np.unique(size).size < 2:
            fixed[0] = 0.0
        coef = _relative_nnls(A, t, fixed)
        if (
            self.max_bandwidth_bytes_per_s is not None
            and coef[1] < 1.0 / self.max_bandwidth_bytes_per_s
        ):
            coef = _relative_nnls(A, t, {**fixed, 1: 1.0 / self.max_bandwidth_bytes_per_s})
        if coef[1] <= 0:  # all time explained by latency: keep a finite, observed ceiling
            coef[1] = 1.0 / float(np.max(y))
            coef = _relative_nnls(A, t, {**fixed, 1: coef[1]})
        self.latency_s_ = float(coef[0])
        self.bandwidth_bytes_per_s_ = float(1.0 / coef[1])
        return self

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "bandwidth_bytes_per_s_")
        X = self._check_X(X, reset=False)
        return self.predict_bandwidth(X[:, 0])


class MatmulRoofline(_TimeModel, MatmulRooflineCurve):
    """Achieved dense GEMM FLOP/s for an (m x k) @ (k x n) product.

    Roofline model (Williams, Waterman and Patterson 2009, CACM 52(4), eq. 1: attainable
    = min(peak, arithmetic intensity x bandwidth)) with a launch latency in front::

        t = latency + max(2mnk / compute_rate, bytes x (mk + kn + mn) / memory_rate)

    using the minimal GEMM traffic (read A and B, write C once). Large, square-ish GEMMs run
    at ``compute_rate``; thin ones (decode, small batch) at the memory roof; tiny ones are
    latency bound. The achieved rate is monotone in each of m, n, k and never above
    ``compute_rate``, which is capped at ``peak_flops_per_s`` when the peak is known.

    Parameters
    ----------
    bytes_per_element:
        element size of the inputs and output (2 for bf16/fp16, 1 for fp8, 4 for fp32).
    peak_flops_per_s:
        catalog dense peak for the dtype (``None``: unknown, e.g. a CPU).
    memory_bandwidth_bytes_per_s:
        achieved memory bandwidth used for the memory roof when the measurements do not
        pin it down (fewer than ``min_shapes_for_memory`` distinct shapes).
    min_shapes_for_memory:
        distinct shapes needed to fit the memory roof and the latency from the data.

    Attributes
    ----------
    latency_s_, compute_flops_per_s_, memory_bytes_per_s_ (``inf`` when no memory roof),
    peak_fraction_ (``compute_flops_per_s_ / peak_flops_per_s``, ``nan`` when no peak).

    Examples
    --------
    >>> import numpy as np
    >>> X = np.array([[s, s, s] for s in (256, 512, 1024, 2048, 4096, 8192)] + [[1, 8192, 8192]])
    >>> F, B = MatmulRoofline.work(X[:, 0], X[:, 1], X[:, 2], 2)
    >>> t = 2e-6 + np.maximum(F / 8e14, B / 3e12)
    >>> m = MatmulRoofline(peak_flops_per_s=1e15).fit(X, F / t)
    >>> round(m.compute_flops_per_s_ / 1e12), round(m.memory_bytes_per_s_ / 1e12, 3), round(m.latency_s_ * 1e6, 3)
    (800, 3.0, 2.0)
    """

    _n_columns = 3
    _column_names = ("m", "n", "k")
    _parameter_constraints: dict = {  # noqa: RUF012
        "bytes_per_element": [Interval(Real, 0, None, closed="neither")],
        "peak_flops_per_s": [Interval(Real, 0, None, closed="neither"), None],
        "memory_bandwidth_bytes_per_s": [Interval(Real, 0, None, closed="neither"), None],
        "min_shapes_for_memory": [Interval(Integral, 1, None, closed="left")],
    }

    def __init__(
        self,
        bytes_per_element: float = 2,
        peak_flops_per_s: float | None = None,
        memory_bandwidth_bytes_per_s: float | None = None,
        min_shapes_for_memory: int = 4,
    ):
        self.bytes_per_element = bytes_per_element
        self.peak_flops_per_s = peak_flops_per_s
        self.memory_bandwidth_bytes_per_s = memory_bandwidth_bytes_per_s
        self.min_shapes_for_memory = min_shapes_for_memory

    def fit(self, X: Any, y: Any) -> MatmulRoofline:
        self._validate_params()
        X, y = self._check_X(X, y, reset=True)
        flops, nbytes = self.work(X[:, 0], X[:, 1], X[:, 2], self.bytes_per_element)
        t = flops / y
        distinct = np.unique(X, axis=0).shape[0]
        fit_memory = distinct >= self.min_shapes_for_memory
        mem = self.memory_bandwidth_bytes_per_s
        inv_peak = 1.0 / self.peak_flops_per_s if self.peak_flops_per_s else 0.0
        # Hinge fit: given which roof binds each point, the time is linear in
        # (latency, 1/compute, 1/memory); alternate assignment and NNLS until stable.
        c = max(float(np.min(t / flops)), inv_peak)  # the best observed rate
        mm = (1.0 / mem) if mem else 0.0
        if fit_memory and not mem:
            mm = float(np.min(t / nbytes))
        lat = 0.0
        membound = nbytes * mm > flops * c
        for _ in range(50):
            A = np.column_stack(
                [np.ones_like(t), np.where(membound, 0.0, flops), np.where(membound, nbytes, 0.0)]
            )
            fixed: dict[int, float] = {}
            if not fit_memory:
                fixed[0] = 0.0
                fixed[2] = mm
            if not np.any(~membound):  # every point on the memory roof: compute from the best rate
                fixed[1] = c
            if not np.any(membound) and fit_memory:
                fixed[2] = mm
            coef = _relative_nnls(A, t, fixed)
            if coef[1] < inv_peak:
                coef = _relative_nnls(A, t, {**fixed, 1: inv_peak})
            if coef[1] <= 0:
                coef = _relative_nnls(A, t, {**fixed, 1: float(np.min(t / flops))})
            lat, c, mm = float(coef[0]), float(coef[1]), float(coef[2])
            new = nbytes * mm > flops * c
            if np.array_equal(new, membound):
                break
            membound = new
        self.latency_s_ = lat
        self.compute_flops_per_s_ = float(1.0 / c)
        self.memory_bytes_per_s_ = float(1.0 / mm) if mm > 0 else math.inf
        self.peak_fraction_ = (
            self.compute_flops_per_s_ / self.peak_flops_per_s if self.peak_flops_per_s else math.nan
        )
        return self

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "compute_flops_per_s_")
        X = self._check_X(X, reset=False)
        return self.predict_flops(X[:, 0], X[:, 1], X[:, 2])


# --- collectives -----------------------------------------------------------------------


class AlphaBetaRegressor(_TimeModel, AlphaBetaCurve):
    """Bus bandwidth of one collective inside one scale-up domain, by size and ranks.

    ``t = alpha x steps(op, n, algorithm) + size x data_factor(op, n, algorithm) / bandwidth``
    (Thakur et al. 2005; Hockney's alpha-beta). The prediction is nccl-tests' busbw,
    ``size x busbw_factor(op, n) / t``. Because ``steps`` and ``data_factor`` follow the
    algorithm, a fit at 8 ranks extrapolates to other rank counts along the topology rather
    than interpolating.

    Parameters
    ----------
    op:
        all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, p2p.
    algorithm:
        ring, tree or nvls (NVLink SHARP in-switch reduction).
    max_bandwidth_bytes_per_s:
        ceiling on the fitted per-rank bandwidth (e.g. catalog link bandwidth); ``None``: none.
    mesh_domain_size:
        devices of a switchless full mesh (the bandwidth grows with the ranks used);
        ``None`` for a switched fabric.
    alpha_s:
        fixed latency per step; ``None`` fits it (needs two distinct sizes, else 0).
    protocols:
        2 fits a second, low-latency line for small messages (NCCL's LL protocols) when the
        sweep has at least six sizes and the BIC prefers it; 1 keeps one alpha-beta line.

    Attributes
    ----------
    alpha_s_: latency per step (s). bandwidth_bytes_per_s_: asymptotic per-rank bandwidth
    of the algorithm (bus bandwidth for ring/tree; algorithm bandwidth for nvls).
    alpha_ll_s_, bandwidth_ll_bytes_per_s_: the low-latency line (``None`` without one).

    Examples
    --------
    >>> import numpy as np
    >>> size = np.array([2.0**20, 2.0**24, 2.0**28, 2.0**30]); n = np.full(4, 8.0)
    >>> t = 5e-6 * 14 + size * 1.75 / 2e11
    >>> m = AlphaBetaRegressor().fit(np.column_stack([size, n]), size * 1.75 / t)
    >>> round(m.alpha_s_ * 1e6, 6), round(m.bandwidth_bytes_per_s_ / 1e9, 6)
    (5.0, 200.0)
    """

    _n_columns = 2
    _column_names = ("size_bytes", "ranks")
    _parameter_constraints: dict = {  # noqa: RUF012
        "op": [
            StrOptions(
                {
                    "all_reduce",
                    "all_gather",
                    "reduce_scatter",
                    "all_to_all",
                    "broadcast",
                    "reduce",
                    "p2p",
                }
            )
        ],
        "algorithm": [StrOptions(set(ALGORITHMS))],
        "max_bandwidth_bytes_per_s": [Interval(Real, 0, None, closed="neither"), None],
        "mesh_domain_size": [Interval(Integral, 2, None, closed="left"), None],
        "alpha_s": [Interval(Real, 0, None, closed="left"), None],
        "protocols": [Interval(Integral, 1, 2, closed="both")],
    }

    def __init__(
        self,
        op: str = "all_reduce",
        algorithm: str = "ring",
        max_bandwidth_bytes_per_s: float | None = None,
        mesh_domain_size: int | None = None,
        alpha_s: float | None = None,
        protocols: int = 2,
    ):
        self.op = op
        self.algorithm = algorithm
        self.max_bandwidth_bytes_per_s = max_bandwidth_bytes_per_s
        self.mesh_domain_size = mesh_domain_size
        self.alpha_s = alpha_s
        self.protocols = protocols

    def _check_X(self, X: Any, y: Any = "no_validation", *, reset: bool) -> Any:
        out = super()._check_X(X, y, reset=reset)
        Xv = out if isinstance(out, np.ndarray) else out[0]
        if np.any(Xv[:, 1] < 2) and self.op != "p2p":
            raise ValueError("AlphaBetaRegressor: a collective needs ranks >= 2")
        return out

    def _fit_line(self, A: np.ndarray, t: np.ndarray, size: np.ndarray) -> np.ndarray:
        fixed: dict[int, float] = {}
        if self.alpha_s is not None:
            fixed[0] = float(self.alpha_s)
        elif np.unique(size).size < 2:
            fixed[0] = 0.0
        coef = _relative_nnls(A, t, fixed)
        if coef[1] <= 0:  # all time explained by latency: cap at the best observed rate
            coef = _relative_nnls(A, t, {**fixed, 1: float(np.min(t / A[:, 1]))})
        cap = self.max_bandwidth_bytes_per_s
        if cap is not None and coef[1] < 1.0 / cap:
            coef = _relative_nnls(A, t, {**fixed, 1: 1.0 / cap})
        return coef

    def fit(self, X: Any, y: Any) -> AlphaBetaRegressor:
        self._validate_params()
        X, y = self._check_X(X, y, reset=True)
        size, n = X[:, 0], X[:, 1]
        t = size * busbw_factor(self.op, n) / y
        A = np.column_stack(
            [latency_steps(self.op, n, self.algorithm), size * self._data_factor(n)]
        )
        coef = self._fit_line(A, t, size)
        self.alpha_ll_s_ = None
        self.bandwidth_ll_bytes_per_s_ = None
        sizes = np.unique(size)
        if self.protocols == 2 and self.alpha_s is None and sizes.size >= 6:
            # NCCL runs small messages with a low-latency protocol (LL: small alpha, lower
            # bandwidth) and large ones with "Simple" (larger alpha, full bandwidth), and its
            # tuner picks the faster (NCCL src/graph/tuning.cc): t = min of two alpha-beta
            # lines. Fitted as a hinge: assign points to a line, refit both, reassign.
            small = size <= np.median(sizes)
            best = None
            for _ in range(50):
                if np.unique(size[small]).size < 2 or np.unique(size[~small]).size < 2:
                    break
                c_ll = self._fit_line(A[small], t[small], size[small])
                c_s = self._fit_line(A[~small], t[~small], size[~small])
                t_ll, t_s = A @ c_ll, A @ c_s
                new = t_ll < t_s
                best = (c_s, c_ll)
                if np.array_equal(new, small):
                    break
                small = new
            if best is not None:
                c_s, c_ll = best
                two = np.minimum(A @ c_s, A @ c_ll)
                one = A @ coef
                # keep the second line only if the Bayesian information criterion (Schwarz
                # 1978) prefers four parameters to two on the log residuals
                m = t.size

                def bic(pred: np.ndarray, k: int) -> float:
                    rss = max(float(np.sum(np.log(pred / t) ** 2)), 1e-300)
                    return m * math.log(rss / m) + k * math.log(m)

                if bic(two, 4) < bic(one, 2) and c_ll[1] > c_s[1]:
                    coef = c_s
                    self.alpha_ll_s_ = float(c_ll[0])
                    self.bandwidth_ll_bytes_per_s_ = float(1.0 / c_ll[1])
        self.alpha_s_ = float(coef[0])
        self.bandwidth_bytes_per_s_ = float(1.0 / coef[1])
        return self

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "bandwidth_bytes_per_s_")
        X = self._check_X(X, reset=False)
        return self.predict_busbw(X[:, 0], X[:, 1])


class HierarchicalAlphaBeta(_TimeModel, HierarchicalAlphaBetaCurve):
    """Bus bandwidth of a collective spanning several nodes.

    Hierarchical decomposition (Thakur et al. 2005 sec. 4; NCCL's ring/tree across nodes):
    each node runs the collective inside its scale-up domain while the inter-node phase
    moves the node's share over the NICs, pipelined, so the slower phase sets the pace::

        t = alpha x steps(N) + max(t_intra, size x g(op, N, r) / B_inter)

    with ``r`` ranks per node, ``N`` nodes, ``g`` the bytes per GPU NIC share
    (:func:`gpuplan.calibration.curves.inter_node_data_factor`: ``f(N) / r`` with ``f``
    nccl-tests' factor, 2(N-1)/N for all-reduce; ``(N-1)/N`` for an all-to-all, whose data
    cannot be combined inside the node) and ``B_inter`` the achieved inter-node bandwidth
    per GPU (its NIC share). ``t_intra`` is the calibrated intra-node time of the same
    collective on ``r`` ranks when ``fit``/``predict_time`` get it (``intra_time_s``), else
    ``size x f(r) / B_intra``.

    Parameters
    ----------
    op:
        the collective.
    intra_bandwidth_bytes_per_s:
        achieved intra-node bus bandwidth of the same op (from :class:`AlphaBetaRegressor`),
        used where no intra-node time is given.
    alpha_s:
        fixed latency per inter-node step; ``None`` fits it (needs two distinct sizes).

    Attributes
    ----------
    alpha_s_: latency per inter-node step. inter_bandwidth_bytes_per_s_: per-GPU
    inter-node bandwidth achieved.
    """

    _n_columns = 3
    _column_names = ("size_bytes", "ranks", "num_nodes")
    _parameter_constraints: dict = {  # noqa: RUF012
        "op": [
            StrOptions(
                {"all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce"}
            )
        ],
        "intra_bandwidth_bytes_per_s": [Interval(Real, 0, None, closed="neither"), None],
        "alpha_s": [Interval(Real, 0, None, closed="left"), None],
    }

    def __init__(
        self,
        op: str = "all_reduce",
        intra_bandwidth_bytes_per_s: float | None = None,
        alpha_s: float | None = None,
    ):
        self.op = op
        self.intra_bandwidth_bytes_per_s = intra_bandwidth_bytes_per_s
        self.alpha_s = alpha_s

    def fit(self, X: Any, y: Any, intra_time_s: Any = None) -> HierarchicalAlphaBeta:
        """Fit ``alpha_s_`` and ``inter_bandwidth_bytes_per_s_`` to busbw ``y`` at ``X``.

        ``intra_time_s`` (one per row, optional): the calibrated intra-node time of the
        collective on each row's size and ranks per node.
        """
        self._validate_params()
        X, y = self._check_X(X, y, reset=True)
        size, n, N = X[:, 0], X[:, 1], X[:, 2]
        t = size * busbw_factor(self.op, np.maximum(n, 2.0)) / y
        intra, inter, steps = self._phases(size, n, N)
        t_intra = self._intra_time(intra, intra_time_s)
        # Profile the non-smooth max: for each candidate inter bandwidth the best alpha is an
        # NNLS in one variable; scan candidates on a log grid, then refine by golden section.
        hi = float(np.max(inter / t)) * 4.0
        lo = float(np.min(inter / t)) / 4.0
        single = np.unique(size).size < 2

        def loss_at(b: float) -> tuple[float, float]:
            base = self._combine(0.0, steps, t_intra, inter / b)
            if self.alpha_s is not None:
                alpha = float(self.alpha_s)
            elif single:
                alpha = 0.0
            else:
                resid_t = t - base
                w = steps / t
                alpha = max(float(np.sum(w * (resid_t / t)) / max(np.sum(w * w), 1e-300)), 0.0)
            pred = self._combine(alpha, steps, t_intra, inter / b)
            return float(np.sum((pred / t - 1.0) ** 2)), alpha

        grid = np.geomspace(lo, hi, 241)
        losses = [loss_at(b)[0] for b in grid]
        i = int(np.argmin(losses))
        a, b = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
        g = (math.sqrt(5) - 1) / 2
        for _ in range(80):
            c, d = b - g * (b - a), a + g * (b - a)
            if loss_at(c)[0] < loss_at(d)[0]:
                b = d
            else:
                a = c
        best = (a + b) / 2
        self.inter_bandwidth_bytes_per_s_ = float(best)
        self.alpha_s_ = float(loss_at(best)[1])
        return self

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "inter_bandwidth_bytes_per_s_")
        X = self._check_X(X, reset=False)
        return self.predict_busbw(X[:, 0], X[:, 1], X[:, 2])


class StorageThroughputRegressor(_TimeModel, StorageThroughputCurve):
    """Read/write throughput by block size, queue depth and jobs (fio).

    ``1 / throughput = 1 / B_max + L / (Q x block)`` with ``Q = iodepth x numjobs``: by
    Little's law the throughput of ``Q`` requests in flight, each taking latency ``L``, is
    ``Q x block / L``; the device caps it at ``B_max``. The additive form joins the two
    regimes smoothly; throughput is monotone in block size, queue depth and jobs.

    Attributes
    ----------
    max_bytes_per_s_, latency_s_:
        the device ceiling and the per-request latency.
    """

    _n_columns = 3
    _column_names = ("block_size_bytes", "iodepth", "numjobs")
    _parameter_constraints: dict = {}  # noqa: RUF012

    def __init__(self) -> None:
        pass

    def fit(self, X: Any, y: Any) -> StorageThroughputRegressor:
        self._validate_params()
        X, y = self._check_X(X, y, reset=True)
        inflight = X[:, 0] * X[:, 1] * X[:, 2]
        inv = 1.0 / y
        A = np.column_stack([np.ones_like(inv), 1.0 / inflight])
        fixed: dict[int, float] = {}
        if np.unique(inflight).size < 2:
            fixed[1] = 0.0
        coef = _relative_nnls(A, inv, fixed)
        if coef[0] <= 0:
            coef = _relative_nnls(A, inv, {**fixed, 0: 1.0 / float(np.max(y))})
        self.max_bytes_per_s_ = float(1.0 / coef[0])
        self.latency_s_ = float(coef[1])
        return self

    def predict(self, X: Any) -> np.ndarray:
        check_is_fitted(self, "max_bytes_per_s_")
        X = self._check_X(X, reset=False)
        return self.predict_throughput(X[:, 0], X[:, 1], X[:, 2])
