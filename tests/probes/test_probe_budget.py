"""The suite plans its duration before it runs, per probe, for the GPUs it found.

The issue's limits: a quick probe of an 8-GPU node is planned at <= 10 minutes and the
full suite at <= 30. There is no GPU here: the 8-GPU node is a fake at the edge
(``resolve_device`` says 8 CUDA devices); the plan is computed by the real suite from the
probes' real sweep definitions.
"""

from __future__ import annotations

import sys
import types

import pytest

from gpuplan.probes import budget, matmul, suite
from gpuplan.probes.base import DeviceInfo
from gpuplan.probes.budget import LIMIT_S, ProbeBudget, plan, point_s
from gpuplan.probes.suite import DEFAULT_TIMING, PROBES, QUICK_TIMING, SuiteOptions, run_suite


@pytest.mark.parametrize("quick", [True, False])
def test_an_8_gpu_node_is_planned_within_the_limits(quick):
    got = plan(PROBES, quick=quick, gpus=8)
    assert got.gpus == 8 and [p.probe for p in got.probes] == list(PROBES)
    assert got.total_s <= LIMIT_S[quick], got.text()
    assert LIMIT_S == {True: 600.0, False: 1800.0}  # the 10 and 30 minutes
    assert got.total_s == pytest.approx(got.start_s + sum(p.planned_s for p in got.probes))


def test_the_plan_counts_the_probes_own_points():
    timing = DEFAULT_TIMING
    got = budget.probe_budget("matmul", False, 8, timing)
    sweep = len(matmul.shapes(gpu=True, quick=False)) * 5  # fp32 tf32 bf16 fp16 fp8
    assert got.points == sweep + 9  # 8 devices alone, then one round all at once
    expected = (
        budget.SETUP_S
        + 5.0  # device warm-up
        + point_s(timing) * (sweep * budget.MATMUL_FLUSH_FACTOR + 9)
    )
    assert got.planned_s == pytest.approx(expected)
    assert point_s(QUICK_TIMING) < point_s(DEFAULT_TIMING)


def test_the_plan_scales_with_the_gpu_count():
    one, eight = plan(PROBES, quick=False, gpus=1), plan(PROBES, quick=False, gpus=8)
    by = {p.probe: p for p in one.probes}, {p.probe: p for p in eight.probes}
    assert by[0]["collectives"].planned_s == 0.0  # one GPU: no collective
    assert by[1]["collectives"].planned_s > 0.0
    for name in ("matmul", "membw", "pcie"):  # the per-GPU loops grow with the GPUs
        assert by[1][name].planned_s > by[0][name].planned_s
    assert by[1]["storage"].planned_s == by[0]["storage"].planned_s
    cpu = plan(PROBES, quick=True, gpus=0)
    assert {p.probe: p for p in cpu.probes}["pcie"].planned_s == 0.0


def test_a_probe_module_brings_its_own_plan(monkeypatch):
    module = types.ModuleType("gpuplan.probes.h3fake")
    module.planned_budget = lambda quick, gpus, timing: ProbeBudget(  # type: ignore[attr-defined]
        "h3fake", 12.5 * gpus, gpus, "its own"
    )
    monkeypatch.setitem(sys.modules, "gpuplan.probes.h3fake", module)
    assert budget.probe_budget("h3fake", True, 8, QUICK_TIMING).planned_s == 100.0
    unknown = budget.probe_budget("nosuchprobe", True, 8, QUICK_TIMING)
    assert unknown.planned_s == budget.UNPLANNED_S and "no plan" in unknown.basis


def test_soak_is_planned_at_its_duration():
    got = plan(["soak"], quick=False, gpus=8, soak_s=600.0)
    assert got.probes[0].planned_s == pytest.approx(600.0 + budget.SETUP_S)


def test_the_suite_plans_for_the_gpus_it_finds_and_records_plan_and_actuals(tmp_path, monkeypatch):
    """The suite sees a fake 8-GPU node (at ``resolve_device``); its probes then fail on
    this CPU machine (recorded ``failed``), which is what lets the plan be checked here."""
    monkeypatch.setattr(
        suite,
        "resolve_device",
        lambda request="auto": DeviceInfo(kind="cuda", count=8, vendor="nvidia"),
    )
    monkeypatch.setattr("gpuplan.probes.power.default_sampler", lambda **kw: None)
    plans, events = [], []
    outcome = run_suite(
        SuiteOptions(only=("membw",), quick=True, out_dir=str(tmp_path)),
        on_plan=lambda b: (plans.append(b), events.append("plan")),
        on_probe=lambda name: events.append(name),
    )
    assert events == ["plan", "membw"]  # planned before the first probe
    (got,) = plans
    assert got.gpus == 8 and got.quick is True
    assert "planned" in got.text() and "8 GPUs" in got.text()
    recorded = outcome.document.budget
    assert recorded is not None and recorded["gpus"] == 8
    (row,) = recorded["probes"]
    assert row["probe"] == "membw"
    assert row["planned_s"] == pytest.approx(got.probes[0].planned_s, abs=0.05)
    assert row["actual_s"] is not None and row["actual_s"] >= 0.0


@pytest.mark.parametrize("name", ["budget", "pergpu", "soak"])
def test_docstring_examples_of_the_new_modules(name):
    import doctest
    import importlib

    module = importlib.import_module(f"gpuplan.probes.{name}")
    failures, tried = doctest.testmod(module, verbose=False)
    assert tried > 0 and failures == 0


def test_the_cli_names_the_suites_probes():
    from gpuplan.cli import probe as cli_probe

    assert cli_probe.PROBE_NAMES == PROBES
