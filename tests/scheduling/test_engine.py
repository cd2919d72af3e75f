"""Invariants of the simulator and hand-computed schedules."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuplan.errors import InputError
from gpuplan.scheduling import Cluster, Job, NodePool, simulate
from gpuplan.scheduling.engine import Engine, SimOptions
from gpuplan.scheduling.schema import TeamSpec
from gpuplan.scheduling.workload import generate_workload

from ._helpers import job, random_jobs

ALL_POLICIES = ("fifo", "backfill", "fair-share", "priority", "drf")


def _running_gpus_max(res) -> float:
    """Largest number of GPUs in use at once, from the per-job start/end times."""
    s = np.asarray(res.jobs["start_s"])
    e = np.asarray(res.jobs["end_s"])
    n = np.asarray(res.jobs["num_gpus"], float)
    t = np.concatenate((e, s))
    d = np.concatenate((-n, n))
    order = np.lexsort((d, t))
    return float(np.max(np.cumsum(d[order])))


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_unlimited_gpus_means_no_wait(policy):
    jobs = random_jobs(1, 300, 8)
    need = sum(j.num_gpus for j in jobs)  # every job at once still fits
    res = simulate(jobs, Cluster.homogeneous(need // 8 + 2, 8), policy)
    assert res.wait_s["max"] == 0.0
    assert all(w == 0.0 for w in res.jobs["wait_s"])
    assert res.jct_s["mean"] == pytest.approx(np.mean([j.duration_s for j in jobs]))
    assert res.starved_jobs_count == 0


@pytest.mark.parametrize("policy", ALL_POLICIES)
@pytest.mark.parametrize("gpn", [1, 4, 8])
def test_gpu_seconds_conserved_and_capacity_respected(policy, gpn):
    jobs = random_jobs(7, 400, gpn)
    cluster = Cluster.homogeneous(4, gpn) if gpn > 1 else Cluster.homogeneous(8, 1)
    res = simulate(jobs, cluster, policy)
    work = sum(j.num_gpus * j.duration_s for j in jobs)
    assert res.gpu_seconds["workload"] == pytest.approx(work, rel=1e-12)
    assert res.gpu_seconds["busy"] == pytest.approx(work, rel=1e-12)
    # every job ran exactly its duration, uninterrupted (no preemption)
    assert np.allclose(
        np.asarray(res.jobs["end_s"]) - np.asarray(res.jobs["start_s"]),
        [j.duration_s for j in jobs],
    )
    assert min(res.jobs["wait_s"]) >= 0.0
    assert _running_gpus_max(res) <= cluster.total_gpus
    assert 0.0 < res.utilization <= 1.0 + 1e-12


@pytest.mark.parametrize("gpn", [1, 4, 8])
def test_strict_fifo_never_starts_a_later_job_first(gpn):
    jobs = random_jobs(3, 500, gpn)
    res = simulate(
        jobs, Cluster.homogeneous(3, gpn) if gpn > 1 else Cluster.homogeneous(6, 1), "fifo"
    )
    starts = res.jobs["start_s"]
    # jobs are in submit order; a later job never starts before an earlier one
    assert all(a <= b for a, b in itertools.pairwise(starts))
    # and the queue really formed (the check is not vacuous)
    assert res.wait_s["max"] > 0


def test_backfill_does_start_later_jobs_first():
    jobs = random_jobs(3, 500, 8)
    res = simulate(jobs, Cluster.homogeneous(3, 8), "backfill")
    starts = res.jobs["start_s"]
    assert any(a > b for a, b in itertools.pairwise(starts))


def test_easy_backfill_hand_computed():
    # One node of 4 GPUs. J2 (all 4 GPUs) must wait for J1 (t=100): it gets a reservation
    # at 100. J3 ends by then (2 + 50 <= 100) and backfills at once; J4 would run past 100
    # on the GPUs J2 needs, so it waits until J2 is done (110).
    jobs = [job(1, 0, 100, 2), job(2, 1, 10, 4), job(3, 2, 50, 2), job(4, 3, 200, 2)]
    c = Cluster.homogeneous(1, 4)
    bf = simulate(jobs, c, "backfill")
    assert [bf.job(str(i))["start_s"] for i in (1, 2, 3, 4)] == [0.0, 100.0, 2.0, 110.0]
    fifo = simulate(jobs, c, "fifo")
    assert [fifo.job(str(i))["start_s"] for i in (1, 2, 3, 4)] == [0.0, 100.0, 110.0, 110.0]


def test_runtime_overestimates_let_backfill_delay_the_head_job():
    # J2 (4 GPUs) waits for J1 (ends at 100). J3 (80 s from t=50.5) would end after 100:
    # with exact estimates it is not backfilled. When every estimate is 3x the run time,
    # J1 "ends" at 300 and J3 at 290.5, so J3 is backfilled - and really holds its GPUs
    # until 130.5, delaying J2 (Mu'alem and Feitelson 2001 discuss this effect).
    jobs = [job(1, 0, 100, 2), job(2, 50, 10, 4), job(3, 50.5, 80, 2)]
    c = Cluster.homogeneous(1, 4)
    exact = simulate(jobs, c, "backfill")
    assert [exact.job(str(i))["start_s"] for i in (1, 2, 3)] == [0.0, 100.0, 110.0]
    over = simulate(jobs, c, "backfill", runtime_estimate_factor=3.0)
    assert [over.job(str(i))["start_s"] for i in (1, 2, 3)] == [0.0, 130.5, 50.5]


def test_backfill_uses_gpus_the_reservation_does_not_need():
    # Two 4-GPU nodes. J1 holds node A until 100, J2 half of node B until 300. J3 (a
    # whole node) gets a reservation on node A at 100. J4 is long but fits on node B,
    # which the reservation does not need, so it starts at once; J5 finds no room.
    jobs = [
        job(1, 0, 100, 4),  # node A until 100
        job(2, 0, 300, 2),  # node B, 2 GPUs until 300
        job(3, 1, 50, 4),  # blocked: reservation on A at t=100
        job(4, 2, 1000, 2),  # long, fits on B's other 2 GPUs: B is not reserved
        job(5, 3, 1000, 1),  # no room left now (A full, B full)
    ]
    res = simulate(jobs, Cluster.homogeneous(2, 4), "backfill")
    assert res.job("3")["start_s"] == 100.0
    assert res.job("4")["start_s"] == 2.0
    assert res.job("5")["start_s"] == 150.0  # after J3 leaves node A


def test_backfill_depth_limits_the_scan():
    jobs = [job(1, 0, 100, 4), job(2, 1, 10, 4)] + [job(k, 2, 500, 4) for k in range(3, 6)]
    jobs += [job(9, 3, 5, 1)]  # short, would backfill, but sits 5th in the queue
    c = Cluster.homogeneous(1, 5)  # 1 GPU idle while J1 runs
    deep = simulate(jobs, c, "backfill")
    assert deep.job("9")["start_s"] == 3.0
    shallow = simulate(jobs, c, "backfill", backfill_depth=2)
    assert shallow.job("9")["start_s"] > 3.0


@pytest.mark.parametrize("policy", ["backfill", "fair-share", "priority"])
@pytest.mark.parametrize("quota_mode", ["none", "kueue"])
def test_vectorised_backfill_scan_gives_the_same_schedule(policy, quota_mode):
    # The engine scans backfill candidates with numpy on one-pool clusters; the plain
    # one-job-at-a-time path must make exactly the same decisions.
    from gpuplan.scheduling import TeamQuota

    classes = ("low", "normal", "high")
    jobs = [
        job(j.job_id, j.submit_s, j.duration_s, j.num_gpus, team=j.team, cls=classes[k % 3])
        for k, j in enumerate(random_jobs(11, 1500, 8))
    ]
    quotas = None
    if quota_mode == "kueue":
        quotas = {t: TeamQuota(8, borrowing_limit_gpus=8, cohort="all") for t in "abc"}
    starts = []
    for vector in (True, False):
        opts = SimOptions(
            policy=policy,
            backfill=True,
            weight_qos=500.0,
            quota_mode=quota_mode,
            quotas=quotas,
        )
        eng = Engine(jobs, Cluster.homogeneous(3, 8), opts)
        eng.vector_ok = vector
        starts.append(eng.run().first_start)
    assert starts[0] == starts[1]


@pytest.mark.parametrize("policy", ALL_POLICIES)
def test_incremental_arrivals_give_the_same_schedule(policy):
    # After arrivals alone the engine only tests the new jobs; a full pass at every
    # arrival must make exactly the same decisions.
    jobs = random_jobs(17, 2000, 8)
    starts = []
    for incremental in (True, False):
        eng = Engine(jobs, Cluster.homogeneous(3, 8), SimOptions(policy=policy))
        if not incremental:
            eng._arrival_pass = lambda t, new, eng=eng: eng._full_pass(t)
        starts.append(eng.run().first_start)
    assert starts[0] == starts[1]


def test_best_fit_keeps_whole_nodes_free():
    # Two 8-GPU nodes: the second 4-GPU job goes next to the first (best fit), so the
    # 8-GPU job still finds a whole node.
    jobs = [job(1, 0, 100, 4), job(2, 1, 100, 4), job(3, 2, 100, 8)]
    res = simulate(jobs, Cluster.homogeneous(2, 8), "fifo")
    assert res.job("3")["wait_s"] == 0.0


def test_fragmentation_blocks_a_job_that_fits_by_count():
    # 5 + 5 GPUs on two 8-GPU nodes leave 3 + 3 free: a 6-GPU job fits by count, not on a
    # node (jobs up to a node's size run on one node), so it waits for a node to drain.
    jobs = [job(1, 0, 100, 5), job(2, 0, 200, 5), job(3, 1, 10, 6)]
    res = simulate(jobs, Cluster.homogeneous(2, 8), "fifo")
    assert res.job("3")["start_s"] == 100.0
    frag = res.fragmentation
    assert frag["head_blocked_by_fragmentation_fraction"] == pytest.approx(99 / 200)
    assert frag["head_blocked_by_fragmentation_gpu_hours"] == pytest.approx(6 * 99 / 3600)
    assert frag["idle_while_waiting_gpu_hours"] == pytest.approx(6 * 99 / 3600)


def test_multi_node_job_takes_whole_nodes_plus_remainder():
    # 12 GPUs on 8-GPU nodes = one whole node + 4 on another. With a 1-GPU job on each
    # of two nodes of three, the whole node exists and the remainder fits next to a job.
    c = Cluster.homogeneous(3, 8)
    jobs = [job(1, 0, 100, 1), job(2, 0, 100, 1), job(3, 1, 10, 12)]
    res = simulate(jobs, c, "fifo")
    assert res.job("3")["start_s"] == 1.0
    # 5-GPU jobs on all three nodes (3 free on each): at 100 one node is whole again and
    # 14 GPUs are free, but the remainder (4) fits on no other node: it waits until 200
    jobs = [job(1, 0, 100, 5), job(2, 0, 200, 5), job(4, 0, 300, 5), job(3, 1, 10, 12)]
    res = simulate(jobs, c, "fifo")
    assert res.job("3")["start_s"] == 200.0


def test_node_types_constrain_placement():
    c = Cluster((NodePool("h100", 8, 1), NodePool("a100", 8, 2)))
    jobs = [
        Job("x", 0, 100, 8, node_type="h100"),
        Job("y", 1, 100, 8, node_type="h100"),  # waits for the only H100 node
        Job("z", 2, 100, 8),  # any type: takes an A100 node at once
    ]
    for policy in ("fifo", "backfill"):
        res = simulate(jobs, c, policy)
        assert res.job("y")["start_s"] == 100.0
        assert res.job("z")["start_s"] == 2.0
    with pytest.raises(InputError, match="node type 'tpu'"):
        simulate([Job("q", 0, 1, 1, node_type="tpu")], c, "fifo")


def test_unschedulable_jobs_error_or_drop():
    jobs = [job(1, 0, 10, 4), job(2, 1, 10, 32)]
    with pytest.raises(InputError, match="job 2 can never start: it needs 32 GPUs"):
        simulate(jobs, Cluster.homogeneous(2, 8), "fifo")
    res = simulate(jobs, Cluster.homogeneous(2, 8), "fifo", on_unschedulable="drop")
    assert res.jobs_simulated == 1 and res.unschedulable["count"] == 1
    assert res.unschedulable["examples"][0]["job_id"] == "2"


def test_bad_options_are_input_errors():
    jobs = [job(1, 0, 10, 1)]
    c = Cluster.homogeneous(1, 8)
    with pytest.raises(InputError, match="unknown policy"):
        simulate(jobs, c, "lottery")
    with pytest.raises(InputError, match="priority class 'urgent'"):
        simulate([job(1, 0, 10, 1, cls="urgent")], c, "priority")
    with pytest.raises(InputError, match="runtime_estimate_factor"):
        simulate(jobs, c, "backfill", runtime_estimate_factor=0.5)
    with pytest.raises(InputError, match="not a whole number of 8-GPU nodes"):
        Cluster.from_gpus(12, 8)
    with pytest.raises(InputError, match="no jobs"):
        simulate([], c)
    with pytest.raises(InputError, match="unknown simulation option"):
        simulate(jobs, c, "fifo", backfil=True)


# --------------------------------------------------------------------------- monotonicity
job_st = st.tuples(
    st.integers(0, 20),  # gap to the previous submit (s)
    st.integers(1, 40),  # duration (s)
    st.sampled_from([1, 1, 2, 3, 4, 5, 8]),  # GPUs
)


@settings(max_examples=150, deadline=None)
@given(
    spec=st.lists(job_st, min_size=1, max_size=12),
    gpn=st.sampled_from([1, 2, 4]),
    extra=st.integers(0, 3),
)
def test_fewer_gpus_never_shortens_mean_wait_under_fifo(spec, gpn, extra):
    t = 0.0
    jobs = []
    for k, (gap, dur, g) in enumerate(spec):
        t += gap
        jobs.append(job(k, t, dur, g))
    nodes = -(-max(j.num_gpus for j in jobs) // gpn) + extra
    small = simulate(jobs, Cluster.homogeneous(nodes, gpn), "fifo")
    big = simulate(jobs, Cluster.homogeneous(nodes + 1, gpn), "fifo")
    assert small.wait_s["mean"] >= big.wait_s["mean"] - 1e-9
    # strict FIFO gives the stronger property: no job starts later on the bigger cluster
    assert all(
        b <= a + 1e-9 for a, b in zip(small.jobs["start_s"], big.jobs["start_s"], strict=True)
    )


def test_more_gpus_can_lengthen_mean_wait_under_backfill():
    # Why the property above is only claimed for FIFO: an EASY-backfill anomaly.
    # 4 GPUs: J2 (4 GPUs) waits for J0 until 24; J3 (2 GPUs, ends 24) backfills at 12.
    # 5 GPUs: J2 starts at once at 12 and holds 4 GPUs until 30, so J3 waits until 30.
    jobs = [job(0, 2, 22, 1), job(2, 12, 18, 4), job(3, 12, 12, 2)]
    four = simulate(jobs, Cluster.homogeneous(4, 1), "backfill")
    five = simulate(jobs, Cluster.homogeneous(5, 1), "backfill")
    assert four.jobs["start_s"] == [2.0, 24.0, 12.0]
    assert five.jobs["start_s"] == [2.0, 12.0, 30.0]
    assert four.wait_s["mean"] == pytest.approx(4.0)
    assert five.wait_s["mean"] == pytest.approx(6.0)


# --------------------------------------------------------------------------- starvation
def _mix(load: float, seed: int) -> list[Job]:
    """One-GPU jobs (log-normal, median 8 h, sigma 1.2, at most 5 days) at ``load`` of 32
    GPUs, plus a planted 24-GPU, 24-hour job submitted on day 2."""
    median_s, sigma = 8 * 3600.0, 1.2
    mean_s = median_s * math.exp(sigma**2 / 2)
    team = TeamSpec(
        name="batch",
        arrival_rate_per_hour=load * 32 / (mean_s / 3600),
        gpu_count_distribution={1: 1.0},
        duration_distribution={
            "kind": "lognormal",
            "median_s": median_s,
            "sigma": sigma,
            "max_s": 5 * 86400,
        },
    )
    jobs = generate_workload([team], horizon_s=6 * 86400, seed=seed)
    planted = Job("planted-big", 2 * 86400, 24 * 3600, 24, team="big")
    return sorted([*jobs, planted], key=lambda j: j.submit_s)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_planted_large_long_job_starves_under_backfill_at_high_load(seed):
    # The big job needs three of the four nodes: under EASY backfill it waits for them to
    # drain while the one-GPU jobs keep flowing around it.
    c = Cluster.homogeneous(4, 8)
    high = simulate(_mix(0.9, seed), c, "backfill")
    big = high.job("planted-big")
    assert big["starved"] and big["wait_s"] > 86400
    assert any(s["kind"] == "job" and s["name"] == "planted-big" for s in high.starved)
    assert any(s["kind"] == "team" and s["name"] == "big" for s in high.starved)
    assert high.per_team["batch"]["wait_s"]["p50"] < big["wait_s"] / 10
    # at low load the same job starts within the day: not flagged
    low = simulate(_mix(0.25, seed), c, "backfill")
    assert not low.job("planted-big")["starved"]
    assert not any(s["name"] == "big" for s in low.starved)
