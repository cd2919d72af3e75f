"""Node health verdict: ``healthy`` or ``degraded`` with the reasons, at the end of a run.

The ``health`` probe runs last and reads no new benchmark: it re-reads every GPU's ECC,
remapped-row and retired-page counters (:func:`gpuplan.probes.inventory.health_counters`),
compares them with the inventory taken when the run started, re-reads the NICs/HCAs and the
GPUDirect RDMA state (:mod:`gpuplan.probes.nics`), and collects what the run's own probes
flagged (peer-to-peer pairs below the median, host buffers that could not be NUMA-bound).

It is the acceptance check a buyer makes of a rented trial node without the kernel log:
XID events (``dmesg``) need root and are not read; the counters NVML/amdsmi expose cover the
memory faults that XIDs 48/63/64/92/94/95 report (NVIDIA "XID Errors" and "GPU Memory Error
Management" guides, https://docs.nvidia.com/deploy/xid-errors/ and
https://docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt/).

``degraded`` when any of: an uncorrectable ECC error since the driver loaded; a row remap
pending (the GPU needs a reset) or failed (no spare row: the GPU needs service); a retired page
pending; corrected ECC errors that grew during the run; a P2P pair flagged; a GPU with fewer
active NVLinks than the others; a GPU whose pinned host copies are below
:data:`PCIE_FLAG_FRACTION` of the node's median; an RDMA port that is not ACTIVE; RDMA devices
present while GPUDirect RDMA is not enabled. ``notes`` hold what is
worth knowing but not a fault (lifetime ECC counts, a GPU with no NIC under its PCIe switch,
host memory that could not be bound to the GPU's node, a PCIe link capped by its slot or
narrower than the other GPUs'). ``unchecked`` names each check that
could not be made, with the reason, so that ``healthy`` never hides a check that was not run.
"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

from gpuplan.probes.base import ProbeContext, ProbeRecorder

PROBE_VERSION = 1


def planned_budget(quick: bool, gpus: int, timing: Any) -> Any:
    """The suite's plan (gpuplan.probes.budget): NVML/amdsmi queries and sysfs reads only."""
    from gpuplan.probes.budget import ProbeBudget

    return ProbeBudget("health", 2.0, 1, "health counters and sysfs re-read")


def _gpu_label(acc: dict[str, Any], fallback: int) -> str:
    idx = acc.get("torch_index")
    return f"GPU {idx if idx is not None else acc.get('mgmt_index', fallback)}"


def gpu_findings(
    accelerators: list[dict[str, Any]], now: dict[int, dict[str, Any]] | None = None
) -> tuple[list[str], list[str], list[str]]:
    """(reasons, notes, unchecked) from the GPUs' health counters.

    ``accelerators`` are inventory rows with ``health`` as read at the start of the run;
    ``now`` the counters re-read at the end, by management index (None: not re-read).
    """
    reasons: list[str] = []
    notes: list[str] = []
    unchecked: list[str] = []
    for k, acc in enumerate(accelerators):
        label = _gpu_label(acc, k)
        start = acc.get("health")
        end = (now or {}).get(acc.get("mgmt_index", k)) if now is not None else None
        health = end or start
        if not health:
            unchecked.append(f"{label}: memory health not readable (no NVML/amdsmi answer)")
            continue
        ecc = health.get("ecc") or {}
        if ecc.get("volatile_uncorrected") is None and ecc.get("aggregate_uncorrected") is None:
            unchecked.append(f"{label}: ECC counters not readable")
        if (ecc.get("volatile_uncorrected") or 0) > 0:
            reasons.append(
                f"{label}: {ecc['volatile_uncorrected']} uncorrectable ECC errors since the driver loaded"
            )
        elif (ecc.get("aggregate_uncorrected") or 0) > 0:
            notes.append(
                f"{label}: {ecc['aggregate_uncorrected']} uncorrectable ECC errors in the board's lifetime"
            )
        if (ecc.get("deferred") or 0) > 0:
            reasons.append(f"{label}: {ecc['deferred']} deferred ECC errors")
        if start and end:
            c0 = (start.get("ecc") or {}).get("volatile_corrected")
            c1 = ecc.get("volatile_corrected")
            if isinstance(c0, int) and isinstance(c1, int) and c1 > c0:
                reasons.append(f"{label}: {c1 - c0} corrected ECC errors during the run")
        rows = health.get("remapped_rows")
        if rows:
            if rows.get("failure"):
                reasons.append(f"{label}: row remapping failed (no spare row left): needs service")
            if rows.get("pending"):
                reasons.append(f"{label}: a row remap is pending: reset the GPU")
            if rows.get("uncorrected"):
                notes.append(
                    f"{label}: {rows['uncorrected']} rows remapped after uncorrectable errors"
                )
        pages = health.get("retired_pages")
        if pages:
            if pages.get("pending"):
                reasons.append(f"{label}: a retired page is pending: reset the GPU")
            total = pages.get(
                "total", (pages.get("single_bit") or 0) + (pages.get("double_bit") or 0)
            )
            if total:
                notes.append(f"{label}: {total} retired pages")
        if not rows and not pages:
            unchecked.append(f"{label}: neither remapped rows nor retired pages readable")
    return reasons, notes, unchecked


def fabric_findings(
    nics: list[dict[str, Any]], rdma: dict[str, Any] | None, gpus: int
) -> tuple[list[str], list[str], list[str]]:
    """(reasons, notes, unchecked) from the NIC inventory and the GPUDirect RDMA state."""
    reasons: list[str] = []
    notes: list[str] = []
    unchecked: list[str] = []
    hcas = [n for n in nics if n.get("kind") == "rdma"]
    for hca in hcas:
        for port in hca.get("ports") or []:
            if port.get("state") not in (None, "ACTIVE"):
                reasons.append(
                    f"{hca['name']} port {port.get('port')} is {port.get('state')}"
                    + (f" ({port['phys_state']})" if port.get("phys_state") else "")
                )
    if hcas and rdma is not None:
        if rdma.get("state") == "absent":
            reasons.append(f"GPUDirect RDMA not enabled: {rdma.get('reason')}")
        elif rdma.get("state") is None:
            unchecked.append(f"GPUDirect RDMA: {rdma.get('reason')}")
    if hcas and gpus:
        near = {
            g
            for n in hcas
            for a in n.get("gpu_affinity") or []
            if a.get("relation") in ("PIX", "PXB")
            for g in [a.get("gpu")]
        }
        known = {
            a.get("gpu") for n in hcas for a in n.get("gpu_affinity") or [] if a.get("relation")
        }
        far = sorted(g for g in known - near if g is not None)
        if far:
            notes.append(
                "GPUs with no RDMA NIC under their PCIe switch: " + ", ".join(str(g) for g in far)
            )
    if not hcas:
        notes.append("no RDMA device (InfiniBand/RoCE/EFA): multi-node traffic goes over TCP")
    return reasons, notes, unchecked


#: A GPU whose pinned host-copy bandwidth is below this fraction of the node's median is a
#: reason: the GPUs of one node have the same link, so a GPU at 0.9 or less has a link
#: trained down (a Gen5 x16 link at Gen4 halves it; x8 halves it) or a congested switch.
PCIE_FLAG_FRACTION = 0.9


def link_findings(
    accelerators: list[dict[str, Any]], recorders: list[ProbeRecorder]
) -> tuple[list[str], list[str]]:
    """(reasons, notes) from the GPUs' links: NVLinks down, PCIe capped by the slot, and the
    run's pinned host copies of one GPU well below the others'."""
    reasons: list[str] = []
    notes: list[str] = []
    links = [(k, a.get("nvlink_links")) for k, a in enumerate(accelerators)]
    counts = [n for _, n in links if isinstance(n, int)]
    if counts and max(counts) > 0:
        top = max(counts)
        for k, n in links:
            if isinstance(n, int) and n < top:
                reasons.append(f"{_gpu_label(accelerators[k], k)}: {n} of {top} NVLinks active")
    for k, acc in enumerate(accelerators):
        gen, gpu_max = acc.get("pcie_gen"), acc.get("pcie_gen_gpu_max")
        if isinstance(gen, int) and isinstance(gpu_max, int) and gen < gpu_max:
            notes.append(
                f"{_gpu_label(acc, k)}: the slot caps PCIe at Gen{gen} (the GPU supports Gen{gpu_max})"
            )
    widths = [int(a["pcie_width"]) for a in accelerators if isinstance(a.get("pcie_width"), int)]
    widest = max(widths) if widths else 0
    for k, acc in enumerate(accelerators):
        w = acc.get("pcie_width")
        if isinstance(w, int) and w < widest:
            notes.append(f"{_gpu_label(acc, k)}: PCIe x{w} where other GPUs have x{widest}")
    pcie = [r for r in recorders if r.probe == "pcie" and r.measurements]
    if len(pcie) >= 2:
        top_size = max(m["size_bytes"] for r in pcie for m in r.measurements)
        for direction in ("h2d", "d2h"):
            per_gpu = {
                str(r.params.get("device")): m["bytes_per_s"]
                for r in pcie
                for m in r.measurements
                if m.get("memory") == "pinned"
                and m.get("direction") == direction
                and m.get("size_bytes") == top_size
            }
            if len(per_gpu) < 2:
                continue
            median = statistics.median(per_gpu.values())
            for device, bps in per_gpu.items():
                if median and bps < PCIE_FLAG_FRACTION * median:
                    reasons.append(
                        f"{device}: pinned {direction} at {bps / 1e9:.1f} GB/s is "
                        f"{bps / median:.0%} of the node's median {median / 1e9:.1f} GB/s"
                    )
    return reasons, notes


def probe_findings(recorders: list[ProbeRecorder]) -> tuple[list[str], list[str]]:
    """(reasons, notes) from this run's probes: flagged P2P pairs, NUMA binding failures."""
    reasons: list[str] = []
    notes: list[str] = []
    for rec in recorders:
        if rec.probe == "p2p":
            flagged = [m for m in rec.measurements if m.get("below_median")]
            if flagged:
                reasons.append(
                    f"{len(flagged)} peer-to-peer copies below "
                    f"{rec.params.get('flag_fraction', 0):.0%} of the median (see the p2p warnings)"
                )
            if any(m.get("peer_access") is False for m in rec.measurements):
                notes.append("some GPU pairs have no peer access")
        elif rec.probe == "pcie":
            numa = rec.params.get("numa") or {}
            if numa and not numa.get("bound") and numa.get("numa_node") is not None:
                notes.append(
                    f"{rec.params.get('device')}: host memory not NUMA-bound ({numa.get('reason')})"
                )
    return reasons, notes


def verdict(
    accelerators: list[dict[str, Any]],
    nics: list[dict[str, Any]],
    rdma: dict[str, Any] | None,
    recorders: list[ProbeRecorder],
    now: dict[int, dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """The health measurement: ``verdict``, ``reasons``, ``notes``, ``unchecked``."""
    r1, n1, u1 = gpu_findings(accelerators, now)
    r2, n2, u2 = fabric_findings(nics, rdma, len(accelerators))
    r3, n3 = probe_findings(recorders)
    r4, n4 = link_findings(accelerators, recorders)
    reasons = r1 + r2 + r3 + r4
    if not accelerators:
        u1 = ["GPU memory health: no accelerator in the inventory"]
    return {
        "verdict": "degraded" if reasons else "healthy",
        "reasons": reasons,
        "notes": n1 + n2 + n3 + n4,
        "unchecked": u1 + u2,
        "gpus": len(accelerators),
        "rdma_devices": sum(n.get("kind") == "rdma" for n in nics),
        "gpudirect_rdma": (rdma or {}).get("state"),
    }


def run(ctx: ProbeContext, root: Path | str = "/") -> None:
    from gpuplan.probes.inventory import health_counters
    from gpuplan.probes.nics import gpudirect_rdma, nic_inventory

    rec = ctx.record("health", PROBE_VERSION, device="node")
    accs = list(ctx.accelerators)
    now = health_counters() if accs else {}
    nics = nic_inventory(accs, root)
    vendor = next((a.get("vendor") for a in accs if a.get("vendor")), None)
    rdma = gpudirect_rdma(vendor, nics, root)
    result = verdict(accs, nics, rdma, ctx.recorders, now or None)
    rec.add(result)
    ctx.point_done()
    rec.ok()
