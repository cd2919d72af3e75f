"""The KV-cache size formula, written once.

Job of this module: bytes of key/value cache one token adds. It lives in ``catalogs``, the
lowest layer that holds model architectures, so that the catalog row
(:meth:`gpuplan.catalogs.schema.ModelArch.kv_cache_bytes_per_token`) and the forecasts'
architecture record (:func:`gpuplan.forecast.model.kv_cache_bytes_per_token`, whole model
and, in :mod:`gpuplan.forecast.inference_arch`, per GPU) all call this one function. Pure arithmetic on plain numbers: no catalog, no I/O.
"""

from __future__ import annotations


def kv_cache_bytes_per_token(
    *,
    kv_layers: float,
    kv_heads: float,
    head_dim: float,
    bytes_per_element: float,
    mla_kv_lora_rank: int | None = None,
    mla_qk_rope_head_dim: int | None = None,
) -> float:
    """Bytes of KV cache one token adds over ``kv_layers`` layers.

    Multi-head, grouped-query and multi-query attention keep one key and one value of
    ``head_dim`` per KV head: ``2 * kv_layers * kv_heads * head_dim * bytes`` (Shazeer 2019,
    arXiv 1911.02150; Ainslie et al. 2023, arXiv 2305.13245). Multi-head latent attention
    keeps the compressed latent and the decoupled RoPE key instead,
    ``kv_layers * (kv_lora_rank + qk_rope_head_dim) * bytes``, shared by all heads
    (DeepSeek-V2, arXiv 2405.04434, Sec. 2.1.2).

    Parameters
    ----------
    kv_layers:
        Layers that keep a KV cache (attention layers; state-space blocks keep a state
        instead). Pass 1 for the bytes per layer.
    kv_heads:
        KV heads cached (per GPU when the heads are split over tensor-parallel ranks);
        unused for MLA.
    head_dim:
        Key/value head dimension; unused for MLA.
    bytes_per_element:
        Bytes of one cached value (2 for bf16/fp16, 1 for fp8/int8).
    mla_kv_lora_rank, mla_qk_rope_head_dim:
        The MLA latent rank and RoPE key width; both given means MLA.

    Returns
    -------
    float
        Bytes per token.

    >>> kv_cache_bytes_per_token(kv_layers=80, kv_heads=8, head_dim=128, bytes_per_element=2)
    327680.0
    >>> kv_cache_bytes_per_token(kv_layers=61, kv_heads=128, head_dim=128, bytes_per_element=2,
    ...                          mla_kv_lora_rank=512, mla_qk_rope_head_dim=64)
    70272.0
    """
    if mla_kv_lora_rank is not None and mla_qk_rope_head_dim is not None:
        return float(kv_layers * (mla_kv_lora_rank + mla_qk_rope_head_dim) * bytes_per_element)
    return float(2 * kv_layers * kv_heads * head_dim * bytes_per_element)
