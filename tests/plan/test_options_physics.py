"""The plan's node power, racks and fabric for the five on-premises node types (issue 17).

Before this change: DGX B200 8 kW, DGX H200 5.6 kW, GB200 NVL72 86.4 kW and the XE9680
6 kW (GPU TDP only, called "catalog"); two NVL72 racks in "1 rack"; 144 GPUs on 72 leaf +
36 spine switches with 9,504 transceivers.
"""

from __future__ import annotations

import pytest

from gpuplan.catalogs import get_catalog
from gpuplan.plan.planner import build_plan
from gpuplan.plan.scenario import load_scenario

SCENARIO = """
name: physics-check
workloads:
  training:
    - name: t
      model: llama3.1-70b
      tokens: 2.0e11
      num_gpus: 144
      seq_len: 8192
      global_batch_tokens: 16.0e6
candidates:
  gpus: [h100, h200, b200, gb200, mi300x]
  clouds: []
  onprem_nodes: [dgx-h100, dgx-h200, dgx-b200, gb200-nvl72-rack, dell-xe9680-mi300x]
costs:
  pue: 1.3
"""


@pytest.fixture(scope="module")
def options(tmp_path_factory):
    path = tmp_path_factory.mktemp("physics") / "s.yaml"
    path.write_text(SCENARIO)
    doc = build_plan(load_scenario(path), results_paths=[]).to_json()
    return {o["id"]: o for o in doc["options"] if o["kind"] == "onprem"}


def v(fig):
    return fig["value"]


def test_node_power_comes_from_datasheets(options):
    assert v(options["onprem/dgx-b200"]["power"]["node_power_w"]) == 14300.0
    assert v(options["onprem/dgx-h200"]["power"]["node_power_w"]) == 10200.0
    assert v(options["onprem/gb200-nvl72-rack"]["power"]["node_power_w"]) >= 120_000
    for oid in ("onprem/dgx-b200", "onprem/dgx-h200", "onprem/gb200-nvl72-rack"):
        assert options[oid]["power"]["basis"] == "catalog"


def test_missing_power_is_estimated_and_says_so(options):
    pw = options["onprem/dell-xe9680-mi300x"]["power"]
    cat = get_catalog()
    b200, mi = cat.node("dgx-b200"), cat.gpu("mi300x")
    # 8 x MI300X TDP x (DGX B200 14.3 kW / (8 x 1000 W))
    expected = 8 * mi.tdp_w * b200.max_power_w / (8 * cat.gpu(b200.accelerator_id).tdp_w)
    assert v(pw["node_power_w"]) == pytest.approx(expected)
    assert 10_000 < expected < 12_500
    assert pw["basis"].startswith("estimated from GPU TDP + host overhead")
    assert "dgx-b200" in pw["basis"]
    assert "catalog" not in pw["basis"]
    assert "estimated" in pw["node_power_w"]["label"]


def test_nvl72_racks_are_the_unit_they_are(options):
    pw = options["onprem/gb200-nvl72-rack"]["power"]
    assert v(pw["nodes_per_rack"]) == 1 and v(pw["racks"]) == 2
    assert pw["cooling"] == "liquid"


def test_default_rack_power_holds_air_cooled_racks(options):
    # no constraints.power_per_rack_kw: the node row's reference air-cooled rack (56 kW)
    pw = options["onprem/dgx-b200"]["power"]
    assert v(pw["rack_power_limit_w"]) == 56000.0
    assert v(pw["nodes_per_rack"]) == 3  # floor(56 / 14.3)
    assert v(pw["racks"]) == 6  # 18 nodes
    assert v(pw["power_per_full_rack_w"]) <= v(pw["rack_power_limit_w"])
    assert v(pw["weight_per_full_rack_kg"]) == pytest.approx(3 * 142.4)


def test_144_gpus_on_a_handful_of_switches(options):
    fb = options["onprem/gb200-nvl72-rack"]["fabric"]
    # 144 x 400G on 64 x 800G switches split to 128 x 400G: 3 leaves + 2 spines
    assert (v(fb["tiers"]), v(fb["leaf_switches"]), v(fb["spine_switches"])) == (2, 3, 2)
    assert v(fb["switches"]) == 5
    # twin-port modules on the split switch ports: 144 NIC ends + (144 + 2 x 192) / 2
    assert v(fb["transceivers"]) == 408
    assert v(fb["host_links_optical"]) == 144


def test_scenario_rack_weight_limit_caps_nodes_per_rack(tmp_path):
    """constraints.rack_weight_limit_kg reaches the rack sizing: a limit of 2.5 DGX B200s
    (catalog weight) holds 2 per rack where the default 56 kW rack holds 3."""
    node_kg = get_catalog().node("dgx-b200").weight_kg
    limit = 2.5 * node_kg
    path = tmp_path / "s.yaml"
    path.write_text(
        SCENARIO.replace("gpus: [h100, h200, b200, gb200, mi300x]", "gpus: [b200]").replace(
            "onprem_nodes: [dgx-h100, dgx-h200, dgx-b200, gb200-nvl72-rack, dell-xe9680-mi300x]",
            "onprem_nodes: [dgx-b200]",
        )
        + f"constraints:\n  rack_weight_limit_kg: {limit}\n"
    )
    doc = build_plan(load_scenario(path), results_paths=[]).to_json()
    pw = next(o for o in doc["options"] if o["id"] == "onprem/dgx-b200")["power"]
    assert v(pw["nodes_per_rack"]) == 2
    assert pw["racks_limited_by"] == "rack weight"
    assert v(pw["racks"]) == 9  # 18 nodes, 2 per rack
    assert v(pw["weight_per_full_rack_kg"]) <= limit
