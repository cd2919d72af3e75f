"""What forecasts need from calibration: achieved performance of one device, with intervals.

This module is the contract between ``gpuplan.calibration`` (which implements it) and
``gpuplan.forecast`` / ``gpuplan.plan`` (which only call it). It imports nothing heavy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol, runtime_checkable

Basis = Literal["measured", "transferred", "spec"]
BASIS_ORDER: dict[str, int] = {"measured": 0, "transferred": 1, "spec": 2}

CollectiveOp = Literal[
    "all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "p2p"
]
Scope = Literal["intra", "inter"]


@dataclass(frozen=True)
class Estimate:
    """A calibrated quantity: central value with a [low, high] interval and its basis.

    ``value``/``low``/``high`` are floats, or numpy arrays of one shape when the query was
    vectorised. ``basis`` says whether the device was measured, transferred from similar
    devices, or has only the catalog spec. ``source`` names the evidence (run ids, catalog
    row, published table) for the report's provenance section.
    """

    value: Any
    low: Any
    high: Any
    basis: Basis
    source: str | None = None

    def as_dict(self) -> dict[str, Any]:
        def plain(x: Any) -> Any:
            return x.tolist() if hasattr(x, "tolist") else x

        return {
            "value": plain(self.value),
            "low": plain(self.low),
            "high": plain(self.high),
            "basis": self.basis,
        }


def worst_basis(*bases: str) -> Basis:
    """The weakest of several bases (spec < transferred < measured)."""
    return max(bases, key=lambda b: BASIS_ORDER[b])  # type: ignore[arg-type]


@runtime_checkable
class DevicePerf(Protocol):
    """Achieved performance of one catalog accelerator. All quantities in SI units.

    Every method accepts Python scalars or numpy arrays (broadcast together) and returns an
    :class:`Estimate` of the same shape, so that forecasts can evaluate thousands of
    parallel layouts in one call.
    """

    gpu_id: str

    def peak_flops_per_s(self, dtype: str) -> float | None:
        """Catalog dense peak for ``dtype`` (fp32, tf32, bf16, fp16, fp8, fp4, int8)."""

    def matmul_flops_per_s(self, m: Any, n: Any, k: Any, dtype: str) -> Estimate:
        """Achieved dense GEMM throughput for an (m x k) @ (k x n) product; never above peak."""

    def memory_bandwidth_bytes_per_s(self, size_bytes: Any = None) -> Estimate:
        """Achieved device-memory bandwidth (bytes read + written per second) for a working
        set of ``size_bytes``; ``None`` means well past the last-level cache."""

    def h2d_bandwidth_bytes_per_s(self, size_bytes: Any = None) -> Estimate:
        """Host-to-device copy bandwidth (pinned memory)."""

    def d2h_bandwidth_bytes_per_s(self, size_bytes: Any = None) -> Estimate:
        """Device-to-host copy bandwidth (pinned memory)."""

    def collective_time_s(
        self,
        op: str,
        size_bytes: Any,
        ranks: Any,
        *,
        ranks_per_node: Any = None,
        inter_node_bandwidth_bytes_per_s: float | None = None,
    ) -> Estimate:
        """Time of one collective over ``ranks`` ranks with nccl-tests' ``size`` convention.

        ``ranks_per_node`` (default: the device's scale-up domain) decides the scope: all
        ranks in one scale-up domain is intra-node; otherwise the inter-node part runs at
        ``inter_node_bandwidth_bytes_per_s`` per GPU (the NIC share; default from the
        calibration's inter-node fit). ``op="p2p"`` is one point-to-point send.
        """

    def summary(self) -> dict[str, Estimate]:
        """The per-device quantities of DESIGN.md 3.2 (``matmul_bf16_flops_per_s`` ...)."""
