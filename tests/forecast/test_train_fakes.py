"""A small synthetic DevicePerf for the training-forecast tests (no tests in this module).

The real one comes from ``gpuplan.calibration.device_perf``; these tests exercise the
formulas with a device whose every number is chosen here, so that hand-computed values and
invariants can be checked without depending on the shipped calibration. The figures are
round synthetic values, not hardware claims.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuplan.calibration.api import Estimate
from gpuplan.forecast.hardware import Hardware

BUSBW_FACTOR = {
    "all_reduce": lambda n: 2.0 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "p2p": lambda n: 1.0,
}


@dataclass
class FakePerf:
    """Saturating GEMM efficiency, flat memory bandwidth, alpha-beta collectives."""

    gpu_id: str = "fake-gpu"
    peak: dict[str, float] = field(
        default_factory=lambda: {"bf16": 1000e12, "fp16": 1000e12, "fp8": 2000e12, "fp32": 60e12}
    )
    gemm_eff: float = 0.8
    gemm_knee: float = 256.0
    membw: float = 3.0e12
    intra_busbw: float = 400e9
    inter_busbw: float = 45e9
    alpha_s: float = 10e-6
    rel_band: float = 0.1
    calls: int = 0

    def peak_flops_per_s(self, dtype: str) -> float | None:
        return self.peak.get(dtype)

    def _est(self, value: Any) -> Estimate:
        v = np.asarray(value, dtype=float)
        return Estimate(v, v * (1 - self.rel_band), v * (1 + self.rel_band), "spec", "fake")

    def matmul_flops_per_s(self, m: Any, n: Any, k: Any, dtype: str) -> Estimate:
        self.calls += 1
        m, n, k = (np.asarray(x, dtype=float) for x in (m, n, k))
        sat = (m / (m + self.gemm_knee)) * (n / (n + self.gemm_knee)) * (k / (k + self.gemm_knee))
        value = self.peak[dtype] * self.gemm_eff * sat
        v = np.asarray(value, dtype=float)
        hi = np.minimum(v * (1 + self.rel_band), self.peak[dtype])
        return Estimate(v, v * (1 - self.rel_band), hi, "spec", "fake")

    def memory_bandwidth_bytes_per_s(self, size_bytes: Any = None) -> Estimate:
        return self._est(self.membw)

    def h2d_bandwidth_bytes_per_s(self, size_bytes: Any = None) -> Estimate:
        return self._est(50e9)

    def d2h_bandwidth_bytes_per_s(self, size_bytes: Any = None) -> Estimate:
        return self._est(50e9)

    def collective_time_s(
        self,
        op: str,
        size_bytes: Any,
        ranks: Any,
        *,
        ranks_per_node: Any = None,
        inter_node_bandwidth_bytes_per_s: float | None = None,
    ) -> Estimate:
        size = np.asarray(size_bytes, dtype=float)
        n = np.asarray(ranks, dtype=float)
        rpn = n if ranks_per_node is None else np.asarray(ranks_per_node, dtype=float)
        inter = (
            self.inter_busbw
            if inter_node_bandwidth_bytes_per_s is None
            else 0.9 * inter_node_bandwidth_bytes_per_s
        )
        busbw = np.where(rpn >= n, self.intra_busbw, inter)
        factor = np.vectorize(BUSBW_FACTOR[op])(np.maximum(n, 2.0)) if op != "p2p" else 1.0
        t = self.alpha_s * np.log2(np.maximum(n, 2.0)) + size * factor / busbw
        return self._est(t)

    def summary(self) -> dict[str, Estimate]:
        return {"matmul_bf16_flops_per_s": self._est(self.peak["bf16"] * self.gemm_eff)}


def fake_hardware(**perf_kw: Any) -> Hardware:
    memory = perf_kw.pop("memory_bytes", 80e9)
    nic = perf_kw.pop("nic", 50e9)
    node = perf_kw.pop("node_size", 8)
    return Hardware(
        gpu_id="fake-gpu",
        perf=FakePerf(**perf_kw),
        memory_bytes=memory,
        node_size=node,
        inter_node_bandwidth_bytes_per_s=nic,
        provenance={"gpu": "fake-gpu"},
    )
