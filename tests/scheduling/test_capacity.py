"""Capacity answers: wait-vs-size curve, smallest cluster, concurrent fit, comparison."""

from __future__ import annotations

import itertools

import pytest

from gpuplan.errors import InputError
from gpuplan.scheduling import (
    Cluster,
    NodePool,
    compare_policies,
    concurrent_fit,
    simulate,
    smallest_cluster,
    wait_vs_size_curve,
)
from gpuplan.scheduling.capacity import default_sizes, mean_demand_gpus

from ._helpers import job, random_jobs

JOBS = random_jobs(21, 400, 8)
CLUSTER = Cluster.homogeneous(2, 8)


def test_wait_vs_size_curve_under_fifo_is_monotone():
    sizes = [16, 24, 32, 48, 64]
    curve = wait_vs_size_curve(JOBS, CLUSTER, sizes, "fifo")
    assert [p["gpus"] for p in curve["points"]] == sizes
    means = [p["wait_s"]["mean"] for p in curve["points"]]
    assert all(a >= b for a, b in itertools.pairwise(means))
    assert means[0] > means[-1]  # it does shrink
    assert set(curve["points"][0]["wait_s"]) == {"mean", "p50", "p95", "p99", "max"}
    # each point is the same as a direct simulation at that size
    direct = simulate(JOBS, Cluster.homogeneous(3, 8), "fifo")
    assert curve["points"][1]["wait_s"] == direct.wait_s


def test_curve_marks_sizes_too_small_for_some_jobs():
    curve = wait_vs_size_curve(JOBS, CLUSTER, [8, 24], "backfill", attribution="cite me")
    small, big = curve["points"]
    assert small["unschedulable_jobs"] > 0 and big["unschedulable_jobs"] == 0
    assert small["jobs_simulated"] + small["unschedulable_jobs"] == len(JOBS)
    assert curve["attribution"] == "cite me"
    with pytest.raises(InputError, match="positive"):
        wait_vs_size_curve(JOBS, CLUSTER, [0, 8])


def test_default_sizes_start_at_the_mean_demand():
    demand = mean_demand_gpus(JOBS)
    sizes = default_sizes(JOBS, CLUSTER)
    assert sizes == sorted(sizes) and all(s % 8 == 0 for s in sizes)
    assert sizes[0] >= max(demand, max(j.num_gpus for j in JOBS))
    assert sizes[-1] >= 3 * demand


def test_smallest_cluster_meets_the_target_and_one_node_less_does_not():
    target = 1800.0
    ans = smallest_cluster(JOBS, CLUSTER, target, "fifo")
    nodes = ans["overall"]["nodes"]
    at = simulate(JOBS, Cluster.homogeneous(nodes, 8), "fifo")
    assert max(t["wait_s"]["p95"] for t in at.per_team.values()) <= target
    below = simulate(JOBS, Cluster.homogeneous(nodes - 1, 8), "fifo")
    assert max(t["wait_s"]["p95"] for t in below.per_team.values()) > target
    for team, v in ans["per_team"].items():
        assert v["nodes"] <= nodes
        res = simulate(JOBS, Cluster.homogeneous(v["nodes"], 8), "fifo")
        assert res.per_team[team]["wait_s"]["p95"] <= target
    unreachable = smallest_cluster(JOBS, CLUSTER, 1e-9, "fifo", max_gpus=32)
    assert unreachable["overall"] is None
    with pytest.raises(InputError, match="target"):
        smallest_cluster(JOBS, CLUSTER, 0.0)


def test_concurrent_fit_matches_a_simulation():
    c = Cluster((NodePool("a", 8, 3), NodePool("b", 4, 2)))
    fit = concurrent_fit(c, [1, 3, 4, 8, 12])
    # a: 3 x 8 GPUs, b: 2 x 4 GPUs. 8 GPUs: 3 nodes of a + both nodes of b together;
    # 12 GPUs: a whole a-node + 4 on another a-node, twice (b has only 8 GPUs)
    assert fit == {1: 32, 3: 8, 4: 8, 8: 4, 12: 2}
    for n, k in fit.items():
        # k + 1 identical long jobs at t=0: exactly k run at once, the last one waits
        jobs = [job(i, 0, 1000, n) for i in range(k + 1)]
        res = simulate(jobs, c, "fifo")
        assert res.concurrency["max_running_jobs"] == k
        assert sum(w > 0 for w in res.jobs["wait_s"]) == 1


def test_compare_policies_on_one_workload():
    out = compare_policies(
        JOBS,
        Cluster.homogeneous(3, 8),
        [
            "fifo",
            "backfill",
            {"policy": "fair-share", "name": "fs-tree", "fairshare_algorithm": "fair-tree"},
        ],
    )
    assert set(out["policies"]) == {"fifo", "backfill", "fs-tree"}
    fifo = out["policies"]["fifo"]["wait_s"]["mean"]
    bf = out["policies"]["backfill"]["wait_s"]["mean"]
    assert bf < fifo  # backfilling this bursty mix helps
    assert out["best"]["mean_wait"] in {"backfill", "fs-tree"}


def test_philly_wait_curve_carries_the_citation():
    # The full curve is timed by benchmarks/schedule_philly.py; one size where almost
    # nobody waits keeps this test short.
    from gpuplan.scheduling import philly_wait_curve

    curve = philly_wait_curve([2048], "fifo")
    (point,) = curve["points"]
    assert point["gpus"] == 2048 and point["jobs_simulated"] == 82247
    assert point["unschedulable_jobs"] == 0
    assert point["wait_s"]["p99"] == 0.0  # 2048 GPUs: over 5x the mean demand
    assert "Jeon et al." in curve["attribution"] and curve["trace"] == "philly"


def test_curve_rederives_quotas_per_size():
    from gpuplan.scheduling.scenario import team_quotas
    from gpuplan.scheduling.schema import TeamSpec

    teams = [TeamSpec(name=t) for t in ("a", "b", "c")]
    opts = {"quota_mode": "resourcequota", "quotas": team_quotas(teams, 16)}
    # with the 16-GPU quotas kept, a 16-GPU job never fits any team's quota
    fixed = wait_vs_size_curve(JOBS, CLUSTER, [48], "fifo", **opts)
    assert fixed["points"][0]["unschedulable_jobs"] > 0
    scaled = wait_vs_size_curve(JOBS, CLUSTER, [48], "fifo", teams=teams, **opts)
    assert scaled["points"][0]["unschedulable_jobs"] == 0  # 16 GPUs each at 48
