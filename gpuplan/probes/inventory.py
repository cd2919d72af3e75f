"""Inventory of the node: host facts, accelerators (NVML, amdsmi or torch), tool versions.

Host facts come from Linux (``/proc``, ``/sys``) with portable fallbacks; accelerators from
NVML (``pynvml``, the ``nvidia-ml-py`` package) on NVIDIA GPUs, from ``amdsmi`` on AMD GPUs
when it is installed, and otherwise from what torch reports. Every field is best effort:
an unanswered query leaves ``None``, never stops the run.

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
from pathlib import Path
from typing import Any

from gpuplan.probes.procs import run_child

_MACHINE_ID_FILES = ("/etc/machine-id", "/var/lib/dbus/machine-id")
_SALT = b"gpuplan-machine-id-v1:"


def machine_id(paths: tuple[str, ...] = _MACHINE_ID_FILES) -> str:
    """A stable, non-identifying id of this machine (16 hex digits).

    SHA-256 of a fixed salt and ``/etc/machine-id`` (systemd's random 128-bit id): stable
    across runs and reboots, different between machines, and it reveals neither the
    machine-id nor the hostname. Falls back to the MAC address (hashed the same way).
    """
    raw: bytes | None = None
    for p in paths:
        with contextlib.suppress(OSError):
            text = Path(p).read_text(encoding="ascii", errors="ignore").strip()
            if text:
                raw = text.encode()
                break
    if raw is None:
        raw = f"mac:{uuid.getnode():012x}".encode()
    return hashlib.sha256(_SALT + raw).hexdigest()[:16]


def _parse_size(text: str) -> int | None:
    """'32768K' / '32 MiB' / '1M' -> bytes (cache sizes are binary multiples)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGkmg]?)(i?B)?\s*", text)
    if not m:
        return None
    scale = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2).upper()]
    return int(float(m.group(1)) * scale)


def cpu_llc_bytes(sys_cpu: Path | str = "/sys/devices/system/cpu") -> int | None:
    """Size of the last-level cache (one instance), from sysfs, else ``lscpu``/``getconf``."""
    best: tuple[int, int] | None = None
    for index in sorted(Path(sys_cpu).glob("cpu0/cache/index*")):
        try:
            level = int((index / "level").read_text().strip())
            kind = (index / "type").read_text().strip()
            size = _parse_size((index / "size").read_text())
        except (OSError, ValueError):
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


def nvml_accelerators(nvml: Any) -> list[dict[str, Any]]:
    """One dict per NVIDIA GPU with the ``Accelerator`` fields of the result schema."""
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
        out.append(
            {
                "name": _text(_q(nvml.nvmlDeviceGetName, h)) or f"NVIDIA GPU {i}",
                "vendor": "nvidia",
                "uuid": _text(_q(nvml.nvmlDeviceGetUUID, h)),
                "memory_bytes": int(mem.total) if mem is not None else None,
                "sm_clock_max_mhz": _q(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_SM),
                "mem_clock_max_mhz": _q(nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_MEM),
                "power_limit_w": limit_mw / 1e3 if limit_mw else None,
                "pcie_gen": _q(nvml.nvmlDeviceGetMaxPcieLinkGeneration, h),
                "pcie_width": _q(nvml.nvmlDeviceGetMaxPcieLinkWidth, h),
                "pcie_gen_current": _q(nvml.nvmlDeviceGetCurrPcieLinkGeneration, h),
                "pcie_width_current": _q(nvml.nvmlDeviceGetCurrPcieLinkWidth, h),
                "nvlink_links": links,
                "ecc": None if ecc is None else bool(ecc[0] == nvml.NVML_FEATURE_ENABLED),
            }
        )
    return out


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
    """One dict per AMD GPU from amdsmi (ROCm), same fields as :func:`nvml_accelerators`."""
    out: list[dict[str, Any]] = []
    for i, h in enumerate(smi.amdsmi_get_processor_handles()):
        asic = _q(smi.amdsmi_get_gpu_asic_info, h) or {}
        vram = _q(smi.amdsmi_get_gpu_vram_info, h) or {}
        cap = _q(smi.amdsmi_get_power_cap_info, h) or {}
        pcie = (_q(smi.amdsmi_get_pcie_info, h) or {}).get("pcie_static", {})
        vram_mb = vram.get("vram_size")
        power_cap_uw = cap.get("power_cap")
        out.append(
            {
                "name": asic.get("market_name") or f"AMD GPU {i}",
                "vendor": "amd",
                "uuid": _text(_q(smi.amdsmi_get_gpu_device_uuid, h)),
                "memory_bytes": int(vram_mb) * (1 << 20) if isinstance(vram_mb, int) else None,
                "power_limit_w": power_cap_uw / 1e6
                if isinstance(power_cap_uw, (int, float))
                else None,
                "pcie_gen": pcie.get("max_pcie_speed_gen") if isinstance(pcie, dict) else None,
                "pcie_width": pcie.get("max_pcie_width") if isinstance(pcie, dict) else None,
            }
        )
    return out


def torch_accelerators(torch: Any) -> list[dict[str, Any]]:
    """What torch reports about each visible GPU (the fallback without NVML/amdsmi)."""
    out = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        uuid_ = getattr(props, "uuid", None)
        out.append(
            {
                "name": props.name,
                "vendor": "amd" if getattr(torch.version, "hip", None) else "nvidia",
                "uuid": str(uuid_) if uuid_ is not None else None,
                "memory_bytes": int(props.total_memory),
            }
        )
    return out


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
    if not accs and torch is not None and torch.cuda.is_available():
        accs = torch_accelerators(torch)
    for acc in accs:
        row = catalog_gpu(acc["name"])
        acc["catalog_id"] = getattr(row, "id", None)
    return accs, extras


def topology() -> str | None:
    """``nvidia-smi topo -m`` (or ``rocm-smi --showtopo``) text, where available."""
    return _run(["nvidia-smi", "topo", "-m"]) or _run(["rocm-smi", "--showtopo"])


def host_facts(*, record_hostname: bool = False, torch: Any | None = None) -> dict[str, Any]:
    """The ``host`` object of the result document (DESIGN.md 3.1)."""
    accs, extras = accelerators(torch)
    facts: dict[str, Any] = {
        "machine_id": machine_id(),
        "hostname": socket.gethostname() if record_hostname else None,
        "cpu_model": _cpu_model(),
        "cpu_count": _cpu_count(),
        "memory_bytes": _memory_bytes(),
        "cpu_llc_bytes": cpu_llc_bytes(),
        "numa_nodes": _numa_nodes(),
        "accelerators": accs,
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
        facts["topology"] = topology()
    return facts
