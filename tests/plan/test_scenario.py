"""Scenario validation: errors name the file, the line and the field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpuplan.errors import NotFoundError, SchemaError
from gpuplan.plan.scenario import load_scenario, parse_scenario

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.yaml"))

GOOD = textwrap.dedent(
    """\
    name: t
    workloads:
      training:
        - name: a
          model: llama3.1-8b
          tokens: 1e12
          deadline_days: 10
          seq_len: 4096
      inference:
        - name: chat
          model: llama3.1-8b
          qps: 5
          input_tokens: 1000
          output_tokens: {mean: 200, p99: 900}
    candidates:
      gpus: [h100]
    costs:
      onprem_node_prices_usd:
        dgx-h100: 250000
        dgx-h200: {usd: 300000, source: "vendor quote 42", as_of: "2026-01"}
    """
)


def test_good_scenario_and_line_marks():
    s = parse_scenario(GOOD)
    sc = s.scenario
    assert sc.workloads.training[0].tokens == 1e12  # 1e12 is a float, not a string
    assert sc.workloads.inference[0].input_tokens.mean == 1000  # scalar = mean
    assert sc.workloads.inference[0].output_tokens.p99 == 900
    assert sc.costs.onprem_node_prices_usd["dgx-h100"].usd == 250000
    assert sc.costs.onprem_node_prices_usd["dgx-h200"].source == "vendor quote 42"
    assert s.line("workloads", "training", 0, "tokens") == 6
    assert s.line("candidates", "gpus") == 16
    assert s.ref("workloads", "training", 0, "tokens").endswith(":6 workloads.training[0].tokens")
    assert s.ref("costs", "pue") == "default costs.pue"
    assert not s.given("costs", "pue")


def _error(text: str) -> str:
    with pytest.raises(SchemaError) as exc:
        parse_scenario(textwrap.dedent(text))
    return exc.value.one_line()


def test_bad_value_names_line_and_field():
    msg = _error(GOOD.replace("deadline_days: 10", "deadline_days: -3"))
    assert "line 7" in msg
    assert "workloads.training[0].deadline_days" in msg
    assert "greater than 0" in msg and "-3" in msg


def test_unknown_field_suggests_the_closest():
    msg = _error(GOOD.replace("seq_len: 4096", "seqlen: 4096"))
    assert "line 8" in msg and "unknown field 'seqlen'" in msg
    assert "did you mean 'seq_len'" in msg


def test_missing_field_names_its_parent_line():
    msg = _error(GOOD.replace("      qps: 5\n", ""))
    assert "workloads.inference[0].qps" in msg and "required" in msg
    assert "line 10" in msg  # the list item that lacks it


def test_wrong_type():
    msg = _error(GOOD.replace("gpus: [h100]", "gpus: h100"))
    assert "line 16" in msg and "candidates.gpus" in msg


def test_model_level_rule():
    msg = _error(GOOD.replace("      deadline_days: 10\n", ""))
    assert "line 4" in msg and "deadline_days" in msg


def test_yaml_syntax_error_has_a_line():
    msg = _error("name: t\nworkloads:\n  training: [\n  - x\n")
    assert "not valid YAML" in msg and "line" in msg


def test_duplicate_keys_are_refused():
    msg = _error(GOOD.replace("candidates:\n", "name: again\ncandidates:\n"))
    assert "key 'name' repeats the one on line 1" in msg
    assert "line 15" in msg


def test_teams_are_checked_by_the_scheduling_schema():
    text = GOOD + textwrap.dedent(
        """\
        teams:
          - name: research
            share: 1
            priority_class: urgent
        """
    )
    msg = _error(text)
    assert "priority class 'urgent'" in msg
    bad = GOOD + "teams:\n  - name: r\n    qouta_gpus: 3\n"
    msg = _error(bad)
    assert "line 23" in msg and "qouta_gpus" in msg and "quota_gpus" in msg


def test_reference_trace_is_philly_or_absent():
    teams = "teams:\n  - name: r\nscheduling:\n  reference_trace: {}\n"
    s = parse_scenario(GOOD + teams.format("philly"))
    assert s.scenario.scheduling.reference_trace == "philly"
    assert s.ref("scheduling", "reference_trace").endswith(":24 scheduling.reference_trace")
    assert parse_scenario(GOOD + "teams:\n  - name: r\n").scenario.scheduling is None
    msg = _error(GOOD + teams.format("alibaba"))
    assert "line 24" in msg and "scheduling.reference_trace" in msg and "'philly'" in msg


def test_empty_and_non_mapping():
    assert "empty" in _error("")
    assert "mapping" in _error("- a\n- b\n")


def test_file_errors(tmp_path):
    with pytest.raises(NotFoundError, match="does not exist"):
        load_scenario(tmp_path / "nope.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("qps: 5", "qps: zero"))
    with pytest.raises(SchemaError, match=r"bad\.yaml line 12: workloads\.inference\[0\]\.qps"):
        load_scenario(bad)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_examples_validate(path):
    s = load_scenario(path)
    assert s.scenario.name


def test_price_quotes_must_name_catalog_ids():
    from gpuplan.plan.planner import build_plan

    alias = GOOD.replace("dgx-h100: 250000", "DGX H100: 250000")
    with pytest.raises(
        SchemaError,
        match=r"line 19: costs\.onprem_node_prices_usd\.DGX H100: write the catalog id 'dgx-h100'",
    ):
        build_plan(parse_scenario(alias), results_paths=[])
    typo = GOOD.replace("dgx-h100: 250000", "dgx-h1000: 250000")
    with pytest.raises(NotFoundError, match=r"line 19: costs\.onprem_node_prices_usd\.dgx-h1000"):
        build_plan(parse_scenario(typo), results_paths=[])
