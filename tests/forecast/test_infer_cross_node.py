"""TP beyond the scale-up domain: refused unless asked for, then modelled and said (issue 16)."""

from __future__ import annotations

import json

import pytest

from gpuplan.errors import InputError
from gpuplan.forecast.inference import forecast_inference


def test_tp_beyond_the_domain_is_refused_with_the_domain_size_and_alternatives():
    with pytest.raises(InputError, match=r"--tp 16 spans 2 nodes.*h100-sxm5-80gb is 8 GPUs") as e:
        forecast_inference("llama3.3-70b", "h100", tp=16, batch=1)
    hint = e.value.one_line()
    assert "--pp 2" in hint and "gb200" in hint and "explicitly" in hint


def test_tp_beyond_the_domain_when_asked_crosses_nodes_and_says_so():
    r16 = forecast_inference("llama3.3-70b", "h100", tp=16, batch=1, allow_cross_node_tp=True)
    r8 = forecast_inference("llama3.3-70b", "h100", tp=8, batch=1)
    info = r16["cross_node_tp"]
    assert info["nodes"] == 2 and info["scale_up_domain"] == 8
    assert "scale-out" in info["fabric"]
    # the same 160 all-reduces per step, each now paying network steps
    c16 = r16["breakdown_s"]["decode_step"]["communication"]
    c8 = r8["breakdown_s"]["decode_step"]["communication"]
    assert c16 > c8 > 0
    assert "cross_node_tp" not in r8


def test_a_domain_large_enough_needs_no_permission():
    r = forecast_inference("llama3.3-70b", "gb200", tp=16, batch=1)
    assert "cross_node_tp" not in r and r["tp"] == 16


def test_cli_refuses_cross_node_tp_in_one_line(run_cli):
    p = run_cli(
        "forecast", "infer", "--model", "llama3.3-70b", "--gpu", "h100", "--tp", "16",
        "--batch", "1",
    )  # fmt: skip
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr
    assert "scale-up domain" in lines[0] and "8 GPUs" in lines[0]
    assert p.stdout == ""
    assert "--allow-cross-node-tp" in lines[0]  # the error names the flag that allows it


def test_cli_flag_allows_cross_node_tp_and_the_json_says_so(run_cli):
    p = run_cli(
        "forecast", "infer", "--model", "llama3.3-70b", "--gpu", "h100", "--tp", "16",
        "--batch", "1", "--allow-cross-node-tp", "--format", "json",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    out = json.loads(p.stdout)
    assert out["tp"] == 16
    assert out["cross_node_tp"]["nodes"] == 2 and out["cross_node_tp"]["scale_up_domain"] == 8


def test_cli_engine_profile_is_reported(run_cli):
    p = run_cli(
        "forecast", "infer", "--model", "llama3.3-70b", "--gpu", "h100", "--tp", "8",
        "--batch", "8", "--engine", "vllm@0.6.0", "--format", "json",
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["engine"] == "vllm@0.6.0"
    # a later release runs on the nearest profile and says so; an unknown family is refused
    later = run_cli(
        "forecast", "infer", "--model", "llama3.3-70b", "--tp", "8", "--batch", "8",
        "--engine", "vllm@9", "--format", "json",
    )  # fmt: skip
    assert later.returncode == 0, later.stderr
    prof = json.loads(later.stdout)["engine_profile"]
    assert prof["name"] == "vllm@0.8.4" and "stands for it" in prof["resolution"]
    bad = run_cli("forecast", "infer", "--model", "llama3.3-70b", "--engine", "tgi@2")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1
    assert "vllm@0.6.0" in bad.stderr  # names the versions it knows
