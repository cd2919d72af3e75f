"""Result documents -> tidy measurement records keyed by device and machine.

A *device* is what calibration describes: a catalog accelerator id (``h100-sxm5-80gb``), a
CPU (``cpu:<model slug>``; not in the GPU catalog, so no peaks), an accelerator the catalog
does not know (``unknown:<name slug>``) or, for storage-only documents, ``storage:<slug>``.
A *machine* is the cross-validation group: the host's ``machine_id`` (published documents
have one per source and hardware).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuplan.calibration.units import short_dtype, slug
from gpuplan.errors import InputError, NotFoundError
from gpuplan.results.schema import ResultDocument


@dataclass(frozen=True)
class Record:
    """One measured point. ``x`` holds the features of its quantity, ``y`` the throughput."""

    quantity: str  # matmul | membw | h2d | d2h | collective | storage
    device: str
    machine: str
    run_id: str
    key: tuple  # quantity-specific grouping: (dtype,), (op,), (op, scope, algorithm)...
    x: tuple[float, ...]
    y: float
    rel_spread: float = 0.0  # (p90 - p10) / 2 / median of the raw samples, when there are samples
    published: bool = False
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)


@dataclass
class Dataset:
    records: list[Record] = field(default_factory=list)
    devices: dict[str, dict[str, Any]] = field(default_factory=dict)  # device -> info
    run_ids: list[str] = field(default_factory=list)

    def select(self, quantity: str, **where: Any) -> list[Record]:
        out = [r for r in self.records if r.quantity == quantity]
        for k, v in where.items():
            out = [r for r in out if getattr(r, k) == v]
        return out


def _spread(samples_s: list[float] | None) -> float:
    """Relative half-width of the central 80% of the timing samples (0 without samples)."""
    if not samples_s or len(samples_s) < 3:
        return 0.0
    import numpy as np

    s = np.asarray(samples_s, dtype=float)
    med = float(np.median(s))
    if med <= 0:
        return 0.0
    p10, p90 = np.percentile(s, [10, 90])
    return float((p90 - p10) / 2.0 / med)


def device_of(
    doc: ResultDocument, params: dict[str, Any], catalog: Any
) -> tuple[str, dict[str, Any]]:
    """Device id and description for a probe's ``params['device']`` on ``doc``'s host."""
    dev = str(params.get("device") or "")
    accs = doc.host.accelerators
    if dev.startswith("cpu") or (not accs and not dev.startswith("cuda")):
        if not accs and not dev and doc.host.cpu_model is None:
            name = str(
                getattr(doc.host, "storage_device", None)
                or doc.host.hostname
                or doc.host.machine_id
            )
            return f"storage:{slug(name)}", {"kind": "storage", "name": name}
        model = doc.host.cpu_model or doc.host.hostname or "unknown cpu"
        return f"cpu:{slug(model)}", {"kind": "cpu", "name": model, "cpu_count": doc.host.cpu_count}
    if not accs:
        raise InputError(
            f"run {doc.run_id}: probe ran on {dev or 'an accelerator'} but host.accelerators is empty",
            hint="re-run the probe so that the inventory records the accelerators",
        )
    index = 0
    if ":" in dev:
        try:
            index = int(dev.split(":", 1)[1])
        except ValueError:
            index = 0
    acc = accs[min(index, len(accs) - 1)]
    if acc.catalog_id:
        return acc.catalog_id, {"kind": "gpu", "name": acc.name}
    if catalog is not None:
        try:
            return catalog.gpu(acc.name).id, {"kind": "gpu", "name": acc.name}
        except NotFoundError:
            pass
    return f"unknown:{slug(acc.name)}", {"kind": "unknown", "name": acc.name}


def _published_extra(m: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "bench_id",
        "source_locator",
        "tool",
        "confidence",
        "approximate",
        "algorithm",
        "nvls",
        "nic_bandwidth_bytes_per_s_per_gpu",
    )
    return {k: m[k] for k in keys if m.get(k) is not None}


def extract(docs: Iterable[ResultDocument], catalog: Any = None) -> Dataset:
    """Records of every usable measurement in ``docs``: points of probes that finished
    (``ok``) or were stopped part-way by a signal (``interrupted``: each point it kept was
    measured to the end), and whose correctness check did not fail."""
    ds = Dataset()
    for doc in docs:
        ds.run_ids.append(doc.run_id)
        machine = doc.host.machine_id
        published = doc.source is not None
        for probe in doc.probes:
            if probe.status not in ("ok", "interrupted") or probe.probe in (
                "inventory",
                "serve",
                "train",
            ):
                continue  # serve and train runs: the "serving" and "training" sections
            device, info = device_of(doc, probe.params, catalog)
            ds.devices.setdefault(device, info)
            common = {
                "device": device,
                "machine": machine,
                "run_id": doc.run_id,
                "published": published,
            }
            for m in probe.measurements:
                if m.get("correct") is False:
                    continue
                if m.get("concurrent"):
                    # the per-GPU loop's all-GPUs-at-once points measure the node under a
                    # shared power and host budget (the spread and outlier flag use them);
                    # a device model is fitted from each device measured alone
                    continue
                spread = _spread(m.get("samples_s"))
                extra = _published_extra(m)
                if probe.probe == "matmul":
                    # the probe's effective precision (fp32 with TF32 allowed is "tf32")
                    dtype = short_dtype(
                        probe.params.get("precision") or probe.params.get("dtype", "float32")
                    )
                    if dtype == "fp32" and probe.params.get("allow_tf32"):
                        dtype = "tf32"
                    s = m["shape"]
                    ds.records.append(
                        Record(
                            "matmul",
                            key=(dtype,),
                            x=(s["m"], s["n"], s["k"]),
                            y=m["flops_per_s"],
                            rel_spread=spread,
                            extra=extra,
                            **common,
                        )
                    )
                elif probe.probe == "membw":
                    if m.get("past_cache") is False:
                        # an array that fits in the last-level cache (MI300X's 256 MB Infinity
                        # Cache, H100's 50 MB L2) measures the cache, not HBM
                        continue
                    ds.records.append(
                        Record(
                            "membw",
                            key=(m["op"],),
                            x=(m["size_bytes"],),
                            # the best sample where the probe kept it: BabelStream's statistic,
                            # and the one the published device-copy figures report
                            y=m.get("best_bytes_per_s") or m["bytes_per_s"],
                            rel_spread=spread,
                            extra=extra,
                            **common,
                        )
                    )
                elif probe.probe == "pcie":
                    ds.records.append(
                        Record(
                            m["direction"],
                            key=(m["memory"],),
                            x=(m["size_bytes"],),
                            y=m["bytes_per_s"],
                            rel_spread=spread,
                            extra=extra,
                            **common,
                        )
                    )
                elif probe.probe == "collectives":
                    algorithm = m.get("algorithm") or "auto"
                    ds.records.append(
                        Record(
                            "collective",
                            key=(m["op"], m.get("scope") or "intra", algorithm),
                            x=(m["size_bytes"], m["ranks"], m.get("num_nodes") or 1),
                            y=m["busbw_bytes_per_s"],
                            rel_spread=spread,
                            extra={**extra, "backend": probe.params.get("backend")},
                            **common,
                        )
                    )
                elif probe.probe == "storage":
                    if probe.params.get("transport") or m.get("gds"):
                        # GPUDirect Storage / kvikio reads are another data path: kept out
                        # of the POSIX read/write fit (the probe records them apart)
                        continue
                    ds.records.append(
                        Record(
                            "storage",
                            key=(m["rw"],),
                            x=(m["block_size_bytes"], m["iodepth"], m.get("numjobs") or 1),
                            y=m["bw_bytes_per_s"],
                            rel_spread=spread,
                            extra=extra,
                            **common,
                        )
                    )
    ds.records = [r for r in ds.records if r.y > 0 and all(v > 0 for v in r.x)]
    return ds


def catalog_peaks(catalog: Any) -> Callable[[ResultDocument, Any, str], float | None]:
    """A peak lookup for :func:`gpuplan.results.loader.check_physical`: the catalog peak of
    the accelerator a probe ran on (``None`` for CPUs and devices the catalog lacks).

    ``quantity`` is ``flops_per_s`` (dense, for the probe's ``params['dtype']``) or an
    accelerator field such as ``memory_bandwidth_bytes_per_s``.
    """

    def peaks(doc: ResultDocument, probe: Any, quantity: str) -> float | None:
        device, info = device_of(doc, probe.params, catalog)
        if info.get("kind") != "gpu":
            return None
        try:
            gpu = catalog.gpu(device)
        except NotFoundError:
            return None
        if quantity == "flops_per_s":
            dtype = probe.params.get("dtype")
            return gpu.peak_flops_per_s(str(dtype)) if dtype else None
        value = getattr(gpu, quantity, None)
        return float(value) if isinstance(value, (int, float)) else None

    return peaks
