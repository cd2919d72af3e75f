"""Whole plans of the shipped examples, with the real catalog, calibration and forecasts.

The pre-training example is planned against a synthetic H100 trial run (trialdata.py: the
GPU edge that cannot run here); the others without a trial node.
"""

from __future__ import annotations

import html as html_lib
import itertools
import math
from pathlib import Path

import pytest

from gpuplan.plan.fabric import design_fat_tree
from gpuplan.plan.planner import build_plan
from gpuplan.plan.provenance import KINDS, find_unsourced_numbers, is_figure_json
from gpuplan.plan.scenario import load_scenario, parse_scenario

from .trialdata import GPU_POWER_W, write_trial_results

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NAMES = ["llama-pretrain", "llm-serving", "mixed-teams", "impossible-power"]


@pytest.fixture(scope="module")
def plans(tmp_path_factory):
    results = tmp_path_factory.mktemp("results")
    write_trial_results(results)
    out = {}
    for name in NAMES:
        paths = [results] if name == "llama-pretrain" else []
        p = build_plan(load_scenario(EXAMPLES / f"{name}.yaml"), results_paths=paths)
        out[name] = (p, p.to_json())
    return out


def _figures(obj):
    if is_figure_json(obj):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _figures(v)
    elif isinstance(obj, list):
        for v in obj:
            yield from _figures(v)


def _option(doc, oid):
    return next(o for o in doc["options"] if o["id"] == oid)


@pytest.mark.parametrize("name", NAMES)
def test_every_number_has_provenance(plans, name):
    _, doc = plans[name]
    assert find_unsourced_numbers(doc) == []
    figs = list(_figures(doc))
    assert len(figs) > 50
    for f in figs:
        p = f["provenance"]
        assert p["kind"] in KINDS
        if p["kind"] == "derived":
            assert p["formula"]
        if p["kind"] == "catalog":
            assert p["source"] and p["retrieved"], f
        if p["kind"] in ("input", "default"):
            assert ":" in p["ref"] or p["ref"].startswith(("default", "sensitivity")), p["ref"]
        if f["value"] is None:
            assert f.get("missing"), f  # a missing number always says why


def test_find_unsourced_numbers_catches_a_bare_number(plans):
    _, doc = plans["llm-serving"]
    tampered = {**doc, "options": [{**doc["options"][0], "nodes": 12}]}
    bad = find_unsourced_numbers(tampered)
    assert [(u.path, u.value) for u in bad] == [("$.options[0].nodes", 12)]


def test_pretrain_plan_by_hand(plans):
    plan, doc = plans["llama-pretrain"]
    assert doc["summary"]["feasible"] and doc["summary"]["rank_by"] == "run"
    assert doc["trial_node"]["gpu_power_w"]["value"] == GPU_POWER_W
    onp = _option(doc, "onprem/dgx-h100")
    nodes = onp["nodes"]["value"]
    assert onp["gpus"]["value"] == 8 * nodes
    # measured power: 8 x 610 W + (node max power - 8 x TDP) from the catalog
    from gpuplan.catalogs import get_catalog

    cat = get_catalog()
    node, gpu = cat.node("dgx-h100"), cat.gpu("h100")
    node_w = 8 * GPU_POWER_W + (node.max_power_w - 8 * gpu.tdp_w)
    assert onp["power"]["basis"] == "measured"
    assert onp["power"]["node_power_w"]["value"] == pytest.approx(node_w)
    per_rack = math.floor(40_000 / node_w)
    assert onp["power"]["nodes_per_rack"]["value"] == min(per_rack, 42 // node.rack_units)
    assert onp["power"]["racks"]["value"] == math.ceil(
        nodes / onp["power"]["nodes_per_rack"]["value"]
    )
    assert onp["power"]["facility_power_w"]["value"] == pytest.approx(
        onp["power"]["it_power_w"]["value"] * 1.3
    )
    # unverified catalog values stay flagged downstream (the DGX H100 max power is)
    assert "max_power_w" in node.unverified
    assert onp["power"]["node_power_w"]["provenance"]["unverified"]
    # fabric: rail-optimised non-blocking tree of the catalog switch with the most ports at
    # the ConnectX-7 rate (400 Gb/s)
    fb = onp["fabric"]
    sw = cat.switch(fb["switch"])
    radix = max(
        p
        for p, bw in (
            (sw.ports, sw.port_bandwidth_bits_per_s),
            (sw.alt_ports, sw.alt_port_bandwidth_bits_per_s),
        )
        if bw == 400e9
    )
    assert fb["radix"]["value"] == radix
    assert all(
        radix >= (p or 0)
        for s in cat.switches
        for p, bw in (
            (s.ports, s.port_bandwidth_bits_per_s),
            (s.alt_ports, s.alt_port_bandwidth_bits_per_s),
        )
        if bw == 400e9
    )
    tree = design_fat_tree(nodes=nodes, nics_per_node=8, radix=radix, topology="rail_optimized")
    assert (fb["leaf_switches"]["value"], fb["spine_switches"]["value"]) == (
        tree.leaves,
        tree.spines,
    )
    assert fb["cables"]["value"] == tree.links
    assert fb["per_gpu_bandwidth_worst_bytes_per_s"]["value"] == pytest.approx(400e9 / 8)
    assert fb["communication_check"][0]["status"] in ("holds", "short")
    # storage: dataset 2e12 tokens x 4 B (vocabulary > 65,536) + 3 checkpoints of 14 B/param
    m = cat.model("llama3.1-70b")
    st = onp["storage"]
    assert st["capacity_bytes"]["value"] == pytest.approx(2e12 * 4 + 3 * 14 * m.params_total())
    tps = onp["training"][0]["tokens_per_s"]["value"]
    assert st["read_bytes_per_s"]["value"] == pytest.approx(tps * 4)
    assert st["checkpoint_write_bytes_per_s"]["value"] == pytest.approx(14 * m.params_total() / 300)
    assert (
        st["local_nvme"]["measured_read_per_node_bytes_per_s"]["provenance"]["kind"]
        == "measurement"
    )
    # cloud on-demand: nodes x hours x catalog price / goodput (node failures, Daly 2006)
    aws = _option(doc, "aws/p5.48xlarge")
    od = aws["costs"]["on_demand"]
    t = aws["training"][0]
    good = od["reliability"]["pretrain"]["goodput"]["value"]
    assert 0.9 < good < 1.0
    expect = (
        t["nodes"]["value"]
        * t["time_to_train_s"]["value"]
        / 3600
        * od["price_usd_per_node_hour"]["value"]
        / good
    )
    # + the chosen cloud storage tier for the run's wall time (its own line)
    fsx = aws["storage"]["usd_per_month"]["value"]
    share = od["storage_per_run_usd"]["pretrain"]["value"]
    assert share == pytest.approx(fsx * t["time_to_train_s"]["value"] / 3600 / good / 730)
    assert od["per_run_usd"]["pretrain"]["value"] == pytest.approx(expect + share, rel=1e-6)
    assert od["price_usd_per_node_hour"]["provenance"]["kind"] == "catalog"
    # reserved prices the catalog lacks come from the scenario's discount, and say so
    r1 = aws["costs"]["reserved_1y"]["price_usd_per_node_hour"]
    assert r1["value"] == pytest.approx(od["price_usd_per_node_hour"]["value"] * 0.7)
    assert "discount" in r1["provenance"]["formula"]
    # spot: Young/Daly checkpoint interval and goodput below 1
    rel = aws["costs"]["spot"]["reliability"]["pretrain"]
    assert 0 < rel["goodput"]["value"] < 1
    assert rel["checkpoint_interval_s"]["value"] < rel["young_interval_s"]["value"]
    # owned: TCO and break-even against the cheapest H100 on-demand price per GPU
    assert onp["onprem_tco"]["usd_per_node_hour"]["value"] > 0
    assert onp["break_even_utilisation"]["value"] > 0
    assert onp["break_even_against"].endswith(
        ("p5.48xlarge", "a3-highgpu-8g", "a3-megagpu-8g", "standard-nd96isr-h100-v5")
    )
    # time-to-train curves: more GPUs never take longer in the forecast
    for c in doc["time_to_train_curves"]:
        pts = [
            (p["gpus"]["value"], p["time_to_train_s"]["value"])
            for p in c["points"]
            if "error" not in p
        ]
        assert len(pts) >= 3
        # sensitivity ran and the recommended option is ranked first
    assert doc["ranking"][0]["option"] == doc["summary"]["recommended"]["option"]
    assert doc["sensitivity"]["per_option"]
    assert plan.trial is not None


def test_missing_prices_stay_missing(plans):
    _, doc = plans["llama-pretrain"]
    p5 = _option(doc, "aws/p5.48xlarge")
    sp = p5["costs"]["savings_plan_1y"]["price_usd_per_node_hour"]
    assert sp["value"] is None
    assert "no savings_plan_1y price" in sp["missing"]
    # the catalog's documented gap is quoted; the kinds with a rate are priced
    assert "no p5 1-year Savings Plans rate" in sp["missing"]
    assert p5["costs"]["on_demand"]["price_usd_per_node_hour"]["value"] is not None
    ranked = [e for e in doc["ranking"] if e["option"] == p5["id"]]
    assert all(e["purchasing_model"] != "savings_plan_1y" for e in ranked)


def test_serving_plan(plans):
    _, doc = plans["llm-serving"]
    assert doc["summary"]["rank_by"] == "mtok"
    ranked = doc["ranking"]
    assert ranked and all(r["metric"]["unit"] == "USD/Mtok" for r in ranked)
    for o in doc["options"]:
        if o["inference"][0]["gpus"] is None:
            continue
        assert o["inference"][0]["gpus"]["value"] % 8 == 0
        assert o["costs"]["spot"]["per_million_output_tokens_usd"]["chat"]["value"] is None
        tokens = o["inference"][0]["output_tokens_per_month"]["value"]
        assert tokens == pytest.approx(20 * 256 * 3600 * 730)


def test_mixed_plan_has_the_shared_cluster(plans):
    _, doc = plans["mixed-teams"]
    assert doc["summary"]["rank_by"] == "month"
    sc = doc["shared_cluster"]
    assert sc["scenario_policy"] == "fair-share"
    pols = {p["policy"]: p for p in sc["policies"]}
    assert set(pols) >= {"fair-share", "fifo"}
    for p in pols.values():
        assert 0 < p["utilization"]["value"] <= 1
        assert p["wait_s"]["p95"]["value"] >= p["wait_s"]["p50"]["value"]
    rec = doc["summary"]["recommended"]
    top = _option(doc, rec["option"])
    serving_nodes = top["inference"][0]["nodes"]["value"]
    assert sc["cluster_gpus"]["value"] == (top["nodes"]["value"] - serving_nodes) * 8
    # both workloads sit side by side on the fleet; the teams' p95 target may grow the
    # shared (non-serving) part beyond the training run's nodes
    shared_needed = max(top["training"][0]["nodes"]["value"], top["sizing"]["nodes"]["value"])
    assert top["nodes"]["value"] == shared_needed + top["inference"][0]["nodes"]["value"]


def _by_policy(doc):
    return {c["policy"]: c for c in doc["shared_cluster"]["wait_vs_size"]["curves"]}


def test_mixed_plan_wait_vs_size_curve(plans):
    _, doc = plans["mixed-teams"]
    sc = doc["shared_cluster"]
    w = sc["wait_vs_size"]
    assert w["sizes_from"].startswith("default")
    curves = _by_policy(doc)
    assert list(curves) == ["fair-share", "fifo"]
    planned = sc["cluster_gpus"]["value"]
    largest_job = 16  # the teams' gpu_count_distribution tops out at 16 GPUs
    demand = w["mean_demand_gpus"]["value"]
    assert 0 < demand < planned
    for c in curves.values():
        gpus = [p["gpus"]["value"] for p in c["points"]]
        assert gpus == sorted(set(gpus)) and planned in gpus
        assert all(g % 8 == 0 and g >= largest_job for g in gpus)
        # the default reaches from the teams' mean demand to 3x it (whole nodes)
        assert gpus[0] == math.ceil(demand / 8) * 8
        assert gpus[-1] == math.ceil(3 * demand / 8) * 8
        for p in c["points"]:
            assert (
                p["jobs_simulated"]["value"] + p["unschedulable_jobs"]["value"]
                == (sc["jobs"]["value"])
            )
        # the point at the planned size is the section's own simulation of that policy
        at = next(p for p in c["points"] if p["gpus"]["value"] == planned)
        same = next(q for q in sc["policies"] if q["policy"] == c["policy"])
        assert at["utilization"]["value"] == same["utilization"]["value"]
        for k in ("mean", "p95", "max"):
            assert at["wait_s"][k]["value"] == same["wait_s"][k]["value"], k
    # strict FIFO: no job starts later on a bigger cluster, so no wait statistic grows
    fifo = curves["fifo"]["points"]
    for a, b in itertools.pairwise(fifo):
        for k in ("mean", "p50", "p95", "p99", "max"):
            assert b["wait_s"][k]["value"] <= a["wait_s"][k]["value"], k
        for team, f in b["per_team_p95_wait_s"].items():
            assert f["value"] <= a["per_team_p95_wait_s"][team]["value"], team
    assert fifo[0]["wait_s"]["mean"]["value"] > fifo[-1]["wait_s"]["mean"]["value"]


def test_mixed_plan_shared_cluster_figures_cite_figures_of_the_plan(plans):
    """Every figure the shared-cluster section derives names inputs that are themselves
    figures of the plan (so the appendix can follow each number back to the scenario)."""
    _, doc = plans["mixed-teams"]
    labels = {f["label"] for f in _figures(doc)}
    section = list(_figures(doc["shared_cluster"]))
    assert len(section) > 200
    for f in section:
        for name in f["provenance"].get("inputs", []):
            assert name in labels, (f["label"], name)


def test_mixed_plan_smallest_cluster_meets_the_target_and_one_node_less_does_not(plans):
    from gpuplan.scheduling import Cluster, scenario_inputs, simulate
    from gpuplan.scheduling import parse_scenario as parse_teams_scenario

    _, doc = plans["mixed-teams"]
    sm = doc["shared_cluster"]["smallest_cluster"]
    target = sm["target_p95_wait_s"]
    assert target["value"] == 3600 and target["provenance"]["kind"] == "input"
    assert sm["policy"] == "fair-share"
    overall = sm["overall"]
    nodes = overall["nodes"]["value"]
    assert overall["gpus"]["value"] == nodes * 8
    waits = {t: f["value"] for t, f in overall["per_team_p95_wait_s"].items()}
    assert set(waits) == {"research", "product", "interns"}
    assert max(waits.values()) <= 3600
    # every team meets the target where all of them do, so each has an answer
    assert all(e is not None for e in sm["per_team"].values())
    # the same answer through the scheduling part's own scenario path
    import yaml

    teams_scenario = parse_teams_scenario(
        yaml.safe_load((EXAMPLES / "mixed-teams.yaml").read_text())
    )
    for n, meets in ((nodes, True), (nodes - 1, False)):
        jobs, cluster, opts = scenario_inputs(teams_scenario, Cluster.homogeneous(n, 8))
        assert len(jobs) == doc["shared_cluster"]["jobs"]["value"]
        res = simulate(jobs, cluster, "fair-share", **opts)
        p95 = [v["wait_s"]["p95"] for v in res.per_team.values()]
        assert (max(p95) <= 3600) is meets, n
        if meets:
            assert sorted(p95) == pytest.approx(sorted(waits.values()))


def test_mixed_plan_philly_reference_curve_is_cited(plans):
    from gpuplan.report import render_html, render_markdown
    from gpuplan.scheduling.workload import PHILLY_CITATION

    _, doc = plans["mixed-teams"]
    ref = doc["shared_cluster"]["reference_curve"]
    assert ref["trace"] == "philly" and ref["policy"] == "backfill"
    assert ref["attribution"] == PHILLY_CITATION
    assert [p["gpus"]["value"] for p in ref["points"]] == [384, 512, 768, 1024]
    # the whole trace (docs/scheduling.md: 82,247 jobs) at every size
    for p in ref["points"]:
        assert p["jobs_simulated"]["value"] + p["unschedulable_jobs"]["value"] == 82_247
        assert 0 < p["utilization"]["value"] <= 1
        assert p["wait_s"]["p95"]["value"] <= p["wait_s"]["max"]["value"]
        assert p["wait_s"]["p95"]["provenance"]["inputs"][0] == "reference trace"
    assert 370 < ref["mean_demand_gpus"]["value"] < 380  # NOTICE.md: ~374 GPUs
    md = render_markdown(doc)
    assert PHILLY_CITATION in md
    page = html_lib.unescape(render_html(doc, charts={}))
    start = page.index('<section id="reference-curve">')
    assert PHILLY_CITATION in page[start : page.index("</section>", start)]


def test_impossible_constraint_says_what_binds(plans):
    _, doc = plans["impossible-power"]
    sm = doc["summary"]
    assert not sm["feasible"] and sm["recommended"] is None
    assert [b["constraint"] for b in sm["binding_constraints"]] == ["site_power_kw"]
    assert "No option meets all constraints" in sm["headline"]["text"]
    assert "site_power_kw" in sm["headline"]["text"]
    o = doc["options"][0]
    b = o["binding"][0]
    assert b["needed"]["value"] > b["limit"]["value"] * 1000
    fits = o["power"]["max_gpus_within_site_power"]["value"]
    assert 0 < fits < o["gpus"]["value"]
    per_node = o["power"]["facility_power_w"]["value"] / o["nodes"]["value"]
    assert fits == math.floor(1000e3 / per_node) * 8
    assert o["power"]["time_to_train_within_site_power"]["pretrain-70b"]["value"] > 30 * 86400


def test_budget_binds():
    text = (
        (EXAMPLES / "mixed-teams.yaml")
        .read_text()
        .replace("budget_usd_per_month: 1500000", "budget_usd_per_month: 1000")
    )
    text = text[: text.index("teams:")]  # no simulation needed here
    doc = build_plan(parse_scenario(text), results_paths=[]).to_json()
    assert not doc["summary"]["feasible"]
    assert {b["constraint"] for b in doc["summary"]["binding_constraints"]} == {
        "budget_usd_per_month"
    }
    for o in doc["options"]:
        assert not any(o["within_budget"].values())


def test_unknown_names_are_errors_with_the_closest():
    from gpuplan.errors import NotFoundError

    text = (EXAMPLES / "llm-serving.yaml").read_text().replace("llama3.3-70b", "llama-3.3-7b0")
    with pytest.raises(NotFoundError):
        build_plan(parse_scenario(text), results_paths=[])


def test_oversubscribed_fabric_fails_the_communication_check():
    text = (EXAMPLES / "llama-pretrain.yaml").read_text()
    text = text.replace("clouds: [aws, gcp, azure]", "clouds: []").replace(
        "oversubscription: 1", "oversubscription: 2"
    )
    doc = build_plan(parse_scenario(text), results_paths=[]).to_json()
    (o,) = doc["options"]
    check = o["fabric"]["communication_check"][0]
    assert check["status"] == "short"
    assert check["ratio"]["value"] == pytest.approx(0.5)
    assert check["assumed_bytes_per_s"]["value"] == pytest.approx(400e9 / 8)
    t = o["training"][0]
    # the run re-forecast at the fabric's bandwidth is never faster
    assert t["time_to_train_on_fabric_s"]["value"] >= t["time_to_train_s"]["value"]
    assert "longer" in check["note"]["text"]
    # 2:1 leaves: 43 down / 21 up ports of a 64-port switch (or the split 128-port one)
    assert o["fabric"]["leaf_down_ports"]["value"] > o["fabric"]["leaf_up_ports"]["value"]


SMALL_ONPREM = """\
name: small-onprem
workloads:
  training:
    - name: t
      model: llama3.1-8b
      tokens: 2.0e11
      deadline_days: 5
      seq_len: 4096
      global_batch_tokens: 2.0e6
candidates:
  gpus: [h100]
  clouds: []
  onprem_nodes: [dgx-h100]
constraints:
  power_per_rack_kw: 40
  max_racks: 1
  floor_space_m2: 2
  floor_m2_per_rack: 3
costs:
  pue: 1.2
"""


def test_racks_and_floor_space_bind():
    doc = build_plan(parse_scenario(SMALL_ONPREM), results_paths=[]).to_json()
    (o,) = doc["options"]
    racks = o["power"]["racks"]["value"]
    assert racks > 1
    kinds = {b["constraint"] for b in o["binding"]}
    assert kinds == {"max_racks", "floor_space_m2"}
    floor = next(b for b in o["binding"] if b["constraint"] == "floor_space_m2")
    assert floor["needed"]["value"] == pytest.approx(racks * 3)
    assert not doc["summary"]["feasible"]
    # without prices the owned option is unranked, and says what is missing
    assert o["onprem_tco"]["usd_per_node_hour"]["value"] is None


def test_region_filters_prices():
    text = (
        (EXAMPLES / "llm-serving.yaml")
        .read_text()
        .replace("clouds: [aws, gcp, azure]", "clouds: [aws]\n  instances: [p5.48xlarge]")
    )
    text += "constraints:\n  region: eu-north-9\n"
    doc = build_plan(parse_scenario(text), results_paths=[]).to_json()
    (o,) = doc["options"]
    od = o["costs"]["on_demand"]["price_usd_per_node_hour"]
    assert od["value"] is None
    assert "in eu-north-9" in od["missing"] and "other regions" in od["missing"]
    assert doc["ranking"] == [] and doc["unranked"][0]["option"] == "aws/p5.48xlarge"


def test_named_platforms_without_a_candidate_gpu_are_noted_and_skipped():
    from gpuplan.catalogs import get_catalog
    from gpuplan.plan.context import PlanContext
    from gpuplan.plan.options import candidate_options

    text = (
        (EXAMPLES / "llama-pretrain.yaml")
        .read_text()
        .replace("clouds: [aws, gcp, azure]", "instances: [p5.48xlarge, p4d.24xlarge]")
        .replace("onprem_nodes: [dgx-h100]", "onprem_nodes: [dgx-h100, dgx-a100]")
    )
    ctx = PlanContext(parse_scenario(text), get_catalog())
    options, notes = candidate_options(ctx)
    assert [o.id for o in options] == ["aws/p5.48xlarge", "onprem/dgx-h100"]
    assert notes == [
        "instance p4d.24xlarge carries a100-sxm4-40gb, not a candidate GPU: skipped",
        "node dgx-a100 carries a100-sxm4-80gb, not a candidate GPU: skipped",
    ]
    # without names, every catalog platform with a candidate GPU is an option, silently
    text = (
        (EXAMPLES / "llama-pretrain.yaml").read_text().replace("  clouds: [aws, gcp, azure]\n", "")
    )
    options, notes = candidate_options(PlanContext(parse_scenario(text), get_catalog()))
    assert notes == []
    assert {o.gpu.id for o in options} <= {"h100-sxm5-80gb", "h200-sxm-141gb"}
    assert "aws/p5e.48xlarge" in {o.id for o in options}


@pytest.mark.parametrize("spelling", ["all", "[ALL]"])
def test_all_gpus_takes_every_platform_the_scenario_allows(spelling):
    from gpuplan.catalogs import get_catalog
    from gpuplan.plan.context import PlanContext
    from gpuplan.plan.options import candidate_options

    cat = get_catalog()
    text = (
        (EXAMPLES / "llm-serving.yaml")
        .read_text()
        .replace("gpus: [h100, h200]", f"gpus: {spelling}")
        .replace("clouds: [aws, gcp, azure]", "clouds: [gcp]")
        .replace("onprem_nodes: []", "onprem_nodes: [dgx-h100, dgx-a100]")
    )
    options, notes = candidate_options(PlanContext(parse_scenario(text), cat))
    gcp = {f"gcp/{i.id}" for i in cat.instances if i.cloud.lower() == "gcp"}
    assert {o.id for o in options} == gcp | {"onprem/dgx-h100", "onprem/dgx-a100"}
    assert notes == []
    # more than the GPUs a scenario usually names: TPUs and every NVIDIA generation GCP rents
    assert len({o.gpu.id for o in options}) >= 5
    assert any(o.gpu.id.startswith("tpu") for o in options)


def test_all_gpus_without_a_platform_says_which_fields_left_none():
    text = (
        (EXAMPLES / "llm-serving.yaml")
        .read_text()
        .replace("gpus: [h100, h200]", "gpus: all")
        .replace("clouds: [aws, gcp, azure]", "clouds: []")
    )
    doc = build_plan(parse_scenario(text), results_paths=[]).to_json()
    assert doc["options"] == [] and not doc["summary"]["feasible"]
    said = doc["summary"]["headline"]["text"]
    assert "candidates.clouds" in said and "candidates.onprem_nodes" in said


def test_a_plan_over_all_gpus_ranks_every_priced_option():
    text = (
        (EXAMPLES / "llm-serving.yaml")
        .read_text()
        .replace("gpus: [h100, h200]", "gpus: all")
        .replace("clouds: [aws, gcp, azure]", "clouds: [lambda, nebius]")
    )
    doc = build_plan(parse_scenario(text), results_paths=[]).to_json()
    ids = {o["id"] for o in doc["options"]}
    from gpuplan.catalogs import get_catalog

    want = {f"{i.cloud}/{i.id}" for i in get_catalog().instances if i.cloud in ("lambda", "nebius")}
    assert ids == want and len(want) >= 4
    ranked = [r["option"] for r in doc["ranking"]]
    assert set(ranked) | {u["option"] for u in doc["unranked"]} == ids
    # GPU generations compete on one metric
    gpus = {o["id"]: o["gpu"] for o in doc["options"]}
    assert len({gpus[r] for r in ranked}) >= 2


def test_a_curve_size_that_cannot_run_keeps_its_provenance(tmp_path):
    # 70B on one 8-GPU node does not fit: that curve point is an error, and its GPU count
    # must still say where it came from (the scenario's sizes)
    import yaml

    data = yaml.safe_load((EXAMPLES / "llama-pretrain.yaml").read_text())
    data["workloads"]["training"][0]["sizes"] = [8, 512]
    path = tmp_path / "sizes.yaml"
    path.write_text(yaml.safe_dump(data))
    doc = build_plan(load_scenario(path), results_paths=[]).to_json()
    assert find_unsourced_numbers(doc) == []
    points = [p for c in doc["time_to_train_curves"] for p in c["points"]]
    failed = [p for p in points if "error" in p]
    assert failed, "a 70B model on 8 GPUs should not fit"
    for p in failed:
        assert is_figure_json(p["gpus"]) and p["gpus"]["value"] == 8
        assert p["gpus"]["provenance"]["kind"] == "input"
    from gpuplan.report.render import render_html, render_markdown

    md = render_markdown(doc)
    assert "| 8 GPUs [" in md and "'provenance'" not in md
    html = render_html(doc)
    assert "'provenance'" not in html and "&#39;provenance&#39;" not in html
