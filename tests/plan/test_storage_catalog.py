"""Storage tiers from the shipped catalog: per-appliance rows, dated prices, bad rows and
bad scenarios (issue 17 item 3). Expected figures are computed from the catalog rows
themselves, so the tests check the sizing arithmetic, not a copy of its output."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest

from gpuplan.catalogs import load_catalog, validate_catalog
from gpuplan.catalogs.loader import default_data_dir
from gpuplan.plan import cost as costmod
from gpuplan.plan import power as powmod
from gpuplan.plan import storage as st
from gpuplan.plan.provenance import input_fig, missing_fig

CAT = load_catalog()
TEN_PB = 10e15
CKPT_405B = 405.853e9 * 14.0
BUDGET_S = 300.0


def fig(v, unit="x"):
    return input_fig(v, unit, "f", "test")


def appliance_tier(row) -> st.ApplianceTier:
    def get(name, unit):
        v = getattr(row, name)
        return fig(v, unit) if v is not None else missing_fig(unit, name, f"no {name}")

    return st.ApplianceTier(
        id=row.id,
        name=row.name,
        read_bytes_per_s_per_appliance=get("read_bytes_per_s_per_appliance", "B/s"),
        write_bytes_per_s_per_appliance=get("write_bytes_per_s_per_appliance", "B/s"),
        capacity_bytes_per_appliance=get("capacity_bytes_per_appliance", "B"),
        price_usd_per_gib_month=missing_fig("USD/GiB-month", "p", "no price"),
        rack_units_per_appliance=get("rack_units_per_appliance", "U"),
        power_w_per_appliance=get("power_w_per_appliance", "W"),
        min_appliances=fig(row.min_appliances) if row.min_appliances else None,
    )


def test_every_on_prem_tier_is_sold_in_appliances_and_cloud_tiers_per_tib():
    for row in CAT.storage:
        if row.provider in ("aws", "gcp", "azure"):
            assert not row.per_appliance, row.id
        elif row.kind_of_storage != "local_nvme":
            assert row.per_appliance, row.id
            assert row.read_bytes_per_s_per_tib is None  # one sizing rule per row


def test_lustre_appliances_for_10_pb_and_a_405b_checkpoint():
    row = CAT.storage_tier("ClusterStor E1000")
    tier = appliance_tier(row)
    read = 1e12  # a pipeline reading 1 TB/s
    f = st.fit_appliances(
        tier,
        capacity=fig(TEN_PB),
        read_bps=fig(read),
        write_bps=fig(CKPT_405B / BUDGET_S),
        ckpt=fig(CKPT_405B),
        budget_s=fig(BUDGET_S),
    )
    by_cap = math.ceil(TEN_PB / row.capacity_bytes_per_appliance)
    by_read = math.ceil(read / row.read_bytes_per_s_per_appliance)
    by_write = math.ceil(CKPT_405B / BUDGET_S / row.write_bytes_per_s_per_appliance)
    n = max(by_cap, by_read, by_write)
    assert f.appliances.value == n
    assert f.sized_by == "capacity" if n == by_cap else f.sized_by != "capacity"
    assert f.provisioned_bytes.value == pytest.approx(n * row.capacity_bytes_per_appliance)
    assert f.provisioned_bytes.value >= TEN_PB
    assert f.rack_units.value == n * row.rack_units_per_appliance
    assert not f.power_w.ok  # power per unit not in the catalog: stays missing, not zero
    w = n * row.write_bytes_per_s_per_appliance
    assert f.checkpoint_write_s.value == pytest.approx(CKPT_405B / w)
    assert f.fits and f.sized


def test_weka_servers_for_10_pb_and_never_fewer_than_its_minimum_system():
    row = CAT.storage_tier("WEKApod")
    assert row.min_appliances and row.power_w_per_appliance
    big = st.fit_appliances(
        appliance_tier(row),
        capacity=fig(TEN_PB),
        read_bps=fig(1e11),
        write_bps=fig(CKPT_405B / BUDGET_S),
        ckpt=fig(CKPT_405B),
        budget_s=fig(BUDGET_S),
    )
    n = math.ceil(TEN_PB / row.capacity_bytes_per_appliance)  # capacity binds at 10 PB
    assert n > row.min_appliances and big.appliances.value == n and big.sized_by == "capacity"
    assert big.power_w.value == n * row.power_w_per_appliance
    assert big.rack_units.value == n * row.rack_units_per_appliance
    small = st.fit_appliances(
        appliance_tier(row),
        capacity=fig(1e12),
        read_bps=fig(1e9),
        write_bps=fig(1e9),
        ckpt=fig(1e12),
        budget_s=fig(BUDGET_S),
    )  # one server would do: the vendor sells no fewer than its minimum system
    assert small.appliances.value == row.min_appliances and small.sized_by == "tier minimum"
    assert small.provisioned_bytes.value == row.min_appliances * row.capacity_bytes_per_appliance


def test_ddn_es400x3_is_sized_from_the_published_deployment():
    row = CAT.storage_tier("AI400X3")
    assert row.id == "ddn-exascaler-es400x3" and row.gpudirect_storage
    # the deployment's totals (RIKEN R-CCS: two appliances) are what the row halves
    assert 2 * row.capacity_bytes_per_appliance == pytest.approx(1081.34e12)
    assert 2 * row.read_bytes_per_s_per_appliance == pytest.approx(260e9)
    assert 2 * row.write_bytes_per_s_per_appliance == pytest.approx(180e9)
    read = 1e12
    f = st.fit_appliances(
        appliance_tier(row),
        capacity=fig(TEN_PB),
        read_bps=fig(read),
        write_bps=fig(CKPT_405B / BUDGET_S),
        ckpt=fig(CKPT_405B),
        budget_s=fig(BUDGET_S),
    )
    n = max(
        math.ceil(TEN_PB / row.capacity_bytes_per_appliance),
        math.ceil(read / row.read_bytes_per_s_per_appliance),
        math.ceil(CKPT_405B / BUDGET_S / row.write_bytes_per_s_per_appliance),
    )
    assert f.sized and f.fits and f.appliances.value == n
    assert f.checkpoint_write_s.value == pytest.approx(
        CKPT_405B / (n * row.write_bytes_per_s_per_appliance)
    )
    # height and power are not in the source: missing, never zero
    assert not f.rack_units.ok and not f.power_w.ok


def test_gpfs_building_blocks_for_10_pb_with_one_throughput_figure():
    row = CAT.storage_tier("SSS 3500")
    assert row.id == "ibm-storage-scale-system-3500"
    assert row.write_bytes_per_s_per_appliance is None  # IBM gives one throughput figure
    f = st.fit_appliances(
        appliance_tier(row),
        capacity=fig(TEN_PB),
        read_bps=fig(1e11),
        write_bps=fig(CKPT_405B / BUDGET_S),
        ckpt=fig(CKPT_405B),
        budget_s=fig(BUDGET_S),
    )
    n = math.ceil(TEN_PB / row.capacity_bytes_per_appliance)
    assert f.sized and f.appliances.value == n and f.sized_by == "capacity"
    # the one figure serves both directions
    assert f.write_bytes_per_s.value == f.read_bytes_per_s.value
    assert f.read_bytes_per_s.value == n * row.read_bytes_per_s_per_appliance
    assert f.rack_units.value == n * row.rack_units_per_appliance
    # the 6000 has IBM's read figure but no usable capacity: not sized, and says so
    big = st.fit_appliances(
        appliance_tier(CAT.storage_tier("SSS 6000")),
        capacity=fig(TEN_PB),
        read_bps=fig(1e11),
        write_bps=fig(CKPT_405B / BUDGET_S),
        ckpt=fig(CKPT_405B),
        budget_s=fig(BUDGET_S),
    )
    assert not big.sized and big.missing == ["capacity_bytes_per_appliance"]


@pytest.mark.parametrize(
    "row_id", ["ddn-exascaler-ai400x2-turbo", "vast-data", "ibm-storage-scale"]
)
def test_on_prem_tiers_without_datasheet_figures_name_what_is_missing(row_id):
    row = CAT.storage_tier(row_id)
    f = st.fit_appliances(
        appliance_tier(row),
        capacity=fig(TEN_PB),
        read_bps=fig(1e11),
        write_bps=fig(CKPT_405B / BUDGET_S),
        ckpt=fig(CKPT_405B),
        budget_s=fig(BUDGET_S),
    )
    absent = [n for n in st.APPLIANCE_FIELD.values() if getattr(row, n) is None]
    if row.read_bytes_per_s_per_appliance is not None:
        # a datasheet with one throughput figure: it serves writes too (fit_appliances)
        absent = [n for n in absent if n != "write_bytes_per_s_per_appliance"]
    assert absent, "this row now has all its figures: move it to the sized tests"
    assert not f.fits and sorted(f.missing) == sorted(absent)
    assert f.reason.startswith(f"{row_id} not sized: the catalog has no ")
    assert all(name in f.reason for name in absent)


def test_appliance_rows_list_their_missing_sizing_figures_and_price():
    vast = CAT.storage_tier("vast-data")
    missing = vast.missing_fields()
    for f in st.APPLIANCE_FIELD.values():
        assert (f in missing) == (getattr(vast, f) is None)
    assert "price_usd_per_appliance" in missing  # bought: the per-TiB-month rent does not apply
    assert "price_usd_per_tib_month" not in missing
    weka = CAT.storage_tier("wekafs")
    assert not [f for f in weka.missing_fields() if f in st.APPLIANCE_FIELD.values()]
    fsx = CAT.storage_tier("fsx-lustre-persistent2-250")
    assert "price_usd_per_tib_month" in fsx.missing_fields()


def test_catalog_storage_prices_are_dated():
    priced = [r for r in CAT.storage if r.price_usd_per_tib_month is not None]
    assert priced, "no storage tier has a catalog price"
    for r in priced:
        assert r.price_as_of, r.id
        # a price from a secondary page is marked so the report can say it
        if "secondary" in r.source:
            assert r.is_unverified("price_usd_per_tib_month"), r.id


def test_owned_tco_counts_storage_capex_once_as_its_own_line():
    base = dict(
        nodes=fig(10, "nodes"),
        node_price_usd=fig(300_000, "USD"),
        network_capex_usd=fig(500_000, "USD"),
        depreciation_years=fig(4, "years"),
        facility_power_w=fig(100_000, "W"),
        electricity_usd_per_kwh=fig(0.1, "USD/kWh"),
        ops_usd_per_node_per_year=fig(1_000, "USD/node-year"),
        staff_usd_per_year=fig(0, "USD/year"),
    )
    without = costmod.onprem_tco(**base)
    with_storage = costmod.onprem_tco(**base, storage_capex_usd=fig(2_000_000, "USD"))
    assert with_storage.capex_usd.value == without.capex_usd.value + 2_000_000
    assert "storage capex" in with_storage.capex_usd.prov.formula
    assert with_storage.total_per_year_usd.value == pytest.approx(
        without.total_per_year_usd.value + 2_000_000 / 4
    )
    unpriced = costmod.onprem_tco(
        **base, storage_capex_usd=missing_fig("USD", "storage capex", "no price for x")
    )
    assert unpriced.capex_usd.value == without.capex_usd.value
    assert any("shared storage" in e and "no price for x" in e for e in unpriced.excludes)
    rented = costmod.onprem_tco(**base, storage_usd_per_year=fig(120_000, "USD/year"))
    assert rented.capex_usd.value == without.capex_usd.value  # a monthly quote is no capex
    assert rented.total_per_year_usd.value == pytest.approx(
        without.total_per_year_usd.value + 120_000
    )


def test_it_power_adds_storage_power_beside_the_network():
    it = powmod.it_power_w(fig(10, "nodes"), fig(10_000, "W"), fig(5_000, "W"), fig(3_000, "W"))
    assert it.value == 10 * 10_000 + 5_000 + 3_000
    assert "storage power" in it.prov.formula
    missing = powmod.it_power_w(
        fig(10, "nodes"), fig(10_000, "W"), None, missing_fig("W", "s", "none")
    )
    assert missing.value == 100_000


# ---- bad catalog rows ---------------------------------------------------------------------


@pytest.fixture
def catalog_copy(tmp_path: Path) -> Path:
    dst = tmp_path / "catalog"
    shutil.copytree(default_data_dir(), dst)
    return dst


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"fixture text {old!r} not found in {path.name}"
    path.write_text(text.replace(old, new, 1))


def _storage_problems(catalog: Path) -> list:
    return [p for p in validate_catalog(catalog) if p.file == "storage.yaml"]


def test_undated_storage_price_is_a_named_problem(catalog_copy: Path):
    _edit(catalog_copy / "storage.yaml", "    price_as_of: 2026-12\n", "")
    probs = _storage_problems(catalog_copy)
    assert probs and "fsx-lustre-persistent2-125" in probs[0].row
    assert "needs price_as_of" in probs[0].message


def test_appliance_price_without_date_and_negative_capacity_are_problems(catalog_copy: Path):
    _edit(
        catalog_copy / "storage.yaml",
        "    rack_units_per_appliance: 2\n",
        "    rack_units_per_appliance: 2\n    price_usd_per_appliance: 100000\n",
    )
    probs = _storage_problems(catalog_copy)
    assert any("price_usd_per_appliance needs price_as_of" in p.message for p in probs)
    _edit(
        catalog_copy / "storage.yaml",
        "capacity_bytes_per_appliance: 51.1e+12",
        "capacity_bytes_per_appliance: -1",
    )
    probs = _storage_problems(catalog_copy)
    assert any(p.field == "capacity_bytes_per_appliance" for p in probs)


def test_a_row_sized_both_per_tib_and_per_appliance_is_rejected(catalog_copy: Path):
    _edit(
        catalog_copy / "storage.yaml",
        "    read_bytes_per_s_per_tib: 125.0e+6\n",
        "    read_bytes_per_s_per_tib: 125.0e+6\n    capacity_bytes_per_appliance: 1.0e+15\n",
    )
    probs = _storage_problems(catalog_copy)
    assert any("per TiB or per appliance, not both" in p.message for p in probs)


def test_plan_with_a_bad_storage_row_is_one_line_error(catalog_copy: Path, run_cli, tmp_path):
    _edit(catalog_copy / "storage.yaml", "    price_as_of: 2026-12\n", "")
    out = tmp_path / "o"
    proc = run_cli(
        "plan",
        "examples/storage-compare.yaml",
        "--out",
        str(out),
        env={"GPUPLAN_CATALOG_DIR": str(catalog_copy)},
    )
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr
    assert "storage.yaml" in lines[0] and "fsx-lustre-persistent2-125" in lines[0]
    assert not out.exists()


# ---- bad scenarios ------------------------------------------------------------------------


def _scenario(tmp_path: Path, old: str, new: str) -> Path:
    text = Path("examples/storage-compare.yaml").read_text()
    assert old in text
    p = tmp_path / "s.yaml"
    p.write_text(text.replace(old, new, 1))
    return p


def _one_line_error(proc) -> str:
    assert proc.returncode == 2, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    return lines[0]


def test_unknown_storage_tier_names_the_closest_ids(run_cli, tmp_path):
    scen = _scenario(
        tmp_path, "candidates:\n", "storage:\n  tier: clusterstor-e2000\ncandidates:\n"
    )
    line = _one_line_error(run_cli("plan", str(scen), "--out", str(tmp_path / "o")))
    assert "clusterstor-e2000" in line and "hpe-clusterstor-e1000-ssu-f" in line


def test_non_positive_storage_quote_is_one_line_error(run_cli, tmp_path):
    scen = _scenario(
        tmp_path,
        "  restart_s: 600\n",
        "  restart_s: 600\n  storage_usd_per_gib_month:\n"
        "    fsx-lustre-persistent2-125: {usd: -0.1, source: my quote, as_of: '2026-12'}\n",
    )
    line = _one_line_error(run_cli("plan", str(scen), "--out", str(tmp_path / "o")))
    assert "storage_usd_per_gib_month" in line
