"""``gpuplan catalog``: list, show and validate the catalogs.

Only typer, the standard library and :mod:`gpuplan.cli._common` are imported here; the
catalog package (pydantic, YAML) is imported inside each command.
"""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import typer

from gpuplan.cli._common import (
    FORMAT_OPTION,
    Format,
    emit,
    fmt_bytes,
    fmt_si,
    make_app,
    simple_table,
)

app = make_app(
    """Browse the catalogs: accelerators, instances and prices, nodes, models, storage, network.

Every row carries its source and the date it was read; values without a primary source yet
are marked with '*' (JSON: "unverified"), values nobody publishes are listed as missing.

\b
Examples:
  gpuplan catalog ls gpus
  gpuplan catalog ls instances --format json
  gpuplan catalog show h100
  gpuplan catalog show "H100 80GB HBM3" --calibrated --format json
  gpuplan catalog validate
  gpuplan catalog import-prices my-prices.csv
"""
)


class Listing(str, enum.Enum):
    gpus = "gpus"
    instances = "instances"
    nodes = "nodes"
    models = "models"
    storage = "storage"
    network = "network"


UNVERIFIED_NOTE = "* unverified: no primary source yet (see the row's notes)"


def _mark(row: Any, field: str, text: str) -> str:
    """Append '*' to ``text`` when ``field`` of ``row`` has no primary source yet."""
    return f"{text}*" if text != "-" and row.is_unverified(field) else text


def _flops(row: Any, dtype: str) -> str:
    return _mark(row, f"peak_flops_per_s.{dtype}", fmt_si(row.peak_flops_per_s(dtype), "FLOP/s"))


def _bps(value: float | None) -> str:
    return fmt_si(value, "B/s")


def _bits(value: float | None) -> str:
    return fmt_si(value, "b/s")


def _money(value: float | None) -> str:
    return "-" if value is None else f"${value:,.2f}"


def _price_text(inst: Any, model: str) -> str:
    p = inst.price(model)
    if p is None:
        return "-"
    return f"{_money(p.usd_per_hour)} ({p.region or '?'}, {p.as_of})"


def _num(value: float | None, scale: float, digits: int = 4) -> str:
    return "-" if value is None else f"{value / scale:.{digits}g}"


def _gpus_table(rows: list[Any]) -> Any:
    def tf(r: Any, dtype: str) -> str:
        return _mark(r, f"peak_flops_per_s.{dtype}", _num(r.peak_flops_per_s(dtype), 1e12))

    return simple_table(
        "Accelerators: dense peaks, per-direction bandwidths",
        [
            "id",
            "generation",
            "GiB",
            "HBM TB/s",
            "bf16 TFLOP/s",
            "fp8 TFLOP/s",
            "TDP W",
            "scale-up GB/s x GPUs",
        ],
        [
            [
                r.id,
                r.generation,
                _mark(r, "memory_bytes", _num(r.memory_bytes, 2**30)),
                _mark(
                    r, "memory_bandwidth_bytes_per_s", _num(r.memory_bandwidth_bytes_per_s, 1e12)
                ),
                tf(r, "bf16"),
                tf(r, "fp8"),
                _mark(r, "tdp_w", _num(r.tdp_w, 1)),
                _mark(
                    r,
                    "scale_up_bandwidth_bytes_per_s",
                    f"{_num(r.scale_up_bandwidth_bytes_per_s, 1e9)} x {r.scale_up_domain_size or '-'}",
                ),
            ]
            for r in rows
        ],
        caption=UNVERIFIED_NOTE,
    )


def _instances_table(rows: list[Any]) -> Any:
    return simple_table(
        "Instances (latest published price per model)",
        [
            "id",
            "cloud",
            "accelerators",
            "vCPUs",
            "memory",
            "local NVMe",
            "network",
            "on-demand/h",
            "spot/h",
        ],
        [
            [
                r.id,
                r.cloud,
                f"{r.accelerators_per_node} x {r.accelerator_id}",
                r.vcpus if r.vcpus is not None else "-",
                _mark(r, "memory_bytes", fmt_bytes(r.memory_bytes)),
                _mark(r, "local_nvme_bytes", fmt_si(r.local_nvme_bytes, "B")),
                _mark(r, "network_bandwidth_bits_per_s", _bits(r.network_bandwidth_bits_per_s)),
                _price_text(r, "on_demand"),
                _price_text(r, "spot"),
            ]
            for r in rows
        ],
        caption=UNVERIFIED_NOTE,
    )


def _nodes_table(rows: list[Any]) -> Any:
    return simple_table(
        "On-premises node types",
        ["id", "accelerators", "max power", "compute NICs", "price"],
        [
            [
                r.id,
                f"{r.accelerators_per_node} x {r.accelerator_id}",
                _mark(r, "max_power_w", fmt_si(r.max_power_w, "W")),
                _mark(r, "nics", ", ".join(f"{n.count} x {n.nic_id}" for n in r.nics) or "-"),
                _money(r.price_usd),
            ]
            for r in rows
        ],
        caption=UNVERIFIED_NOTE,
    )


def _models_table(rows: list[Any]) -> Any:
    def experts(m: Any) -> str:
        if not m.num_experts:
            return "-"
        shared = f"+{m.num_shared_experts}" if m.num_shared_experts else ""
        return f"{m.num_experts}{shared} top-{m.top_k}"

    return simple_table(
        "Models (parameters derived from the architecture)",
        [
            "id",
            "layers",
            "hidden",
            "heads/kv",
            "attention",
            "ffn",
            "vocab",
            "experts",
            "params",
            "active",
            "context",
        ],
        [
            [
                m.id,
                m.layers,
                m.hidden,
                f"{m.heads}/{m.kv_heads}",
                m.attention,
                m.ffn_hidden,
                m.vocab,
                experts(m),
                fmt_si(m.params_total(), ""),
                fmt_si(m.params_active(), ""),
                m.max_context,
            ]
            for m in rows
        ],
    )


def _storage_table(rows: list[Any]) -> Any:
    def cap(r: Any) -> str:
        if r.capacity_bytes_per_appliance is not None:
            return f"{fmt_bytes(r.capacity_bytes_per_appliance)} per appliance"
        if r.capacity_min_bytes is None and r.capacity_max_bytes is None:
            return "-"
        return f"{fmt_bytes(r.capacity_min_bytes)} .. {fmt_bytes(r.capacity_max_bytes)}"

    return simple_table(
        "Storage tiers",
        [
            "id",
            "provider",
            "type",
            "read per TiB",
            "read per appliance",
            "read per node",
            "capacity",
            "GDS",
        ],
        [
            [
                r.id,
                r.provider,
                r.kind_of_storage,
                _bps(r.read_bytes_per_s_per_tib),
                _bps(r.read_bytes_per_s_per_appliance),
                _bps(r.read_bytes_per_s_per_node),
                cap(r),
                {True: "yes", False: "no", None: "-"}[r.gpudirect_storage],
            ]
            for r in rows
        ],
    )


def _network_table(rows: list[Any]) -> Any:
    def speed(r: Any) -> str:
        if r.kind == "fabric":
            if r.per_gpu_bandwidth_bytes_per_s is not None:
                return f"{_bps(r.per_gpu_bandwidth_bytes_per_s)} per GPU"
            return _bits(r.port_bandwidth_bits_per_s) + " per port"
        if r.kind == "switch":
            return f"{r.ports or '?'} x {_bits(r.port_bandwidth_bits_per_s)}"
        return _bits(r.bandwidth_bits_per_s)

    def extra(r: Any) -> str:
        if r.kind == "fabric":
            return f"{r.scope}, domain {r.domain_size}" if r.domain_size else r.scope
        if r.kind == "optic":
            return f"{r.medium}, reach {r.max_reach_m:g} m" if r.max_reach_m else r.medium
        if r.kind == "switch":
            return r.fabric_id
        return ", ".join(r.fabric_ids)

    return simple_table(
        "Fabrics, switches, NICs, optics (per direction)",
        ["id", "kind", "name", "bandwidth", "detail"],
        [[r.id, r.kind, r.name, speed(r), extra(r)] for r in rows],
        caption=UNVERIFIED_NOTE,
    )


_TABLES = {
    Listing.gpus: _gpus_table,
    Listing.instances: _instances_table,
    Listing.nodes: _nodes_table,
    Listing.models: _models_table,
    Listing.storage: _storage_table,
    Listing.network: _network_table,
}


@app.command("ls")
def ls(
    what: Listing = typer.Argument(..., help="gpus, instances, nodes, models, storage or network."),
    vendor: str | None = typer.Option(None, help="Only rows of this vendor (gpus, nodes)."),
    cloud: str | None = typer.Option(
        None, help="Only instances of this cloud (aws, gcp, azure, coreweave, lambda, nebius, oci)."
    ),
    fmt: Format = FORMAT_OPTION,
) -> None:
    """List the rows of one catalog, with their sources in JSON.

    \b
    Examples:
      gpuplan catalog ls gpus
      gpuplan catalog ls gpus --vendor amd
      gpuplan catalog ls instances --cloud aws --format json
      gpuplan catalog ls models
    """
    from gpuplan.catalogs import get_catalog

    rows = get_catalog().listing(what.value)
    if vendor:
        rows = [r for r in rows if str(getattr(r, "vendor", "")).lower() == vendor.lower()]
    if cloud:
        rows = [r for r in rows if str(getattr(r, "cloud", "")).lower() == cloud.lower()]
    data = {
        "catalog": what.value,
        "count": len(rows),
        "rows": [{"kind": r.kind, **r.to_dict()} for r in rows],
    }
    emit(data, fmt, lambda console: _widen(console).print(_TABLES[what](rows)))


def _widen(console: Any) -> Any:
    """Wide tables when stdout is a file or pipe (rich would wrap them at 80 columns)."""
    if not console.is_terminal:
        console.width = 240
    return console


def _show_table(console: Any, data: dict[str, Any], unverified: list[str]) -> None:
    skip = {
        "id",
        "kind",
        "aliases",
        "source",
        "notes",
        "missing",
        "unverified",
        "calibrated",
        "prices",
    }
    rows: list[list[Any]] = []
    for key, value in data.items():
        if key in skip:
            continue
        if isinstance(value, dict):
            for sub, v in value.items():
                name = f"{key}.{sub}"
                text = _show_value(v, key)
                rows.append([name, text + ("*" if _unverified(name, unverified) else "")])
            continue
        text = _show_value(value, key)
        rows.append([key, text + ("*" if _unverified(key, unverified) else "")])
    console.print(
        simple_table(
            f"{data['kind']} {data['id']}", ["field", "value"], rows, caption=UNVERIFIED_NOTE
        )
    )
    if data.get("prices"):
        console.print(
            simple_table(
                "Published prices (USD per hour)",
                ["model", "usd/h", "region", "as of", "source"],
                [
                    [p["model"], _rate_cell(p), p["region"], p["as_of"], p["source"]]
                    for p in data["prices"]
                ],
            )
        )
    if data.get("calibrated"):
        cal_rows = []
        for quantity, est in data["calibrated"].items():
            if isinstance(est, dict) and "value" in est:
                cal_rows.append(
                    [
                        quantity,
                        _show_value(est.get("value"), quantity),
                        _show_value(est.get("low"), quantity),
                        _show_value(est.get("high"), quantity),
                        est.get("basis", ""),
                    ]
                )
            else:
                cal_rows.append([quantity, _show_value(est, quantity), "", "", ""])
        console.print(
            simple_table(
                "Calibrated (achieved)", ["quantity", "value", "low", "high", "basis"], cal_rows
            )
        )
    if data.get("aliases"):
        console.print(f"aliases: {', '.join(data['aliases'])}")
    console.print(f"source: {data['source']}")
    if data.get("notes"):
        console.print(f"notes: {data['notes']}")
    if data.get("missing"):
        console.print(f"missing (not published in an opened source): {', '.join(data['missing'])}")


def _unverified(name: str, unverified: list[str]) -> bool:
    return any(name == u or name.startswith(u + ".") for u in unverified)


def _item_text(x: Any) -> str:
    if isinstance(x, dict) and "nic_id" in x:
        return f"{x['count']} x {x['nic_id']} ({x.get('role', 'compute')})"
    return str(x)


def _rate_cell(p: dict[str, Any]) -> str:
    """A price observation's rate, or why there is none (the catalog's note on the gap)."""
    if p.get("usd_per_hour") is not None:
        return str(p["usd_per_hour"])
    note = " ".join(str(p.get("notes") or "").split())
    return f"no published rate: {note or 'no note in the catalog'}"


def _show_value(v: Any, key: str = "") -> str:
    """A value for people: SI prefixes from the unit in the field name (JSON keeps raw SI)."""
    if v is None:
        return "-"
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        if isinstance(v, list):
            return (
                ", ".join(_show_value(x) if not isinstance(x, dict) else str(x) for x in v) or "-"
            )
        return str(v)
    units = [
        ("flops_per_s", "FLOP/s"),
        ("bytes_per_s_per_tib", "B/s per TiB"),
        ("bytes_per_s_per_node", "B/s per node"),
        ("bytes_per_s_per_appliance", "B/s per appliance"),
        ("bytes_per_s", "B/s"),
        ("bits_per_s", "b/s"),
    ]
    for suffix, unit in units:
        if key.endswith(suffix):
            return fmt_si(v, unit)
    if key.endswith("_bytes"):
        return f"{fmt_bytes(v)} ({v:,} B)" if isinstance(v, int) else fmt_bytes(v)
    if key.endswith("_bytes_per_appliance"):
        return f"{fmt_bytes(v)} per appliance"
    if key.endswith("_w"):
        return fmt_si(v, "W")
    if key.endswith("_w_per_appliance"):
        return fmt_si(v, "W") + " per appliance"
    if key in ("published_params", "published_active_params", "params_total", "params_active"):
        return fmt_si(v, "")
    return f"{v:.6g}" if isinstance(v, float) else str(v)


@app.command("show")
def show(
    name: str = typer.Argument(
        ..., help="Id or alias of any catalog row (GPU, instance, node, model...)."
    ),
    calibrated: bool = typer.Option(
        False,
        "--calibrated",
        help="Accelerators: add the calibrated (achieved) figures next to the spec.",
    ),
    fmt: Format = FORMAT_OPTION,
) -> None:
    """Show one catalog row: every field, its source and date, what is unverified or missing.

    \b
    Examples:
      gpuplan catalog show h100
      gpuplan catalog show p5.48xlarge
      gpuplan catalog show llama3.1-405b --format json
      gpuplan catalog show mi300x --calibrated
    """
    from gpuplan.catalogs import get_catalog
    from gpuplan.errors import EnvironmentProblem, InputError

    row = get_catalog().find(name)
    data: dict[str, Any] = {"kind": row.kind, **row.to_dict()}
    if calibrated:
        if row.kind != "accelerator":
            raise InputError(
                f"--calibrated applies to accelerators; {row.id} is a {row.kind}",
                hint="drop --calibrated, or name a GPU (e.g. 'gpuplan catalog show h100 --calibrated')",
            )
        try:
            from gpuplan.calibration import calibrated_summary  # type: ignore[attr-defined]
        except ImportError as exc:
            raise EnvironmentProblem(
                "calibrated summaries are not available in this build of gpuplan",
                hint="run without --calibrated, or update gpuplan (gpuplan.calibration.calibrated_summary)",
            ) from exc
        data["calibrated"] = calibrated_summary(row.id)
    emit(data, fmt, lambda console: _show_table(_widen(console), data, list(row.unverified)))


@app.command("import-prices")
def import_prices(
    csv_file: Path = typer.Argument(
        ...,
        help="CSV with columns instance,model,usd_per_hour,region,as_of,source[,notes].",
    ),
    fmt: Format = FORMAT_OPTION,
) -> None:
    """Merge a price list (negotiated or newer published prices) into your own price file.

    The file lives under the gpuplan state folder ($GPUPLAN_STATE_DIR, else
    $XDG_STATE_HOME/gpuplan), never in the package; 'gpuplan plan' and 'gpuplan catalog
    ls/show' use its prices like catalog prices (the latest as_of wins). A price with the
    same instance, model, region and as_of replaces the earlier one. Nothing is written
    when any row is bad: each bad row is listed on stdout, and the exit code is 2.

    \b
    Examples:
      gpuplan catalog import-prices quotes.csv
      gpuplan catalog import-prices quotes.csv --format json
    """
    from gpuplan.catalogs import get_catalog
    from gpuplan.catalogs import user_prices as up
    from gpuplan.errors import SchemaError
    from gpuplan.userfiles import read_text

    text = read_text(csv_file, what="price list")
    new, problems = up.parse_price_csv(text, get_catalog().instances)
    if problems:
        data: dict[str, Any] = {
            "imported": 0,
            "file": str(csv_file),
            "problems": [
                {"line": p.line, "column": p.column, "message": p.message} for p in problems
            ],
        }
        emit(
            data,
            fmt,
            lambda console: [console.print(f"{csv_file} {p}", soft_wrap=True) for p in problems],
        )
        raise SchemaError(
            f"{csv_file}: {len(problems)} bad row(s); nothing imported",
            hint="fix the rows listed above and import the file again",
        )
    path = up.user_prices_path()
    merged = up.merge(up.load_user_prices(path), new)
    up.save_user_prices(merged, path)
    count = sum(len(v) for v in new.values())
    data = {
        "imported": count,
        "file": str(csv_file),
        "price_file": str(path),
        "instances": sorted(new),
        "total_prices": sum(len(v) for v in merged.values()),
    }
    emit(
        data,
        fmt,
        lambda console: console.print(
            f"imported {count} price(s) for {len(new)} instance(s) into {path}"
        ),
    )


@app.command("validate")
def validate(
    path: Path | None = typer.Option(
        None, "--dir", help="Catalog folder to check (default: the shipped catalog)."
    ),
    fmt: Format = FORMAT_OPTION,
) -> None:
    """Check every catalog file and print what is wrong with which row and field.

    Exit code 0 when the catalog is valid, 2 when a problem was found.

    \b
    Examples:
      gpuplan catalog validate
      gpuplan catalog validate --dir my-catalog/ --format json
    """
    from gpuplan.catalogs.loader import default_data_dir, read_dir

    folder = path if path is not None else default_data_dir()
    files, problems = read_dir(folder)
    data = {
        "valid": not problems,
        "dir": str(folder),
        "files": {name: len(rows) for name, rows in files.items()},
        "rows": sum(len(rows) for rows in files.values()),
        "problems": [p.as_dict() for p in problems],
    }

    def table(console: Any) -> None:
        if problems:
            console.print(
                simple_table(
                    f"{len(problems)} problem(s) in {folder}",
                    ["file", "row", "field", "problem"],
                    [[p.file, p.row, p.field, p.message] for p in problems],
                )
            )
        else:
            counts = ", ".join(f"{n} {name}" for name, n in data["files"].items())
            console.print(f"catalog {folder} is valid: {data['rows']} rows ({counts})")

    emit(data, fmt, table)
    if problems:
        from gpuplan.errors import SchemaError

        # The problems are on stdout above; stderr gets one line and the exit code is 2.
        raise SchemaError(
            f"{len(problems)} problem(s) in catalog {folder}",
            hint="fix the rows and fields listed above, then run 'gpuplan catalog validate' again",
        )
