"""``gpuplan catalog import-prices``: validated merge into the user's price file (issue 17)."""

from __future__ import annotations

import json

from gpuplan.catalogs import get_catalog
from gpuplan.catalogs.user_prices import merge, parse_price_csv, user_prices_path

HEADER = "instance,model,usd_per_hour,region,as_of,source,notes\n"


def _lines(proc):
    return [ln for ln in proc.stderr.splitlines() if ln.strip()]


def test_import_then_catalog_and_plan_use_it(run_cli, tmp_path):
    f = tmp_path / "q.csv"
    f.write_text(HEADER + "p5,reserved_1y,31.5,us-east-1,2026-11-20,AWS EDP quote 2026-11,\n")
    proc = run_cli("catalog", "import-prices", str(f), "--format", "json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["imported"] == 1 and out["instances"] == ["p5.48xlarge"]
    path = user_prices_path()
    assert out["price_file"] == str(path) and path.is_file()
    show = json.loads(run_cli("catalog", "show", "p5", "--format", "json").stdout)
    assert [p["usd_per_hour"] for p in show["prices"] if p["model"] == "reserved_1y"] == [31.5]
    ls = json.loads(run_cli("catalog", "ls", "instances", "--format", "json").stdout)
    p5 = next(r for r in ls["rows"] if r["id"] == "p5.48xlarge")
    assert any(p["source"] == "AWS EDP quote 2026-11" for p in p5["prices"])


def test_bad_rows_one_line_each_nothing_written(run_cli, tmp_path):
    good = tmp_path / "good.csv"
    good.write_text(HEADER + "p5,reserved_1y,31.5,us-east-1,2026-11-20,AWS EDP quote 2026-11,\n")
    assert run_cli("catalog", "import-prices", str(good)).returncode == 0
    before = user_prices_path().read_bytes()
    bad = tmp_path / "bad.csv"
    bad.write_text(
        HEADER
        + "p5,on_demand,-3,us-east-1,2026-11-20,AWS EDP quote,\n"
        + "nope,on_demand,3,,2026-11-20,AWS EDP quote,\n"
        + "p5,weekly,3,,2026-11-20,AWS EDP quote,\n"
        + "p5,on_demand,40,,yesterday,AWS EDP quote,\n"
    )
    proc = run_cli("catalog", "import-prices", str(bad), "--format", "json")
    assert proc.returncode == 2
    assert len(_lines(proc)) == 1 and "Traceback" not in proc.stderr
    assert "4 bad row(s)" in proc.stderr
    probs = json.loads(proc.stdout)["problems"]
    assert [(p["line"], p["column"]) for p in probs] == [
        (2, "usd_per_hour"),
        (3, "instance"),
        (4, "model"),
        (5, "as_of"),
    ]
    assert user_prices_path().read_bytes() == before  # nothing already imported was lost


def test_missing_column_and_missing_file(run_cli, tmp_path):
    f = tmp_path / "h.csv"
    f.write_text("instance,model,usd_per_hour\np5,on_demand,3\n")
    proc = run_cli("catalog", "import-prices", str(f))
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "header" in proc.stdout and "as_of" in proc.stdout
    proc = run_cli("catalog", "import-prices", str(tmp_path / "none.csv"))
    assert proc.returncode == 2 and len(_lines(proc)) == 1


def test_merge_replaces_same_key_and_keeps_the_rest():
    insts = get_catalog().instances
    a, _ = parse_price_csv(
        HEADER
        + "p5,on_demand,40,us-east-1,2026-11-01,quote one 2026,\n"
        + "p5,spot,12,us-east-1,2026-11-01,quote one 2026,\n",
        insts,
    )
    b, _ = parse_price_csv(HEADER + "p5,on_demand,38,us-east-1,2026-11-01,quote two 2026,\n", insts)
    m = merge(a, b)
    got = {(o.model, o.usd_per_hour) for o in m["p5.48xlarge"]}
    assert got == {("on_demand", 38.0), ("spot", 12.0)}
