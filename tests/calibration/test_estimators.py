"""The estimators: scikit-learn contract, recovery of known parameters, physical bounds."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.utils.estimator_checks import estimator_checks_generator

from gpuplan.calibration.estimators import (
    AlphaBetaRegressor,
    HierarchicalAlphaBeta,
    LatencyBandwidthRegressor,
    MatmulRoofline,
    StorageThroughputRegressor,
    data_factor,
    latency_steps,
)
from gpuplan.calibration.reference import busbw_factor

# scikit-learn's generic checks that feed data these physical models refuse by design: a
# fixed number of named columns (sizes, ranks, ...) and strictly positive values. The
# models answer with a ValueError naming the columns; the API checks (parameters, clone,
# repr, tags, unfitted errors, set_params...) run in full, and the same properties on the
# models' own kind of data are tested below (fit returns self, idempotence, order
# invariance, n_features_in_).
_DATA_DEPENDENT_CHECKS = {
    "check_dtype_object",
    "check_estimators_dtypes",
    "check_fit_score_takes_y",
    "check_estimators_overwrite_params",
    "check_dont_overwrite_parameters",
    "check_estimators_fit_returns_self",
    "check_readonly_memmap_input",
    "check_n_features_in_after_fitting",
    "check_positive_only_tag_during_fit",
    "check_pipeline_consistency",
    "check_estimators_nan_inf",
    "check_estimators_pickle",
    "check_f_contiguous_array_estimator",
    "check_regressors_train",
    "check_regressor_data_not_an_array",
    "check_regressors_no_decision_function",
    "check_supervised_y_2d",
    "check_regressors_int",
    "check_methods_sample_order_invariance",
    "check_methods_subset_invariance",
    "check_fit2d_1sample",
    "check_fit2d_1feature",
    "check_dict_unchanged",
    "check_fit_idempotent",
    "check_fit_check_is_fitted",
    "check_n_features_in",
    "check_fit2d_predict1d",
}
_REASON = "generic random data: not the model's named positive columns"


def _expected_failures(est):
    return {name: _REASON for name in _DATA_DEPENDENT_CHECKS}


ESTIMATORS = [
    LatencyBandwidthRegressor(),
    MatmulRoofline(),
    AlphaBetaRegressor(),
    HierarchicalAlphaBeta(),
    StorageThroughputRegressor(),
]


def _check_params():
    """scikit-learn's estimator checks; the data-dependent ones above are skipped, not run."""
    out = []
    for est in ESTIMATORS:
        for e, check in estimator_checks_generator(
            est, expected_failed_checks=_expected_failures(est), mark="skip"
        ):
            func = getattr(check, "func", check)
            name = getattr(func, "__name__", "check")
            out.append(pytest.param(e, check, id=f"{type(e).__name__}-{name}"))
    return out


@pytest.mark.parametrize(("estimator", "check"), _check_params())
def test_sklearn_contract(estimator, check):
    check(estimator)


def test_contract_basics_hold_without_exceptions():
    """The parts of the contract that apply in full: params, clone, repr, fitted state."""
    from sklearn.base import clone
    from sklearn.exceptions import NotFittedError

    for est in ESTIMATORS:
        params = est.get_params()
        assert clone(est).get_params() == params
        assert not [k for k in vars(est) if k.endswith("_")], "no learned state before fit"
        with pytest.raises(NotFittedError):
            est.predict(np.ones((2, est._n_columns)) * 8)
    with pytest.raises(ValueError, match="expects 2 column"):
        AlphaBetaRegressor().fit(np.ones((3, 3)) * 8, np.ones(3))
    with pytest.raises(ValueError, match="must be > 0"):
        LatencyBandwidthRegressor().fit(np.array([[0.0], [1.0]]), np.array([1.0, 2.0]))


def test_latency_bandwidth_recovers_hockney_parameters():
    rng = np.random.default_rng(0)
    size = np.geomspace(2**10, 2**32, 30)
    latency, bw = 8e-6, 2.2e12
    t = (latency + size / bw) * rng.lognormal(0, 0.01, size.size)
    m = LatencyBandwidthRegressor().fit(size[:, None], size / t)
    assert m.latency_s_ == pytest.approx(latency, rel=0.05)
    assert m.bandwidth_bytes_per_s_ == pytest.approx(bw, rel=0.02)
    # a ceiling is respected even when the data say more
    capped = LatencyBandwidthRegressor(max_bandwidth_bytes_per_s=2e12).fit(size[:, None], size / t)
    assert capped.bandwidth_bytes_per_s_ <= 2e12 * (1 + 1e-9)


@pytest.mark.parametrize(
    ("op", "n"), [("all_reduce", 8), ("all_gather", 16), ("reduce_scatter", 4)]
)
def test_alpha_beta_recovers_known_alpha_and_beta(op, n):
    """Synthetic nccl-tests sweep from t = alpha * steps + size * factor / B, 2% noise."""
    rng = np.random.default_rng(1)
    alpha, bandwidth = 6e-6, 180e9
    size = np.geomspace(2**12, 2**33, 40)
    ranks = np.full_like(size, n)
    t = alpha * latency_steps(op, ranks) + size * data_factor(op, ranks) / bandwidth
    t *= rng.lognormal(0, 0.02, size.size)
    busbw = size * busbw_factor(op, ranks) / t
    m = AlphaBetaRegressor(op=op).fit(np.column_stack([size, ranks]), busbw)
    assert m.alpha_s_ == pytest.approx(alpha, rel=0.08)
    assert m.bandwidth_bytes_per_s_ == pytest.approx(bandwidth, rel=0.03)


def test_alpha_beta_extrapolates_along_the_ring_to_more_ranks():
    """Fit at 8 ranks, predict 64: the ring's latency grows with 2(n-1), bandwidth stays."""
    alpha, bandwidth = 5e-6, 200e9
    size = np.geomspace(2**16, 2**32, 20)
    n8 = np.full_like(size, 8)
    t8 = alpha * latency_steps("all_reduce", n8) + size * data_factor("all_reduce", n8) / bandwidth
    m = AlphaBetaRegressor().fit(np.column_stack([size, n8]), size * 1.75 / t8)
    t64 = m.predict_time(2**20, 64)
    expected = alpha * 2 * 63 + 2**20 * (2 * 63 / 64) / bandwidth
    assert t64 == pytest.approx(expected, rel=0.01)


def test_nvls_bus_bandwidth_can_exceed_the_link():
    """In-switch reduction moves each byte once per direction: busbw = algbw x 2(n-1)/n."""
    m = AlphaBetaRegressor(algorithm="nvls")
    m.alpha_s_, m.bandwidth_bytes_per_s_ = 0.0, 300e9
    assert m.predict_busbw(2**34, 8) == pytest.approx(300e9 * 1.75)


def test_mesh_bandwidth_grows_with_the_peers_used():
    m = AlphaBetaRegressor(mesh_domain_size=8)
    m.alpha_s_, m.bandwidth_bytes_per_s_ = 0.0, 448e9
    assert m.predict_busbw(2**32, 8) == pytest.approx(448e9)
    assert m.predict_busbw(2**32, 2) == pytest.approx(448e9 / 7)


def test_matmul_roofline_recovers_compute_memory_and_latency():
    shapes = [(s, s, s) for s in (128, 256, 512, 1024, 2048, 4096, 8192)]
    shapes += [(1, 8192, 8192), (16, 8192, 8192), (64, 4096, 4096)]
    X = np.array(shapes, dtype=float)
    flops, nbytes = MatmulRoofline.work(X[:, 0], X[:, 1], X[:, 2], 2)
    t = 4e-6 + np.maximum(flops / 700e12, nbytes / 3.0e12)
    rng = np.random.default_rng(2)
    t *= rng.lognormal(0, 0.01, t.size)
    m = MatmulRoofline(peak_flops_per_s=989e12).fit(X, flops / t)
    assert m.compute_flops_per_s_ == pytest.approx(700e12, rel=0.03)
    assert m.memory_bytes_per_s_ == pytest.approx(3.0e12, rel=0.05)
    assert m.latency_s_ == pytest.approx(4e-6, rel=0.2)


def test_matmul_single_best_shape_uses_the_given_memory_roof():
    m = MatmulRoofline(peak_flops_per_s=989e12, memory_bandwidth_bytes_per_s=2.4e12)
    m.fit(np.array([[2048, 2048, 13312]]), np.array([794.5e12]))
    assert m.predict_flops(2048, 2048, 13312) == pytest.approx(794.5e12, rel=1e-9)
    assert m.compute_flops_per_s_ <= 989e12


def test_storage_little_law_recovers_ceiling_and_latency():
    bs = np.array([4096, 4096, 65536, 1 << 20, 4096, 1 << 20], dtype=float)
    qd = np.array([1, 32, 8, 4, 128, 64], dtype=float)
    jobs = np.array([1, 1, 2, 1, 4, 4], dtype=float)
    thr = 1.0 / (1.0 / 3.2e9 + 90e-6 / (bs * qd * jobs))
    m = StorageThroughputRegressor().fit(np.column_stack([bs, qd, jobs]), thr)
    assert m.max_bytes_per_s_ == pytest.approx(3.2e9, rel=1e-6)
    assert m.latency_s_ == pytest.approx(90e-6, rel=1e-6)


def test_hierarchical_recovers_inter_node_bandwidth():
    size = np.geomspace(2**20, 2**34, 12)
    n, N = np.full_like(size, 32), np.full_like(size, 4)
    b_intra, b_inter, alpha = 480e9, 37e9, 20e-6
    t = alpha * latency_steps("all_reduce", N) + np.maximum(
        size * 1.75 / b_intra, size * 1.5 / (8 * b_inter)
    )
    busbw = size * busbw_factor("all_reduce", n) / t
    m = HierarchicalAlphaBeta(intra_bandwidth_bytes_per_s=b_intra).fit(
        np.column_stack([size, n, N]), busbw
    )
    assert m.inter_bandwidth_bytes_per_s_ == pytest.approx(b_inter, rel=0.01)
    assert m.alpha_s_ == pytest.approx(alpha, rel=0.05)


# --- physics, checked over random inputs ---------------------------------------------------

_dims = st.integers(min_value=1, max_value=65536)


@settings(max_examples=200, deadline=None)
@given(
    m=_dims,
    n=_dims,
    k=_dims,
    grow=st.integers(min_value=1, max_value=4096),
    which=st.sampled_from("mnk"),
)
def test_matmul_never_above_peak_and_monotone(m, n, k, grow, which):
    est = MatmulRoofline(peak_flops_per_s=1e15)
    est.latency_s_, est.compute_flops_per_s_, est.memory_bytes_per_s_ = 5e-6, 8e14, 3e12
    base = est.predict_flops(m, n, k)
    bigger = {"m": m, "n": n, "k": k}
    bigger[which] += grow
    assert base <= 8e14 * (1 + 1e-12)
    assert est.predict_flops(**bigger) >= base * (1 - 1e-12)


@settings(max_examples=200, deadline=None)
@given(
    size=st.floats(min_value=1.0, max_value=2.0**40),
    factor=st.floats(min_value=1.0, max_value=1e3),
    ranks=st.integers(min_value=2, max_value=4096),
)
def test_bandwidths_bounded_and_monotone_in_size(size, factor, ranks):
    lb = LatencyBandwidthRegressor()
    lb.latency_s_, lb.bandwidth_bytes_per_s_ = 1e-5, 2e12
    assert lb.predict_bandwidth(size) <= 2e12
    assert lb.predict_bandwidth(size * factor) >= lb.predict_bandwidth(size) * (1 - 1e-12)
    ab = AlphaBetaRegressor()
    ab.alpha_s_, ab.bandwidth_bytes_per_s_ = 5e-6, 3e11
    assert ab.predict_busbw(size, ranks) <= 3e11 * (1 + 1e-12)
    assert ab.predict_busbw(size * factor, ranks) >= ab.predict_busbw(size, ranks) * (1 - 1e-12)
    # more ranks never make a ring all-reduce faster
    assert ab.predict_time(size, ranks + 1) >= ab.predict_time(size, ranks) * (1 - 1e-12)


@settings(max_examples=100, deadline=None)
@given(
    bs=st.integers(min_value=512, max_value=1 << 24),
    qd=st.integers(min_value=1, max_value=256),
    jobs=st.integers(min_value=1, max_value=64),
)
def test_storage_monotone_in_block_queue_and_jobs(bs, qd, jobs):
    est = StorageThroughputRegressor()
    est.max_bytes_per_s_, est.latency_s_ = 3e9, 1e-4
    base = est.predict_throughput(bs, qd, jobs)
    assert base <= 3e9
    assert est.predict_throughput(bs * 2, qd, jobs) >= base
    assert est.predict_throughput(bs, qd + 1, jobs) >= base
    assert est.predict_throughput(bs, qd, jobs + 1) >= base


@settings(max_examples=100, deadline=None)
@given(
    size=st.floats(min_value=2.0**10, max_value=2.0**36), b=st.floats(min_value=1e9, max_value=1e11)
)
def test_more_inter_node_bandwidth_is_never_slower(size, b):
    m = HierarchicalAlphaBeta(intra_bandwidth_bytes_per_s=400e9)
    m.alpha_s_, m.inter_bandwidth_bytes_per_s_ = 1e-5, 30e9
    assert m.predict_time(size, 64, 8, b * 1.5) <= m.predict_time(size, 64, 8, b)


def _domain_data(est):
    rng = np.random.default_rng(3)
    if isinstance(est, LatencyBandwidthRegressor):
        size = np.geomspace(2**10, 2**30, 12)
        return size[:, None], size / (1e-5 + size / 1e11) * rng.lognormal(0, 0.02, 12)
    if isinstance(est, MatmulRoofline):
        X = np.array(
            [(s, s, s) for s in (128, 256, 512, 1024, 2048, 4096)] + [(8, 4096, 4096)], dtype=float
        )
        f, b = MatmulRoofline.work(X[:, 0], X[:, 1], X[:, 2], 2)
        return X, f / (2e-6 + np.maximum(f / 5e14, b / 2e12)) * rng.lognormal(0, 0.02, len(X))
    if isinstance(est, AlphaBetaRegressor):
        size = np.geomspace(2**12, 2**32, 12)
        n = np.full_like(size, 8)
        t = 5e-6 * 14 + size * 1.75 / 2e11
        return np.column_stack([size, n]), size * 1.75 / t * rng.lognormal(0, 0.02, 12)
    if isinstance(est, HierarchicalAlphaBeta):
        size = np.geomspace(2**20, 2**34, 10)
        n, N = np.full_like(size, 16), np.full_like(size, 2)
        t = 1e-5 + np.maximum(size * 1.75 / 4e11, size * 1.0 / (8 * 3e10))
        return np.column_stack([size, n, N]), size * 1.875 / t * rng.lognormal(0, 0.02, 10)
    X = np.array(
        [[4096, 1, 1], [4096, 32, 4], [1 << 20, 8, 1], [65536, 64, 16], [1 << 20, 1, 1]],
        dtype=float,
    )
    return X, 1.0 / (1 / 3e9 + 1e-4 / X.prod(axis=1)) * rng.lognormal(0, 0.02, 5)


@pytest.mark.parametrize("est", ESTIMATORS, ids=lambda e: type(e).__name__)
def test_contract_on_physical_data(est):
    """What the skipped generic checks verify, on the data each model is made for."""
    from sklearn.base import clone

    X, y = _domain_data(est)
    fitted = clone(est)
    assert fitted.fit(X, y) is fitted
    assert fitted.n_features_in_ == X.shape[1]
    pred = fitted.predict(X)
    assert pred.shape == (len(X),) and np.all(np.isfinite(pred)) and np.all(pred > 0)
    # idempotent, deterministic, independent of sample order
    again = clone(est).fit(X, y).fit(X, y)
    np.testing.assert_allclose(again.predict(X), pred, rtol=1e-9)
    order = np.random.default_rng(4).permutation(len(X))
    shuffled = clone(est).fit(X[order], y[order])
    np.testing.assert_allclose(shuffled.predict(X), pred, rtol=1e-6)
    # the fit explains the physical data to within its noise
    assert np.median(np.abs(pred / y - 1)) < 0.1
    with pytest.raises(ValueError, match=r"features|column"):
        fitted.predict(np.ones((2, X.shape[1] + 1)))
    with pytest.raises(ValueError, match="requires y"):
        clone(est).fit(X, None)
