"""``gpuplan probe --workload serve`` against a real local streaming server.

The server (``tests/probes/serve_server.py``) is a CPU stand-in for a GPU serving engine:
a real OpenAI-compatible HTTP server on 127.0.0.1 that runs a 2-layer torch transformer
with random weights and streams one token per forward pass. Nothing is mocked.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import numpy as np
import pytest

from gpuplan.errors import InputError
from gpuplan.paths import results_dir
from gpuplan.probes.serve import (
    ServeOptions,
    completions_url,
    level_summary,
    parse_concurrency,
    public_endpoint,
)
from gpuplan.results.schema import ResultDocument
from tests.probes._runs import terminal_signals
from tests.probes.serve_server import running_server

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server() -> str:
    with running_server() as url:
        yield url


def _serve_args(url: str, *extra: str) -> list[str]:
    return [
        "probe",
        "--workload",
        "serve",
        "--endpoint",
        url,
        "--model",
        "tiny",
        "--input-tokens",
        "24",
        "--output-tokens",
        "12",
        "--no-progress",
        *extra,
    ]


def _result_files() -> list[Path]:
    root = results_dir()
    return sorted(root.rglob("*.json")) if root.exists() else []


def _one_error_line(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_sweep_records_every_request_with_vllm_definitions(server, run_cli):
    proc = run_cli(
        *_serve_args(server, "--concurrency", "4,1,2", "--requests-per-level", "6"),
        "--format",
        "json",
    )
    assert proc.returncode == 0, proc.stderr
    doc = ResultDocument.model_validate(json.loads(proc.stdout))
    [files] = [_result_files()]
    assert len(files) == 1 and json.loads(files[0].read_text())["run_id"] == doc.run_id
    [probe] = doc.probe("serve")
    assert probe.status == "ok"
    assert probe.params["model"] == "tiny" and probe.params["endpoint"] == server
    assert "vLLM benchmark_serving" in probe.params["convention"]
    assert probe.params["warmup"]["ok"] is True  # kept apart from the levels
    levels = probe.measurements
    assert [m["concurrency"] for m in levels] == [1, 2, 4]  # sorted sweep
    for m in levels:
        assert m["num_requests"] == m["completed"] == 6 and m["failed"] == 0
        assert (m["input_tokens"], m["output_tokens"]) == (24, 12)
        reqs = m["requests"]
        for r in reqs:
            assert r["ok"] and r["prompt_tokens"] == 24 and r["output_tokens"] == 12
            # TPOT = (e2e - ttft) / (output_tokens - 1); one ITL per chunk after the first
            assert r["tpot_s"] == pytest.approx((r["e2e_s"] - r["ttft_s"]) / 11, rel=1e-9)
            assert len(r["itl_s"]) == 11
            assert r["ttft_s"] + sum(r["itl_s"]) == pytest.approx(r["e2e_s"], rel=1e-9)
        assert m["ttft_p50_s"] == pytest.approx(np.percentile([r["ttft_s"] for r in reqs], 50))
        assert m["tpot_p99_s"] == pytest.approx(np.percentile([r["tpot_s"] for r in reqs], 99))
        assert m["ttft_p50_s"] <= m["ttft_p99_s"] and m["tpot_p50_s"] <= m["tpot_p99_s"]
        assert m["total_output_tokens"] == 72
        assert m["output_throughput_tokens_per_s"] == pytest.approx(72 / m["duration_s"])
    # at concurrency 1 requests never overlap: their latencies add up to at most the wall time
    c1 = levels[0]
    assert sum(r["e2e_s"] for r in c1["requests"]) <= c1["duration_s"] * 1.001
    # at 4 in flight they do
    c4 = levels[2]
    assert sum(r["e2e_s"] for r in c4["requests"]) > c4["duration_s"]


def test_result_validates_against_committed_json_schema(server, run_cli):
    jsonschema = pytest.importorskip("jsonschema")
    proc = run_cli(*_serve_args(server, "--concurrency", "2", "--requests-per-level", "2"))
    assert proc.returncode == 0, proc.stderr
    [path] = _result_files()
    schema = json.loads((REPO / "gpuplan/results/result.schema.json").read_text())
    data = json.loads(path.read_text())
    jsonschema.validate(data, schema)
    bad = json.loads(path.read_text())
    del bad["probes"][0]["measurements"][0]["concurrency"]
    with pytest.raises(jsonschema.ValidationError, match="concurrency"):
        jsonschema.validate(bad, schema)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(
    ("extra", "needle"),
    [
        (["--model", "nope"], "--model 'nope' is not served"),
        (["--concurrency", "1,x"], "--concurrency"),
        (["--concurrency", "0"], "--concurrency"),
        (["--engine", "nosuch"], "unknown engine"),
        (["--device-id", "no-such-gpu"], "no-such-gpu"),
        (["--requests-per-level", "0"], "--requests-per-level"),
    ],
)
def test_user_errors_are_one_line_exit_2_and_write_nothing(server, run_cli, extra, needle):
    proc = run_cli(*_serve_args(server), *extra)
    line = _one_error_line(proc)
    assert needle in line
    assert _result_files() == []


def test_unreachable_endpoint_and_missing_options(run_cli):
    port = _free_port()
    line = _one_error_line(run_cli(*_serve_args(f"http://127.0.0.1:{port}")))
    assert f"127.0.0.1:{port}" in line and "cannot reach" in line
    line = _one_error_line(run_cli("probe", "--workload", "serve", "--model", "tiny"))
    assert "--endpoint" in line
    line = _one_error_line(run_cli("probe", "--endpoint", "http://127.0.0.1:1", "--only", "pcie"))
    assert "--workload serve" in line
    assert _result_files() == []


def test_ctrl_c_keeps_finished_levels_and_the_partial_one(tmp_path):
    """SIGINT in the middle of the second level: the first level is kept whole, the second
    with the requests that finished (flagged), and the run exits 130."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with running_server() as url:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gpuplan",
                *_serve_args(url, "--concurrency", "1,2", "--requests-per-level", "100"),
                "--output-tokens",
                "48",
            ],
            env=env,
            cwd=REPO,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            preexec_fn=terminal_signals,
        )
        try:
            deadline = time.monotonic() + 240
            while time.monotonic() < deadline:  # warmup + level 1 + some of level 2
                if httpx.get(f"{url}/stats").json()["completed"] >= 1 + 100 + 4:
                    break
                assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
                time.sleep(0.05)
            proc.send_signal(signal.SIGINT)
            _, err = proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    [path] = [p for p in _result_files() if not p.name.endswith(".partial.json")]
    doc = ResultDocument.model_validate(json.loads(path.read_text()))
    assert doc.interrupted
    [probe] = doc.probe("serve")
    assert probe.status == "interrupted"
    first, second = probe.measurements
    assert first["concurrency"] == 1 and first["completed"] == 100 and "interrupted" not in first
    assert second["concurrency"] == 2 and second["interrupted"] is True
    assert 4 <= second["completed"] < 100


def test_level_summary_by_hand():
    opts = ServeOptions(endpoint="http://h:1", model="m", input_tokens=8, output_tokens=3)
    reqs = [
        {
            "ok": True,
            "output_tokens": 3,
            "ttft_s": 0.1,
            "e2e_s": 0.5,
            "tpot_s": 0.2,
            "itl_s": [0.2, 0.2],
        },
        {
            "ok": True,
            "output_tokens": 3,
            "ttft_s": 0.3,
            "e2e_s": 0.7,
            "tpot_s": 0.2,
            "itl_s": [0.1, 0.3],
        },
        {"ok": False, "error": "HTTP 500: boom", "itl_s": []},
    ]
    m = level_summary(reqs, 2, opts, duration_s=2.0)
    assert (m["completed"], m["failed"], m["total_output_tokens"]) == (2, 1, 6)
    assert m["ttft_p50_s"] == pytest.approx(0.2)  # linear percentile of 0.1 and 0.3
    assert m["ttft_p99_s"] == pytest.approx(0.1 + 0.99 * 0.2)
    assert m["itl_p50_s"] == pytest.approx(0.2)
    assert m["output_throughput_tokens_per_s"] == pytest.approx(3.0)
    assert m["request_throughput_per_s"] == pytest.approx(1.0)
    empty = level_summary([reqs[2]], 1, opts, duration_s=1.0)
    assert empty["ttft_p50_s"] is None and not math.isnan(empty["output_throughput_tokens_per_s"])


def test_urls_and_options():
    assert completions_url("http://h:8000/v1/completions") == "http://h:8000/v1/completions"
    assert completions_url("https://h/prefix/v1/") == "https://h/prefix/v1/completions"
    # credentials and query never reach the result file
    assert public_endpoint("http://user:secret@h:8000/v1?key=abc") == "http://h:8000"
    assert parse_concurrency("8, 1,2,2") == (1, 2, 8)
    with pytest.raises(InputError, match="--endpoint"):
        ServeOptions(endpoint="h:8000", model="m")
    with pytest.raises(InputError, match="--output-tokens"):
        ServeOptions(endpoint="http://h:1", model="m", output_tokens=0)


def test_headline_is_the_best_output_throughput():
    from gpuplan.results.schema import ProbeResult
    from gpuplan.results.summary import headline

    def level(c: int, thr: float) -> dict:
        return {
            "concurrency": c,
            "num_requests": 1,
            "completed": 1,
            "input_tokens": 8,
            "output_tokens": 4,
            "duration_s": 1.0,
            "request_throughput_per_s": 1.0,
            "output_throughput_tokens_per_s": thr,
            "total_output_tokens": 4,
        }

    probe = ProbeResult(
        probe="serve",
        probe_version=1,
        status="ok",
        measurements=[level(1, 50.0), level(4, 120.0), level(8, 90.0)],
    )
    head = headline(probe)
    assert head == {"label": "output tokens, concurrency 4", "value": 120.0, "unit": "tok/s"}
