"""Request-length distributions the fleet is sized from: fixed, lognormal by the mean and a
percentile (p50, p90, p99), or a trace of request lengths; and the typed sizing input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from gpuplan.errors import InputError
from gpuplan.forecast.inference import ServingDemand
from gpuplan.forecast.serving import LengthDist


@pytest.mark.parametrize(("name", "q"), [("p99", 0.99), ("p90", 0.9), ("p50", 0.5)])
def test_lognormal_keeps_its_mean_and_the_given_percentile(name, q) -> None:
    value = {"p50": 600.0, "p90": 2000.0, "p99": 3000.0}[name]
    d = LengthDist(1000.0, **{name: value})
    assert d.kind == "lognormal"
    assert d.quantile(q) == pytest.approx(value, rel=1e-9)
    assert math.exp(d.mu + d.sigma**2 / 2) == pytest.approx(1000.0, rel=1e-9)
    x = d.sample(np.random.default_rng(1), 200_000)
    assert x.mean() == pytest.approx(1000.0, rel=0.02)
    assert np.quantile(x, q) == pytest.approx(value, rel=0.03)


def test_the_highest_percentile_given_fixes_the_tail() -> None:
    d = LengthDist(1000.0, p99=5000.0, p50=400.0)
    assert d.describe()["fixed_by"] == ["mean", "p99"]
    assert d.quantile(0.99) == pytest.approx(5000.0)


def test_trace_resamples_the_requests_own_lengths() -> None:
    lengths = [100, 100, 200, 4000]
    d = LengthDist.from_trace(lengths)
    assert d.kind == "trace" and d.mean == pytest.approx(1100.0)
    assert d.quantile(0.5) == pytest.approx(150.0)
    x = d.sample(np.random.default_rng(0), 10_000)
    assert set(np.unique(x)) == {100, 200, 4000}
    assert d.describe()["requests"] == 4
    clipped = LengthDist.from_trace(lengths, max_tokens=1000)
    assert clipped.sample(np.random.default_rng(0), 1000).max() == 1000


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: LengthDist(1000.0, p90=900.0), "p90 length 900 must be above the mean"),
        (lambda: LengthDist(1000.0, p50=1200.0), "p50 length 1200 is above the mean"),
        (lambda: LengthDist(100.0, p99=1e6), "no lognormal has that mean and p99"),
        (lambda: LengthDist.from_trace([]), "trace of request lengths"),
        (lambda: LengthDist.from_trace([10, 0]), "each >= 1 token"),
    ],
)
def test_impossible_distributions_are_refused(make, match) -> None:
    with pytest.raises(InputError, match=match):
        make()


def _demand(**kw):
    base = dict(
        model="llama3.1-8b",
        gpus=("h100",),
        qps=5.0,
        inputs=LengthDist(512),
        outputs=LengthDist(128),
        ttft_slo_s=1.0,
    )
    return ServingDemand(**{**base, **kw})


def test_demand_defaults_and_checks() -> None:
    d = _demand()
    assert d.slo_percentile == "p99" and d.engine
    assert _demand(gpus="h100,h200").gpus == ("h100", "h200")
    with pytest.raises(InputError, match="qps"):
        _demand(qps=0)
    with pytest.raises(InputError, match="unknown SLO percentile 'p98'"):
        _demand(slo_percentile="p98")
    with pytest.raises(InputError, match="unknown engine"):
        _demand(engine="tgi")
    with pytest.raises(InputError, match="requests"):
        _demand(num_requests=0)
