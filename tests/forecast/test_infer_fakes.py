"""Small stand-ins for the inference tests: a device model with known numbers and two
architectures written out by hand, so that expected values can be computed on paper.

The fake device model stands in for the calibration only where a test needs numbers it can
predict exactly; the integration tests use the real catalog and calibration.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuplan.calibration.api import Estimate
from gpuplan.catalogs.params import MLAConfig
from gpuplan.forecast.model import ModelArch

# Llama-2-70B-like and Mixtral-8x7B-like shapes (HF config.json of meta-llama/Llama-2-70b-hf
# and mistralai/Mixtral-8x7B-v0.1).
LLAMA70 = ModelArch(
    name="llama2-70b",
    layers=80,
    hidden=8192,
    heads=64,
    kv_heads=8,
    head_dim=128,
    ffn_hidden=28672,
    vocab=32000,
    tied_embeddings=False,
    gated_mlp=True,
    attention="gqa",
)
MIXTRAL = ModelArch(
    name="mixtral-8x7b",
    layers=32,
    hidden=4096,
    heads=32,
    kv_heads=8,
    head_dim=128,
    ffn_hidden=14336,
    vocab=32000,
    tied_embeddings=False,
    gated_mlp=True,
    attention="gqa",
    num_experts=8,
    top_k=2,
    moe_ffn_hidden=14336,
    shared_expert_ffn_hidden=14336,
)
DEEPSEEK_MLA = ModelArch(
    name="mla-toy",
    layers=4,
    hidden=1024,
    heads=16,
    kv_heads=16,
    head_dim=64,
    ffn_hidden=4096,
    vocab=1000,
    tied_embeddings=False,
    gated_mlp=True,
    attention="mla",
    mla=MLAConfig(
        q_lora_rank=256, kv_lora_rank=128, qk_nope_head_dim=32, qk_rope_head_dim=16, v_head_dim=32
    ),
)


@dataclass
class FakeGpu:
    """The catalog fields the inference model reads, with made-up round numbers."""

    id: str = "fake-gpu"
    memory_bytes: int = 80 * 2**30
    memory_bandwidth_bytes_per_s: float = 3.0e12
    scale_up_domain_size: int = 8
    peaks: dict[str, float | None] = field(
        default_factory=lambda: {
            "fp32": 6.0e13,
            "bf16": 1.0e15,
            "fp16": 1.0e15,
            "fp8": 2.0e15,
            "int8": 2.0e15,
        }
    )

    def peak_flops_per_s(self, dtype: str) -> float | None:
        return self.peaks.get(dtype)


@dataclass
class FakePerf:
    """A DevicePerf with a flat GEMM rate (``eff`` x peak), a flat bandwidth and an
    alpha-beta collective model; intervals are +-``spread`` around each value."""

    gpu: FakeGpu = field(default_factory=FakeGpu)
    eff: float = 0.8
    bw_eff: float = 0.9
    alpha_s: float = 10e-6
    busbw_bytes_per_s: float = 300e9
    spread: float = 0.1
    basis: str = "measured"
    calls: list[str] = field(default_factory=list)

    @property
    def gpu_id(self) -> str:
        return self.gpu.id

    def _est(self, v: Any) -> Estimate:
        v = np.asarray(v, dtype=float)
        return Estimate(v, v * (1 - self.spread), v * (1 + self.spread), self.basis, "fake")

    def peak_flops_per_s(self, dtype: str) -> float | None:
        return self.gpu.peak_flops_per_s(dtype)

    def matmul_flops_per_s(self, m: Any, n: Any, k: Any, dtype: str) -> Estimate:
        self.calls.append(f"matmul:{dtype}")
        peak = self.gpu.peak_flops_per_s(dtype)
        if peak is None:
            raise ValueError(f"no {dtype}")
        shape = np.broadcast(np.asarray(m), np.asarray(n), np.asarray(k)).shape
        return self._est(np.full(shape, self.eff * peak))

    def memory_bandwidth_bytes_per_s(self, size_bytes: Any = None) -> Estimate:
        return self._est(self.bw_eff * self.gpu.memory_bandwidth_bytes_per_s)

    def collective_time_s(self, op: str, size_bytes: Any, ranks: Any, **_: Any) -> Estimate:
        self.calls.append(f"coll:{op}")
        n = np.asarray(ranks, dtype=float)
        factor = {"all_reduce": 2 * (n - 1) / n, "all_to_all": (n - 1) / n, "p2p": 1.0}.get(
            op, (n - 1) / n
        )
        t = self.alpha_s + np.asarray(size_bytes, float) * factor / self.busbw_bytes_per_s
        return self._est(t)

    def summary(self) -> dict[str, Estimate]:
        return {}
