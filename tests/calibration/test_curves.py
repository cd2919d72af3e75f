"""Closed-form curves: one implementation shared with the estimators, restored from entries,
and the multi-node model checked against hand-computed cases and the physics over random
inputs."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.calibration import curves as C
from gpuplan.calibration import models as M
from gpuplan.calibration.estimators import (
    AlphaBetaRegressor,
    HierarchicalAlphaBeta,
    LatencyBandwidthRegressor,
    MatmulRoofline,
    StorageThroughputRegressor,
)

PAIRS = [
    (LatencyBandwidthRegressor, C.LatencyBandwidthCurve, "predict_bandwidth"),
    (MatmulRoofline, C.MatmulRooflineCurve, "predict_flops"),
    (AlphaBetaRegressor, C.AlphaBetaCurve, "predict_time"),
    (HierarchicalAlphaBeta, C.HierarchicalAlphaBetaCurve, "predict_time"),
    (StorageThroughputRegressor, C.StorageThroughputCurve, "predict_throughput"),
]


@pytest.mark.parametrize(("est_cls", "curve_cls", "method"), PAIRS, ids=lambda x: str(x))
def test_estimators_evaluate_with_the_curve_formulas(est_cls, curve_cls, method):
    """The estimator adds the fit; its prediction is the curve's (one formula, one place),
    and the curve knows exactly the estimator's parameters and defaults."""
    assert getattr(est_cls, method) is getattr(curve_cls, method)
    assert est_cls().get_params() == C.curve_params(curve_cls())
    assert est_cls.__name__ == curve_cls.ESTIMATOR


def test_an_entry_restores_to_a_curve_that_predicts_like_the_fitted_estimator():
    size = np.geomspace(2**12, 2**32, 12)
    n = np.full_like(size, 8)
    t = 5e-6 * 14 + size * 1.75 / 2e11
    est = AlphaBetaRegressor().fit(np.column_stack([size, n]), size * 1.75 / t)
    entry = M.make_entry(est, basis="measured", interval=(0.9, 1.1))
    curve = M.restore(entry)
    assert type(curve) is C.AlphaBetaCurve
    np.testing.assert_allclose(curve.predict_time(size, 16), est.predict_time(size, 16), rtol=1e-12)
    # an entry built from a curve (a transferred device) has the estimator's name and params
    again = M.make_entry(curve, basis="transferred", interval=(0.8, 1.2))
    assert again["estimator"] == "AlphaBetaRegressor"
    assert again["params"] == entry["params"] and again["coefficients"] == entry["coefficients"]


def test_unknown_parameters_are_refused():
    with pytest.raises(TypeError, match="unknown parameters"):
        C.AlphaBetaCurve(opp="all_reduce")


# --- multi-node model: hand-computed cases ---------------------------------------------------


def _hier(op: str, b_intra: float = 400e9, b_inter: float = 50e9, alpha: float = 0.0):
    c = C.HierarchicalAlphaBetaCurve(op=op, intra_bandwidth_bytes_per_s=b_intra)
    c.alpha_s_, c.inter_bandwidth_bytes_per_s_ = alpha, b_inter
    return c


def test_all_to_all_across_nodes_is_not_shared_by_the_node():
    """16 ranks on 2 nodes of 8, 1 GiB per rank: each rank sends 1/16 GiB to each of the
    8 ranks of the other node, 1/2 GiB through its own 50 GB/s NIC share: 10.7 ms. The
    NVLink part (7/8 GiB at 400 GB/s, 2.35 ms) hides under it."""
    t = _hier("all_to_all").predict_time(2**30, 16, 2)
    assert t == pytest.approx(2**30 / 2 / 50e9, rel=1e-12)


def test_all_gather_and_all_reduce_across_nodes_by_hand():
    # all-gather, 64 MiB per rank over 4 nodes x 8: the gathered output is 2 GiB; each GPU
    # receives the 3 other nodes' blocks of its rail, 3 x 64 MiB, at 50 GB/s.
    s = 64 * 2**20
    c = _hier("all_gather", b_intra=1e15)
    assert c.predict_time(32 * s, 32, 4) == pytest.approx(3 * s / 50e9, rel=1e-12)
    # all-reduce of 1 GiB over 4 nodes x 8: each GPU all-reduces its 1/8 shard across the
    # 4 nodes, 2 x 3/4 x 1/8 GiB, pipelined with the 1.75 GiB of the node's own reduction
    t = _hier("all_reduce", alpha=10e-6).predict_time(2**30, 32, 4)
    expected = 10e-6 * 2 * 3 + max(2**30 * 1.75 / 400e9, 2**30 * 1.5 / 8 / 50e9)
    assert t == pytest.approx(expected, rel=1e-12)


def test_the_intra_node_phase_includes_its_latency_when_given():
    """A collective spilling onto a second node is never faster than the same one inside a
    node: the intra-node phase is that intra-node collective, latency included."""
    ring = C.AlphaBetaCurve(op="all_reduce")
    ring.alpha_s_, ring.bandwidth_bytes_per_s_ = 8e-6, 350e9
    ring.alpha_ll_s_ = ring.bandwidth_ll_bytes_per_s_ = None
    cands = [({"interval": [0.9, 1.1], "basis": "measured"}, ring)]
    size = np.geomspace(2**3, 2**34, 40)
    one_node = ring.predict_time(size, 8)
    two_nodes = _hier("all_reduce", alpha=2e-6).predict_time(
        size, 16, 2, None, C.intra_phase_time(cands, size, 8)
    )
    assert np.all(two_nodes >= one_node)
    assert np.all(C.intra_phase_time(cands, size, 1) == 0.0)  # one rank per node: no phase


# --- multi-node model: physics over random inputs ---------------------------------------------


def _per_rank_to_size(op: str, per_rank: float, ranks: float) -> float:
    """nccl-tests ``size`` for a fixed amount per rank: the gathered output of an
    all-gather is ``ranks`` blocks; the other ops' size is already one rank's buffer."""
    return per_rank * ranks if op == "all_gather" else per_rank


@settings(max_examples=300, deadline=None)
@given(
    op=st.sampled_from(C.COLLECTIVE_OPS),
    per_rank=st.floats(min_value=1.0, max_value=2.0**36),
    r=st.sampled_from([1, 2, 4, 8, 72]),
    nodes=st.integers(min_value=2, max_value=4096),
    more=st.integers(min_value=1, max_value=4096),
    b_inter=st.floats(min_value=1e9, max_value=1e11),
    alpha=st.floats(min_value=0.0, max_value=1e-4),
)
def test_time_never_decreases_with_nodes_or_size(op, per_rank, r, nodes, more, b_inter, alpha):
    c = _hier(op, b_inter=b_inter, alpha=alpha)

    def t(per_rank_bytes, n_nodes):
        n = r * n_nodes
        return float(c.predict_time(_per_rank_to_size(op, per_rank_bytes, n), n, n_nodes))

    base = t(per_rank, nodes)
    assert t(per_rank, nodes + more) >= base * (1 - 1e-12)
    assert t(per_rank * 1.5, nodes) >= base * (1 - 1e-12)
    # at a fixed total size the bandwidth term follows nccl-tests' factor over the nodes
    if alpha == 0.0 and op != "all_to_all":
        big = _hier(op, b_intra=1e30, b_inter=b_inter)
        S, N = 2.0**30, float(nodes)
        expected = S * C.busbw_factor(op, N) / (r * b_inter)
        assert float(big.predict_time(S, r * N, N)) == pytest.approx(expected, rel=1e-9)


def test_the_fitted_intra_bandwidth_never_divides_by_zero():
    """A node of one rank has no intra-node phase: its bus bandwidth is the fabric's, not
    0 bytes over 0 seconds (the RuntimeWarning forecasts printed)."""
    ring = C.AlphaBetaCurve(op="reduce_scatter")
    ring.alpha_s_, ring.bandwidth_bytes_per_s_ = 8e-6, 350e9
    ring.alpha_ll_s_ = ring.bandwidth_ll_bytes_per_s_ = None
    entry = M.make_entry(ring, basis="transferred", interval=(0.8, 1.2))
    with warnings.catch_warnings(), np.errstate(all="raise"):
        warnings.simplefilter("error")
        one = M.intra_busbw_asymptote({"ring": entry}, "reduce_scatter", 1.0)
        two = M.intra_busbw_asymptote({"ring": entry}, "reduce_scatter", 2.0)
    assert np.isfinite(one) and one == two
    assert two == pytest.approx(350e9, rel=1e-6)
