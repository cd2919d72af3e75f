"""The serve probe against a server that runs speculative decoding: it reads the server's
vLLM spec-decode counters around each level, and ``calibrate`` forecasts each level with the
speculation it measured before taking the measured-over-forecast factors.

The server is the CPU stand-in of ``tests/probes/serve_server.py`` with ``--speculative 3``:
real prompt-lookup drafts verified by its tiny torch model (its acceptance is whatever the
random-weight model gives), and vLLM's Prometheus counters at ``GET /metrics``.
"""

from __future__ import annotations

import json

import httpx
import pytest

from gpuplan.forecast.inference import forecast_inference
from gpuplan.forecast.speculative import speculation
from gpuplan.paths import results_dir
from gpuplan.probes.serve_spec import (
    SPEC_COUNTERS,
    SpecReading,
    parse_counters,
    speculative_summary,
)
from gpuplan.results.schema import ResultDocument
from tests.probes._points import serving_point
from tests.probes.serve_server import running_server

MODEL = "llama3.1-8b"
GPU = "h100-sxm5-80gb"


def test_parse_counters_sums_label_sets_and_skips_others():
    text = (
        "# HELP vllm:spec_decode_num_drafts Drafts\n"
        "# TYPE vllm:spec_decode_num_drafts counter\n"
        'vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 10.0\n'
        'vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 5\n'
        "vllm:num_requests_running 3\n"
        "vllm:spec_decode_num_drafts_created 1.7e9\n"
    )
    got = parse_counters(text, ("vllm:spec_decode_num_drafts_total", "absent_total"))
    assert got == {"vllm:spec_decode_num_drafts_total": 15.0}


def test_speculative_summary_is_vllms_mean_acceptance_length():
    before = SpecReading("vllm", {"drafts": 100.0, "draft_tokens": 300.0, "accepted": 150.0})
    after = SpecReading("vllm", {"drafts": 300.0, "draft_tokens": 900.0, "accepted": 450.0})
    s = speculative_summary(before, after)
    assert s is not None
    assert s["draft_tokens"] == 3 and s["drafts"] == 200
    assert s["acceptance_length"] == pytest.approx(1 + 300 / 200)
    assert speculative_summary(after, after) is None  # no drafts in the level
    assert speculative_summary(None, after) is None


@pytest.fixture(scope="module")
def spec_server() -> str:
    with running_server(speculative=3) as url:
        yield url


@pytest.fixture
def probed(spec_server, run_cli, tmp_path):
    before = httpx.get(spec_server + "/metrics").text
    proc = run_cli(
        "probe", "--workload", "serve", "--endpoint", spec_server, "--model", "tiny",
        "--catalog-model", MODEL, "--device-id", "h100", "--engine", "vllm",
        "--concurrency", "1,2", "--input-tokens", "24", "--output-tokens", "20",
        "--requests-per-level", "4", "--no-progress",
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    after = httpx.get(spec_server + "/metrics").text
    [path] = sorted(results_dir().rglob("*.json"))
    doc = ResultDocument.model_validate(json.loads(path.read_text()))
    return doc, before, after


def test_each_level_records_the_speculation_the_server_counted(probed):
    doc, before, after = probed
    names = tuple(SPEC_COUNTERS.values())
    b, a = parse_counters(before, names), parse_counters(after, names)
    levels = doc.probe("serve")[0].measurements
    assert [m["concurrency"] for m in levels] == [1, 2]
    drafts = sum(m["speculative"]["drafts"] for m in levels)
    # the warmup request ran before the first level: its drafts are in neither level
    assert 0 < drafts <= a[SPEC_COUNTERS["drafts"]] - b[SPEC_COUNTERS["drafts"]]
    for m in levels:
        sp = m["speculative"]
        assert sp["draft_tokens"] == 3
        assert 1.0 <= sp["acceptance_length"] <= 4.0
        assert "vllm:spec_decode_num_drafts_total" in sp["source"]
        # speculation changes how tokens arrive, not how many: every answer is whole
        assert all(r["output_tokens"] == 20 for r in m["requests"] if r["ok"])


def test_calibrate_forecasts_each_level_with_its_measured_speculation(probed, run_cli, tmp_path):
    doc, _, _ = probed
    out = tmp_path / "cal.json"
    cal = run_cli("calibrate", str(results_dir()), "--out", str(out))
    assert cal.returncode == 0, cal.stderr
    artifact = json.loads(out.read_text())
    points = artifact["serving"][GPU]["vllm@0.6.0"]["points"]
    levels = doc.probe("serve")[0].measurements
    for p, m in zip(points, levels, strict=True):
        assert p["speculative"]["draft_tokens"] == 3
        assert p["speculative"]["acceptance_length"] == pytest.approx(
            m["speculative"]["acceptance_length"]
        )
    r = forecast_inference(MODEL, GPU, engine="vllm", batch=2, artifact=str(out))
    sc = r["serving_calibration"]
    assert sc["applied"] is True
    for fp, p in zip(sc["points"], points, strict=True):
        assert fp["speculative"] == p["speculative"]
        kw = dict(
            tp=1,
            input_tokens=24,
            output_tokens=20,
            concurrency=p["concurrency"],
            closed_loop_requests=p["completed"],
            engine="vllm",
            artifact=str(out),
            serving_calibration=False,
        )
        spec = speculation(3, p["speculative"]["acceptance_length"])
        with_spec = forecast_inference(MODEL, GPU, speculation=spec, **kw)["closed_loop"]
        without = forecast_inference(MODEL, GPU, **kw)["closed_loop"]
        # the factor's reference is the forecast with the level's speculation
        assert fp["forecast_tpot_s"] == pytest.approx(with_spec["tpot_p50_s"], rel=1e-12)
        assert fp["forecast_tpot_s"] != pytest.approx(without["tpot_p50_s"], rel=1e-3)


def test_a_server_without_counters_records_no_speculation(run_cli):
    with running_server() as url:
        assert httpx.get(url + "/metrics").status_code == 404
        proc = run_cli(
            "probe", "--workload", "serve", "--endpoint", url, "--model", "tiny",
            "--concurrency", "1", "--input-tokens", "16", "--output-tokens", "8",
            "--requests-per-level", "2", "--no-progress",
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    [path] = sorted(results_dir().rglob("*.json"))
    doc = ResultDocument.model_validate(json.loads(path.read_text()))
    assert "speculative" not in doc.probe("serve")[0].measurements[0]


@pytest.mark.parametrize(
    "spec", [{"draft_tokens": 2, "acceptance_length": 3.5}, {"draft_tokens": 0}, "mtp"]
)
def test_the_artifact_refuses_an_impossible_speculation(spec):
    from gpuplan.calibration.serving import validate_serving
    from gpuplan.errors import SchemaError

    point = serving_point(spec)
    with pytest.raises(SchemaError, match="speculative needs draft_tokens"):
        validate_serving({"h100": {"vllm@0.6.0": {"points": [point]}}})
