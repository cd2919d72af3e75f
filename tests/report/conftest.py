"""A small but complete plan (cloud + on-premises options, trial node, teams) rendered once.

The Philly reference curve is drawn from the first jobs of the trace at small sizes
(:func:`small_philly_curve`) to keep these tests fast.
"""

from __future__ import annotations

import importlib.util
import textwrap
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

SCENARIO = textwrap.dedent(
    """\
    name: report-test
    description: A small plan that exercises every section of the report.
    workloads:
      training:
        - name: train-8b
          model: llama3.1-8b
          tokens: 2.0e11
          deadline_days: 10
          seq_len: 4096
          global_batch_tokens: 2.0e6
      inference:
        - name: chat
          model: llama3.1-8b
          qps: 4
          input_tokens: {mean: 1000, p99: 3000}
          output_tokens: {mean: 200, p99: 600}
          ttft_slo_s: 1.0
          tpot_slo_s: 0.05
    candidates:
      gpus: [h100]
      instances: [p5.48xlarge]
      onprem_nodes: [dgx-h100]
    constraints:
      power_per_rack_kw: 40
      rack_units_per_rack: 42
    costs:
      utilisation: 0.8
      commitment_discounts: {reserved_1y: 0.3, reserved_3y: 0.5}
      electricity_usd_per_kwh: 0.08
      pue: 1.3
      depreciation_years: 4
      ops_usd_per_node_per_year: 20000
      onprem_node_prices_usd:
        dgx-h100: {usd: 199000, source: "test quote"}
      spot_interruptions_per_node_hour: 0.005
      restart_s: 600
    teams:
      - name: research
        share: 2
        arrival_rate_per_hour: 1
        gpu_count_distribution: {1: 0.7, 8: 0.3}
        duration_distribution: {kind: exponential, mean_s: 3600}
      - name: product
        share: 1
        arrival_rate_per_hour: 0.5
        gpu_count_distribution: {8: 1.0}
        duration_distribution: {kind: fixed, value_s: 7200}
    scheduling:
      horizon_days: 2
      sizes_gpus: [64, 16, 32]
      p95_wait_target_s: 1800
      reference_trace: philly
    """
)

#: The reference curve drawn here: the first jobs of the Philly trace at small sizes, so that
#: the report tests render a real Philly curve in a fraction of a second (the whole trace,
#: about 15 s, is planned once in tests/plan/test_planner.py).
SMALL_PHILLY_JOBS = 1000
SMALL_PHILLY_SIZES_GPUS = (64, 128, 256)


def small_philly_curve(sizes_gpus, policy="backfill", *, progress=None, **options):
    """:func:`philly_wait_curve` on the first :data:`SMALL_PHILLY_JOBS` jobs of the trace."""
    from gpuplan.scheduling.capacity import wait_vs_size_curve
    from gpuplan.scheduling.cluster import Cluster
    from gpuplan.scheduling.workload import PHILLY_CITATION, load_philly

    out = wait_vs_size_curve(
        load_philly(limit=SMALL_PHILLY_JOBS),
        Cluster.homogeneous(1, 8),
        list(sizes_gpus),
        policy,
        progress=progress,
        attribution=PHILLY_CITATION,
        **options,
    )
    out["trace"] = "philly"
    return out


def _trialdata():
    spec = importlib.util.spec_from_file_location(
        "gpuplan_test_trialdata", HERE.parent / "plan" / "trialdata.py"
    )
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="session")
def report_dir(tmp_path_factory) -> Path:
    """Plan SCENARIO against a synthetic H100 trial run and write the three outputs."""
    from gpuplan.plan.planner import build_plan
    from gpuplan.plan.scenario import parse_scenario
    from gpuplan.report import write_report
    from gpuplan.scheduling import capacity

    root = tmp_path_factory.mktemp("report")
    results = root / "results"
    _trialdata().write_trial_results(results)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(capacity, "PHILLY_CURVE_SIZES_GPUS", SMALL_PHILLY_SIZES_GPUS)
        mp.setattr(capacity, "philly_wait_curve", small_philly_curve)
        plan = build_plan(parse_scenario(SCENARIO), results_paths=[results])
    out = root / "out"
    write_report(plan.to_json(), out)
    return out


EXAMPLES = HERE.parents[1] / "examples"
#: The shipped examples the print and summary tests read (issue 17 measured these two).
EXAMPLE_NAMES = ("llama-pretrain", "mixed-teams")


@pytest.fixture(scope="session")
def example_reports(tmp_path_factory) -> dict[str, Path]:
    """Each shipped example planned as a user would (``gpuplan plan FILE``, no trial run),
    its report written under a tmp dir; the Philly curve shortened as for ``report_dir``."""
    from gpuplan.plan.planner import build_plan
    from gpuplan.plan.scenario import load_scenario
    from gpuplan.report import write_report
    from gpuplan.scheduling import capacity

    out = {}
    for name in EXAMPLE_NAMES:
        root = tmp_path_factory.mktemp(name)
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(capacity, "PHILLY_CURVE_SIZES_GPUS", SMALL_PHILLY_SIZES_GPUS)
            mp.setattr(capacity, "philly_wait_curve", small_philly_curve)
            plan = build_plan(load_scenario(EXAMPLES / f"{name}.yaml"), results_paths=[root])
        write_report(plan.to_json(), root / "out")
        out[name] = root / "out"
    return out
