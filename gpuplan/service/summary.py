"""Key figures of one run, for the HTML pages that browse and compare runs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpuplan.results.schema import ResultDocument


@dataclass(frozen=True)
class Figure:
    key: str
    label: str
    value: float
    unit: str


def _best(values: list[float]) -> float | None:
    vals = [v for v in values if isinstance(v, (int, float)) and v > 0]
    return max(vals) if vals else None


def key_figures(doc: ResultDocument) -> dict[str, Figure]:
    """Best achieved value per quantity (SI units), keyed like the calibration summary.

    ``matmul_<dtype>_flops_per_s`` (best over shapes), ``memory_bandwidth_bytes_per_s`` (best
    copy/triad), ``h2d``/``d2h_bandwidth_bytes_per_s`` (pinned), ``allreduce_busbw_bytes_per_s``
    (best over sizes and scopes), ``storage_read_bytes_per_s`` (best sequential read).
    """
    out: dict[str, Figure] = {}

    def put(key: str, label: str, value: float | None, unit: str) -> None:
        if value is None:
            return
        if key not in out or value > out[key].value:
            out[key] = Figure(key, label, float(value), unit)

    for p in doc.probes:
        if p.status != "ok":
            continue
        ms: list[dict[str, Any]] = p.measurements
        if p.probe == "matmul":
            dtype = str(p.params.get("dtype", "?")).replace("torch.", "")
            put(
                f"matmul_{dtype}_flops_per_s",
                f"matmul {dtype}",
                _best([m.get("flops_per_s") for m in ms]),
                "FLOP/s",
            )
        elif p.probe == "membw":
            put(
                "memory_bandwidth_bytes_per_s",
                "memory bandwidth",
                _best([m.get("bytes_per_s") for m in ms if m.get("op") in ("copy", "triad")]),
                "B/s",
            )
        elif p.probe == "pcie":
            for direction in ("h2d", "d2h"):
                put(
                    f"{direction}_bandwidth_bytes_per_s",
                    f"{direction} pinned",
                    _best(
                        [
                            m.get("bytes_per_s")
                            for m in ms
                            if m.get("direction") == direction and m.get("memory") == "pinned"
                        ]
                    ),
                    "B/s",
                )
        elif p.probe == "collectives":
            put(
                "allreduce_busbw_bytes_per_s",
                "all-reduce busbw",
                _best([m.get("busbw_bytes_per_s") for m in ms if m.get("op") == "all_reduce"]),
                "B/s",
            )
        elif p.probe == "storage":
            put(
                "storage_read_bytes_per_s",
                "storage read",
                _best([m.get("bw_bytes_per_s") for m in ms if m.get("rw") == "read"]),
                "B/s",
            )
    return dict(sorted(out.items()))


def compare_rows(docs: list[ResultDocument]) -> list[dict[str, Any]]:
    """One row per quantity found in any run: label, unit, values (None where absent), ratio
    of each value to the first run's."""
    figures = [key_figures(d) for d in docs]
    keys = sorted({k for f in figures for k in f})
    rows = []
    for key in keys:
        present = next(f[key] for f in figures if key in f)
        values = [f[key].value if key in f else None for f in figures]
        base = values[0]
        ratios = [None if (v is None or not base) else v / base for v in values]
        rows.append(
            {
                "key": key,
                "label": present.label,
                "unit": present.unit,
                "values": values,
                "ratios": ratios,
            }
        )
    return rows
