"""Node power, racks and their limits: hand-computed cases and properties over generated fleets."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.plan import power as pw
from gpuplan.plan.provenance import input_fig


def f(value, unit="", label="x"):
    return input_fig(value, unit, label, "test")


def test_estimate_is_labelled_and_names_its_basis():
    # 8 x 750 W MI300X, DGX B200 ratio 14.3 kW / (8 x 1000 W) = 1.7875 -> 10,725 W
    ratio = pw.host_overhead_ratio(
        ref_id="dgx-b200",
        ref_max_power_w=f(14300.0, "W"),
        ref_tdp_w=f(1000.0, "W"),
        ref_gpus_per_node=f(8, "GPUs"),
    )
    est = pw.node_power_w(
        gpus_per_node=f(8, "GPUs"),
        tdp_w=f(750.0, "W"),
        node_max_power_w=None,
        measured_gpu_power_w=None,
        overhead_ratio=ratio,
    )
    assert est.value == 10725.0
    assert "estimated from GPU TDP + host overhead" in est.label
    assert "dgx-b200" in est.prov.formula
    # a node max power always wins over the estimate
    cat = pw.node_power_w(
        gpus_per_node=f(8, "GPUs"),
        tdp_w=f(750.0, "W"),
        node_max_power_w=f(12000.0, "W"),
        measured_gpu_power_w=None,
        overhead_ratio=ratio,
    )
    assert (cat.value, cat.label) == (12000.0, "node power")


def test_nvl72_is_one_rack_each_never_two_in_one():
    r = pw.racks_for(
        nodes=f(2, "nodes"),
        node_power=f(132000.0, "W"),
        power_per_rack_kw=f(300.0, "kW"),  # a rack that could power two by the numbers
        rack_units_per_rack=None,
        node_rack_units=None,
        rack_scale=True,
    )
    assert (r["nodes_per_rack"].value, r["racks"].value) == (1, 2)
    assert r["limited_by"] == "rack-scale system"
    # a hall whose racks take 100 kW cannot host a 132 kW NVL72 at all: binding, not 1 rack
    r = pw.racks_for(
        nodes=f(2, "nodes"),
        node_power=f(132000.0, "W"),
        power_per_rack_kw=f(100.0, "kW"),
        rack_units_per_rack=None,
        node_rack_units=None,
        rack_scale=True,
    )
    assert r["nodes_per_rack"].value == 0 and not r["racks"].ok
    assert "power_per_rack_kw" in r["binding"].plain()


def test_no_rack_limit_is_missing_not_one_rack():
    r = pw.racks_for(
        nodes=f(1024, "nodes"),
        node_power=f(10200.0, "W"),
        power_per_rack_kw=None,
        rack_units_per_rack=None,
        node_rack_units=None,
    )
    assert not r["racks"].ok and not r["nodes_per_rack"].ok
    assert "power_per_rack_kw" in r["racks"].missing


def test_weight_limit_binds():
    # 142.4 kg DGX B200, a rack rated for 600 kg of equipment -> floor(4.21) = 4 by weight,
    # 56 kW / 14.3 kW = 3 by power: power binds; at 400 kg weight binds (2).
    common = dict(
        nodes=f(10, "nodes"),
        node_power=f(14300.0, "W"),
        power_per_rack_kw=f(56.0, "kW"),
        rack_units_per_rack=None,
        node_rack_units=None,
        node_weight_kg=f(142.4, "kg"),
    )
    r = pw.racks_for(**common, rack_weight_limit_kg=f(600.0, "kg"))
    assert (r["nodes_per_rack"].value, r["racks"].value, r["limited_by"]) == (3, 4, "rack power")
    r = pw.racks_for(**common, rack_weight_limit_kg=f(400.0, "kg"))
    assert (r["nodes_per_rack"].value, r["racks"].value, r["limited_by"]) == (2, 5, "rack weight")


def test_full_rack_power():
    r = pw.rack_power_w(f(3, "nodes"), f(14300.0, "W"))
    assert r.value == 42900.0


@settings(max_examples=300, deadline=None)
@given(
    nodes=st.integers(1, 5000),
    node_w=st.floats(500.0, 150_000.0),
    rack_kw=st.floats(5.0, 200.0),
    rack_u=st.one_of(st.none(), st.integers(1, 52)),
    node_u=st.integers(1, 10),
    node_kg=st.one_of(st.none(), st.floats(10.0, 1500.0)),
    rack_kg=st.floats(100.0, 2000.0),
    rack_scale=st.booleans(),
)
def test_racks_never_exceed_their_limits(
    nodes, node_w, rack_kw, rack_u, node_u, node_kg, rack_kg, rack_scale
):
    def plan(n):
        return pw.racks_for(
            nodes=f(n, "nodes"),
            node_power=f(node_w, "W"),
            power_per_rack_kw=f(rack_kw, "kW"),
            rack_units_per_rack=f(rack_u, "U") if rack_u else None,
            node_rack_units=f(node_u, "U") if rack_u else None,
            rack_scale=rack_scale,
            node_weight_kg=f(node_kg, "kg") if node_kg else None,
            rack_weight_limit_kg=f(rack_kg, "kg") if node_kg else None,
        )

    r = plan(nodes)
    per = r["nodes_per_rack"].value
    assert per * node_w <= rack_kw * 1000.0 * (1 + 1e-9)  # power
    if rack_u:
        assert per * node_u <= rack_u  # space
    if node_kg:
        assert per * node_kg <= rack_kg * (1 + 1e-9)  # weight
    if rack_scale:
        assert per <= 1
    if per == 0:
        assert not r["racks"].ok and r["binding"] is not None
        return
    assert r["racks"].value == math.ceil(nodes / per)
    assert r["racks"].value * per >= nodes
    # more nodes never need fewer racks
    assert plan(nodes + 1)["racks"].value >= r["racks"].value
