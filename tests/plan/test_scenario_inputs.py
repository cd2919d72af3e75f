"""Scenario inputs the forecasts would misread are refused at load, naming line and field."""

from __future__ import annotations

import pytest

from gpuplan.errors import GpuplanError, SchemaError
from gpuplan.forecast.serving import LengthDist
from gpuplan.plan.scenario import load_scenario, parse_scenario
from tests.cli._helpers import SMALL_SCENARIO


@pytest.mark.parametrize("value", [".inf", "-.inf", ".nan", ".NaN"])
@pytest.mark.parametrize(
    ("old", "field", "line"),
    [
        ("qps: 2", "workloads.inference[0].qps", 6),
        ("ttft_slo_s: 1.0", "workloads.inference[0].ttft_slo_s", 9),
        ("input_tokens: 512", "workloads.inference[0].input_tokens.mean", 7),
    ],
)
def test_non_finite_numbers_are_refused(value, old, field, line):
    key = old.split(":")[0]
    text = SMALL_SCENARIO.replace(old, f"{key}: {value}")
    with pytest.raises(SchemaError) as exc:
        parse_scenario(text)
    msg = exc.value.one_line()
    assert f"line {line}: {field}:" in msg and "finite" in msg


def test_infinite_deadline_is_refused():
    text = SMALL_SCENARIO.replace(
        "  inference:\n",
        "  training:\n    - name: pre\n      model: llama3.1-8b\n      tokens: 1e12\n"
        "      seq_len: 8192\n      deadline_days: .inf\n  inference:\n",
    )
    with pytest.raises(
        SchemaError, match=r"line 8: workloads.training\[0\].deadline_days: .*finite"
    ):
        parse_scenario(text)


@pytest.mark.parametrize(
    ("dist", "mean", "p99"),
    [("{mean: 1000, p99: 50}", 1000, 50), ("{mean: 10, p99: 1e9}", 10, 1e9)],
)
def test_length_distribution_uses_the_forecast_check(dist, mean, p99):
    """One check for the scenario and for forecast infer --input-tokens-p99."""
    with pytest.raises(GpuplanError) as forecast_error:
        LengthDist(mean, p99)
    text = SMALL_SCENARIO.replace("input_tokens: 512", f"input_tokens: {dist}")
    with pytest.raises(SchemaError) as exc:
        parse_scenario(text)
    assert forecast_error.value.message in exc.value.one_line()
    assert "line 7: workloads.inference[0].input_tokens:" in exc.value.one_line()


def test_percentiles_must_be_ordered():
    text = SMALL_SCENARIO.replace(
        "output_tokens: 128", "output_tokens: {mean: 100, p90: 500, p50: 600}"
    )
    with pytest.raises(SchemaError, match=r"p90 \(500\) must not be below p50 \(600\)"):
        parse_scenario(text)


def test_valid_distribution_still_loads():
    text = SMALL_SCENARIO.replace("input_tokens: 512", "input_tokens: {mean: 1000, p99: 4000}")
    sc = parse_scenario(text).scenario
    assert sc.workloads.inference[0].input_tokens.p99 == 4000


@pytest.mark.parametrize(
    ("content", "expect"),
    [
        (b"\xff\xfe" + "name: x\n".encode("utf-16-le"), "UTF-16-encoded"),
        (bytes(range(256)), "not UTF-8 text"),
        (b"name: x\n\x00\x00", "NUL bytes"),
    ],
)
def test_scenario_file_encoding(tmp_path, content, expect):
    f = tmp_path / "s.yaml"
    f.write_bytes(content)
    with pytest.raises(GpuplanError, match=expect):
        load_scenario(f)


def test_deeply_nested_yaml_is_a_schema_error():
    text = "name: x\nworkloads: " + "[" * 3000 + "]" * 3000 + "\n"
    with pytest.raises(SchemaError, match=r"nested too deeply|not valid YAML"):
        parse_scenario(text)


def test_serving_engine_is_validated_and_reaches_the_sizing():
    from gpuplan.plan.workloads import serving_demand

    text = SMALL_SCENARIO.replace("tpot_slo_s: 0.05", "tpot_slo_s: 0.05\n      engine: vllm@0.6.0")
    s = parse_scenario(text).scenario.workloads.inference[0]
    assert s.engine == "vllm@0.6.0"
    assert serving_demand(s, "h100-sxm5-80gb").engine == "vllm@0.6.0"
    default = parse_scenario(SMALL_SCENARIO).scenario.workloads.inference[0]
    assert serving_demand(default, "h100-sxm5-80gb").engine == "modern"
    # a release of a known family runs on its nearest profile; an unknown family is refused
    later = SMALL_SCENARIO.replace("tpot_slo_s: 0.05", "tpot_slo_s: 0.05\n      engine: vllm@9")
    assert parse_scenario(later).scenario.workloads.inference[0].engine == "vllm@9"
    bad = SMALL_SCENARIO.replace("tpot_slo_s: 0.05", "tpot_slo_s: 0.05\n      engine: tgi@2")
    with pytest.raises(SchemaError, match=r"workloads.inference\[0\].engine: .*vllm@0.6.0"):
        parse_scenario(bad)


@pytest.mark.parametrize(
    ("dist", "match"),
    [
        ({"min": 800}, "give min and max alone"),
        ({"min": 800, "max": 1000, "p99": 990}, "give min and max alone"),
        ({"min": 900, "max": 800}, "must not be below min"),
        ({"min": 800, "max": 1000, "mean": 950}, "have the mean 900"),
        ({"p99": 4000}, "give the mean length"),
    ],
)
def test_uniform_lengths_need_both_ends_and_nothing_else(dist, match):
    from pydantic import ValidationError

    from gpuplan.plan.scenario import LengthDistribution

    with pytest.raises(ValidationError, match=match):
        LengthDistribution(**dist)
    assert LengthDistribution(min=800, max=1000, mean=900).min == 800
