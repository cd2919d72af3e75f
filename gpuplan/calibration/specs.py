"""What the catalog says about a device, in the form calibration needs it.

Devices outside the GPU catalog (CPUs, unknown accelerators, storage) get a spec with
every figure ``None``: their peaks are unknown, so only achieved values are reported.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

DTYPES = ("fp32", "tf32", "bf16", "fp16", "fp8")


@dataclass(frozen=True)
class DeviceSpec:
    id: str
    kind: str  # gpu | cpu | unknown | storage
    name: str
    vendor: str | None = None
    generation: str | None = None
    peaks_flops_per_s: dict[str, float | None] = field(default_factory=dict)
    memory_bandwidth_bytes_per_s: float | None = None
    scale_up_bandwidth_bytes_per_s: float | None = None
    scale_up_domain_size: int | None = None
    in_switch_reduction: bool = False
    # the collective library's modelled in-switch reduction efficiency for this GPU
    # architecture (NCCL nvlsEfficiency, read from the scale-up fabric row)
    in_switch_reduction_efficiency: float | None = None
    mesh: bool = False  # switchless full mesh (the bandwidth grows with the peers used)
    host_link_bandwidth_bytes_per_s: float | None = None
    source: str | None = None

    def peak(self, dtype: str) -> float | None:
        return self.peaks_flops_per_s.get(dtype)

    def link_bandwidth(self) -> float | None:
        """Per-direction bandwidth collectives inside one node use (scale-up, else host link)."""
        if self.scale_up_bandwidth_bytes_per_s:
            return self.scale_up_bandwidth_bytes_per_s
        return None

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        # added after artifact version 1 was first written: left out when unknown, so that a
        # reader that rebuilds specs strictly (gpuplan 0.1) still loads the artifact
        if out["in_switch_reduction_efficiency"] is None:
            del out["in_switch_reduction_efficiency"]
        return out


def _is_mesh(gpu: Any, catalog: Any) -> bool:
    """True for a switchless all-to-all scale-up fabric.

    Read from the catalog: an explicit ``topology`` on the fabric row when present,
    otherwise the fabric's description ("all-to-all mesh without a switch").
    """
    fabric_id = getattr(gpu, "scale_up_fabric_id", None)
    if not fabric_id or getattr(gpu, "scale_up_in_switch_reduction", False):
        return False
    try:
        fabric = catalog.fabric(fabric_id)
    except Exception:  # a missing fabric row only loses the topology hint
        return False
    topology = getattr(fabric, "topology", None)
    if topology is not None:
        return str(topology).lower() in {"mesh", "full-mesh", "all-to-all"}
    text = f"{getattr(fabric, 'name', '')} {getattr(fabric, 'notes', '')}".lower()
    return (
        "without a switch" in text
        or "no switch" in text
        or ("mesh" in text and "all-to-all" in text)
    )


def _reduction_efficiency(gpu: Any, catalog: Any) -> float | None:
    fabric_id = getattr(gpu, "scale_up_fabric_id", None)
    if not fabric_id or not getattr(gpu, "scale_up_in_switch_reduction", False):
        return None
    try:
        fabric = catalog.fabric(fabric_id)
    except Exception:  # a missing fabric row only loses the efficiency
        return None
    return getattr(fabric, "in_network_reduction_efficiency", None)


def spec_from_catalog(gpu: Any, catalog: Any) -> DeviceSpec:
    peaks = {d: gpu.peak_flops_per_s(d) for d in DTYPES}
    return DeviceSpec(
        id=gpu.id,
        kind="gpu",
        name=gpu.name,
        vendor=gpu.vendor,
        generation=gpu.generation,
        peaks_flops_per_s=peaks,
        memory_bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s,
        scale_up_bandwidth_bytes_per_s=gpu.scale_up_bandwidth_bytes_per_s or None,
        scale_up_domain_size=gpu.scale_up_domain_size,
        in_switch_reduction=bool(getattr(gpu, "scale_up_in_switch_reduction", False)),
        in_switch_reduction_efficiency=_reduction_efficiency(gpu, catalog),
        mesh=_is_mesh(gpu, catalog),
        host_link_bandwidth_bytes_per_s=gpu.host_link_bandwidth_bytes_per_s,
        source=gpu.source,
    )


def device_specs(
    catalog: Any, extra: dict[str, dict[str, Any]] | None = None
) -> dict[str, DeviceSpec]:
    """Specs of every catalog accelerator plus the non-catalog devices in ``extra``."""
    specs: dict[str, DeviceSpec] = {}
    if catalog is not None:
        for gpu in catalog.gpus:
            specs[gpu.id] = spec_from_catalog(gpu, catalog)
    for dev, info in (extra or {}).items():
        if dev not in specs:
            specs[dev] = DeviceSpec(
                id=dev, kind=info.get("kind", "unknown"), name=str(info.get("name", dev))
            )
    return specs
