"""``gpuplan catalog``: ls / show / validate, tables and JSON, one-line errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from gpuplan.catalogs.loader import default_data_dir
from gpuplan.cli.main import main


def _run(capsys, *args: str) -> tuple[int, str, str]:
    code = main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def test_ls_gpus_json_lists_sources(capsys) -> None:
    code, out, _ = _run(capsys, "catalog", "ls", "gpus", "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert data["count"] == len(data["rows"]) >= 20
    for row in data["rows"]:
        assert row["source"] and row["retrieved"]
        assert "peak_flops_per_s" in row and "unverified" in row and "missing" in row
    h100 = next(r for r in data["rows"] if r["id"] == "h100-sxm5-80gb")
    assert h100["peak_flops_per_s"]["bf16"] == 989.4e12
    assert h100["memory_bytes"] == 80 * 2**30


@pytest.mark.parametrize("what", ["gpus", "instances", "nodes", "models", "storage", "network"])
def test_ls_every_catalog_as_table_and_json(capsys, what: str) -> None:
    code, out, _ = _run(capsys, "catalog", "ls", what)
    assert code == 0 and out.strip()
    code, out, _ = _run(capsys, "catalog", "ls", what, "-f", "json")
    assert code == 0
    data = json.loads(out)
    assert data["catalog"] == what and data["count"] > 0


def test_ls_table_marks_unverified(capsys) -> None:
    _, out, _ = _run(capsys, "catalog", "ls", "gpus")
    line = next(ln for ln in out.splitlines() if "h100-nvl-94gb" in ln)
    assert "835.5*" in line
    assert "unverified" in out


def test_ls_filters(capsys) -> None:
    _, out, _ = _run(capsys, "catalog", "ls", "gpus", "--vendor", "amd", "-f", "json")
    ids = {r["id"] for r in json.loads(out)["rows"]}
    assert ids == {"mi210", "mi250x", "mi300x", "mi325x", "mi350x", "mi355x"}
    _, out, _ = _run(capsys, "catalog", "ls", "instances", "--cloud", "azure", "-f", "json")
    assert {r["cloud"] for r in json.loads(out)["rows"]} == {"azure"}


def test_show_by_alias_json(capsys) -> None:
    code, out, _ = _run(capsys, "catalog", "show", "H100 80GB HBM3", "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert data["id"] == "h100-sxm5-80gb" and data["kind"] == "accelerator"
    assert data["scale_up_in_switch_reduction"] is True


def test_show_model_includes_derived_params(capsys) -> None:
    _, out, _ = _run(capsys, "catalog", "show", "Llama 3.1 405B", "-f", "json")
    data = json.loads(out)
    assert data["params_total"] == pytest.approx(405e9, rel=0.03)
    assert data["published_params"] == 405e9


def test_show_instance_table_lists_prices(capsys) -> None:
    code, out, _ = _run(capsys, "catalog", "show", "p5.48xlarge")
    assert code == 0
    assert "Published prices" in out and "55.04" in out and "98.32" in out


def test_show_unknown_is_one_line_with_closest(capsys) -> None:
    code, out, err = _run(capsys, "catalog", "show", "h1000")
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuplan: error:")
    assert "h100" in lines[0]


def test_show_calibrated_rejects_non_gpu(capsys) -> None:
    code, _, err = _run(capsys, "catalog", "show", "p5.48xlarge", "--calibrated")
    assert code == 2 and "applies to accelerators" in err


def test_show_calibrated(capsys) -> None:
    code, out, _ = _run(capsys, "catalog", "show", "h100", "--calibrated", "-f", "json")
    assert code == 0
    data = json.loads(out)
    assert data["id"] == "h100-sxm5-80gb"
    bf16 = data["calibrated"]["matmul_bf16_flops_per_s"]
    # spec next to calibrated: achieved below the dense peak, inside its own interval
    assert bf16["spec"] == data["peak_flops_per_s"]["bf16"]
    assert bf16["low"] <= bf16["value"] <= bf16["high"] < bf16["spec"]
    assert bf16["basis"] in ("measured", "transferred", "spec")


def test_validate_ok(capsys) -> None:
    code, out, _ = _run(capsys, "catalog", "validate", "-f", "json")
    assert code == 0
    data = json.loads(out)
    assert data["valid"] is True and data["problems"] == []
    assert data["files"]["accelerators.yaml"] >= 20


def test_validate_reports_problems_and_exits_2(capsys, tmp_path: Path) -> None:
    folder = tmp_path / "cat"
    shutil.copytree(default_data_dir(), folder)
    path = folder / "accelerators.yaml"
    path.write_text(path.read_text().replace("tdp_w: 700\n", "tdp_w: -700\n", 1))
    code, out, _ = _run(capsys, "catalog", "validate", "--dir", str(folder))
    assert code == 2
    assert "accelerators.yaml" in out and "h100-sxm5-80gb" in out and "tdp_w" in out
    code, out, _ = _run(capsys, "catalog", "validate", "--dir", str(folder), "-f", "json")
    data = json.loads(out)
    assert code == 2 and data["valid"] is False
    assert {"file": "accelerators.yaml", "field": "tdp_w"}.items() <= data["problems"][0].items()


def test_broken_catalog_gives_one_line_error_in_a_subprocess(run_cli, tmp_path: Path) -> None:
    folder = tmp_path / "cat"
    shutil.copytree(default_data_dir(), folder)
    path = folder / "models.yaml"
    path.write_text(path.read_text().replace("layers: 126\n", "layers: many\n", 1))
    proc = run_cli("catalog", "ls", "models", env={"GPUPLAN_CATALOG_DIR": str(folder)})
    assert proc.returncode == 2
    assert proc.stdout == ""
    err = proc.stderr.strip().splitlines()
    assert len(err) == 1 and "Traceback" not in proc.stderr
    assert "models.yaml: row" in err[0] and "(llama3.1-405b): field layers" in err[0]


def test_help_has_examples() -> None:
    from typer.testing import CliRunner

    from gpuplan.cli.catalog import app

    runner = CliRunner()
    for args in (["--help"], ["ls", "--help"], ["show", "--help"], ["validate", "--help"]):
        result = runner.invoke(app, args)
        assert result.exit_code == 0 and "Examples:" in result.output, args


def test_usage_error_is_one_line_through_the_root(capsys) -> None:
    code, _, err = _run(capsys, "catalog", "ls", "foo")
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "'gpus'" in err  # says what is allowed


def test_group_help_through_the_root(capsys) -> None:
    code, out, err = _run(capsys, "catalog", "--help")
    assert code == 0 and "Examples:" in out and "Traceback" not in err
