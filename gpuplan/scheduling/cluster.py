"""The simulated cluster: pools of identical GPU nodes, and the placement rule.

Placement rule (gang scheduling, documented in docs/scheduling.md):

* a job starts only when all its GPUs can be given at once;
* a job with ``n <= G`` GPUs (``G`` GPUs per node) runs on a single node, chosen best-fit
  (the node with the fewest free GPUs that still holds it), to keep whole nodes free for
  big jobs;
* a job with ``n > G`` takes ``n // G`` whole free nodes, and the remainder ``n % G`` (if
  any) on one more node chosen best-fit (or a further whole node). It gets exactly ``n``
  GPUs, so GPU-hours are never inflated by rounding up to whole nodes;
* a job never spans node types; one that names a node type runs only there, others take
  the first type (in the order given) where they fit.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gpuplan.errors import InputError


@dataclass(frozen=True)
class NodePool:
    """Identical nodes of one type.

    Attributes
    ----------
    name:
        Node type name (a Kueue ResourceFlavor, a Slurm partition).
    gpus_per_node:
        GPUs in each node.
    nodes:
        Number of nodes.
    gpu:
        Catalog GPU id, for labels and reports only.
    """

    name: str
    gpus_per_node: int
    nodes: int
    gpu: str | None = None

    def __post_init__(self) -> None:
        if self.gpus_per_node < 1:
            raise InputError(f"node type {self.name!r}: gpus_per_node must be >= 1", hint="e.g. 8")
        if self.nodes < 0:
            raise InputError(f"node type {self.name!r}: nodes must be >= 0", hint="e.g. 16")

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_node * self.nodes


@dataclass(frozen=True)
class Cluster:
    """A cluster made of one or more node pools."""

    pools: tuple[NodePool, ...]

    def __post_init__(self) -> None:
        if not self.pools:
            raise InputError("the cluster has no nodes", hint="give --gpus and --gpus-per-node")
        names = [p.name for p in self.pools]
        if len(set(names)) != len(names):
            raise InputError(f"node type names must be unique: {names}", hint="rename one")

    @classmethod
    def homogeneous(
        cls, nodes: int, gpus_per_node: int, *, gpu: str | None = None, name: str = "default"
    ) -> Cluster:
        """``nodes`` identical nodes of ``gpus_per_node`` GPUs."""
        return cls((NodePool(name, gpus_per_node, nodes, gpu),))

    @classmethod
    def from_gpus(cls, total_gpus: int, gpus_per_node: int, *, gpu: str | None = None) -> Cluster:
        """A homogeneous cluster of ``total_gpus`` GPUs (a whole number of nodes)."""
        if gpus_per_node < 1:
            raise InputError("--gpus-per-node must be >= 1", hint="e.g. --gpus-per-node 8")
        if total_gpus < gpus_per_node or total_gpus % gpus_per_node:
            lo = max(gpus_per_node, total_gpus // gpus_per_node * gpus_per_node)
            raise InputError(
                f"{total_gpus} GPUs is not a whole number of {gpus_per_node}-GPU nodes",
                hint=f"use {lo} or {lo + gpus_per_node} GPUs",
            )
        return cls.homogeneous(total_gpus // gpus_per_node, gpus_per_node, gpu=gpu)

    @classmethod
    def from_spec(cls, spec: object) -> Cluster:
        """From a validated :class:`~gpuplan.scheduling.schema.ClusterSpec`."""
        node_types = getattr(spec, "node_types", None)
        if node_types:
            return cls(tuple(NodePool(n.name, n.gpus_per_node, n.nodes, n.gpu) for n in node_types))
        return cls.homogeneous(
            int(spec.nodes),  # type: ignore[attr-defined]
            int(spec.gpus_per_node),  # type: ignore[attr-defined]
            gpu=getattr(spec, "gpu", None),
        )

    @property
    def total_gpus(self) -> int:
        return sum(p.total_gpus for p in self.pools)

    @property
    def total_nodes(self) -> int:
        return sum(p.nodes for p in self.pools)

    def pool(self, name: str) -> NodePool:
        for p in self.pools:
            if p.name == name:
                return p
        raise InputError(
            f"no node type {name!r} in the cluster",
            hint=f"node types: {', '.join(p.name for p in self.pools)}",
        )

    def scaled(self, total_gpus: int) -> Cluster:
        """The same node types resized to about ``total_gpus`` GPUs.

        One pool: ``total_gpus // gpus_per_node`` nodes (at least one). Several pools: each
        keeps its fraction of the GPUs, rounded to whole nodes.
        """
        if len(self.pools) == 1:
            p = self.pools[0]
            return Cluster(
                (NodePool(p.name, p.gpus_per_node, max(1, total_gpus // p.gpus_per_node), p.gpu),)
            )
        base = self.total_gpus or 1
        return Cluster(
            tuple(
                NodePool(
                    p.name,
                    p.gpus_per_node,
                    max(0, round(p.total_gpus / base * total_gpus / p.gpus_per_node)),
                    p.gpu,
                )
                for p in self.pools
            )
        )

    def max_job_gpus(self, node_type: str | None = None) -> int:
        """Largest job (in GPUs) that could ever be placed (on ``node_type`` if given)."""
        pools = [self.pool(node_type)] if node_type else list(self.pools)
        return max((p.total_gpus for p in pools), default=0)

    def to_dict(self) -> dict[str, object]:
        return {
            "total_gpus": self.total_gpus,
            "total_nodes": self.total_nodes,
            "node_types": [
                {
                    "name": p.name,
                    "gpus_per_node": p.gpus_per_node,
                    "nodes": p.nodes,
                    "gpu": p.gpu,
                }
                for p in self.pools
            ],
        }


def max_concurrent(num_gpus: int, pool: NodePool) -> int:
    """How many ``num_gpus``-GPU jobs fit at once in ``pool`` under the placement rule.

    ``n <= G``: ``nodes * (G // n)``. ``n > G`` with ``q, r = divmod(n, G)``: the largest
    ``k`` with ``k*q + ceil(k / (G // r)) <= nodes`` (each job takes ``q`` whole nodes and
    its remainder shares partial nodes, ``G // r`` remainders per node); ``k*q <= nodes``
    when ``r == 0``.

    >>> max_concurrent(3, NodePool("x", 8, 4))
    8
    >>> max_concurrent(12, NodePool("x", 8, 10))
    6
    """
    g, nodes = pool.gpus_per_node, pool.nodes
    if num_gpus <= g:
        return nodes * (g // num_gpus)
    q, r = divmod(num_gpus, g)
    if r == 0:
        return nodes // q
    per_node = g // r
    k = nodes // q
    while k > 0 and k * q + math.ceil(k / per_node) > nodes:
        k -= 1
    return k
