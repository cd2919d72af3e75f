"""Whole-appliance sizing, the writers' cap and the catalog's cloud tiers for 10 PB and a
405B checkpoint every hour (issue 17 item 3). Figures are hand-computed below."""

from __future__ import annotations

import math

import pytest

from gpuplan.catalogs.catalog import load_catalog
from gpuplan.plan import storage as st
from gpuplan.plan.provenance import catalog_fig, input_fig, missing_fig

TEN_PB = 10e15
CKPT_405B = 405e9 * 14.0  # 5.67e12 B
BUDGET_S = 300.0
WRITE_NEED = CKPT_405B / BUDGET_S  # 18.9e9 B/s


def fig(v, unit="x"):
    return input_fig(v, unit, "f", "test")


def none(unit="x"):
    return missing_fig(unit, "m", "none")


def appliance(read, write, cap, price=None):
    # hypothetical building blocks: the tests check the arithmetic, not a vendor's datasheet
    return st.ApplianceTier(
        id="box",
        name="box",
        read_bytes_per_s_per_appliance=fig(read) if read else none(),
        write_bytes_per_s_per_appliance=fig(write) if write else none(),
        capacity_bytes_per_appliance=fig(cap) if cap else none(),
        price_usd_per_gib_month=fig(price) if price else none(),
        gpudirect_storage=True,
    )


def needs(read=100e9):
    return dict(
        capacity=fig(TEN_PB),
        read_bps=fig(read),
        write_bps=fig(WRITE_NEED),
        ckpt=fig(CKPT_405B),
        budget_s=fig(BUDGET_S),
    )


def test_capacity_buys_the_appliances():
    # 10e15 / 1e15 = 10 for capacity, 100e9 / 20e9 = 5 for reads, 18.9e9 / 10e9 -> 2 writes
    f = st.fit_appliances(appliance(20e9, 10e9, 1e15, price=0.05), **needs())
    assert f.appliances.value == 10 and f.sized_by == "capacity"
    assert f.read_bytes_per_s.value == pytest.approx(200e9)
    assert f.write_bytes_per_s.value == pytest.approx(100e9)
    assert f.checkpoint_write_s.value == pytest.approx(56.7)  # 5.67e12 / 100e9
    assert f.fits and f.gpudirect_storage is True
    assert f.usd_per_month.value == pytest.approx(TEN_PB / 2**30 * 0.05)


def test_reads_and_writes_are_sized_each_against_their_own_figure():
    # reads 1.5e12 / 20e9 = 75; writes 18.9e9 / 0.2e9 = 94.5 -> 95 appliances
    f = st.fit_appliances(appliance(20e9, 0.2e9, 1e15), **needs(read=1.5e12))
    assert f.appliances.value == 95 and f.sized_by == "checkpoint writes"
    assert f.checkpoint_write_s.value <= BUDGET_S
    assert f.checkpoint_write_s.value == pytest.approx(CKPT_405B / (95 * 0.2e9))


def test_one_throughput_figure_serves_both_directions():
    f = st.fit_appliances(appliance(5e9, None, 1e15), **needs())
    # reads 100e9 / 5e9 = 20 > capacity 10 > writes 18.9e9 / 5e9 -> 4; write = 20 x 5e9
    assert f.appliances.value == 20 and f.sized_by == "read bandwidth"
    assert f.write_bytes_per_s.value == pytest.approx(100e9)


def test_writers_cap_the_checkpoint_and_more_boxes_do_not_help():
    # 2 writers x 5e9 B/s = 10e9 B/s < 18.9e9: 5.67e12 / 10e9 = 567 s > 300 s budget
    cap = st.client_write_cap(fig(2, "nodes"), fig(5e9, "B/s"))
    f = st.fit_appliances(appliance(20e9, 10e9, 1e15), **needs(), write_cap=cap)
    assert f.appliances.value == 10
    assert f.write_bytes_per_s.value == pytest.approx(10e9)
    assert f.checkpoint_write_s.value == pytest.approx(567.0)
    assert not f.fits and "writers" in f.reason and "300 s" in f.reason


def test_writers_that_outrun_the_tier_leave_it_as_it_is():
    cap = st.client_write_cap(fig(64, "nodes"), fig(50e9, "B/s"))  # 3.2e12 B/s
    f = st.fit_appliances(appliance(20e9, 10e9, 1e15), **needs(), write_cap=cap)
    assert f.write_bytes_per_s.value == pytest.approx(100e9) and f.fits


def test_missing_per_appliance_figures_stay_missing():
    f = st.fit_appliances(appliance(None, None, None), **needs())
    assert not f.fits and not f.appliances.ok and not f.usd_per_month.ok
    assert not f.sized and len(f.missing) == 3
    g = st.fit_appliances(appliance(None, None, 1e15), **needs())
    # no partial count that would read as a sizing: not sized, and why, in one line
    assert not g.appliances.ok and not g.fits and not g.checkpoint_write_s.ok
    assert g.missing == ["read_bytes_per_s_per_appliance", "write_bytes_per_s_per_appliance"]
    assert g.reason == (
        "box not sized: the catalog has no read_bytes_per_s_per_appliance, "
        "write_bytes_per_s_per_appliance (the capacity figure alone asks for 10 appliances)"
    )
    assert "\n" not in g.reason


def test_boxes_past_what_the_writers_can_fill_are_not_bought():
    # writes alone would buy ceil(18.9e9 / 0.2e9) = 95 boxes; 4 writers x 2e9 B/s = 8e9 B/s
    # can fill only ceil(8e9 / 0.2e9) = 40; capacity needs 10 and reads 100e9 / 20e9 = 5
    cap = st.client_write_cap(fig(4, "nodes"), fig(2e9, "B/s"))
    f = st.fit_appliances(appliance(20e9, 0.2e9, 1e15), **needs(), write_cap=cap)
    assert f.appliances.value == 40 and f.sized_by == "checkpoint writes"
    assert f.write_bytes_per_s.value == pytest.approx(8e9)  # 40 x 0.2e9, equal to the cap
    assert f.checkpoint_write_s.value == pytest.approx(CKPT_405B / 8e9)
    assert not f.fits and "writers" in f.reason  # 709 s > 300 s: more boxes would not help


def test_rack_units_power_and_capex_scale_with_the_appliances():
    tier = st.ApplianceTier(
        id="box",
        name="box",
        read_bytes_per_s_per_appliance=fig(20e9),
        write_bytes_per_s_per_appliance=fig(10e9),
        capacity_bytes_per_appliance=fig(1e15),
        price_usd_per_gib_month=none(),
        rack_units_per_appliance=fig(2, "U"),
        power_w_per_appliance=fig(1500, "W"),
        capex_usd_per_appliance=fig(250_000, "USD"),
    )
    f = st.fit_appliances(tier, **needs())
    n = f.appliances.value
    assert n == math.ceil(TEN_PB / 1e15)
    assert f.rack_units.value == 2 * n and f.power_w.value == 1500 * n
    assert f.capex_usd.value == 250_000 * n
    # ranked against a per-month tier by its capex over the depreciation months
    assert st.monthly_equivalent(f, fig(48, "months")) == pytest.approx(250_000 * n / 48)
    assert st.monthly_equivalent(f) is None


def test_pick_tier_compares_capex_spread_over_months_with_monthly_prices():
    bought = st.fit_appliances(
        st.ApplianceTier(
            id="bought",
            name="bought",
            read_bytes_per_s_per_appliance=fig(20e9),
            write_bytes_per_s_per_appliance=fig(10e9),
            capacity_bytes_per_appliance=fig(1e15),
            price_usd_per_gib_month=none(),
            capex_usd_per_appliance=fig(480_000, "USD"),
        ),
        **needs(),
    )  # 10 boxes: 4.8e6 USD over 48 months = 100k USD/month
    rented = st.fit_appliances(appliance(20e9, 10e9, 1e15, price=0.012), **needs())
    # 10e15 B / 2**30 x 0.012 = 111.8k USD/month: buying is cheaper
    assert rented.usd_per_month.value > 100_000
    assert st.pick_tier([rented, bought], fig(48, "months")) is bought
    assert st.pick_tier([rented, bought], fig(24, "months")) is rented  # 200k/month
    assert st.pick_tier([rented, bought]) is rented  # no period: only the monthly price ranks


# ---- the catalog's cloud tiers for the same case ------------------------------------


def catalog_tier(row_id):
    row = load_catalog().storage_tier(row_id)

    def get(name, unit):
        v = getattr(row, name)
        if not v:
            return none(unit)
        return catalog_fig(
            v,
            unit,
            f"{row_id} {name}",
            row_kind="storage",
            row_id=row_id,
            field_name=name,
            source=row.source,
            retrieved=str(row.retrieved),
        )

    return st.StorageTier(
        id=row.id,
        name=row.name,
        read_bytes_per_s_per_tib=get("read_bytes_per_s_per_tib", "B/s"),
        write_bytes_per_s_per_tib=get("write_bytes_per_s_per_tib", "B/s"),
        min_capacity_bytes=get("capacity_min_bytes", "B"),
        max_capacity_bytes=get("capacity_max_bytes", "B"),
        increment_bytes=get("capacity_step_bytes", "B"),
        price_usd_per_gib_month=none("USD"),
        cloud=row.provider,
    )


TIB_10PB = TEN_PB / 2**40  # 9094.95 TiB


@pytest.mark.parametrize(
    ("row_id", "per_tib", "tib", "fits"),
    [
        ("fsx-lustre-persistent2-125", 125e6, TIB_10PB, True),
        ("fsx-lustre-persistent2-1000", 1000e6, TIB_10PB, True),
        ("gcp-managed-lustre-1000", 1000e6, TIB_10PB, True),  # max 10,008,000 GiB = 9773 TiB
        ("gcp-managed-lustre-500", 500e6, TIB_10PB, True),
        ("gcp-managed-lustre-125", 125e6, TIB_10PB, True),  # max 12,240,000 GiB = 11953 TiB
        ("azure-managed-lustre-40", 40e6, 190 * 48, False),  # 48 TiB steps; max 768 TiB
        ("azure-managed-lustre-500", 500e6, 2274 * 4, False),  # 4 TiB steps; max 128 TiB
    ],
)
def test_cloud_tier_for_10_pb_and_405b_hourly(row_id, per_tib, tib, fits):
    tier = catalog_tier(row_id)
    f = st.fit_tier(tier, **needs())
    # capacity sizes every tier: 9094.95 TiB x 125 MB/s = 1.14 TB/s >> 18.9 GB/s
    assert f.sized_by == "capacity"
    assert f.write_bytes_per_s.value == pytest.approx(tib * per_tib)
    assert f.checkpoint_write_s.value == pytest.approx(CKPT_405B / (tib * per_tib))
    assert f.checkpoint_write_s.value < BUDGET_S
    assert f.fits is fits
    if not fits:
        assert "maximum" in f.reason


def test_azure_40_steps_are_whole_48_tib_units():
    tier = catalog_tier("azure-managed-lustre-40")
    f = st.fit_tier(tier, **needs())
    assert f.provisioned_bytes.value == math.ceil(TIB_10PB / 48) * 48 * 2**40  # 190 x 48 TiB
