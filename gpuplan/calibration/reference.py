"""Published microbenchmarks -> result documents (``results/reference/``).

The published table (``gpuplan/calibration/data/microbench.csv``, copied with its source
columns from the project's shared data) holds best achievable matmul FLOP/s, nccl-tests
all-reduce bus bandwidth sweeps, host-device and device copy bandwidth and fio runs.
:func:`build_reference_documents` turns it into documents of the probe result schema
(DESIGN.md 3.1) with ``source`` set, one per (source, hardware), so that calibration
treats published and local measurements alike. Rows that are not measurements (guidance,
cluster-wide production figures) or that the source itself flags as unrepresentative are
skipped with the reason; ``scripts/build_reference.py`` prints them.

Every measurement keeps the row's provenance as extra keys: ``bench_id``, ``source_locator``,
``tool``, ``confidence``, ``notes``, and ``approximate`` where the value was read as "~x".
"""

from __future__ import annotations

import csv
import hashlib
import re
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuplan.calibration.curves import busbw_factor
from gpuplan.calibration.units import parse_gemm_shape, parse_size_bytes, slug
from gpuplan.catalogs.cache import PAST_CACHE_FACTOR, catalog_llc_bytes, is_past_cache
from gpuplan.errors import InputError

DATA_DIR = Path(__file__).resolve().parent / "data"
MICROBENCH_CSV = DATA_DIR / "microbench.csv"

#: started_at of converted documents: published tables carry no run time of their own, and
#: a fixed value keeps the rebuilt set byte-identical (the dates are in ``source``).
REFERENCE_STARTED_AT = "1970-01-01T00:00:00Z"

#: Hardware strings of the table -> what to look up in the GPU catalog. ``None``: not a
#: catalog accelerator (a host CPU, a disk). The A100 rows of ml-engineering's nccl-tests
#: sweep do not say 40 or 80 GB; both have the same NVLink 3 and tensor cores in the
#: catalog, so they are filed under the 80 GB SXM4 part.
HARDWARE_LOOKUP: dict[str, str | None] = {
    "Intel Gaudi 2": "Gaudi 2",
    "Intel Gaudi 3": "Gaudi 3",
    "NVIDIA A100 SXM": "A100 SXM4 80GB",
    "NVIDIA A100 PCIe": "A100 PCIe 80GB",
    "NVIDIA H100 SXM": "H100 SXM5 80GB",
    "NVIDIA B300 SXM": "B300",
    "NVIDIA B200 SXM": "B200",
    "NVIDIA GB200 SXM": "GB200",
    "AMD MI355X": "MI355X",
    "AMD MI325X": "MI325X",
    "AMD MI300X": "MI300X",
    "AMD MI300X node (8x)": "MI300X",
    "A100 node (8x, NVLink 3 / NVSwitch)": "A100 SXM4 80GB",
    "B200 node (AWS p6-b200.48xlarge)": "B200",
    "B200 (AWS P6-B200)": "B200",
    "H100 80GB HBM3 SXM5 (Voltage Park node)": "H100 SXM5 80GB",
    "H100 80GB HBM3 SXM5": "H100 SXM5 80GB",
    "H100 80GB": "H100 SXM5 80GB",
    "H100 80GB HBM3 (host 2x Xeon Platinum 8470)": "H100 SXM5 80GB",
    "H100 80GB HBM3": "H100 SXM5 80GB",
    "H100 80GB HBM3 (8 ranks on one host)": "H100 SXM5 80GB",
    "A100-SXM4-40GB, 2x Xeon 8358, 4x HDR IB per server": "A100 SXM4 40GB",
    "A100 x8 per node, IB 200Gb x4 (dual port)": "A100 SXM4 80GB",
    "A100 x8": "A100 SXM4 80GB",
    "MI300X (Dell XE9680, 2x Xeon 8462Y+), ROCm 6.4.1": "MI300X",
    "A100-SXM4-40GB": "A100 SXM4 40GB",
    "AMD Instinct MI300X (Azure ND MI300X v5)": "MI300X",
}

#: Rows measured on a setup that the source (or the data's curator) flags as not
#: representative of the hardware. They stay in the CSV; they do not calibrate anything.
CURATED_EXCLUSIONS: dict[str, str] = {
    "vp_h100_d2h_32MB": "the source attributes the large-transfer D2H drop to remote-NUMA pinned memory (a misconfiguration)",
    "vp_h100_d2h_68MB": "the source attributes the large-transfer D2H drop to remote-NUMA pinned memory (a misconfiguration)",
    "cudademo_a100_40g_H2D": "H2D far below PCIe4 x16 on that host; the data notes a constrained host/VM",
    "cudademo_a100_40g_D2H": "D2H far below PCIe4 x16 on that host; the data notes a constrained host/VM",
}

#: fio parameters of ml-engineering's fio-scan runs, which the table only names as "fio via
#: fio-scan (libaio, 16 jobs)". Source: stas00/ml-engineering storage/README.md @744d01e1,
#: section "fio": "--blocksize=4k --iodepth=64 --numjobs=16 --direct=1" and "fio-scan ...
#: using a fixed 4k block size"; 4 KiB is also what bw / IOPS gives (2400.1 MiB/s / 614419).
FIO_SCAN_PARAMS: dict[str, Any] = {
    "block_size_bytes": 4096,
    "iodepth": 64,
    "numjobs": 16,
    "direct": True,
    "params_source": "stas00/ml-engineering storage/README.md @744d01e1 (fio section and fio-scan)",
}


@dataclass
class Skipped:
    bench_id: str
    reason: str


@dataclass
class _Doc:
    source: str
    hardware: str
    rows: list[dict[str, str]] = field(default_factory=list)


def read_microbench(path: Path | str = MICROBENCH_CSV) -> list[dict[str, str]]:
    """Rows of the published microbenchmark table."""
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


_NUMBER = re.compile(r"~?\s*(\d+(?:\.\d+)?)")


def parse_value(text: str) -> tuple[float, bool]:
    """The measured number of a value cell and whether it was approximate ("~x").

    Cells such as "84.8 avg; ~96 peak" give the peak (the largest-size figure, what a
    size-resolved curve can use; an average over sizes is no measurement at one size);
    "~350 (chart); ~339 (text)" gives the figure stated in the text.

    >>> parse_value("229.04")
    (229.04, False)
    >>> parse_value("84.8 avg; ~96 peak")
    (96.0, True)
    >>> parse_value("~350 (chart); ~339 (text)")
    (339.0, True)
    """
    text = (text or "").strip()
    try:
        return float(text), False
    except ValueError:
        pass
    parts = [p.strip() for p in text.split(";") if p.strip()]
    chosen = next((p for p in parts if "peak" in p), None) or next(
        (p for p in parts if "text" in p), None
    )
    chosen = chosen or (parts[0] if parts else "")
    match = _NUMBER.search(chosen)
    if match is None:
        raise InputError(f"cannot read a number from {text!r}")
    return float(match.group(1)), "~" in chosen or "~" in text


def _provenance(row: dict[str, str], approximate: bool) -> dict[str, Any]:
    out: dict[str, Any] = {
        "bench_id": row["bench_id"],
        "source_locator": row["source_locator"],
        "tool": row["tool"],
        "confidence": row["confidence"],
        "notes": row["notes"],
    }
    if approximate:
        out["approximate"] = True
    return out


def _skip_reason(row: dict[str, str]) -> str | None:
    if row["bench_id"] in CURATED_EXCLUSIONS:
        return CURATED_EXCLUSIONS[row["bench_id"]]
    if "guidance" in row["metric"].lower() or "guidance" in row["confidence"].lower():
        return "maintainer guidance, not a measurement"
    category = row["category"]
    if category == "cpu_memory":
        return "STREAM array size not stated (a memory-bandwidth measurement needs its size)"
    if category == "storage" and not row["size"] and "filesize" not in row["operation_dtype"]:
        return "cluster-wide production throughput with no block size or queue depth"
    if category not in {
        "gemm",
        "allreduce",
        "allgather",
        "broadcast",
        "pcie_h2d",
        "pcie_d2h",
        "hbm_copy",
        "storage",
    }:
        return f"category {category!r} has no probe equivalent"
    return None


def _op_of(row: dict[str, str]) -> str:
    text = row["operation_dtype"].lower()
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"):
        if text.startswith(op):
            return op
    raise InputError(f"{row['bench_id']}: unknown collective {row['operation_dtype']!r}")


def _int(text: str, default: int) -> int:
    try:
        return int(float(text))
    except (TypeError, ValueError):
        return default


_NICS = re.compile(r"(\d+)\s*x\s*(?:HDR\s*|NDR\s*)?(\d+(?:\.\d+)?)\s*(GB/s|Gb/s|Gbps|Gb)\b")


def nic_bandwidth_per_gpu(interconnect: str, gpus_per_node: int) -> float | None:
    """Per-GPU share of the node's NICs (bytes/s, per direction) named in the row's
    ``interconnect`` column ("8x 50 GB/s EFA v4 per node", "4x HDR 200Gb/s per node");
    ``None`` when the text names no NIC count and rate.

    >>> nic_bandwidth_per_gpu("4x HDR 200Gb/s per node", 8)
    12500000000.0
    """
    match = _NICS.search(interconnect or "")
    if match is None or gpus_per_node <= 0:
        return None
    count, rate, unit = int(match.group(1)), float(match.group(2)), match.group(3)
    per_node = count * rate * (1e9 if unit == "GB/s" else 1e9 / 8)
    return per_node / gpus_per_node


def _collective(row: dict[str, str]) -> list[dict[str, Any]]:
    value, approx = parse_value(row["value"])
    op = _op_of(row)
    ranks = _int(row["num_gpus"], 1)
    nodes = _int(row["num_nodes"], 1)
    size = parse_size_bytes(row["size"])
    notes = row["notes"]
    algo_match = re.search(r"algo\s+(\w+)", notes, flags=re.IGNORECASE)
    base = {
        "op": op,
        "size_bytes": size,
        "dtype": "float32",
        "ranks": ranks,
        "num_nodes": nodes,
        "scope": "intra" if nodes == 1 else "inter",
        "correct": None,
    }
    busbw = value * 1e9  # GB/s as nccl-tests prints it (1 GB = 1e9 B)
    first = {
        **base,
        "busbw_bytes_per_s": busbw,
        "algbw_bytes_per_s": busbw / float(busbw_factor(op, ranks)),
        **_provenance(row, approx),
    }
    if algo_match:
        first["algorithm"] = algo_match.group(1).lower()
    if nodes > 1:
        nic = nic_bandwidth_per_gpu(row["interconnect"], ranks // nodes)
        if nic is not None:
            first["nic_bandwidth_bytes_per_s_per_gpu"] = nic
    out = [first]
    off = re.search(r"NVLS off:\s*([\d.]+)\s*GB/s", notes)
    if off and first.get("algorithm") != "ring":
        # the same table gives the run with NVLink SHARP disabled (NCCL falls back to ring)
        busbw_off = float(off.group(1)) * 1e9
        out.append(
            {
                **base,
                "busbw_bytes_per_s": busbw_off,
                "algbw_bytes_per_s": busbw_off / float(busbw_factor(op, ranks)),
                **_provenance(row, False),
                "algorithm": "ring",
                "nvls": False,
            }
        )
    return out


def _measurement(row: dict[str, str]) -> tuple[str, dict[str, Any], list[dict[str, Any]]]:
    """(probe name, probe params, measurements) of one published row."""
    category = row["category"]
    vendor_is_amd = "AMD" in row["hardware"] or "MI3" in row["hardware"]
    if category == "gemm":
        value, approx = parse_value(row["value"])
        m, n, k = parse_gemm_shape(row["size"])
        dtype_text = row["operation_dtype"]
        inner = re.search(r"\((\w+)\)", dtype_text)
        dtype = inner.group(1) if inner else dtype_text.split()[-1]
        dtype = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}.get(dtype, dtype)
        spec = parse_value(row["spec_value"])[0] * 1e12 if row["spec_value"] else None
        meas = {
            "shape": {"m": m, "n": n, "k": k},
            "flops_per_s": value * 1e12,
            "spec_flops_per_s": spec,
            "label": "best shape of a shape sweep",
            **_provenance(row, approx),
        }
        return "matmul", {"dtype": dtype, "device": "cuda:0"}, [meas]
    if category in ("allreduce", "allgather", "broadcast"):
        backend = "rccl" if vendor_is_amd else "nccl"
        return "collectives", {"backend": backend, "device": "cuda"}, _collective(row)
    if category in ("pcie_h2d", "pcie_d2h"):
        value, approx = parse_value(row["value"])
        text = row["operation_dtype"].lower()
        meas = {
            "direction": "h2d" if category == "pcie_h2d" else "d2h",
            "memory": "pageable" if "pageable" in text else "pinned",
            "size_bytes": parse_size_bytes(row["size"]),
            "bytes_per_s": value * 1e9,
            **_provenance(row, approx),
        }
        return "pcie", {"device": "cuda:0"}, [meas]
    if category == "hbm_copy":
        value, approx = parse_value(row["value"])
        size = parse_size_bytes(row["size"])
        meas = {
            "op": "copy",
            "size_bytes": size,
            "bytes_moved": 2 * size,  # bandwidthTest D2D counts read + write
            "bytes_per_s": value * 1e9,
            **_provenance(row, approx),
        }
        return "membw", {"device": "cuda:0"}, [meas]
    if category == "storage":
        value, approx = parse_value(row["value"])
        text = row["operation_dtype"].lower()
        rw = text.split()[0]
        size_match = re.search(r"filesize=(\S+)", text)
        unit = {"MiB/s": 2.0**20, "MB/s": 1e6, "GB/s": 1e9, "GiB/s": 2.0**30}[row["unit"]]
        iops = re.search(r"IOPS\s+([\d.]+)", row["notes"])
        meas = {
            "rw": rw,
            "block_size_bytes": FIO_SCAN_PARAMS["block_size_bytes"],
            "iodepth": FIO_SCAN_PARAMS["iodepth"],
            "numjobs": FIO_SCAN_PARAMS["numjobs"],
            "direct": FIO_SCAN_PARAMS["direct"],
            "size_bytes": parse_size_bytes(size_match.group(1)) if size_match else None,
            "bw_bytes_per_s": value * unit,
            "iops": float(iops.group(1)) if iops else None,
            "params_source": FIO_SCAN_PARAMS["params_source"],
            **_provenance(row, approx),
        }
        return "storage", {"engine": "libaio"}, [meas]
    raise InputError(f"{row['bench_id']}: category {category!r} is not convertible")


def _vendor(hardware: str) -> str | None:
    text = hardware.lower()
    if "nvidia" in text or re.search(r"\b[abhl]\d{2,3}\b|gb200|b300", text):
        return "nvidia"
    if "amd" in text or "mi3" in text:
        return "amd"
    if "gaudi" in text or "intel" in text:
        return "intel"
    return None


def _resolve(hardware: str, catalog: Any) -> tuple[str | None, str | None]:
    """(catalog id, note) for a hardware string; ``catalog`` None leaves it unresolved."""
    query = HARDWARE_LOOKUP.get(hardware)
    if query is None:
        return None, f"{hardware!r} is not in the hardware lookup table"
    if catalog is None:
        return None, "no catalog"
    from gpuplan.errors import NotFoundError

    try:
        return catalog.gpu(query).id, None
    except NotFoundError as exc:
        return None, f"{hardware!r} -> {query!r}: {exc.one_line()}"


def build_reference_documents(
    rows: Iterable[dict[str, str]],
    *,
    catalog: Any = None,
    gpuplan_version: str | None = None,
) -> tuple[list[dict[str, Any]], list[Skipped], list[str]]:
    """Convert published rows into result documents.

    Parameters
    ----------
    rows:
        rows of ``microbench.csv`` (see :func:`read_microbench`).
    catalog:
        the GPU catalog used to set ``catalog_id`` on each accelerator (None: leave unset).
    gpuplan_version:
        written into each document (default: this package's version).

    Returns
    -------
    (documents as JSON-ready dicts sorted by machine id, skipped rows with the reason,
    notes on hardware that did not resolve to a catalog accelerator)
    """
    from gpuplan import __version__
    from gpuplan.results.store import parse_result

    version = gpuplan_version or __version__
    docs: dict[tuple[str, str], _Doc] = {}
    skipped: list[Skipped] = []
    for row in rows:
        reason = _skip_reason(row)
        if reason is not None:
            skipped.append(Skipped(row["bench_id"], reason))
            continue
        key = (row["source"], row["hardware"])
        docs.setdefault(key, _Doc(source=row["source"], hardware=row["hardware"])).rows.append(row)

    out: list[dict[str, Any]] = []
    unresolved: list[str] = []
    for (source, hardware), doc in docs.items():
        probes: dict[tuple[str, str], dict[str, Any]] = {}
        max_gpus_per_node = 0
        for row in doc.rows:
            probe, params, measurements = _measurement(row)
            pkey = (probe, repr(sorted(params.items())))
            entry = probes.setdefault(
                pkey,
                {
                    "probe": probe,
                    "probe_version": 1,
                    "status": "ok",
                    "error": None,
                    "params": params,
                    "measurements": [],
                },
            )
            entry["measurements"].extend(measurements)
            gpus = _int(row["num_gpus"], 0)
            nodes = max(_int(row["num_nodes"], 1), 1)
            max_gpus_per_node = max(max_gpus_per_node, gpus // nodes if gpus else 0)
        is_storage_only = all(p["probe"] == "storage" for p in probes.values())
        accelerators: list[dict[str, Any]] = []
        if not is_storage_only:
            catalog_id, note = _resolve(hardware, catalog)
            if note:
                unresolved.append(note)
            accelerators = [
                {"name": hardware, "vendor": _vendor(hardware), "catalog_id": catalog_id}
                for _ in range(max(max_gpus_per_node, 1))
            ]
            if catalog_id is not None:
                _mark_past_cache(probes.values(), catalog_llc_bytes(catalog.gpu(catalog_id)))
        source_short = source.split(" (")[0].split(" ")[0]
        # one document per (source, hardware): the same hardware string can come from two
        # files of one repository (single- and multi-node runs), hence the digest
        digest = hashlib.sha1(f"{source}|{hardware}".encode()).hexdigest()[:8]
        machine_id = f"reference-{slug(f'{source_short}-{hardware}')[:64]}-{digest}"
        run_id = str(uuid.uuid5(uuid.NAMESPACE_URL, f"gpuplan-reference:{source}|{hardware}"))
        data = {
            "schema_version": 1,
            "run_id": run_id,
            "started_at": REFERENCE_STARTED_AT,
            "ended_at": None,
            "gpuplan_version": version,
            "host": {
                "machine_id": machine_id,
                "hostname": None,
                "accelerators": accelerators,
                **({"storage_device": hardware} if is_storage_only else {}),
            },
            "argv": ["scripts/build_reference.py"],
            "env": {},
            "probes": list(probes.values()),
            "source": source,
        }
        # validate against the schema now: a bad conversion must fail here, not at load time
        parsed = parse_result(data, where=f"reference {machine_id}")
        out.append(parsed.model_dump(mode="json"))
    out.sort(key=lambda d: d["host"]["machine_id"])
    return out, skipped, sorted(set(unresolved))


def _mark_past_cache(probes: Iterable[dict[str, Any]], llc_bytes: int | None) -> None:
    """Mark each published device-copy point past the last-level cache or not, by the rule
    the membw probe applies to its own points (array >= ``PAST_CACHE_FACTOR`` x the catalog's
    last-level cache: BabelStream's run rules ask for arrays 4x the largest cache).

    Calibration fits HBM bandwidth only from points past the cache: a 64 MB bandwidthTest
    copy on an H100 (50 MiB L2) measures the L2 as much as HBM.
    """
    if llc_bytes is None:
        return
    for probe in probes:
        if probe["probe"] != "membw":
            continue
        probe["params"]["llc_bytes"] = llc_bytes
        probe["params"]["llc_source"] = "catalog last_level_cache_bytes"
        probe["params"]["past_cache_factor"] = PAST_CACHE_FACTOR
        for meas in probe["measurements"]:
            meas["past_cache"] = is_past_cache(meas["size_bytes"], llc_bytes)


def reference_file_name(doc: dict[str, Any]) -> str:
    """File name of a reference document, relative to the reference directory."""
    return f"{doc['host']['machine_id']}.json"
