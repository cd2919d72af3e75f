"""PCI topology, NUMA placement, NIC/HCA inventory and GPUDirect RDMA state, read from ``/sys``.

Everything here reads Linux sysfs under a ``root`` folder (``/`` on a real node; tests point
it at a fake tree under ``tmp_path``), never stops a run, and says why a field is null:

* a PCI device's NUMA node is ``/sys/bus/pci/devices/<bus id>/numa_node`` (``-1`` when the
  platform does not report one), the CPUs of node N ``/sys/devices/system/node/nodeN/cpulist``
  (Linux ``Documentation/ABI/stable/sysfs-devices-node``);
* RDMA devices (InfiniBand HCAs, RoCE NICs, AWS EFA) are ``/sys/class/infiniband/<dev>``, with
  ``device`` linking to the PCI function and ``ports/<p>/{rate,state,phys_state,link_layer}``
  (Linux ``Documentation/ABI/stable/sysfs-class-infiniband``); network interfaces are
  ``/sys/class/net/<if>`` with ``device``, ``speed`` (Mb/s), ``operstate``
  (``Documentation/ABI/testing/sysfs-class-net``). Virtual interfaces (no ``device``) are left
  out. MAC addresses, GUIDs and IP addresses are never read (privacy);
* the GPU-NIC relation uses the legend of ``nvidia-smi topo -m`` (NVML's
  ``nvmlGpuTopologyLevel_t``): ``PIX`` at most one PCIe switch between them, ``PXB`` several
  bridges but no host bridge, ``PHB`` through a PCIe host bridge (the CPU), ``NODE`` between host
  bridges of one NUMA node, ``SYS`` across NUMA nodes; computed from the two devices' paths under
  ``/sys/devices`` (a switch is an upstream port with its downstream ports, as NCCL's topology
  detection merges them);
* GPUDirect RDMA on NVIDIA needs the ``nvidia_peermem`` module (driver 470 and later; the older
  Mellanox ``nv_peer_mem``; ``efa_nv_peermem`` on AWS EFA) or a dma-buf capable stack
  (NVIDIA GPU Operator documentation, "GPUDirect RDMA: Using nvidia-peermem",
  https://docs.nvidia.com/datacenter/cloud-native/gpu-operator/1.8/gpu-operator-rdma.html;
  github.com/Mellanox/nv_peer_memory README); a loaded module is ``/sys/module/<name>``. The
  PeerDirect API of MLNX_OFED lists its registered peer-memory clients under
  ``/sys/kernel/mm/memory_peers/<client>`` (NVIDIA networking docs, "NVIDIA PeerDirect"): on AMD
  the ROCm kernel driver (``amdgpu``/KFD) registers there, which is the AMD equivalent looked
  for. A dma-buf path (no module) cannot be seen from sysfs, so where nothing is found the
  state is ``absent`` with that said.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path
from typing import Any

_BDF = re.compile(r"^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_HOST_BRIDGE = re.compile(r"^pci[0-9a-f]{4,}:[0-9a-f]{2}$")

#: Kernel modules that give NVIDIA GPUs GPUDirect RDMA, in the order they are looked for.
NVIDIA_PEERMEM_MODULES = ("nvidia_peermem", "nv_peer_mem", "efa_nv_peermem")


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="ascii", errors="replace").strip()
    except OSError:
        return None


def parse_cpulist(text: str) -> set[int]:
    """CPUs of a sysfs cpulist (``0-3,8-11`` or ``0,2,4``; empty for a memory-only node).

    >>> sorted(parse_cpulist("0-2,8"))
    [0, 1, 2, 8]
    >>> parse_cpulist("")
    set()
    """
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            lo, hi = part.split("-", 1)
            cpus.update(range(int(lo), int(hi) + 1))
        else:
            cpus.add(int(part))
    return cpus


def pci_numa_node(bus_id: str | None, root: Path | str = "/") -> tuple[int | None, str | None]:
    """(NUMA node of a PCI device, why it is None): ``-1`` in sysfs reads as None."""
    if not bus_id:
        return None, "the device's PCI bus id is unknown"
    path = Path(root) / "sys/bus/pci/devices" / bus_id / "numa_node"
    text = _read(path)
    if text is None:
        return None, f"{path} is not readable"
    try:
        node = int(text)
    except ValueError:
        return None, f"{path} holds {text!r}, not a number"
    if node < 0:
        return None, "the platform reports no NUMA node for the device (numa_node = -1)"
    return node, None


def node_cpus(node: int, root: Path | str = "/") -> tuple[set[int] | None, str | None]:
    """(CPUs of NUMA node ``node``, why it is None)."""
    path = Path(root) / f"sys/devices/system/node/node{node}/cpulist"
    text = _read(path)
    if text is None:
        return None, f"{path} is not readable"
    try:
        cpus = parse_cpulist(text)
    except ValueError:
        return None, f"{path} holds {text!r}, not a cpulist"
    if not cpus:
        return None, f"NUMA node {node} has no CPUs (a memory-only node)"
    return cpus, None


def pci_path(bus_id: str | None, root: Path | str = "/") -> list[str] | None:
    """The device's place in the PCI tree: ``[host bridge, bus id, ..., bus id]``, or None.

    ``/sys/bus/pci/devices/<bus id>`` links to ``/sys/devices/pci<domain>:<bus>/<root port>/
    .../<bus id>``; a link that does not resolve inside ``root`` gives None.
    """
    if not bus_id:
        return None
    base = Path(root)
    link = base / "sys/bus/pci/devices" / bus_id
    try:
        real = link.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    parts = real.parts
    for i, part in enumerate(parts):
        if _HOST_BRIDGE.match(part):
            chain = [p for p in parts[i + 1 :] if _BDF.match(p)]
            return [part, *chain] if chain else None
    return None


def _pci_ancestor(device_link: Path) -> str | None:
    """The PCI bus id at or above a sysfs device (a virtio netdev sits below its PCI function)."""
    try:
        real = device_link.resolve(strict=True)
    except (OSError, RuntimeError):
        return None
    for part in reversed(real.parts):
        if _BDF.match(part):
            return part
    return None


def relation(a: str | None, b: str | None, root: Path | str = "/") -> tuple[str | None, str | None]:
    """(``PIX|PXB|PHB|NODE|SYS``, why None) between two PCI devices, ``nvidia-smi topo`` style."""
    pa, pb = pci_path(a, root), pci_path(b, root)
    if pa is None or pb is None:
        return None, "a device's place in the PCI tree is not readable"
    if pa[0] != pb[0]:
        na, _ = pci_numa_node(a, root)
        nb, _ = pci_numa_node(b, root)
        if na is None or nb is None:
            return None, "different host bridges and a NUMA node is unknown"
        return ("NODE" if na == nb else "SYS"), None
    common = 0
    for x, y in zip(pa[1:], pb[1:], strict=False):
        if x != y:
            break
        common += 1
    if common == 0:
        return "PHB", None
    # below the shared bridge: at most a downstream port and the device on each side is one
    # switch (its upstream port is the last shared component)
    rest_a, rest_b = len(pa) - 1 - common, len(pb) - 1 - common
    return ("PIX" if rest_a <= 2 and rest_b <= 2 else "PXB"), None


_RANK = {"PIX": 0, "PXB": 1, "PHB": 2, "NODE": 3, "SYS": 4}


def _rate_gbps(text: str | None) -> float | None:
    """``400 Gb/sec (4X NDR)`` -> 400.0."""
    if not text:
        return None
    m = re.match(r"\s*([0-9.]+)\s*Gb/sec", text)
    return float(m.group(1)) if m else None


def _state(text: str | None) -> str | None:
    """``4: ACTIVE`` -> ``ACTIVE``."""
    if not text:
        return None
    return text.split(":", 1)[-1].strip() or None


def rdma_devices(root: Path | str = "/") -> list[dict[str, Any]]:
    """One row per RDMA device (``/sys/class/infiniband``), every port with rate and state."""
    base = Path(root) / "sys/class/infiniband"
    out: list[dict[str, Any]] = []
    if not base.is_dir():
        return out
    for dev in sorted(base.iterdir()):
        bus = _pci_ancestor(dev / "device")
        ports = []
        for port in sorted((dev / "ports").glob("*")):
            rate_text = _read(port / "rate")
            ports.append(
                {
                    "port": int(port.name) if port.name.isdigit() else port.name,
                    "rate_gbps": _rate_gbps(rate_text),
                    "rate": rate_text,
                    "state": _state(_read(port / "state")),
                    "phys_state": _state(_read(port / "phys_state")),
                    "link_layer": _read(port / "link_layer"),
                }
            )
        netdevs = sorted(p.name for p in (dev / "device/net").glob("*")) if bus else []
        out.append(
            {
                "name": dev.name,
                "kind": "rdma",
                "pci_bus_id": bus,
                "driver": _driver(dev / "device"),
                "netdevs": netdevs,
                "ports": ports,
            }
        )
    return out


def _driver(device_link: Path) -> str | None:
    with contextlib.suppress(OSError, RuntimeError):
        return (device_link / "driver").resolve(strict=True).name
    return None


def net_devices(root: Path | str = "/") -> list[dict[str, Any]]:
    """One row per physical network interface (``/sys/class/net/<if>`` with a ``device``)."""
    base = Path(root) / "sys/class/net"
    out: list[dict[str, Any]] = []
    if not base.is_dir():
        return out
    for dev in sorted(base.iterdir()):
        link = dev / "device"
        if not link.exists():
            continue  # lo, bridges, veth, ifb: no hardware behind them
        bus = _pci_ancestor(link)
        if bus is None:
            continue
        speed = _read(dev / "speed")
        speed_mbps = int(speed) if speed and speed.lstrip("-").isdigit() else None
        rate_why = (
            None
            if speed_mbps and speed_mbps > 0
            else f"speed reads {speed!r} (link down, or a virtual NIC that reports none)"
        )
        out.append(
            {
                **({"rate_unknown": rate_why} if rate_why else {}),
                "name": dev.name,
                "kind": "net",
                "pci_bus_id": bus,
                "driver": _driver(link),
                "rate_gbps": speed_mbps / 1000 if speed_mbps and speed_mbps > 0 else None,
                "state": (_read(dev / "operstate") or "").upper() or None,
            }
        )
    return out


def gpu_id(gpu: dict[str, Any]) -> int | None:
    """A GPU's number in these rows: its torch index when torch sees it, else NVML/amdsmi's."""
    idx = gpu.get("torch_index")
    return int(idx) if idx is not None else gpu.get("mgmt_index")


def nearest_nics(gpu: dict[str, Any], nics: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The RDMA devices closest to ``gpu`` (same relation, best first), from ``nic_inventory``
    rows: what ``NCCL_IB_HCA`` would pair with that GPU."""
    me = gpu_id(gpu)
    found = []
    for nic in nics:
        if nic.get("kind") != "rdma":
            continue
        for a in nic.get("gpu_affinity") or []:
            if a.get("gpu") == me and a.get("relation"):
                found.append({"name": nic["name"], "relation": a["relation"]})
    if not found:
        return []
    best = min(_RANK.get(f["relation"], 9) for f in found)
    return [f for f in found if _RANK.get(f["relation"], 9) == best]


def parse_topo_matrix(text: str | None) -> dict[tuple[int, str], str]:
    r"""``nvidia-smi topo -m`` as {(NVML GPU index, NIC name): PIX|PXB|PHB|NODE|SYS}.

    The matrix has one column per GPU and NIC, then the CPU/NUMA affinity columns; NICs are
    named by their RDMA device (``mlx5_0``) or, in newer drivers, ``NIC<k>`` with a
    ``NIC Legend`` (``NIC0: mlx5_0``) below. Other cells (``X``, ``NV18``) are not relations
    to a NIC and are left out.

    >>> parse_topo_matrix("\tGPU0\tNIC0\tCPU Affinity\nGPU0\t X \tPIX\t0-7\n"
    ...                   "NIC0\tPIX\t X\n\nNIC Legend:\n\n  NIC0: mlx5_0\n")
    {(0, 'mlx5_0'): 'PIX'}
    """
    if not text:
        return {}
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return {}
    header: list[str] = []
    for token in lines[0].split():
        if token == "CPU":  # "CPU Affinity", "NUMA Affinity", "GPU NUMA ID" follow
            break
        header.append(token)
    legend = dict(re.findall(r"^\s*(NIC\d+):\s*(\S+)\s*$", text, re.M))
    out: dict[tuple[int, str], str] = {}
    for line in lines[1:]:
        cells = line.split()
        m = re.fullmatch(r"GPU(\d+)", cells[0]) if cells else None
        if not m:
            continue
        for col, value in zip(header, cells[1 : 1 + len(header)], strict=False):
            if col.startswith("GPU") or value not in _RANK:
                continue
            out[(int(m.group(1)), legend.get(col, col))] = value
    return out


def nic_inventory(
    gpus: list[dict[str, Any]] | None = None,
    root: Path | str = "/",
    topo: str | None = None,
) -> list[dict[str, Any]]:
    """NICs and HCAs with PCI address, NUMA node, link rate, state and the GPUs nearest them.

    ``gpus`` are inventory rows (``pci_bus_id``, ``torch_index``/``mgmt_index``). An RDMA
    device and the network interface of the same PCI function are one row (``netdevs``);
    interfaces without RDMA follow as their own rows. ``gpu_affinity`` lists every GPU with
    its relation, nearest first (``source``: ``sysfs``, or ``nvidia-smi topo -m`` where the
    PCI paths cannot be read and ``topo``, that command's output, names the pair);
    ``nearest_gpus`` those at the closest relation.
    """
    matrix = parse_topo_matrix(topo)
    rows = rdma_devices(root)
    rdma_buses = {r["pci_bus_id"] for r in rows if r["pci_bus_id"]}
    rows += [n for n in net_devices(root) if n["pci_bus_id"] not in rdma_buses]
    for row in rows:
        if row["pci_bus_id"] is None:
            row["pci_unknown"] = "no PCI function above the device (a software RDMA device?)"
        node, why = pci_numa_node(row["pci_bus_id"], root)
        row["numa_node"] = node
        if node is None:
            row["numa_node_unknown"] = why
        if row["kind"] == "rdma":
            active = [p for p in row["ports"] if p["state"] == "ACTIVE"]
            rates = [p["rate_gbps"] for p in active if p["rate_gbps"]]
            row["rate_gbps"] = max(rates) if rates else None
            if not rates:
                row["rate_unknown"] = "no ACTIVE port with a readable rate"
            row["state"] = (
                "ACTIVE" if active else (row["ports"][0]["state"] if row["ports"] else None)
            )
        affinity: list[dict[str, Any]] = []
        for gpu in gpus or []:
            rel, why = relation(gpu.get("pci_bus_id"), row["pci_bus_id"], root)
            source = "sysfs" if rel else None
            if rel is None and gpu.get("mgmt_index") is not None:
                rel = matrix.get((int(gpu["mgmt_index"]), row["name"]))
                source = "nvidia-smi topo -m" if rel else None
            affinity.append(
                {
                    "gpu": gpu_id(gpu),
                    "mgmt_index": gpu.get("mgmt_index"),
                    "pci_bus_id": gpu.get("pci_bus_id"),
                    "relation": rel,
                    "source": source,
                    **({} if rel else {"unknown": why}),
                }
            )
        affinity.sort(key=lambda a: _RANK.get(str(a["relation"] or ""), 9))
        row["gpu_affinity"] = affinity
        known = [a for a in affinity if a["relation"]]
        best = known[0]["relation"] if known else None
        row["nearest_gpus"] = [a["gpu"] for a in known if a["relation"] == best]
    return rows


def gpudirect_rdma(
    vendor: str | None, nics: list[dict[str, Any]], root: Path | str = "/"
) -> dict[str, Any]:
    """GPUDirect RDMA state: ``enabled``, ``absent``, or None (not checked, with ``reason``).

    NVIDIA: one of :data:`NVIDIA_PEERMEM_MODULES` loaded. AMD: ``amdgpu`` loaded and a
    peer-memory client registered under ``/sys/kernel/mm/memory_peers``. ``peer_clients``
    lists those registrations for either vendor; ``rdma_devices`` counts the HCAs/RDMA NICs
    (without one there is nothing for GPUDirect RDMA to use).
    """
    base = Path(root)
    modules_dir = base / "sys/module"
    peers_dir = base / "sys/kernel/mm/memory_peers"
    rdma = sum(n["kind"] == "rdma" for n in nics)
    peers = sorted(p.name for p in peers_dir.iterdir()) if peers_dir.is_dir() else []
    out: dict[str, Any] = {"rdma_devices": rdma, "peer_clients": peers, "modules": []}
    if vendor not in ("nvidia", "amd"):
        return {**out, "state": None, "reason": "no GPU vendor known: not checked"}
    if not modules_dir.is_dir():
        return {**out, "state": None, "reason": f"{modules_dir} is not readable"}
    if vendor == "nvidia":
        loaded = [m for m in NVIDIA_PEERMEM_MODULES if (modules_dir / m).is_dir()]
        wanted = f"none of {', '.join(NVIDIA_PEERMEM_MODULES)} is loaded"
    else:
        amdgpu = (modules_dir / "amdgpu").is_dir()
        loaded = ["amdgpu"] if amdgpu and peers else []
        wanted = (
            "amdgpu is not loaded"
            if not amdgpu
            else f"no peer-memory client is registered under {peers_dir}"
        )
    if loaded:
        return {**out, "modules": loaded, "state": "enabled", "reason": None}
    reason = (
        wanted
        + ("" if rdma else "; the node has no RDMA device either")
        + " (a dma-buf path, if the stack has one, is not visible in sysfs)"
    )
    return {**out, "state": "absent", "reason": reason}
