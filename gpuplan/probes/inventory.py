"""Inventory of the node: host facts, accelerators (NVML, amdsmi or torch), tool versions.

Host facts come from Linux (``/proc``, ``/sys``) with portable fallbacks; accelerators from
NVML (``pynvml``, the ``nvidia-ml-py`` package) on NVIDIA GPUs, from ``amdsmi`` on AMD GPUs
when it is installed, and otherwise from what torch reports. Every field is best effort:
an unanswered query leaves ``None``, never stops the run.

Node health (issue 18): each accelerator row carries ``health`` (ECC counters, remapped rows,
retired pages: :func:`nvml_health`, :func:`amdsmi_health`) and ``numa_node``; the host carries
``nics`` (NICs/HCAs with PCI address, NUMA node, link rate, state and GPU affinity) and
``gpudirect_rdma`` (:mod:`gpuplan.probes.nics`). The verdict is the ``health`` probe's.

Privacy: the machine is identified by :func:`machine_id`, a hash of ``/etc/machine-id``
that cannot be turned back into it; the hostname is recorded only on request; the
environment is filtered by ``gpuplan.results.privacy.ENV_ALLOWLIST``.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from gpuplan.errors import InputError
from gpuplan.probes.nics import gpudirect_rdma, nearest_nics, nic_inventory, pci_numa_node
from gpuplan.probes.procs import run_child
from gpuplan.units import parse_size_bytes

_MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
_SALT = b"gpuplan-machine-id-v1:"


def machine_id(
    paths: tuple[str, ...] = _MACHINE_ID_FILES,
    *,
    hardware_ids: Sequence[str] = (),
    net_root: Path | str = "/sys/class/net",
) -> str:
    """A stable, non-identifying id of this machine (16 hex digits).

    SHA-256 of a fixed salt and ``/etc/machine-id`` (systemd's random 128-bit id): stable
    across runs and reboots, different between machines, and it reveals neither the
    machine-id nor the hostname. Where that file is absent or empty (container and VM
    images often ship it empty), the hardware is hashed the same way: the MAC addresses
    of the network interfaces backed by a device (sysfs ``device`` link; virtual ones such
    as ``ifb``/``veth``/bridges get a random MAC at each boot) and ``hardware_ids`` (the
    accelerators' UUIDs, unique to each GPU). Then the burned-in MAC that
    :func:`uuid.getnode` finds, and last the host name: never ``uuid.getnode``'s random
    number (multicast bit set), which changes with every process. Seen on a Firecracker
    VM with an empty ``/etc/machine-id``: two runs on one machine got two ids.
    """
    raw: bytes | None = None
    for p in paths:
        with contextlib.suppress(OSError):
            text = Path(p).read_text(encoding="ascii", errors="ignore").strip()
            if text:
                raw = text.encode()
                break
    if raw is None:
        hardware = sorted({*_device_macs(Path(net_root)), *(h for h in hardware_ids if h)})
        if hardware:
            raw = ("hw:" + ",".join(hardware)).encode()
    if raw is None:
        node = uuid.getnode()
        random_node = bool(node & (1 << 40))  # RFC 4122 4.5: a random node sets this bit
        raw = (f"mac:{node:012x}" if not random_node else f"host:{socket.gethostname()}").encode()
    return hashlib.sha256(_SALT + raw).hexdigest()[:16]


def _device_macs(net_root: Path) -> list[str]:
    """MAC addresses of the interfaces under ``net_root`` that a device backs (not ``lo``,
    not all-zero), which stay the same from boot to boot."""
    macs = []
    with contextlib.suppress(OSError):
        for nic in sorted(net_root.iterdir()):
            if nic.name == "lo" or not (nic / "device").exists():
                continue
            with contextlib.suppress(OSError):
                mac = (nic / "address").read_text(encoding="ascii").strip().lower()
                if mac and mac.strip("0:"):
                    macs.append(mac)
    return macs


def cpu_llc_bytes(sys_cpu: Path | str = "/sys/devices/system/cpu") -> int | None:
    """Size of the last-level cache (one instance), from sysfs, else ``lscpu``/``getconf``."""
    best: tuple[int, int] | None = None
    for index in sorted(Path(sys_cpu).glob("cpu0/cache/index*")):
        try:
            level = int((index / "level").read_text().strip())
            kind = (index / "type").read_text().strip()
            size = parse_size_bytes((index / "size").read_text(), strict=True)
        except (OSError, ValueError, InputError):
            continue
        if kind in ("Unified", "Data") and size and (best is None or level > best[0]):
            best = (level, size)
    if best is not None:
        return best[1]
    if shutil.which("lscpu"):
        with contextlib.suppress(OSError, subprocess.SubprocessError, ValueError):
            out = run_child(["lscpu", "-B", "-C=LEVEL,ONE-SIZE"], timeout_s=5).stdout
            rows = [line.split() for line in out.splitlines()[1:] if line.split()]
            sizes = [(int(r[0]), int(r[1])) for r in rows if len(r) == 2 and r[0].isdigit()]
            if sizes:
                return max(sizes)[1]
    with contextlib.suppress(ValueError, OSError, AttributeError):
        for name in ("SC_LEVEL3_CACHE_SIZE", "SC_LEVEL2_CACHE_SIZE"):
            value = os.sysconf(name)
            if value and value > 0:
                return int(value)
    return None


def _cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("model name", "hardware", "cpu model")):
                return line.split(":", 1)[1].strip()
    return platform.processor() or None


def _cpu_count() -> int | None:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def _memory_bytes() -> int | None:
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    with contextlib.suppress(ValueError, OSError, AttributeError):
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return None


def available_memory_bytes() -> int | None:
    """Memory available for new allocations (``MemAvailable``), for sizing sweeps."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return _memory_bytes()


def _numa_nodes() -> int | None:
    nodes = list(Path("/sys/devices/system/node").glob("node[0-9]*"))
    return len(nodes) or None


def _run(cmd: list[str], timeout: float = 10) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    try:
        done = run_child(cmd, timeout_s=timeout)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else None


def fio_version() -> str | None:
    out = _run(["fio", "--version"], timeout=5)
    return out.splitlines()[0].strip() if out else None


# --------------------------------------------------------------------------- accelerators
def _nvml() -> Any | None:
    """pynvml, initialised, or None where NVML is absent (no driver, no GPU)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None
    return pynvml


def _q(fn: Any, *args: Any) -> Any:
    """An NVML/amdsmi query that may be unsupported on this board: None then."""
    try:
        return fn(*args)
    except Exception:
        return None


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _pcie_gen_from_speed(speed: Any) -> int | None:
    """PCIe generation from a link speed in MT/s (amdsmi reports 16000 for Gen4)."""
    if not isinstance(speed, (int, float)) or speed <= 0:
        return None
    for gen, mts in ((6, 64000), (5, 32000), (4, 16000), (3, 8000), (2, 5000), (1, 2500)):
        if speed >= mts * 0.9:
            return gen
    return None


def _int_or_none(value: Any) -> int | None:
    """amdsmi answers "N/A" (or a max-uint sentinel) for fields a board does not report."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if value <= 0 or value >= 0xFFFF_FFFF:
        return None
    return int(value)


def normalize_uuid(value: Any) -> str | None:
    """A device UUID comparable across NVML, amdsmi and torch, or None.

    NVML writes ``GPU-<hex with dashes>`` (``MIG-<...>`` for a MIG instance), torch's
    ``get_device_properties().uuid`` the bare hex with dashes: the prefix is dropped, case
    and dashes ignored.

    >>> normalize_uuid("GPU-8A1B2C3D-0000-1111-2222-333344445555")
    '8a1b2c3d000011112222333344445555'
    >>> normalize_uuid("8a1b2c3d-0000-1111-2222-333344445555")
    '8a1b2c3d000011112222333344445555'
    """
    text = _text(value)
    if not isinstance(text, str) or not text.strip():
        return None
    text = text.strip().lower()
    for prefix in ("gpu-", "mig-"):
        text = text.removeprefix(prefix)
    text = text.replace("-", "")
    return text or None


def normalize_bus_id(value: Any) -> str | None:
    """A PCI address as ``dddd:bb:dd.f`` in lower case (NVML pads the domain to 8 digits).

    >>> normalize_bus_id("00000000:1B:00.0")
    '0000:1b:00.0'
    >>> normalize_bus_id("0000:c1:00.0")
    '0000:c1:00.0'
    """
    text = _text(value)
    if not isinstance(text, str):
        return None
    m = re.fullmatch(
        r"\s*(?:([0-9a-fA-F]+):)?([0-9a-fA-F]{1,2}):([0-9a-fA-F]{1,2})\.([0-7])\s*", text
    )
    if not m:
        return None
    domain = int(m.group(1) or "0", 16)
    return f"{domain:04x}:{int(m.group(2), 16):02x}:{int(m.group(3), 16):02x}.{m.group(4)}"


def _nvml_mig(nvml: Any, h: Any) -> dict[str, Any] | None:
    """MIG mode and instances of one GPU (None where the board has no MIG)."""
    mode = _q(nvml.nvmlDeviceGetMigMode, h)
    if mode is None:
        return None
    current = mode[0] if isinstance(mode, (list, tuple)) else mode
    enabled = bool(current == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1))
    devices: list[dict[str, Any]] = []
    if enabled:
        for j in range(_q(nvml.nvmlDeviceGetMaxMigDeviceCount, h) or 0):
            mh = _q(nvml.nvmlDeviceGetMigDeviceHandleByIndex, h, j)
            if mh is None:
                continue  # an empty slot
            mem = _q(nvml.nvmlDeviceGetMemoryInfo, mh)
            devices.append(
                {
                    "uuid": _text(_q(nvml.nvmlDeviceGetUUID, mh)),
                    "name": _text(_q(nvml.nvmlDeviceGetName, mh)),
                    "memory_bytes": int(mem.total) if mem is not None else None,
                }
            )
    pending = mode[1] if isinstance(mode, (list, tuple)) and len(mode) > 1 else None
    return {
        "enabled": enabled,
        "pending": None
        if pending is None
        else bool(pending == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)),
        "devices": devices,
    }


def _why(fn: Any, *args: Any) -> tuple[Any, str | None]:
    """(answer, None), or (None, why) where the query raised (not supported, no permission)."""
    try:
        return fn(*args), None
    except Exception as exc:
        return None, " ".join(f"{type(exc).__name__}: {exc}".split())[:200]


def nvml_health(nvml: Any, h: Any) -> dict[str, Any]:
    """ECC counters, remapped rows and retired pages of one NVIDIA GPU (NVML).

    ``ecc``: ``nvmlDeviceGetTotalEccErrors`` for corrected/uncorrected errors, volatile (since
    the driver loaded) and aggregate (the board's lifetime); ``remapped_rows``:
    ``nvmlDeviceGetRemappedRows`` (A100 and later: rows remapped after corrected/uncorrected
    errors, a remap ``pending`` until the GPU is reset, ``failure`` when no spare row was
    left); ``retired_pages``: ``nvmlDeviceGetRetiredPages`` by cause and
    ``nvmlDeviceGetRetiredPagesPendingStatus`` (pre-A100 dynamic page retirement). A field
    the board does not answer is None and ``unreadable`` says why (NVML API reference,
    "Device Queries: ECC", https://docs.nvidia.com/deploy/nvml-api/).
    """
    unreadable: dict[str, str] = {}
    ecc: dict[str, Any] = {}
    for key, err, counter in (
        ("volatile_corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_VOLATILE_ECC"),
        ("volatile_uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_VOLATILE_ECC"),
        ("aggregate_corrected", "NVML_MEMORY_ERROR_TYPE_CORRECTED", "NVML_AGGREGATE_ECC"),
        ("aggregate_uncorrected", "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", "NVML_AGGREGATE_ECC"),
    ):
        value, why = _why(
            getattr(nvml, "nvmlDeviceGetTotalEccErrors", _absent),
            h,
            getattr(nvml, err, 1 if "UNCORRECTED" in err else 0),
            getattr(nvml, counter, 1 if "AGGREGATE" in counter else 0),
        )
        ecc[key] = int(value) if isinstance(value, int) else None
        if why:
            unreadable[f"ecc.{key}"] = why
    rows, why = _why(getattr(nvml, "nvmlDeviceGetRemappedRows", _absent), h)
    remapped = None
    if isinstance(rows, (list, tuple)) and len(rows) >= 4:
        remapped = {
            "corrected": int(rows[0]),
            "uncorrected": int(rows[1]),
            "pending": bool(rows[2]),
            "failure": bool(rows[3]),
        }
    else:
        unreadable["remapped_rows"] = why or "no answer"
    retired: dict[str, Any] = {}
    for key, cause in (
        ("single_bit", "NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS"),
        ("double_bit", "NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR"),
    ):
        pages, why = _why(
            getattr(nvml, "nvmlDeviceGetRetiredPages", _absent),
            h,
            getattr(nvml, cause, 1 if "DOUBLE" in cause else 0),
        )
        if isinstance(pages, (list, tuple)):
            retired[key] = len(pages)
        else:
            unreadable[f"retired_pages.{key}"] = why or "no answer"
    pending, why = _why(getattr(nvml, "nvmlDeviceGetRetiredPagesPendingStatus", _absent), h)
    if pending is not None:
        retired["pending"] = bool(pending == getattr(nvml, "NVML_FEATURE_ENABLED", 1))
    else:
        unreadable["retired_pages.pending"] = why or "no answer"
    return {
        "source": "nvml",
        "ecc": ecc,
        "remapped_rows": remapped,
        "retired_pages": retired or None,
        "unreadable": unreadable,
    }


def amdsmi_health(smi: Any, h: Any) -> dict[str, Any]:
    """ECC counts and retired (bad) pages of one AMD GPU (amdsmi).

    ``amdsmi_get_gpu_total_ecc_count`` gives correctable, uncorrectable and deferred counts
    since the driver loaded (AMD SMI API reference, "ECC Information",
    https://rocm.docs.amd.com/projects/amdsmi/); ``amdsmi_get_gpu_bad_page_info`` lists the
    retired pages with their status (``PENDING`` until the GPU is reset). AMD has no row
    remapping counter: ``remapped_rows`` is None with the reason.
    """
    unreadable: dict[str, str] = {
        "remapped_rows": "AMD GPUs report retired pages, not remapped rows"
    }
    counts, why = _why(getattr(smi, "amdsmi_get_gpu_total_ecc_count", _absent), h)
    ecc: dict[str, Any] = {
        "volatile_corrected": None,
        "volatile_uncorrected": None,
        "aggregate_corrected": None,
        "aggregate_uncorrected": None,
        "deferred": None,
    }
    if isinstance(counts, dict):
        ecc["volatile_corrected"] = _int_or_zero(counts.get("correctable_count"))
        ecc["volatile_uncorrected"] = _int_or_zero(counts.get("uncorrectable_count"))
        ecc["deferred"] = _int_or_zero(counts.get("deferred_count"))
        unreadable["ecc.aggregate"] = "amdsmi reports counts since the driver loaded only"
    else:
        unreadable["ecc"] = why or "no answer"
    pages, why = _why(getattr(smi, "amdsmi_get_gpu_bad_page_info", _absent), h)
    retired = None
    if isinstance(pages, (list, tuple)):
        statuses = [str(p.get("status", "")).upper() if isinstance(p, dict) else "" for p in pages]
        retired = {"total": len(pages), "pending": any("PENDING" in s for s in statuses)}
    else:
        unreadable["retired_pages"] = why or "no answer"
    return {
        "source": "amdsmi",
        "ecc": ecc,
        "remapped_rows": None,
        "retired_pages": retired,
        "unreadable": unreadable,
    }


def _int_or_zero(value: Any) -> int | None:
    """amdsmi counts: an int (0 included), None for "N/A"."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def health_counters() -> dict[int, dict[str, Any]]:
    """Health of every GPU now, by management index (NVML first, then amdsmi); {} without.

    The health probe reads it at the end of a run to see what changed during the run.
    """
    nvml = _nvml()
    if nvml is not None:
        with contextlib.suppress(Exception):
            return {
                i: nvml_health(nvml, nvml.nvmlDeviceGetHandleByIndex(i))
                for i in range(nvml.nvmlDeviceGetCount())
            }
    smi = _amdsmi()
    if smi is not None:
        with contextlib.suppress(Exception):
            return {
                i: amdsmi_health(smi, h) for i, h in enumerate(smi.amdsmi_get_processor_handles())
            }
    return {}


def nvml_accelerators(nvml: Any) -> list[dict[str, Any]]:
    """One dict per NVIDIA GPU with the ``Accelerator`` fields of the result schema.

    ``pcie_gen``/``pcie_width`` are the link's maximum (an idle GPU downtrains its link to
    save power, so the current generation read at rest is often 1); the current ones are
    kept in ``pcie_gen_current``/``pcie_width_current``. ``mgmt_index`` is NVML's index, which
    is *not* the CUDA index under ``CUDA_VISIBLE_DEVICES``, Slurm or MIG: see
    :func:`match_devices`.
    """
    out: list[dict[str, Any]] = []
    for i in range(nvml.nvmlDeviceGetCount()):
        h = nvml.nvmlDeviceGetHandleByIndex(i)
        mem = _q(nvml.nvmlDeviceGetMemoryInfo, h)
        limit_mw = _q(nvml.nvmlDeviceGetEnforcedPowerLimit, h) or _q(
            nvml.nvmlDeviceGetPowerManagementLimit, h
        )
        links = 0
        for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
            state = _q(nvml.nvmlDeviceGetNvLinkState, h, link)
            if state is None:
                break
            links += int(state == nvml.NVML_FEATURE_ENABLED)
        ecc = _q(nvml.nvmlDeviceGetEccMode, h)
        pci = _q(nvml.nvmlDeviceGetPciInfo, h)
        bus_id = getattr(pci, "busId", None) if pci is not None else None
        # the GPU's own maximum where the driver has it (the slot may cap the link lower)
        gen_max = _q(nvml.nvmlDeviceGetMaxPcieLinkGeneration, h)
        gpu_gen_max = _q(getattr(nvml, "nvmlDeviceGetGpuMaxPcieLinkGeneration", _absent), h)
        out.append(
            {
                "name": _text(_q(nvml.nvmlDeviceGetName, h)) or f"NVIDIA GPU {i}",
                "vendor": "nvidia",
                "uuid": _text(_q(nvml.nvmlDeviceGetUUID, h)),
                "pci_bus_id": normalize_bus_id(bus_id),
                "mgmt_index": i,
                "memory_bytes": int(mem.total) if mem is not None else None,
                "sm_clock_max_mhz": _q(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_SM),
                "mem_clock_max_mhz": _q(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_MEM),
                "power_limit_w": limit_mw / 1e3 if limit_mw else None,
                "pcie_gen": gen_max,
                "pcie_width": _q(nvml.nvmlDeviceGetMaxPcieLinkWidth, h),
                "pcie_gen_gpu_max": gpu_gen_max,
                "pcie_gen_current": _q(nvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
                "pcie_width_current": _q(nvml.nvmlDeviceGetCurrPcieLinkWidth, h),
                "nvlink_links": links,
                "ecc": None if ecc is None else bool(ecc[0] == nvml.NVML_FEATURE_ENABLED),
                "mig": _nvml_mig(nvml, h),
                "energy_counter": _q(nvml.nvmlDeviceGetTotalEnergyConsumption, h) is not None,
                "health": nvml_health(nvml, h),
            }
        )
    return out


def _absent(*args: Any) -> Any:
    raise NotImplementedError("this library version has no such query")


def _amdsmi() -> Any | None:
    try:
        import amdsmi
    except ImportError:
        return None
    try:
        amdsmi.amdsmi_init()
    except Exception:
        return None
    return amdsmi


def amdsmi_accelerators(smi: Any) -> list[dict[str, Any]]:
    """One dict per AMD GPU from amdsmi (ROCm), same fields as :func:`nvml_accelerators`.

    ``amdsmi_get_pcie_info`` returns ``pcie_static`` (``max_pcie_width``, ``max_pcie_speed``
    in MT/s, ``pcie_interface_version``, and ``max_pcie_interface_version`` from ROCm 6.3)
    and ``pcie_metric`` (``pcie_width``, ``pcie_speed``: the current link). The maximum
    generation is ``max_pcie_interface_version``, else derived from ``max_pcie_speed``.
    """
    out: list[dict[str, Any]] = []
    for i, h in enumerate(smi.amdsmi_get_processor_handles()):
        asic = _q(smi.amdsmi_get_gpu_asic_info, h) or {}
        vram = _q(smi.amdsmi_get_gpu_vram_info, h) or {}
        cap = _q(smi.amdsmi_get_power_cap_info, h) or {}
        pcie_info = _q(smi.amdsmi_get_pcie_info, h) or {}
        static = pcie_info.get("pcie_static") or {} if isinstance(pcie_info, dict) else {}
        metric = pcie_info.get("pcie_metric") or {} if isinstance(pcie_info, dict) else {}
        vram_mb = vram.get("vram_size")
        power_cap_uw = cap.get("power_cap")
        gen_max = _int_or_none(static.get("max_pcie_interface_version")) or _pcie_gen_from_speed(
            _int_or_none(static.get("max_pcie_speed"))
        )
        gen_now = _pcie_gen_from_speed(_int_or_none(metric.get("pcie_speed")))
        energy = _q(getattr(smi, "amdsmi_get_energy_count", _absent), h)
        out.append(
            {
                "name": asic.get("market_name") or f"AMD GPU {i}",
                "vendor": "amd",
                "uuid": _text(_q(smi.amdsmi_get_gpu_device_uuid, h)),
                "pci_bus_id": normalize_bus_id(_q(smi.amdsmi_get_gpu_device_bdf, h)),
                "mgmt_index": i,
                "gfx_arch": asic.get("target_graphics_version"),
                "memory_bytes": int(vram_mb) * (1 << 20) if isinstance(vram_mb, int) else None,
                "power_limit_w": power_cap_uw / 1e6
                if isinstance(power_cap_uw, (int, float))
                else None,
                "pcie_gen": gen_max,
                "pcie_width": _int_or_none(static.get("max_pcie_width")),
                "pcie_gen_current": gen_now,
                "pcie_width_current": _int_or_none(metric.get("pcie_width")),
                "energy_counter": isinstance(energy, dict),
                "health": amdsmi_health(smi, h),
            }
        )
    return out


def torch_devices(torch: Any) -> list[dict[str, Any]]:
    """Identity of each GPU torch sees, in torch's (CUDA/HIP) index order.

    ``uuid`` is ``get_device_properties(i).uuid`` (a MIG instance has its own); the PCI
    address comes from ``pci_domain_id/pci_bus_id/pci_device_id`` where this torch has them.
    """
    out = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        uuid_ = getattr(props, "uuid", None)
        bus = getattr(props, "pci_bus_id", None)
        bus_id = None
        if isinstance(bus, int):
            dom = getattr(props, "pci_domain_id", 0) or 0
            dev = getattr(props, "pci_device_id", 0) or 0
            bus_id = f"{int(dom):04x}:{bus:02x}:{int(dev):02x}.0"
        out.append(
            {
                "index": i,
                "name": props.name,
                "uuid": str(uuid_) if uuid_ is not None else None,
                "pci_bus_id": bus_id,
                "memory_bytes": int(props.total_memory),
                "gfx_arch": getattr(props, "gcnArchName", None),
            }
        )
    return out


def torch_accelerators(torch: Any) -> list[dict[str, Any]]:
    """What torch reports about each visible GPU (the fallback without NVML/amdsmi)."""
    vendor = "amd" if getattr(torch.version, "hip", None) else "nvidia"
    out = []
    for dev in torch_devices(torch):
        out.append(
            {
                "name": dev["name"],
                "vendor": vendor,
                "uuid": dev["uuid"],
                "pci_bus_id": dev["pci_bus_id"],
                "memory_bytes": dev["memory_bytes"],
                "torch_index": dev["index"],
                "matched_by": "torch",
            }
        )
    return out


def _visible_ordinals(environ: dict[str, str] | os._Environ[str], count: int) -> list[int] | None:
    """Management indices named by ``CUDA_VISIBLE_DEVICES``/``HIP_VISIBLE_DEVICES`` when they
    are plain integers (UUIDs there are matched by UUID anyway), else None."""
    for key in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        text = environ.get(key)
        if text is None or not text.strip():
            continue
        items = [t.strip() for t in text.split(",") if t.strip()]
        if all(t.isdigit() for t in items):
            return [int(t) for t in items][:count]
        return None
    return None


def match_devices(
    visible: list[dict[str, Any]],
    managed: list[dict[str, Any]],
    environ: dict[str, str] | os._Environ[str] | None = None,
) -> list[tuple[int | None, str | None]]:
    """For each torch device, (index into ``managed``, how it was matched).

    By UUID first (GPU or MIG instance), then by PCI bus id; only where neither is known,
    by the integer list of ``CUDA_VISIBLE_DEVICES`` (or HIP's), and last by position, which
    is marked ``"index (unverified)"``: NVML and amdsmi number every GPU of the node in PCI
    order while torch numbers the visible ones (``CUDA_VISIBLE_DEVICES``, a Slurm
    allocation, MIG instances), so position alone is wrong in those cases.
    """
    env = os.environ if environ is None else environ
    by_uuid: dict[str, int] = {}
    by_bus: dict[str, int] = {}
    for j, acc in enumerate(managed):
        u = normalize_uuid(acc.get("uuid"))
        if u:
            by_uuid[u] = j
        for mig in (acc.get("mig") or {}).get("devices") or []:
            mu = normalize_uuid(mig.get("uuid"))
            if mu:
                by_uuid[mu] = j
        b = normalize_bus_id(acc.get("pci_bus_id"))
        if b:
            by_bus[b] = j
    ordinals = _visible_ordinals(env, len(visible))
    out: list[tuple[int | None, str | None]] = []
    for pos, dev in enumerate(visible):
        u = normalize_uuid(dev.get("uuid"))
        b = normalize_bus_id(dev.get("pci_bus_id"))
        if u and u in by_uuid:
            out.append((by_uuid[u], "uuid"))
        elif b and b in by_bus:
            out.append((by_bus[b], "pci_bus_id"))
        elif ordinals is not None and pos < len(ordinals) and ordinals[pos] < len(managed):
            out.append((ordinals[pos], "visible_devices"))
        elif pos < len(managed):
            out.append((pos, "index (unverified)"))
        else:
            out.append((None, None))
    return out


def annotate_visible(
    managed: list[dict[str, Any]],
    visible: list[dict[str, Any]],
    environ: dict[str, str] | os._Environ[str] | None = None,
) -> list[dict[str, Any]]:
    """``managed`` reordered so that the GPUs torch sees come first, in torch's order, each
    with ``torch_index`` and ``matched_by``; GPUs of the node that torch does not see
    follow with ``torch_index: None``. A visible MIG instance sets ``mig_instance_uuid``."""
    matches = match_devices(visible, managed, environ)
    rows = [dict(acc, torch_index=None, matched_by=None) for acc in managed]
    ordered: list[dict[str, Any]] = []
    used: set[int] = set()
    for dev, (j, how) in zip(visible, matches, strict=True):
        if j is None or j in used:
            continue
        used.add(j)
        row = rows[j]
        row["torch_index"], row["matched_by"] = dev["index"], how
        u = normalize_uuid(dev.get("uuid"))
        if u and u != normalize_uuid(row.get("uuid")):
            row["mig_instance_uuid"] = dev.get("uuid")
        if dev.get("gfx_arch") and not row.get("gfx_arch"):
            row["gfx_arch"] = dev["gfx_arch"]
        ordered.append(row)
    ordered += [r for j, r in enumerate(rows) if j not in used]
    return ordered


def catalog_gpu(name: str) -> Any | None:
    """The catalog row for an accelerator name, or None when the catalog lacks it.

    The catalog (``gpuplan.catalogs``) resolves aliases such as "NVIDIA H100 80GB HBM3".
    A missing or broken catalog never stops a probe run: it only loses the spec figures.
    """
    try:
        from gpuplan.catalogs import get_catalog
    except ImportError:
        return None
    for candidate in (name, name.removeprefix("NVIDIA ").removeprefix("AMD ")):
        try:
            return get_catalog().gpu(candidate)
        except Exception:  # NotFoundError, or a catalog still being written
            continue
    return None


def accelerators(torch: Any | None) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Accelerators of this node and driver facts: (list of Accelerator dicts, extras)."""
    extras: dict[str, Any] = {}
    accs: list[dict[str, Any]] = []
    nvml = _nvml()
    if nvml is not None:
        with contextlib.suppress(Exception):
            accs = nvml_accelerators(nvml)
        extras["driver_version"] = _text(_q(nvml.nvmlSystemGetDriverVersion))
        cuda_drv = _q(nvml.nvmlSystemGetCudaDriverVersion)
        if cuda_drv:
            extras["cuda_driver_version"] = f"{cuda_drv // 1000}.{cuda_drv % 1000 // 10}"
    if not accs:
        smi = _amdsmi()
        if smi is not None:
            with contextlib.suppress(Exception):
                accs = amdsmi_accelerators(smi)
    visible: list[dict[str, Any]] = []
    if torch is not None:
        with contextlib.suppress(Exception):
            if torch.cuda.is_available():
                visible = torch_devices(torch)
    if accs and visible:
        accs = annotate_visible(accs, visible)
    elif not accs and visible:
        accs = torch_accelerators(torch)
    for acc in accs:
        row = catalog_gpu(acc["name"])
        acc["catalog_id"] = getattr(row, "id", None)
        acc["numa_node"], why = pci_numa_node(acc.get("pci_bus_id"))
        if why:
            acc["numa_node_unknown"] = why
    return accs, extras


def topology() -> str | None:
    """``nvidia-smi topo -m`` (or ``rocm-smi --showtopo``) text, where available."""
    return _run(["nvidia-smi", "topo", "-m"]) or _run(["rocm-smi", "--showtopo"])


def host_facts(*, record_hostname: bool = False, torch: Any | None = None) -> dict[str, Any]:
    """The ``host`` object of the result document (DESIGN.md 3.1)."""
    accs, extras = accelerators(torch)
    topo = topology() if accs else None
    nics = nic_inventory(accs, topo=topo)
    for acc in accs:
        acc["nearest_nics"] = nearest_nics(acc, nics)
    vendor = next((a.get("vendor") for a in accs if a.get("vendor")), None)
    facts: dict[str, Any] = {
        "machine_id": machine_id(hardware_ids=[a["uuid"] for a in accs if a.get("uuid")]),
        "hostname": socket.gethostname() if record_hostname else None,
        "cpu_model": _cpu_model(),
        "cpu_count": _cpu_count(),
        "memory_bytes": _memory_bytes(),
        "cpu_llc_bytes": cpu_llc_bytes(),
        "numa_nodes": _numa_nodes(),
        "accelerators": accs,
        "nics": nics,
        "gpudirect_rdma": gpudirect_rdma(vendor, nics),
        "driver_version": extras.pop("driver_version", None),
        "fio_version": fio_version(),
        "os": platform.platform(),
        "python_version": sys.version.split()[0],
        **extras,
    }
    if torch is not None:
        facts["torch_version"] = str(torch.__version__)
        facts["cuda_version"] = torch.version.cuda
        facts["hip_version"] = getattr(torch.version, "hip", None)
        facts["torch_num_threads"] = torch.get_num_threads()
        if torch.cuda.is_available():
            with contextlib.suppress(Exception):
                nccl = torch.cuda.nccl.version()
                facts["nccl_version"] = (
                    ".".join(str(x) for x in nccl) if isinstance(nccl, tuple) else str(nccl)
                )
    if accs:
        facts["topology"] = topo
    return facts
