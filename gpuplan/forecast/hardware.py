"""Catalog + calibration -> the one typed device and fabric record both forecasts read.

Job of this module: everything the forecasts need to know about an accelerator and the
fabric around it, read from the catalog once and reported the same way when missing:

* :func:`memory_capacity_bytes` and :func:`scale_up_domain`: the device memory and the
  GPUs per scale-up domain (NVLink / xGMI / ICI), for the training and the serving
  forecasts alike (a row without a memory size is refused here, with one message);
* the scale-out bandwidth per GPU of a node or instance row (:func:`node_inter_bandwidth`,
  :func:`instance_inter_bandwidth`: the compute NICs' line rate over the GPUs);
* :class:`Hardware` and :func:`resolve_hardware`: the calibrated device
  (:class:`gpuplan.calibration.api.DevicePerf`), its memory, dense peaks by dtype,
  scale-up domain, build and purchase units, scale-out bandwidth and the collective
  library's latency constants (:func:`gpuplan.forecast.comm.library_latency`), with the
  provenance of each.

The catalog rows are :class:`gpuplan.catalogs.schema.Accelerator`, ``Node`` and
``Instance``; the serving tests pass stand-ins with the same attribute names, which is why
the two readers below use ``getattr`` with the catalog's defaults.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from gpuplan.errors import InputError
from gpuplan.forecast.comm import LibraryLatency, library_latency
from gpuplan.numeric import JSONDict

if TYPE_CHECKING:
    from gpuplan.calibration.api import DevicePerf
    from gpuplan.catalogs.catalog import Catalog
    from gpuplan.catalogs.schema import Accelerator, Instance, Node


def memory_capacity_bytes(gpu: Accelerator) -> float:
    """Device memory of a catalog accelerator; refused with one message where the row has none."""
    cap = float(getattr(gpu, "memory_bytes", 0) or 0)
    if cap <= 0:
        raise InputError(
            f"the catalog has no memory size for {getattr(gpu, 'id', gpu)}, so no layout can "
            "be checked",
            hint="pick a GPU whose catalog row gives memory_bytes, or add it to the row",
        )
    return cap


def scale_up_domain(gpu: Accelerator) -> int:
    """GPUs per scale-up domain (8 for an HGX board, 72 for an NVL72 rack); 1 where the
    catalog row gives none (each GPU alone: every collective leaves the device)."""
    return int(getattr(gpu, "scale_up_domain_size", None) or 1)


def server_size(gpu: Accelerator) -> int:
    """GPUs in one node as a serving layout counts them: the scale-up domain, or, for PCIe
    cards without one, the cards one server holds (``pcie_server_size``).

    Tensor parallelism stays inside it unless asked otherwise. On PCIe cards its all-reduces
    leave the device: the step model counts every rank outside the scale-up domain
    (:func:`scale_up_domain`) and prices the collective as the faster of the calibrated
    collectives between devices and NCCL's ring over PCIe
    (:func:`gpuplan.forecast.comm.library_latency`; docs/forecast-inference.md, "PCIe
    servers").
    """
    return max(scale_up_domain(gpu), int(getattr(gpu, "pcie_server_size", None) or 1))


def within_node(gpu: Accelerator, node_gpus: int | None) -> Accelerator:
    """``gpu`` as a machine of ``node_gpus`` GPUs holds it (a cloud instance, a server).

    A scale-up domain or PCIe server larger than the machine is cut to it: an H100 NVL
    bridged pair split over two one-GPU VMs (Azure NC40ads_H100_v5) has no NVLink peer, and
    four L40S in a g6e.12xlarge reach four others only over the network, and a TPU v5e VM of
    8 chips (tpu-v5litepod-8) is a slice of its own, so tensor parallelism
    (:func:`server_size`) stays within ``node_gpus``. A scale-up fabric that joins machines
    by design is kept: a GB200 NVL72 rack of 4-GPU trays, bought and installed whole (the
    row's ``purchase_unit`` covers the domain). ``None``, or a machine at least as large as
    the GPU's server, returns ``gpu`` unchanged.
    """
    if not node_gpus or node_gpus >= server_size(gpu):
        return gpu
    domain = scale_up_domain(gpu)
    joined = int(getattr(gpu, "purchase_unit", None) or 0) >= domain
    update: dict[str, int | None] = {}
    if not joined and domain > node_gpus:
        update["scale_up_domain_size"] = node_gpus
    pcie = getattr(gpu, "pcie_server_size", None)
    if pcie and pcie > node_gpus:
        update["pcie_server_size"] = node_gpus if node_gpus > 1 else None
    return gpu.model_copy(update=update) if update else gpu


@dataclass(frozen=True, kw_only=True)
class Hardware:
    """The calibrated accelerator and its fabric, as the step model needs them."""

    gpu_id: str
    perf: DevicePerf
    """The calibrated device."""
    memory_bytes: float
    node_size: int
    """GPUs per scale-up domain (NVLink/xGMI), e.g. 8 for HGX, 72 for NVL72."""
    inter_node_bandwidth_bytes_per_s: float | None
    """Scale-out bandwidth per GPU, per direction; None = the calibration's default."""
    generation: str | None = None
    """Architecture generation (``ampere``, ``hopper``...): selects the attention kernel."""
    vendor: str | None = None
    """The catalog's vendor (``nvidia``, ``amd``, ``aws``...)."""
    cluster_unit: int | None = None
    """Accelerators in the smallest unit a cluster is built from (an HGX node, an NVL72
    compute tray, a TPU host); None = ``node_size``. Sizing scans whole units."""
    purchase_unit: int | None = None
    """Accelerators in the unit the hardware is bought in when larger than ``cluster_unit``
    (an NVL72 rack): deadline sizing reports how many to buy; None = ``cluster_unit``."""
    peaks_flops_per_s: dict[str, float] = field(default_factory=dict)
    """The catalog's dense peaks by dtype (fp4 and int8 included, which the calibration
    does not model); empty means the calibration's spec peaks only."""
    provenance: JSONDict = field(default_factory=dict)
    collective_latency: LibraryLatency | None = None
    """The collective library's latency constants of the scale-up fabric (catalog
    ``collective_*_latency_s``): data-parallel collectives across nodes take the faster of
    the calibrated model and the library's topology-aware cost
    (:func:`gpuplan.forecast.comm.topology_collective_time3`); None = calibrated only."""


def _nic_bandwidth_bytes_per_s(cat: Catalog, nic_id: str) -> float | None:
    try:
        nic = cat.nic(nic_id)
    except Exception:
        return None
    bits = nic.bandwidth_bits_per_s
    return float(bits) / 8.0 if bits else None


def node_inter_bandwidth(cat: Catalog, node: Node) -> float | None:
    """Scale-out bandwidth per GPU of an on-premises node row (sum of its NICs / GPUs)."""
    total = 0.0
    for entry in node.nics:
        if entry.role != "compute":
            continue  # storage / management NICs do not carry the training traffic
        bw = _nic_bandwidth_bytes_per_s(cat, entry.nic_id)
        if bw is None:
            return None
        total += bw * float(entry.count)
    per = float(node.accelerators_per_node)
    return total / per if total > 0 and per > 0 else None


def instance_inter_bandwidth(instance: Instance) -> float | None:
    bits = instance.network_bandwidth_bits_per_s
    per = float(instance.accelerators_per_node)
    return float(bits) / 8.0 / per if bits and per > 0 else None


def resolve_hardware(
    gpu: str,
    *,
    artifact: object = None,
    node: str | None = None,
    instance: str | None = None,
    inter_node_bandwidth_bytes_per_s: float | None = None,
) -> Hardware:
    """Catalog GPU + calibration + the scale-out bandwidth per GPU.

    The scale-out bandwidth comes from, in order: the explicit argument; the named node or
    instance row; the first catalog node row built around this GPU (e.g. DGX H100 for
    H100); the first instance row with this GPU. Without any, the calibration's own
    inter-node default is used and the provenance says so.
    """
    from gpuplan.calibration import device_perf
    from gpuplan.catalogs import get_catalog

    cat = get_catalog()
    row = cat.gpu(gpu)
    perf = device_perf(row.id, artifact=artifact)
    prov: JSONDict = {"gpu": row.id, "gpu_source": row.source}
    bw = inter_node_bandwidth_bytes_per_s
    if bw is not None:
        prov["inter_node_bandwidth"] = "given"
    elif node is not None:
        n = cat.node(node)
        bw = node_inter_bandwidth(cat, n)
        prov["inter_node_bandwidth"] = f"node {n.id}"
    elif instance is not None:
        inst = cat.instance(instance)
        bw = instance_inter_bandwidth(inst)
        prov["inter_node_bandwidth"] = f"instance {inst.id}"
    else:
        for n in cat.nodes:
            if n.accelerator_id == row.id:
                bw = node_inter_bandwidth(cat, n)
                if bw:
                    prov["inter_node_bandwidth"] = f"default: node {n.id} (same GPU)"
                    break
        if bw is None:
            generation = row.generation
            for n in cat.nodes:
                try:
                    other = cat.gpu(n.accelerator_id)
                except Exception:
                    continue
                if generation and other.generation == generation and other.vendor == row.vendor:
                    bw = node_inter_bandwidth(cat, n)
                    if bw:
                        prov["inter_node_bandwidth"] = (
                            f"default: node {n.id} (same generation {generation})"
                        )
                        break
        if bw is None:
            for inst in cat.instances:
                if inst.accelerator_id == row.id:
                    bw = instance_inter_bandwidth(inst)
                    if bw:
                        prov["inter_node_bandwidth"] = f"default: instance {inst.id} (same GPU)"
                        break
    if bw is None:
        prov["inter_node_bandwidth"] = "calibration default (no node or instance row)"
    prov["inter_node_bandwidth_bytes_per_s"] = bw
    node_size = scale_up_domain(row)
    memory = memory_capacity_bytes(row)
    peaks = {d: float(v) for d, v in row.dense_flops_per_s.items() if v}
    return Hardware(
        generation=row.generation,
        vendor=row.vendor,
        peaks_flops_per_s=peaks,
        cluster_unit=int(row.cluster_unit) if row.cluster_unit else None,
        purchase_unit=int(row.purchase_unit) if row.purchase_unit else None,
        gpu_id=row.id,
        perf=perf,
        memory_bytes=memory,
        node_size=node_size,
        inter_node_bandwidth_bytes_per_s=bw,
        provenance=prov,
        collective_latency=library_latency(row, cat),
    )
