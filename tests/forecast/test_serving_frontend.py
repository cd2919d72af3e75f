"""The engine's serial front end (tokenisation, HTTP/streaming) in front of the scheduler:
Lindley's recursion, its effect on TTFT in the simulator and in a single forecast, and the
fitted per-engine constant (issue 16.5, TTFT realism)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.forecast.inference import build_candidates, device_perf_for, forecast_inference
from gpuplan.forecast.inference_fit import FittedOverheads, load_overheads
from gpuplan.forecast.model import arch_from
from gpuplan.forecast.serving import LengthDist, frontend_entries, simulate_requests


def test_frontend_entries_follow_lindleys_recursion():
    rng = np.random.default_rng(3)
    a = np.sort(rng.exponential(0.01, 400).cumsum())
    c = 0.008
    e = np.empty_like(a)
    prev = -np.inf
    for i, t in enumerate(a):
        prev = max(t, prev) + c
        e[i] = prev
    assert np.allclose(frontend_entries(a, c), e, rtol=0, atol=1e-12)
    assert frontend_entries(a, 0.0) is not None and np.array_equal(frontend_entries(a, 0.0), a)


def _replica():
    cat = get_catalog()
    arch = arch_from(cat.model("llama3.1-8b"))
    cands, _ = build_candidates(
        arch=arch,
        gpus=[cat.gpu("h100")],
        precision="bf16",
        kv_precision=None,
        tp=1,
        pp=1,
        ep=1,
        inputs=LengthDist(128.0),
        outputs=LengthDist(16.0),
        batch=256,
        fitted=load_overheads(),
        get_perf=lambda g: device_perf_for(g),
        catalog=cat,
        chunk_tokens=8192,
        utilization=0.9,
    )
    return cands[0].replica


def test_a_burst_pays_the_front_end_queue():
    """N requests at once through a serial front end of c s: the i-th cannot start before
    (i + 1) c, so every TTFT is at least that and the mean at least c (N + 1) / 2."""
    rep = _replica()
    n, c = 200, 0.004
    arr = np.zeros(n)
    lin, lout = np.full(n, 128), np.full(n, 16)
    plain = simulate_requests(rep, arr, lin, lout, max_queue=n + 1)
    fe = simulate_requests(replace(rep, frontend_s_per_request=c), arr, lin, lout, max_queue=n + 1)
    assert fe.ttft_s.mean() >= c * (n + 1) / 2
    assert fe.ttft_s.mean() > plain.ttft_s.mean()
    assert np.all(fe.ttft_s >= c * (np.arange(n) + 1) - 1e-12)


def test_single_forecast_adds_the_fitted_front_end_to_ttft():
    fitted = load_overheads()
    params = fitted.params_for("vllm@0.5.4")
    c = params.frontend_s_per_request
    assert c > 0  # fitted on the engine's burst rows
    zero = FittedOverheads(
        fitted.params,
        fitted.quantiles,
        fitted.record,
        {k: {**v, "frontend_s_per_request": 0.0} for k, v in fitted.engines.items()},
    )
    kw = dict(engine="vllm@0.5.4", batch=1, input_tokens=512, output_tokens=64)
    with_fe = forecast_inference("llama3.1-8b", "h100", overheads=fitted, **kw)
    without = forecast_inference("llama3.1-8b", "h100", overheads=zero, **kw)
    assert with_fe["ttft_s"] - without["ttft_s"] == pytest.approx(c, rel=1e-9)
    assert with_fe["tpot_s"] == pytest.approx(without["tpot_s"], rel=1e-12)


def test_profiles_without_serving_rows_have_no_front_end():
    fitted = load_overheads()
    for engine in ("modern", "trtllm@0.9"):
        assert fitted.params_for(engine).frontend_s_per_request == 0.0
