"""Communication cost of parallel training and serving, from the calibrated collective model.

Every time here comes from :meth:`gpuplan.calibration.api.DevicePerf.collective_time_s`
(the alpha-beta model fitted to nccl-tests-style measurements, per scope): this module only
decides *which* collective, *how many bytes* (nccl-tests' size convention: the full buffer,
e.g. the gathered output of an all-gather) and *which scope* (how many ranks of the group
share a scale-up domain, and the scale-out bandwidth per GPU otherwise).

Times are returned as arrays with a leading axis of 3: ``[value, low, high]`` (the
calibration interval), so that the forecast can carry the interval through max/min and
sums; every operation used downstream is monotone, so the slow corner stays the slow
corner.

Rank order follows Megatron-LM (``tp`` fastest, then ``cp``, then ``dp``, then ``pp``;
expert-parallel ranks are taken from the ``dp`` ranks), which fixes how many members of
each group sit on one node (Narayanan et al. 2021, section 3.3: tensor parallelism inside
the node, pipeline across nodes).
"""

from __future__ import annotations

from typing import Any

import numpy as np

SCENARIOS = ("value", "low", "high")


def estimate3(est: Any, *, rate: bool = False) -> np.ndarray:
    """Stack an :class:`~gpuplan.calibration.api.Estimate` into ``[value, fast, slow]``.

    For a time the fast corner is ``low``; for a rate (FLOP/s, bytes/s) it is ``high``.
    The result always has a leading axis of 3 so it broadcasts against layout arrays.
    """
    v = np.asarray(est.value, dtype=float)
    lo = np.asarray(est.low if est.low is not None else est.value, dtype=float)
    hi = np.asarray(est.high if est.high is not None else est.value, dtype=float)
    lo, hi = np.minimum(lo, v), np.maximum(hi, v)
    return np.stack([v, hi, lo]) if rate else np.stack([v, lo, hi])


def group_ranks_per_node(group_size: Any, stride: Any, node_size: Any) -> np.ndarray:
    """Members of one process group that share a scale-up domain (node).

    A group whose consecutive members are ``stride`` ranks apart has
    ``node_size // stride`` members per node (at least 1, at most the group size).

    >>> [float(group_ranks_per_node(*a)) for a in ((8, 1, 8), (64, 8, 8), (16, 2, 8))]
    [8.0, 1.0, 4.0]
    """
    g = np.asarray(group_size, dtype=float)
    per = np.floor(
        np.asarray(node_size, dtype=float) / np.maximum(np.asarray(stride, dtype=float), 1.0)
    )
    return np.clip(per, 1.0, np.maximum(g, 1.0))


def collective_time3(
    perf: Any,
    op: str,
    size_bytes: Any,
    ranks: Any,
    *,
    ranks_per_node: Any,
    inter_node_bandwidth_bytes_per_s: float | None,
) -> np.ndarray:
    """Time of one collective as ``[value, low, high]`` arrays; 0 for a group of one rank.

    ``ranks_per_node`` is clipped to ``ranks``; a group wholly inside one scale-up domain
    runs at the intra-node model, otherwise the calibration's hierarchical model uses
    ``inter_node_bandwidth_bytes_per_s`` for the part that leaves the node.
    """
    ranks = np.asarray(ranks, dtype=float)
    size = np.asarray(size_bytes, dtype=float)
    shape = np.broadcast_shapes(ranks.shape, size.shape, np.shape(ranks_per_node))
    ranks_b = np.broadcast_to(ranks, shape)
    active = (ranks_b > 1) & (np.broadcast_to(size, shape) > 0)
    if not np.any(active):
        return np.zeros((3, *shape))
    r = np.where(active, ranks_b, 2.0)
    rpn = np.clip(np.broadcast_to(np.asarray(ranks_per_node, dtype=float), shape), 1.0, r)
    sz = np.where(active, np.broadcast_to(size, shape), 1.0)
    est = perf.collective_time_s(
        op,
        sz,
        r,
        ranks_per_node=rpn,
        inter_node_bandwidth_bytes_per_s=inter_node_bandwidth_bytes_per_s,
    )
    t = np.broadcast_to(estimate3(est), (3, *shape))
    return np.where(active, t, 0.0)


def p2p_time3(
    perf: Any,
    size_bytes: Any,
    same_node: Any,
    *,
    inter_node_bandwidth_bytes_per_s: float | None,
) -> np.ndarray:
    """One point-to-point send of ``size_bytes`` between two ranks, intra- or inter-node."""
    same = np.asarray(same_node, dtype=bool)
    size = np.asarray(size_bytes, dtype=float)
    shape = np.broadcast_shapes(same.shape, size.shape)
    return collective_time3(
        perf,
        "p2p",
        np.broadcast_to(size, shape),
        np.full(shape, 2.0),
        ranks_per_node=np.where(np.broadcast_to(same, shape), 2.0, 1.0),
        inter_node_bandwidth_bytes_per_s=inter_node_bandwidth_bytes_per_s,
    )


def tp_layer_comm_time3(
    perf: Any,
    activation_bytes: Any,
    tp: Any,
    node_size: Any,
    *,
    sequence_parallel: Any,
    inter_node_bandwidth_bytes_per_s: float | None,
) -> np.ndarray:
    """Tensor-parallel communication of one layer's forward (the backward does the same).

    Without sequence parallelism two all-reduces of the ``s*b*h`` activation per layer
    (Shoeybi et al. 2019, figure 4); with it two all-gathers and two reduce-scatters of the
    same tensor, the same volume (Korthikanti et al. 2022, section 4.2.2).
    """
    rpn = group_ranks_per_node(tp, 1, node_size)
    kw: dict[str, Any] = dict(
        ranks_per_node=rpn, inter_node_bandwidth_bytes_per_s=inter_node_bandwidth_bytes_per_s
    )
    sp = np.asarray(sequence_parallel, dtype=bool)
    if np.all(sp):
        ag = collective_time3(perf, "all_gather", activation_bytes, tp, **kw)
        rs = collective_time3(perf, "reduce_scatter", activation_bytes, tp, **kw)
        return 2.0 * (ag + rs)
    ar = collective_time3(perf, "all_reduce", activation_bytes, tp, **kw)
    if not np.any(sp):
        return 2.0 * ar
    ag = collective_time3(perf, "all_gather", activation_bytes, tp, **kw)
    rs = collective_time3(perf, "reduce_scatter", activation_bytes, tp, **kw)
    return np.where(sp, 2.0 * (ag + rs), 2.0 * ar)


def data_parallel_times3(
    perf: Any,
    *,
    grad_bytes: Any,
    param_bytes: Any,
    ranks: Any,
    stride: Any,
    node_size: Any,
    zero: Any,
    inter_node_bandwidth_bytes_per_s: float | None,
    zero3_chunks: Any = 1,
) -> dict[str, np.ndarray]:
    """Gradient and parameter collectives of one data-parallel group.

    ZeRO stage 0: one all-reduce of the gradients; 1-2 (Megatron distributed optimizer):
    reduce-scatter of the gradients and all-gather of the updated weights (Rajbhandari et
    al. 2020, section 5); 3 / FSDP FULL_SHARD: per micro-batch one all-gather of the
    weights for the forward, another for the backward and a reduce-scatter of the
    gradients (Zhao et al. 2023, PyTorch FSDP, section 3). Stage 3 issues one collective
    per gathered unit (``zero3_chunks`` per pass: FSDP wraps each transformer block), so
    each pays the collective's latency. Returns ``{"grad", "param"}`` times of one pass;
    the caller applies the counts and the overlap.
    """
    zero = np.asarray(zero)
    rpn = group_ranks_per_node(ranks, stride, node_size)
    kw: dict[str, Any] = dict(
        ranks_per_node=rpn, inter_node_bandwidth_bytes_per_s=inter_node_bandwidth_bytes_per_s
    )
    chunks = np.where(zero >= 3, np.maximum(np.asarray(zero3_chunks, dtype=float), 1.0), 1.0)
    grad_bytes = np.asarray(grad_bytes, dtype=float) / chunks
    param_bytes = np.asarray(param_bytes, dtype=float) / chunks
    ar = collective_time3(perf, "all_reduce", grad_bytes, ranks, **kw)
    rs = collective_time3(perf, "reduce_scatter", grad_bytes, ranks, **kw) * chunks
    ag = collective_time3(perf, "all_gather", param_bytes, ranks, **kw) * chunks
    grad = np.where(zero >= 1, rs, ar)
    param = np.where(zero >= 1, ag, 0.0)
    return {"grad": grad, "param": param}
