"""Slurm fair-share (classic and Fair Tree), decayed usage, DRF shares, and their effect."""

from __future__ import annotations

import math

import pytest

from gpuplan.errors import InputError
from gpuplan.scheduling import Cluster, simulate
from gpuplan.scheduling.fairshare import (
    Account,
    DecayedUsage,
    build_tree,
    classic_fairshare,
    dominant_share,
    factors,
    fair_tree,
)

from ._helpers import job


def slurm_example_tree() -> Account:
    """Figure 3 of https://slurm.schedmd.com/classic_fair_share.html ("Example").

    Accounts A (40 shares) and D (60); A has B (30) and C (10); D has E (25) and F (35).
    User 1 is in B, users 2 and 3 (1 share each) in C, user 4 in E, user 5 in F. Actual
    usage as a fraction of the machine: user 1 0.2, user 2 0.25, user 4 0.25.
    """
    return Account(
        "root",
        1,
        [
            Account(
                "A",
                40,
                [
                    Account("B", 30, [Account("user1", 1, usage=0.20)]),
                    Account("C", 10, [Account("user2", 1, usage=0.25), Account("user3", 1)]),
                ],
            ),
            Account(
                "D",
                60,
                [
                    Account("E", 25, [Account("user4", 1, usage=0.25)]),
                    Account("F", 35, [Account("user5", 1)]),
                ],
            ),
        ],
    )


def test_slurm_classic_worked_example_reproduced_exactly():
    # The example's usages are fractions of the whole machine, so R_H = 1.
    res = classic_fairshare(slurm_example_tree(), total_usage=1.0)
    published = {
        "user1": "0.408479",
        "user2": "0.022097",
        "user3": "0.125000",
        "user4": "0.500000",
        "user5": "0.749154",
    }
    assert {u: f"{f:.6f}" for u, f in res.factor.items()} == published
    # the intermediate values printed on the same page
    assert res.normalized_shares == pytest.approx(
        {"user1": 0.3, "user2": 0.05, "user3": 0.05, "user4": 0.25, "user5": 0.35}
    )
    assert res.effective_usage["user1"] == pytest.approx(0.3875)
    assert res.effective_usage["user2"] == pytest.approx(0.275)
    assert res.effective_usage["user3"] == pytest.approx(0.15)
    assert res.effective_usage["user4"] == pytest.approx(0.25)
    assert res.effective_usage["user5"] == pytest.approx(0.25 * 35 / 60)


def test_classic_dampening_and_defaults():
    flat = Account("root", 1, [Account("a", 1, usage=3.0), Account("b", 1, usage=1.0)])
    f = classic_fairshare(flat).factor  # R_H = 4: a used 0.75 of a 0.5 share
    assert f["a"] == pytest.approx(2 ** (-0.75 / 0.5))
    assert f["b"] == pytest.approx(2 ** (-0.25 / 0.5))
    damped = classic_fairshare(flat, dampening=2.0).factor
    assert damped["a"] == pytest.approx(2 ** (-0.75 / 0.5 / 2))
    assert damped["a"] > f["a"]  # damping pulls factors towards 1
    idle = classic_fairshare(Account("root", 1, [Account("a", 1), Account("b", 3)])).factor
    assert idle == {"a": 1.0, "b": 1.0}  # no usage at all: everybody at 1
    with pytest.raises(InputError, match="dampening"):
        classic_fairshare(flat, dampening=0)


def test_fair_tree_ranks_whole_accounts_together():
    # Account B (8 of 18 units used, half the shares) is under-served at its level, so
    # every user of B outranks every user of A, although b2 alone used 8 units and a1 none.
    tree = Account(
        "root",
        1,
        [
            Account("A", 1, [Account("a1", 1, usage=0.0), Account("a2", 1, usage=10.0)]),
            Account("B", 1, [Account("b1", 1, usage=0.0), Account("b2", 1, usage=8.0)]),
        ],
    )
    f = fair_tree(tree)
    assert f == {"b1": 1.0, "b2": 0.75, "a1": 0.5, "a2": 0.25}
    # classic mixes the levels: a1 (no usage of its own) gets 2**(-(10/18)/2/0.25) and
    # beats b2 with 2**(-(8/18)/0.25)
    c = classic_fairshare(tree).factor
    assert c["a1"] == pytest.approx(2 ** (-(10 / 18) / 2 / 0.25))
    assert c["b2"] == pytest.approx(2 ** (-(8 / 18) / 0.25))
    assert c["a1"] > c["b2"]


def test_fair_tree_ties_share_a_rank():
    tree = Account("root", 1, [Account("x", 1, usage=1.0), Account("y", 1, usage=1.0)])
    assert fair_tree(tree) == {"x": 1.0, "y": 1.0}
    # no usage: infinite level fair-share for everybody, all tied at the top
    assert set(fair_tree(Account("root", 1, [Account("p", 1), Account("q", 2)])).values()) == {1.0}


def test_build_tree_groups_teams_under_parents():
    root = build_tree([("a", 2, "org"), ("b", 1, "org"), ("c", 3, None)])
    org = next(c for c in root.children if c.name == "org")
    assert org.shares == 3  # parent shares default to the sum of its teams
    res = classic_fairshare(root)
    assert res.normalized_shares == pytest.approx({"a": 2 / 6, "b": 1 / 6, "c": 3 / 6})
    with pytest.raises(InputError, match="both a team and a parent"):
        build_tree([("a", 1, "b"), ("b", 1, None)])
    with pytest.raises(InputError, match="unknown fair-share algorithm"):
        factors(root, {}, "lottery")


def test_decayed_usage_matches_numeric_integration():
    h = 3600.0
    du = DecayedUsage(["t"], h)
    du.add_rate("t", 0.0, 8)  # 8 GPUs from t=0
    du.add_rate("t", 5000.0, -8)  # ... to t=5000
    got = du.snapshot(9000.0)["t"]
    # midpoint-rule integral of 8 * 2**(-(9000 - s)/h) over [0, 5000]
    n = 200_000
    step = 5000.0 / n
    ref = sum(8 * 2 ** (-(9000.0 - (k + 0.5) * step) / h) for k in range(n)) * step
    assert got == pytest.approx(ref, rel=1e-6)
    # halves after one half-life without new usage
    assert du.snapshot(9000.0 + h)["t"] == pytest.approx(got / 2)
    # a constant rate saturates at r * h / ln 2
    sat = DecayedUsage(["t"], h)
    sat.add_rate("t", 0.0, 2)
    assert sat.snapshot(100 * h)["t"] == pytest.approx(2 * h / math.log(2), rel=1e-9)
    with pytest.raises(InputError, match="half-life"):
        DecayedUsage(["t"], 0)


def test_dominant_share():
    cap = {"h100": 64, "a100": 16}
    assert dominant_share({"h100": 16, "a100": 2}, cap) == 0.25
    assert dominant_share({"h100": 16, "a100": 8}, cap) == 0.5
    assert dominant_share({"h100": 16}, cap, weight=2) == 0.125
    assert dominant_share({}, cap) == 0.0


def _heavy_then_both():
    # team "heavy" ran alone on the whole cluster for a day; then both teams submit a job
    # that needs the whole cluster. "heavy" submits one second earlier.
    return [
        job("h0", 0, 86400, 8, team="heavy"),
        job("h1", 86400 + 10, 3600, 8, team="heavy"),
        job("l1", 86400 + 11, 3600, 8, team="light"),
        # keep the cluster busy so that both wait and the order is the policy's choice
        job("blk", 86400 + 1, 1000, 8, team="light"),
    ]


def test_fair_share_serves_the_under_served_team_first():
    cluster = Cluster.homogeneous(1, 8)
    fifo = simulate(_heavy_then_both(), cluster, "fifo")
    assert fifo.job("h1")["start_s"] < fifo.job("l1")["start_s"]
    for algo in ("classic", "fair-tree"):
        fs = simulate(
            _heavy_then_both(),
            cluster,
            "fair-share",
            fairshare_algorithm=algo,
            priority_calc_period_s=60.0,
        )
        assert fs.job("l1")["start_s"] < fs.job("h1")["start_s"], algo


def test_drf_favours_the_team_with_the_smaller_dominant_share():
    cluster = Cluster.homogeneous(2, 4)
    jobs = [
        job("a-big", 0, 5000, 4, team="a"),  # a holds half the cluster
        job("b-run", 0, 100, 4, team="b"),
        job("a-next", 10, 100, 4, team="a"),
        job("b-next", 20, 100, 4, team="b"),
    ]
    drf = simulate(jobs, cluster, "drf")
    # when b-run ends at 100, b (share 0) goes before a (share 0.5) despite submitting later
    assert drf.job("b-next")["start_s"] == 100.0
    assert drf.job("a-next")["start_s"] == 200.0
    fifo = simulate(jobs, cluster, "fifo")
    assert fifo.job("a-next")["start_s"] == 100.0
