"""Fair-share factors of Slurm's multifactor priority plugin, and DRF dominant shares.

Two Slurm algorithms over an account tree whose leaves are the associations (here: teams):

* **classic** (``PriorityFlags=NO_FAIR_TREE``), from SchedMD, "Classic Fairshare Algorithm"
  (https://slurm.schedmd.com/classic_fair_share.html): normalised shares
  ``S = prod(S_node / S_siblings)`` down the tree, normalised usage ``U = U_node / U_total``,
  effective usage ``U_E = U_A + (U_E,parent - U_A) * S_child / S_all_siblings`` (for the tier
  under root ``U_E = U_A``) and the factor ``F = 2**(-U_E / S / d)`` with the
  FairShareDampeningFactor ``d``.
* **Fair Tree** (the default since Slurm 19.05), from SchedMD, "Fair Tree Fairshare
  Algorithm" (https://slurm.schedmd.com/fair_tree.html): per level ``LF = S / U`` with
  ``S`` and ``U`` normalised among siblings; the tree is visited depth-first with siblings
  sorted by ``LF`` (highest first) and the leaves ranked in that order;
  ``F = rank / number of leaves`` (the first leaf gets 1.0).

Usage decays with a half-life (``PriorityDecayHalfLife``): :class:`DecayedUsage` keeps
``U(t) = sum_i u_i * 2**(-(t - t_i) / half_life)`` exactly between events.

DRF (Ghodsi et al., "Dominant Resource Fairness: Fair Allocation of Multiple Resource
Types", NSDI 2011): a team's dominant share is the largest of its shares of each resource
(here: the GPUs of each node type), divided by its weight.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from gpuplan.errors import InputError

LN2 = math.log(2.0)


@dataclass
class Account:
    """A node of the fair-share tree: an account (with children) or a leaf association.

    Attributes
    ----------
    name:
        Unique name in the tree.
    shares:
        Raw shares (``Fairshare=`` in sacctmgr) relative to its siblings.
    children:
        Sub-accounts or leaf associations; empty for a leaf.
    usage:
        Raw (decayed) usage of a leaf, e.g. GPU-seconds. Ignored for accounts, whose usage
        is the sum of their children's.
    """

    name: str
    shares: float
    children: list[Account] = field(default_factory=list)
    usage: float = 0.0

    def is_leaf(self) -> bool:
        return not self.children

    def total_usage(self) -> float:
        if not self.children:
            return self.usage
        return sum(c.total_usage() for c in self.children)

    def leaves(self) -> list[Account]:
        if not self.children:
            return [self]
        out: list[Account] = []
        for c in self.children:
            out.extend(c.leaves())
        return out


@dataclass(frozen=True)
class ClassicFairShare:
    """Per-leaf results of the classic algorithm (all values are fractions of the machine)."""

    factor: dict[str, float]
    normalized_shares: dict[str, float]
    normalized_usage: dict[str, float]
    effective_usage: dict[str, float]


def classic_fairshare(
    root: Account, *, dampening: float = 1.0, total_usage: float | None = None
) -> ClassicFairShare:
    """Slurm classic fair-share factors of every leaf of ``root`` (see module docstring).

    Parameters
    ----------
    root:
        The root account; its children are the first tier.
    dampening:
        FairShareDampeningFactor ``d`` (Slurm default 1).
    total_usage:
        ``R_H``, the usage that normalises every account's usage; default the sum over
        the leaves (Slurm: the root association's usage). Give 1.0 when leaf usages are
        already fractions of the machine, as in Slurm's worked example.

    Examples
    --------
    Two teams with equal shares; one has used everything so far:

    >>> r = Account("root", 1, [Account("a", 1, usage=10.0), Account("b", 1, usage=0.0)])
    >>> f = classic_fairshare(r).factor
    >>> round(f["a"], 6), round(f["b"], 6)
    (0.25, 1.0)
    """
    if dampening <= 0:
        raise InputError("the fair-share dampening factor must be > 0", hint="use 1 (default)")
    total = root.total_usage() if total_usage is None else float(total_usage)
    norm_shares: dict[str, float] = {}
    norm_usage: dict[str, float] = {}
    eff_usage: dict[str, float] = {}
    factor: dict[str, float] = {}

    def walk(node: Account, parent_s: float, parent_ue: float | None) -> None:
        siblings_shares = sum(c.shares for c in node.children)
        for child in node.children:
            ratio = child.shares / siblings_shares if siblings_shares > 0 else 0.0
            s = parent_s * ratio
            ua = child.total_usage() / total if total > 0 else 0.0
            ue = ua if parent_ue is None else ua + (parent_ue - ua) * ratio
            if child.is_leaf():
                norm_shares[child.name] = s
                norm_usage[child.name] = ua
                eff_usage[child.name] = ue
                factor[child.name] = 2.0 ** (-ue / s / dampening) if s > 0 else 0.0
            else:
                walk(child, s, ue)

    walk(root, 1.0, None)
    return ClassicFairShare(factor, norm_shares, norm_usage, eff_usage)


def level_fairshare(node: Account, siblings: Sequence[Account]) -> float:
    """Fair Tree's ``LF = S / U`` of ``node`` among ``siblings`` (which include ``node``)."""
    s_total = sum(c.shares for c in siblings)
    u_total = sum(c.total_usage() for c in siblings)
    s = node.shares / s_total if s_total > 0 else 0.0
    u = node.total_usage() / u_total if u_total > 0 else 0.0
    if u == 0.0:
        return math.inf if s > 0 else 0.0
    return s / u


def fair_tree(root: Account) -> dict[str, float]:
    """Slurm Fair Tree fair-share factors of every leaf (rank / number of leaves).

    Ties follow the Slurm documentation: sibling leaves with the same level fair-share
    get the same rank; sibling accounts with the same level fair-share have their children
    merged before descending; a leaf tied with a sibling account gets the rank of that
    account's highest-ranked leaf.

    >>> r = Account("root", 1, [
    ...     Account("A", 1, [Account("a1", 1, usage=5.0), Account("a2", 1, usage=1.0)]),
    ...     Account("B", 1, [Account("b1", 1, usage=1.0), Account("b2", 1, usage=0.0)])])
    >>> fair_tree(r)
    {'b2': 1.0, 'b1': 0.75, 'a2': 0.5, 'a1': 0.25}
    """
    n_leaves = len(root.leaves())
    out: dict[str, float] = {}
    counter = [n_leaves]

    def visit(children: list[tuple[float, Account]]) -> int | None:
        """Rank ``(LF, node)`` pairs (LF computed in each node's own parent); return the
        highest rank given in this subtree."""
        children = sorted(children, key=lambda p: -p[0])
        best: int | None = None
        k = 0
        while k < len(children):
            lf = children[k][0]
            group = [c for lf2, c in children[k:] if lf2 == lf]
            k += len(group)
            accounts = [c for c in group if not c.is_leaf()]
            leaves = [c for c in group if c.is_leaf()]
            group_rank: int | None = None
            if accounts:
                merged = [
                    (level_fairshare(gc, a.children), gc) for a in accounts for gc in a.children
                ]
                group_rank = visit(merged)
            if leaves:
                rank = group_rank if group_rank is not None else counter[0]
                for leaf in leaves:
                    out[leaf.name] = rank / n_leaves if n_leaves else 0.0
                    counter[0] -= 1
                group_rank = rank
            if best is None and group_rank is not None:
                best = group_rank
        return best

    visit([(level_fairshare(c, root.children), c) for c in root.children])
    return out


def build_tree(
    teams: Sequence[tuple[str, float, str | None]],
    *,
    parent_shares: Mapping[str, float] | None = None,
) -> Account:
    """Account tree ``root -> parent -> team`` from ``(team, shares, parent or None)``.

    A parent account's shares default to the sum of its teams' shares, so that a flat
    and a grouped description give the teams the same normalised shares.
    """
    root = Account("root", 1.0)
    parents: dict[str, Account] = {}
    names = {t[0] for t in teams}
    for name, shares, parent in teams:
        leaf = Account(name, float(shares))
        if parent is None:
            root.children.append(leaf)
            continue
        if parent in names:
            raise InputError(
                f"account {parent!r} is both a team and a parent", hint="rename the parent"
            )
        acc = parents.get(parent)
        if acc is None:
            acc = Account(parent, 0.0)
            parents[parent] = acc
            root.children.append(acc)
        acc.children.append(leaf)
    for pname, acc in parents.items():
        given = (parent_shares or {}).get(pname)
        acc.shares = float(given) if given is not None else sum(c.shares for c in acc.children)
    return root


def factors(root: Account, usage: Mapping[str, float], algorithm: str) -> dict[str, float]:
    """Fair-share factor per leaf for the given leaf usage (``classic`` or ``fair-tree``)."""
    for leaf in root.leaves():
        leaf.usage = float(usage.get(leaf.name, 0.0))
    if algorithm == "classic":
        return classic_fairshare(root).factor
    if algorithm == "fair-tree":
        return fair_tree(root)
    raise InputError(
        f"unknown fair-share algorithm {algorithm!r}", hint="use 'classic' or 'fair-tree'"
    )


class DecayedUsage:
    """Half-life decayed usage per key, exact for piecewise-constant usage rates.

    With rate ``r`` (e.g. GPUs in use) constant on ``[t0, t1]`` and ``D = 2**(-(t1-t0)/h)``:
    ``U(t1) = U(t0) * D + r * h / ln 2 * (1 - D)`` (the integral of ``r * 2**(-(t1-s)/h)``).
    This is the continuous limit of Slurm's ``U_H = U_current + D*U_last + D*D*U_(period-2) +
    ...`` (classic_fair_share.html, "Normalized Usage").
    """

    def __init__(self, keys: Iterable[str], half_life_s: float) -> None:
        if half_life_s <= 0:
            raise InputError("the usage half-life must be > 0", hint="e.g. 7 days = 604800 s")
        self.half_life_s = float(half_life_s)
        self.usage = dict.fromkeys(keys, 0.0)
        self.rate = dict.fromkeys(self.usage, 0.0)
        self.last = dict.fromkeys(self.usage, 0.0)

    def advance(self, key: str, t: float) -> None:
        dt = t - self.last[key]
        if dt > 0:
            d = 2.0 ** (-dt / self.half_life_s)
            r = self.rate[key]
            self.usage[key] = self.usage[key] * d + r * self.half_life_s / LN2 * (1.0 - d)
            self.last[key] = t

    def add_rate(self, key: str, t: float, delta: float) -> None:
        self.advance(key, t)
        self.rate[key] += delta

    def snapshot(self, t: float) -> dict[str, float]:
        for k in self.usage:
            self.advance(k, t)
        return dict(self.usage)


def dominant_share(
    allocation: Mapping[str, float], capacity: Mapping[str, float], weight: float = 1.0
) -> float:
    """DRF dominant share: ``max_r allocation[r] / capacity[r]`` divided by ``weight``.

    >>> dominant_share({"h100": 8, "a100": 2}, {"h100": 64, "a100": 8})
    0.25
    """
    share = max((allocation.get(r, 0.0) / c for r, c in capacity.items() if c > 0), default=0.0)
    return share / weight
