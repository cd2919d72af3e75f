"""Storage and power sizing on hand-computed cases."""

from __future__ import annotations

import pytest

from gpuplan.plan import power as pw
from gpuplan.plan import storage as sto
from gpuplan.plan.provenance import input_fig, missing_fig

TIB = 2**40
GIB = 2**30


def f(value, unit="", label=None):
    return input_fig(value, unit, label or f"x{value}", "test")


# ------------------------------------------------------------------ storage


def test_checkpoint_capacity_and_bandwidths():
    # 70e9 parameters x 14 B = 980 GB per checkpoint; 3 kept + a 4 TB dataset = 6.94 TB.
    ckpt = sto.checkpoint_bytes(f(70e9, "parameters"), f(14.0, "B"))
    assert ckpt.value == pytest.approx(980e9)
    cap = sto.capacity_bytes(f(4e12, "B"), ckpt, f(3, "checkpoints"))
    assert cap.value == pytest.approx(4e12 + 3 * 980e9)
    # 1.2M tokens/s x 4 B = 4.8 MB/s of sustained read
    read = sto.read_bandwidth(f(1.2e6, "tokens/s"), f(4, "B"))
    assert read.value == pytest.approx(4.8e6)
    # write 980 GB within 300 s: 3.2667 GB/s
    write = sto.write_bandwidth(ckpt, f(300.0, "s"))
    assert write.value == pytest.approx(980e9 / 300)
    # samples: 1.2M tokens/s / 8192 tokens per sample x 1 MB per sample
    rs = sto.read_bandwidth_samples(f(1.2e6), f(8192), f(1e6))
    assert rs.value == pytest.approx(1.2e6 / 8192 * 1e6)
    assert ckpt.prov.kind == "derived" and "ZeRO" in ckpt.prov.formula


def test_read_bandwidth_carries_the_forecast_interval():
    tps = input_fig(1e6, "tokens/s", "tps", "t")
    from gpuplan.plan.provenance import Figure

    tps = Figure(1e6, "tokens/s", "tps", tps.prov, interval=(0.8e6, 1.1e6))
    read = sto.read_bandwidth(tps, f(2, "B"))
    assert read.interval == (1.6e6, 2.2e6)


def test_bytes_per_token():
    assert sto.bytes_per_token_for_vocab(65536) == 2
    assert sto.bytes_per_token_for_vocab(65537) == 4


def _tier(read_mb_per_tib=250.0, write=None, min_tib=8, max_tib=128, step_tib=8, price=None):
    return sto.StorageTier(
        id="lustre-250",
        name="test Lustre",
        read_bytes_per_s_per_tib=f(read_mb_per_tib * 1e6, "B/s per TiB", "r"),
        write_bytes_per_s_per_tib=f(write, "B/s per TiB", "w")
        if write
        else missing_fig("B/s per TiB", "w", "none"),
        min_capacity_bytes=f(min_tib * TIB, "B", "min"),
        max_capacity_bytes=f(max_tib * TIB, "B", "max"),
        increment_bytes=f(step_tib * TIB, "B", "step"),
        price_usd_per_gib_month=f(price, "USD/GiB-month", "p")
        if price
        else missing_fig("USD/GiB-month", "p", "no price"),
    )


def test_tier_sized_by_write_bandwidth():
    # need 10 TiB, read 1 GB/s, write 5 GB/s at 250 MB/s per TiB (reads and writes alike):
    # capacity 10 TiB; read 4 TiB; write 5e9/250e6 = 20 TiB -> 20 TiB, rounded to 8 TiB
    # steps = 24 TiB; delivers 24 x 250 MB/s = 6 GB/s; a 980 GB checkpoint takes 163.3 s;
    # at 0.1 USD per GiB-month: 24 x 1024 x 0.1 = 2457.6 USD per month.
    fit = sto.fit_tier(
        _tier(price=0.1),
        capacity=f(10 * TIB, "B"),
        read_bps=f(1e9, "B/s"),
        write_bps=f(5e9, "B/s"),
        ckpt=f(980e9, "B"),
    )
    assert fit.fits and fit.sized_by == "checkpoint writes"
    assert fit.provisioned_bytes.value == 24 * TIB
    assert fit.write_bytes_per_s.value == pytest.approx(6e9)
    assert fit.checkpoint_write_s.value == pytest.approx(980e9 / 6e9)
    assert fit.usd_per_month.value == pytest.approx(24 * 1024 * 0.1)


def test_tier_minimum_and_maximum():
    small = sto.fit_tier(
        _tier(), capacity=f(1 * TIB), read_bps=f(1e6), write_bps=f(1e6), ckpt=f(1e9)
    )
    assert small.provisioned_bytes.value == 8 * TIB and small.sized_by == "tier minimum"
    assert not small.usd_per_month.ok and "no price" in small.usd_per_month.missing
    big = sto.fit_tier(
        _tier(), capacity=f(200 * TIB), read_bps=f(1e6), write_bps=f(1e6), ckpt=f(1e9)
    )
    assert not big.fits and "maximum" in big.reason


def test_pick_tier_prefers_the_cheapest_that_fits():
    cheap = sto.fit_tier(
        _tier(price=0.05), capacity=f(10 * TIB), read_bps=f(1e9), write_bps=f(1e9), ckpt=f(1e9)
    )
    dear = sto.fit_tier(
        _tier(price=0.5), capacity=f(10 * TIB), read_bps=f(1e9), write_bps=f(1e9), ckpt=f(1e9)
    )
    assert sto.pick_tier([dear, cheap]) is cheap
    assert sto.pick_tier([]) is None


def test_local_nvme_check():
    out = sto.local_nvme_check(f(10e9, "B/s"), f(100, "nodes"), f(2e9, "B/s"))
    assert out["read_needed_per_node_bytes_per_s"].value == pytest.approx(1e8)
    assert out["local_nvme_sufficient"] is True
    out = sto.local_nvme_check(f(10e9, "B/s"), f(2, "nodes"), f(2e9, "B/s"))
    assert out["local_nvme_sufficient"] is False


# ------------------------------------------------------------------ power


def test_node_power_from_measurement_or_catalog():
    gpn, tdp, node = f(8, "GPUs"), f(700.0, "W"), f(10200.0, "W")
    # catalog: the node's max power
    assert (
        pw.node_power_w(
            gpus_per_node=gpn, tdp_w=tdp, node_max_power_w=node, measured_gpu_power_w=None
        ).value
        == 10200.0
    )
    # measured 600 W per GPU: 8 x 600 + (10200 - 8 x 700) = 4800 + 4600 = 9400 W
    m = pw.node_power_w(
        gpus_per_node=gpn, tdp_w=tdp, node_max_power_w=node, measured_gpu_power_w=f(600.0, "W")
    )
    assert m.value == 9400.0 and "measured" in m.prov.formula
    # no node row: GPUs only, and it says so
    g = pw.node_power_w(
        gpus_per_node=gpn, tdp_w=tdp, node_max_power_w=None, measured_gpu_power_w=None
    )
    assert g.value == 5600.0 and "not counted" in g.prov.formula


def test_racks_power_density_limit():
    # 40 kW racks, 10.2 kW nodes -> floor(3.92) = 3 per rack (8U nodes in 42U would allow 5);
    # 70 nodes -> ceil(70/3) = 24 racks.
    r = pw.racks_for(
        nodes=f(70, "nodes"),
        node_power=f(10200.0, "W"),
        power_per_rack_kw=f(40.0, "kW"),
        rack_units_per_rack=f(42, "U"),
        node_rack_units=f(8, "U"),
    )
    assert r["nodes_per_rack"].value == 3
    assert r["racks"].value == 24
    assert r["limited_by"] == "rack power" and r["binding"] is None
    # denser racks: 100 kW -> 9 by power, 5 by height -> height binds
    r = pw.racks_for(
        nodes=f(70, "nodes"),
        node_power=f(10200.0, "W"),
        power_per_rack_kw=f(100.0, "kW"),
        rack_units_per_rack=f(42, "U"),
        node_rack_units=f(8, "U"),
    )
    assert (r["nodes_per_rack"].value, r["racks"].value, r["limited_by"]) == (5, 14, "rack units")


def test_node_above_the_rack_limit_binds():
    r = pw.racks_for(
        nodes=f(70, "nodes"),
        node_power=f(10200.0, "W"),
        power_per_rack_kw=f(8.0, "kW"),
        rack_units_per_rack=None,
        node_rack_units=None,
    )
    assert r["nodes_per_rack"].value == 0
    assert not r["racks"].ok
    assert "power_per_rack_kw" in r["binding"].plain()
    assert "10.2 kW" in r["binding"].plain()


def test_it_and_facility_power():
    it = pw.it_power_w(f(70, "nodes"), f(10200.0, "W"), f(30000.0, "W"))
    assert it.value == 70 * 10200.0 + 30000.0
    fac = pw.facility_power_w(it, f(1.3))
    assert fac.value == pytest.approx(it.value * 1.3)
    assert not pw.facility_power_w(it, missing_fig("ratio", "PUE", "no PUE")).ok


def test_tier_bought_in_throughput_increments():
    # 4,000 MB/s increments: need max(3 GB/s read, 9 GB/s write) -> 3 increments = 12 GB/s;
    # the 980 GB checkpoint then writes in 81.7 s; capacity is sized on its own.
    tier = sto.StorageTier(
        id="inc",
        name="increments",
        read_bytes_per_s_per_tib=missing_fig("B/s per TiB", "r", "none"),
        write_bytes_per_s_per_tib=missing_fig("B/s per TiB", "w", "none"),
        min_capacity_bytes=missing_fig("B", "min", "none"),
        max_capacity_bytes=missing_fig("B", "max", "none"),
        increment_bytes=missing_fig("B", "step", "none"),
        price_usd_per_gib_month=missing_fig("USD/GiB-month", "p", "no price"),
        throughput_increment_bytes_per_s=f(4e9, "B/s", "inc"),
    )
    fit = sto.fit_tier(tier, capacity=f(50 * TIB), read_bps=f(3e9), write_bps=f(9e9), ckpt=f(980e9))
    assert fit.fits
    assert fit.read_bytes_per_s.value == fit.write_bytes_per_s.value == 12e9
    assert fit.provisioned_bytes.value == 50 * TIB
    assert fit.checkpoint_write_s.value == pytest.approx(980e9 / 12e9)
    assert fit.sized_by == "checkpoint writes"
