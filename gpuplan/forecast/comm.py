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

from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

import numpy as np

from gpuplan.numeric import Flag, FloatArray, Int, Num
from gpuplan.units import busbw_factor

if TYPE_CHECKING:
    from gpuplan.calibration.api import DevicePerf, Estimate
    from gpuplan.catalogs.catalog import Catalog
    from gpuplan.catalogs.schema import Accelerator

SCENARIOS = ("value", "low", "high")


class _Scope(TypedDict):
    """Where a group's ranks sit: the keywords every ``*_time3`` takes besides the sizes."""

    ranks_per_node: Num
    inter_node_bandwidth_bytes_per_s: float | None


class DataParallelTimes(TypedDict):
    """Per-pass ``[value, low, high]`` times of a data-parallel group
    (:func:`data_parallel_times3`)."""

    grad: FloatArray
    param: FloatArray


def estimate3(est: Estimate, *, rate: bool = False) -> FloatArray:
    """Stack an :class:`~gpuplan.calibration.api.Estimate` into ``[value, fast, slow]``.

    For a time the fast corner is ``low``; for a rate (FLOP/s, bytes/s) it is ``high``.
    The result always has a leading axis of 3 so it broadcasts against layout arrays.
    """
    v = np.asarray(est.value, dtype=float)
    lo = np.asarray(est.low if est.low is not None else est.value, dtype=float)
    hi = np.asarray(est.high if est.high is not None else est.value, dtype=float)
    lo, hi = np.minimum(lo, v), np.maximum(hi, v)
    return np.stack([v, hi, lo]) if rate else np.stack([v, lo, hi])


def group_ranks_per_node(group_size: Num, stride: Num, node_size: Num) -> FloatArray:
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
    return np.asarray(np.clip(per, 1.0, np.maximum(g, 1.0)), dtype=float)


def collective_time3(
    perf: DevicePerf,
    op: str,
    size_bytes: Num,
    ranks: Num,
    *,
    ranks_per_node: Num,
    inter_node_bandwidth_bytes_per_s: float | None,
) -> FloatArray:
    """Time of one collective as ``[value, low, high]`` arrays; 0 for a group of one rank.

    ``ranks_per_node`` is clipped to ``ranks``; a group wholly inside one scale-up domain
    runs at the intra-node model, otherwise the calibration's hierarchical model uses
    ``inter_node_bandwidth_bytes_per_s`` for the part that leaves the node.
    """
    if np.ndim(ranks) == 0 and np.ndim(size_bytes) == 0 and np.ndim(ranks_per_node) == 0:
        # one group, one message: the device's scalar query (memoised), no broadcasting
        n1, size1 = float(ranks), float(size_bytes)
        if n1 <= 1 or size1 <= 0:
            return np.zeros(3)
        return estimate3(
            perf.collective_time_s(
                op,
                size1,
                n1,
                ranks_per_node=min(max(float(ranks_per_node), 1.0), n1),
                inter_node_bandwidth_bytes_per_s=inter_node_bandwidth_bytes_per_s,
            )
        )
    ranks = np.asarray(ranks, dtype=float)
    size = np.asarray(size_bytes, dtype=float)
    shape = np.broadcast_shapes(ranks.shape, size.shape, np.shape(ranks_per_node))
    ranks_b = np.broadcast_to(ranks, shape)
    active = (ranks_b > 1) & (np.broadcast_to(size, shape) > 0)
    if not np.any(active):
        return np.zeros((3, *shape))
    # only the groups that communicate are asked of the device model: a layout without that
    # parallelism (CP 1, say) must not need a collective model the device lacks (a PCIe card
    # without a scale-up fabric has no intra-node one)
    r = ranks_b[active]
    rpn = np.clip(np.broadcast_to(np.asarray(ranks_per_node, dtype=float), shape)[active], 1.0, r)
    est = perf.collective_time_s(
        op,
        np.broadcast_to(size, shape)[active],
        r,
        ranks_per_node=rpn,
        inter_node_bandwidth_bytes_per_s=inter_node_bandwidth_bytes_per_s,
    )
    t = np.zeros((3, *shape))
    t[:, active] = estimate3(est)
    return t


def p2p_time3(
    perf: DevicePerf,
    size_bytes: Num,
    same_node: Flag,
    *,
    inter_node_bandwidth_bytes_per_s: float | None,
) -> FloatArray:
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
    perf: DevicePerf,
    activation_bytes: Num,
    tp: Num,
    node_size: Num,
    *,
    sequence_parallel: Flag,
    inter_node_bandwidth_bytes_per_s: float | None,
) -> FloatArray:
    """Tensor-parallel communication of one layer's forward (the backward does the same).

    Without sequence parallelism two all-reduces of the ``s*b*h`` activation per layer
    (Shoeybi et al. 2019, figure 4); with it two all-gathers and two reduce-scatters of the
    same tensor, the same volume (Korthikanti et al. 2022, section 4.2.2).
    """
    rpn = group_ranks_per_node(tp, 1, node_size)
    kw = _Scope(
        ranks_per_node=rpn, inter_node_bandwidth_bytes_per_s=inter_node_bandwidth_bytes_per_s
    )
    sp = np.asarray(sequence_parallel, dtype=bool)
    if np.all(sp):
        ag = collective_time3(perf, "all_gather", activation_bytes, tp, **kw)
        rs = collective_time3(perf, "reduce_scatter", activation_bytes, tp, **kw)
        return np.asarray(2.0 * (ag + rs), dtype=float)
    ar = collective_time3(perf, "all_reduce", activation_bytes, tp, **kw)
    if not np.any(sp):
        return 2.0 * ar
    ag = collective_time3(perf, "all_gather", activation_bytes, tp, **kw)
    rs = collective_time3(perf, "reduce_scatter", activation_bytes, tp, **kw)
    return np.where(sp, 2.0 * (ag + rs), 2.0 * ar)


def data_parallel_times3(
    perf: DevicePerf,
    *,
    grad_bytes: Num,
    param_bytes: Num,
    ranks: Num,
    stride: Num,
    node_size: Num,
    zero: Int,
    inter_node_bandwidth_bytes_per_s: float | None,
    zero3_chunks: Num = 1,
    latency: LibraryLatency | None = None,
) -> DataParallelTimes:
    """Gradient and parameter collectives of one data-parallel group.

    ZeRO stage 0: one all-reduce of the gradients; 1-2 (Megatron distributed optimizer):
    reduce-scatter of the gradients and all-gather of the updated weights (Rajbhandari et
    al. 2020, section 5); 3 / FSDP FULL_SHARD: per micro-batch one all-gather of the
    weights for the forward, another for the backward and a reduce-scatter of the
    gradients (Zhao et al. 2023, PyTorch FSDP, section 3). Stage 3 issues one collective
    per gathered unit (``zero3_chunks`` per pass: FSDP wraps each transformer block), so
    each pays the collective's latency. Returns ``{"grad", "param"}`` times of one pass;
    the caller applies the counts and the overlap.

    With ``latency`` (the collective library's constants, :func:`library_latency`) each
    collective whose group leaves the node is the faster of the calibrated model and the
    library's topology-aware LL cost (:func:`topology_collective_time3`).
    """
    zero = np.asarray(zero)
    rpn = group_ranks_per_node(ranks, stride, node_size)
    kw = _Scope(
        ranks_per_node=rpn, inter_node_bandwidth_bytes_per_s=inter_node_bandwidth_bytes_per_s
    )
    chunks = np.where(zero >= 3, np.maximum(np.asarray(zero3_chunks, dtype=float), 1.0), 1.0)
    grad_bytes = np.asarray(grad_bytes, dtype=float) / chunks
    param_bytes = np.asarray(param_bytes, dtype=float) / chunks

    def coll(op: str, size: Num) -> FloatArray:
        if latency is None:
            return collective_time3(perf, op, size, ranks, **kw)
        return topology_collective_time3(perf, latency, op, size, ranks, **kw)

    ar = coll("all_reduce", grad_bytes)
    rs = coll("reduce_scatter", grad_bytes) * chunks
    ag = coll("all_gather", param_bytes) * chunks
    grad = np.where(zero >= 1, rs, ar)
    param = np.where(zero >= 1, ag, 0.0)
    return {"grad": grad, "param": param}


# ---------------------------------------------------------------------------------------------
# Small messages: the collective library's own latency model
# ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class LibraryLatency:
    """Latency constants of the collective library on one scale-up fabric (catalog row).

    Attributes
    ----------
    library:
        ``nccl`` or ``rccl``.
    base_latency_s:
        Fixed latency of one collective on the low-latency (LL) protocol, seconds (NCCL's
        ``baseLatencies[RING][LL]``).
    hop_latency_s:
        Latency of one algorithm step over the scale-up fabric, seconds (NCCL's
        ``hwLatencies[NVLINK][RING][LL]``).
    net_hop_latency_s:
        Latency of one step that leaves the scale-up domain, seconds (``hwLatencies[NET]``),
        or ``None`` where the catalog has none.
    fabric_id, source:
        The catalog fabric the constants come from and their source.
    """

    library: str
    base_latency_s: float
    hop_latency_s: float
    net_hop_latency_s: float | None
    fabric_id: str
    source: str


def library_latency(gpu: Accelerator, catalog: Catalog | None = None) -> LibraryLatency | None:
    """The :class:`LibraryLatency` of ``gpu``'s scale-up fabric, or ``None`` where the
    catalog row of the fabric has no ``collective_*_latency_s`` fields."""
    # read with a default: the inference tests' stand-in rows (tests/forecast/test_infer_fakes.py)
    # carry only the fields the inference model reads, and have no fabric
    fid = getattr(gpu, "scale_up_fabric_id", None)
    # PCIe cards without a scale-up fabric (L40S, L4) reach the other cards of their server
    # (``pcie_server_size``, :func:`gpuplan.forecast.hardware.server_size`) over the host
    # link: NCCL's ring over PCIe (its NCCL_HW_PCI hop). The step model counts every such
    # rank as leaving the scale-up domain, so the PCIe hop stands for both hops.
    pcie = not fid and (getattr(gpu, "pcie_server_size", None) or 0) > 1
    if pcie:
        fid = getattr(gpu, "host_link", None)
    if not fid:
        return None
    if catalog is None:
        from gpuplan.catalogs import get_catalog

        catalog = get_catalog()
    try:
        fab = catalog.fabric(fid)
    except Exception:  # a catalog without that fabric row: no library model
        return None
    base = fab.collective_base_latency_s
    hop = fab.collective_hop_latency_s
    if not base or not hop:
        return None
    return LibraryLatency(
        library=str(fab.collective_library or "nccl"),
        base_latency_s=float(base),
        hop_latency_s=float(hop),
        net_hop_latency_s=float(hop) if pcie else fab.collective_net_hop_latency_s,
        fabric_id=str(fab.id),
        source=str(fab.latency_source or fab.source),
    )


#: NCCL halves the ring bus bandwidth on the LL protocol (8-byte lines carrying 4 bytes of
#: data and a 4-byte flag): ``busBw = min(llMaxBw, busBw * .5)``, NVIDIA/nccl
#: src/graph/tuning.cc line 327 (@5067397c). A ratio of the library's protocol, not hardware.
LL_BANDWIDTH_FRACTION = 0.5

#: Small-message algorithms of :func:`library_times`.


#: Largest all-reduce message, in bytes, that an engine's custom one-shot/two-shot kernels
#: take, for groups of at most two ranks and for larger groups: their IPC workspace. Larger
#: messages run on NCCL. vLLM (and SGLang, which carries vLLM's kernels):
#: ``CustomAllreduce(max_size=8192 * 1024)`` for every group it supports (2, 4, 6, 8),
#: vllm/distributed/device_communicators/custom_all_reduce.py (``should_custom_ar``).
VLLM_CUSTOM_ALLREDUCE_MAX_BYTES = (8.0 * 1024 * 1024, 8.0 * 1024 * 1024)
#: TensorRT-LLM: ``getMaxRequiredWorkspaceSize``, 16e6 bytes for two ranks and 8e6 beyond
#: (cpp/tensorrt_llm/common/customAllReduceUtils.h); its ``AUTO`` strategy runs NCCL above
#: it (``AllreducePlugin::selectImplementation``, cpp/tensorrt_llm/plugins/ncclPlugin).
TRTLLM_CUSTOM_ALLREDUCE_MAX_BYTES = (16.0e6, 8.0e6)


def custom_allreduce_max_bytes(
    ranks: Num, limits: tuple[float, float] = VLLM_CUSTOM_ALLREDUCE_MAX_BYTES
) -> FloatArray:
    """The largest message the custom all-reduce kernels take for ``ranks`` ranks
    (``limits``: at most two ranks, more).

    >>> float(custom_allreduce_max_bytes(2, TRTLLM_CUSTOM_ALLREDUCE_MAX_BYTES))
    16000000.0
    >>> float(custom_allreduce_max_bytes(8))
    8388608.0
    """
    return np.where(np.asarray(ranks, dtype=float) <= 2, limits[0], limits[1])


def library_times(
    lat: LibraryLatency,
    op: str,
    size_bytes: Num,
    ranks: Num,
    *,
    ranks_per_node: Num,
    busbw_bytes_per_s: Num,
    custom_allreduce: bool = True,
    tree: bool = False,
    custom_max_bytes: Num | None = None,
) -> dict[str, FloatArray]:
    """Time (seconds) of each small-message algorithm the library and engines run.

    * ``ring_ll``: NCCL's (and RCCL's) own cost model of the ring on the LL protocol
      (``ncclTopoTuneModel`` and ``ncclTopoGetAlgoTime``, NVIDIA/nccl src/graph/tuning.cc
      lines 384-412 and 653): ``t = base + (steps - inter) * hop + inter * net_hop +
      size * factor / (busbw / 2)`` with ``steps = 2(n-1)`` for an all-reduce (``n-1``
      for all-gather / reduce-scatter), ``inter = 2(N-1)`` (``N-1``) steps across ``N``
      nodes, and nccl-tests' bus factor ``2(n-1)/n`` (``(n-1)/n``). Inside one node NCCL's
      tree has the same ``2(n-1)`` hops, so the ring stands for both; across ``N > 2``
      nodes it is pessimistic (the tree pays ``2 log2 N`` network hops).
    * ``one_shot`` and ``two_shot`` all-reduce (only inside one scale-up domain with
      direct peer access, where ``custom_allreduce``, and for messages of at most
      ``custom_max_bytes``, the kernels' workspace: :func:`custom_allreduce_max_bytes`,
      vLLM's 8 MiB when not given; NCCL runs larger ones): the custom kernels of
      TensorRT-LLM (``AllReduceStrategy.ONESHOT/TWOSHOT``), vLLM (``custom_all_reduce.cu``,
      vllm-project/vllm PR 2192) and SGLang. One-shot: one barrier step, each GPU reads the
      ``n-1`` peer buffers and reduces, ``t = base + hop + (n-1) size / busbw``; two-shot:
      reduce-scatter then all-gather, ``t = base + 2 hop + 2(n-1)/n size / busbw``. The
      launch and step latencies are the library's own (the same kernels run inside one CUDA
      graph); the model reproduces the published H100 TP8 one-shot times (SGLang PR 2904:
      5.9 us at 512 B, 7.8 us at 32 KB), see ``tests/forecast/test_comm_latency.py``.

    * ``tree_ll`` (with ``tree``, all-reduce across ``N > 1`` nodes of ``G`` ranks): NCCL's
      double binary tree on LL, ``t = base + 2 ((G-1) hop + ceil(log2 N) net_hop) + 2(n-1)/n
      size / (busbw / 2)`` (``ncclTopoTuneModel``, tree branch: the chain inside the node
      and ``log2 N`` network levels, reduce then broadcast; Hu et al. 2025, "Demystifying
      NCCL", arXiv 2507.04786, section 4). The tree's own network hop is the ring's here
      (the catalog carries one set of constants), so at large ``N`` it is the lower bound.

    ``op`` ``all_to_all`` and ``p2p`` take one step (all peers at once): ``base + hop +
    size (n-1)/n / busbw``. ``busbw_bytes_per_s`` is the achieved large-message bus
    bandwidth of the group (the calibrated one).

    >>> lat = LibraryLatency("nccl", 6.6e-6, 0.6e-6, 2.7e-6, "nvlink4", "")
    >>> t = library_times(lat, "all_reduce", 0.0, 8, ranks_per_node=8, busbw_bytes_per_s=1e11)
    >>> round(float(t["ring_ll"]) * 1e6, 2), round(float(t["one_shot"]) * 1e6, 2)
    (15.0, 7.2)
    """
    size = np.asarray(size_bytes, dtype=float)
    n = np.maximum(np.asarray(ranks, dtype=float), 1.0)
    rpn = np.clip(np.asarray(ranks_per_node, dtype=float), 1.0, n)
    nodes = np.ceil(n / rpn)
    bw = np.asarray(busbw_bytes_per_s, dtype=float)
    net_hop = lat.net_hop_latency_s if lat.net_hop_latency_s else lat.hop_latency_s
    base, hop = lat.base_latency_s, lat.hop_latency_s
    out: dict[str, FloatArray] = {}
    if op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"):
        ar = op == "all_reduce"
        steps = (2.0 if ar else 1.0) * (n - 1.0)
        inter = (2.0 if ar else 1.0) * (nodes - 1.0)
        factor = (2.0 if ar else 1.0) * (n - 1.0) / n
        if op in ("broadcast", "reduce"):
            factor = np.ones_like(n)
        t = base + (steps - inter) * hop + inter * net_hop
        out["ring_ll"] = t + size * factor / (LL_BANDWIDTH_FRACTION * bw)
        if ar and custom_allreduce:
            cap = custom_allreduce_max_bytes(n) if custom_max_bytes is None else custom_max_bytes
            one_domain = (nodes <= 1) & (size <= np.asarray(cap, dtype=float))
            one = base + hop + (n - 1.0) * size / bw
            two = base + 2.0 * hop + 2.0 * (n - 1.0) / n * size / bw
            out["one_shot"] = np.where(one_domain, one, np.inf)
            out["two_shot"] = np.where(one_domain, two, np.inf)
        if ar and tree:
            g = n / np.maximum(nodes, 1.0)
            levels = np.ceil(np.log2(np.maximum(nodes, 2.0)))
            t_tree = base + 2.0 * ((g - 1.0) * hop + levels * net_hop)
            ll = t_tree + size * factor / (LL_BANDWIDTH_FRACTION * bw)
            out["tree_ll"] = np.where(nodes > 1, ll, np.inf)
    else:  # all_to_all, p2p: every peer at once
        step = np.where(nodes > 1, net_hop, hop)
        out["ring_ll"] = base + step + size * (n - 1.0) / n / bw
    return {k: np.where(n > 1, v, 0.0) for k, v in out.items()}


def serving_collective_time3(
    perf: DevicePerf,
    lat: LibraryLatency | None,
    op: str,
    size_bytes: Num,
    ranks: Num,
    *,
    ranks_per_node: Num,
    inter_node_bandwidth_bytes_per_s: float | None = None,
    custom_allreduce: bool = True,
    tree: bool = False,
    custom_max_bytes: Num | None = None,
) -> tuple[FloatArray, str]:
    """Collective time ``[value, low, high]`` and the algorithm that sets it.

    The fastest of the calibrated alpha-beta model (:func:`collective_time3`, fitted mostly
    on large messages) and the library's small-message algorithms (:func:`library_times`),
    as NCCL's tuner and the engines' ``AUTO`` all-reduce strategies pick the fastest. The
    library times carry the calibration's relative interval at the same size. With no
    library constants (``lat is None``) this is the calibrated model.
    """
    kw = _Scope(
        ranks_per_node=ranks_per_node,
        inter_node_bandwidth_bytes_per_s=inter_node_bandwidth_bytes_per_s,
    )
    cal = collective_time3(perf, op, size_bytes, ranks, **kw)
    if lat is None or not np.any(cal[0] > 0):
        return cal, "calibrated"
    n = np.asarray(ranks, dtype=float)
    big = 2.0**30
    t_big = collective_time3(perf, "all_reduce" if op == "p2p" else op, big, n, **kw)[0]
    factor = busbw_factor(op, np.maximum(n, 1.0))
    busbw = np.where(t_big > 0, big * factor / np.where(t_big > 0, t_big, 1.0), np.inf)
    times = library_times(
        lat,
        op,
        size_bytes,
        n,
        ranks_per_node=ranks_per_node,
        busbw_bytes_per_s=busbw,
        custom_allreduce=custom_allreduce,
        tree=tree,
        custom_max_bytes=custom_max_bytes,
    )
    rel = np.where(cal[0] > 0, cal / np.where(cal[0] > 0, cal[0], 1.0), 1.0)
    names = ["calibrated", *times]
    stack = np.stack([cal, *(np.where(cal[0] > 0, t * rel, 0.0) for t in times.values())])
    # one algorithm per message, chosen on the central value (as the tuner does), so the
    # interval is that algorithm's
    pick = np.argmin(stack[:, 0], axis=0)
    best = np.take_along_axis(stack, pick[None, None, ...], axis=0)[0]
    counts = np.bincount(np.ravel(pick), minlength=len(names))
    return best, names[int(np.argmax(counts))]


#: Ops that take the library's topology-aware cost in training. Only the all-reduce: for
#: all-gather / reduce-scatter the LL ring was tried (issue 15) and not kept: it brings
#: DeepSpeed ZeRO-3 on 2,240 A100 from 24.8 to 50.4 TFLOP/s (published 48) but makes the
#: 384-1,536 GPU rows 1.2-1.5x too fast (held-out deepspeed median 20.8 -> 28.9 %, overall
#: 7.28 -> 7.53 %, interval coverage 95.2 -> 91.4 %): NCCL runs those sizes on LL128,
#: whose hop latencies the catalog does not carry. See docs/forecast-training.md.
_TOPOLOGY_OPS = ("all_reduce",)


def topology_collective_time3(
    perf: DevicePerf,
    lat: LibraryLatency,
    op: str,
    size_bytes: Num,
    ranks: Num,
    *,
    ranks_per_node: Num,
    inter_node_bandwidth_bytes_per_s: float | None = None,
) -> FloatArray:
    """A training collective over ``N`` nodes of ``G`` ranks whose latency knows the topology.

    The calibrated hierarchical model (:func:`collective_time3`) charges its fitted
    inter-node alpha once per inter-node ring step (``N-1``, ``2(N-1)`` for an all-reduce);
    that alpha is fitted on 2-4 node runs on the Simple protocol and, for devices without
    their own multi-size runs, pooled over fabrics (InfiniBand and EFA alike), ~37 us a
    step. NCCL's tuner instead picks, per message, the algorithm and protocol its own cost
    model says is fastest (``ncclTopoGetAlgoTime``), and that model splits every step into
    the ``n - N`` NVLink hops and ``N`` network hops of the ring (``(n-1) - (N-1)`` and
    ``N-1`` for an all-gather) and, for an all-reduce, ``2((G-1) + log2 N)`` hops of the
    tree (NVIDIA/nccl src/graph/tuning.cc, ``ncclTopoTuneModel``; Hu et al. 2025,
    "Demystifying NCCL", arXiv 2507.04786). So the time of an all-reduce here is the
    faster of the calibrated model and the library's LL ring and tree (:func:`library_times`
    with the calibrated bus bandwidth, halved on LL), chosen on the central value; groups
    inside one node, and the ops outside ``_TOPOLOGY_OPS``, keep the calibrated model.
    The calibrated 37 us per node is itself NCCL's Simple flat ring: 7 NVLink hops of
    3.4 us and one network hop (``hwLat[NVLINK][RING][SIMPLE]`` = 3.4 us).
    """
    cal = collective_time3(
        perf,
        op,
        size_bytes,
        ranks,
        ranks_per_node=ranks_per_node,
        inter_node_bandwidth_bytes_per_s=inter_node_bandwidth_bytes_per_s,
    )
    if op not in _TOPOLOGY_OPS:
        return cal
    n = np.asarray(ranks, dtype=float)
    rpn = np.clip(np.asarray(ranks_per_node, dtype=float), 1.0, np.maximum(n, 1.0))
    multi = np.ceil(np.maximum(n, 1.0) / rpn) > 1
    if not np.any(multi & (cal[0] > 0)):
        return cal
    lib, _ = serving_collective_time3(
        perf,
        lat,
        op,
        size_bytes,
        ranks,
        ranks_per_node=ranks_per_node,
        inter_node_bandwidth_bytes_per_s=inter_node_bandwidth_bytes_per_s,
        custom_allreduce=False,
        tree=op == "all_reduce",
    )
    return np.where(multi, lib, cal)
