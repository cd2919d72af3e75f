"""Priority classes, preemption cost accounting, Kueue and ResourceQuota quotas."""

from __future__ import annotations

import pytest

from gpuplan.errors import InputError
from gpuplan.scheduling import Cluster, TeamQuota, simulate

from ._helpers import job, random_jobs

ONE_NODE = Cluster.homogeneous(1, 8)


def _low_then_high():
    # a low-class job holds the whole node from 0 to 1000; a high-class one arrives at 250
    return [job("L", 0, 1000, 8, cls="low"), job("H", 250, 100, 8, cls="high")]


def test_priority_classes_order_the_queue():
    jobs = [
        job("run", 0, 100, 8, cls="low"),
        job("n1", 1, 10, 8, cls="normal"),
        job("h1", 2, 10, 8, cls="high"),
        job("l1", 3, 10, 8, cls="low"),
    ]
    pri = simulate(jobs, ONE_NODE, "priority")
    assert [pri.job(j)["start_s"] for j in ("h1", "n1", "l1")] == [100.0, 110.0, 120.0]
    fifo = simulate(jobs, ONE_NODE, "fifo")
    assert [fifo.job(j)["start_s"] for j in ("n1", "h1", "l1")] == [100.0, 110.0, 120.0]


def test_without_preemption_the_high_job_waits():
    res = simulate(_low_then_high(), ONE_NODE, "priority")
    assert res.job("H")["start_s"] == 1000.0
    assert res.preemption["preemptions"] == 0


def test_preemption_with_checkpoints_counts_lost_work_and_restart():
    # L runs 0-250 and saved progress at 100 and 200: it loses 50 s x 8 GPUs. H runs
    # 250-350; L restarts at 350 with 800 s left plus a 20 s restore: it ends at 1170.
    res = simulate(
        _low_then_high(),
        ONE_NODE,
        "priority",
        preemption=True,
        checkpoint_interval_s=100.0,
        restart_cost_s=20.0,
    )
    assert res.job("H")["start_s"] == 250.0 and res.job("H")["wait_s"] == 0.0
    low = res.job("L")
    assert low["preemptions"] == 1
    assert low["end_s"] == pytest.approx(1170.0)
    assert res.preemption["preemptions"] == 1
    assert res.preemption["jobs_preempted"] == 1
    assert res.preemption["lost_work_gpu_hours"] == pytest.approx(8 * 50 / 3600)
    assert res.preemption["restart_gpu_hours"] == pytest.approx(8 * 20 / 3600)
    assert res.preemption["gpu_hours_lost"] == pytest.approx(8 * 70 / 3600)
    # GPU time = the work + what was lost + the restore time
    assert res.gpu_seconds["busy"] == pytest.approx(8 * 1100 + 8 * 50 + 8 * 20)


def test_preemption_without_checkpoints_loses_everything():
    res = simulate(_low_then_high(), ONE_NODE, "priority", preemption=True)
    assert res.job("L")["end_s"] == pytest.approx(350.0 + 1000.0)
    assert res.preemption["gpu_hours_lost"] == pytest.approx(8 * 250 / 3600)
    assert res.preemption["restart_gpu_hours"] == 0.0


def test_preemption_picks_the_lower_class_and_the_cheapest_victims():
    # two nodes: node 1 runs a normal job, node 2 a low job that started later (less work
    # lost). A high 8-GPU job evicts the low one, never the normal one.
    c = Cluster.homogeneous(2, 8)
    jobs = [
        job("N", 0, 1000, 8, cls="normal"),
        job("L", 100, 1000, 8, cls="low"),
        job("H", 200, 50, 8, cls="high"),
    ]
    res = simulate(jobs, c, "priority", preemption=True)
    assert res.job("H")["start_s"] == 200.0
    assert res.job("N")["preemptions"] == 0
    assert res.job("L")["preemptions"] == 1
    # an equal class never preempts
    same = simulate(
        [job("a", 0, 1000, 8), job("b", 1, 10, 8)], ONE_NODE, "priority", preemption=True
    )
    assert same.job("b")["start_s"] == 1000.0


def test_preemption_of_multi_node_victims_and_for_multi_node_jobs():
    c = Cluster.homogeneous(3, 4)
    jobs = [
        job("L-wide", 0, 1000, 8, cls="low"),  # two whole nodes
        job("N", 0, 1000, 4, cls="normal"),  # third node
        job("H", 10, 100, 8, cls="high"),  # needs two whole nodes: only L-wide's
    ]
    res = simulate(jobs, c, "priority", preemption=True)
    assert res.job("H")["start_s"] == 10.0
    assert res.job("L-wide")["preemptions"] == 1
    assert res.job("N")["preemptions"] == 0
    assert res.job("L-wide")["start_s"] == 0.0  # first start kept for the wait


def test_preemption_conserves_work_with_random_mixes():
    jobs = random_jobs(5, 200, 8)
    classes = ["low", "normal", "high"]
    jobs = [
        job(j.job_id, j.submit_s, j.duration_s, j.num_gpus, cls=classes[k % 3])
        for k, j in enumerate(jobs)
    ]
    res = simulate(
        jobs,
        Cluster.homogeneous(3, 8),
        "priority",
        preemption=True,
        checkpoint_interval_s=300.0,
        restart_cost_s=30.0,
    )
    assert res.preemption["preemptions"] > 0
    work = sum(j.num_gpus * j.duration_s for j in jobs)
    lost = res.preemption["lost_work_gpu_hours"] * 3600
    restart = res.preemption["restart_gpu_hours"] * 3600
    assert res.gpu_seconds["busy"] == pytest.approx(work + lost + restart, rel=1e-9)
    assert res.preemption["gpu_hours_lost"] * 3600 == pytest.approx(lost + restart)
    # a restore is paid after each preemption, unless the job is preempted again during it
    paid_max = 30.0 * sum(
        n * p for n, p in zip(res.jobs["num_gpus"], res.jobs["preemptions"], strict=True)
    )
    assert 0 < restart <= paid_max + 1e-6


# --------------------------------------------------------------------------- quotas
def test_resourcequota_is_a_hard_limit_that_does_not_block_other_teams():
    jobs = [
        job("a1", 0, 100, 4, team="a"),
        job("a2", 1, 100, 4, team="a"),  # over a's 4-GPU quota: waits though GPUs are free
        job("b1", 2, 100, 4, team="b"),  # not held up by a2
    ]
    quotas = {"a": TeamQuota(4), "b": TeamQuota(4)}
    res = simulate(
        jobs, Cluster.homogeneous(2, 8), "fifo", quota_mode="resourcequota", quotas=quotas
    )
    assert res.job("a2")["start_s"] == 100.0
    assert res.job("b1")["start_s"] == 2.0
    free = simulate(jobs, Cluster.homogeneous(2, 8), "fifo")
    assert free.job("a2")["start_s"] == 1.0


def _borrow_jobs():
    return [job(f"a{k}", k, 1000, 2, team="a") for k in range(4)]


def test_kueue_borrowing_within_a_cohort_and_its_limit():
    c = Cluster.homogeneous(1, 8)
    lend = {"a": TeamQuota(4, cohort="ml"), "b": TeamQuota(4, cohort="ml")}
    res = simulate(_borrow_jobs(), c, "fifo", quota_mode="kueue", quotas=lend)
    assert all(res.job(f"a{k}")["wait_s"] == 0 for k in range(4))  # b's idle quota used
    capped = {
        "a": TeamQuota(4, borrowing_limit_gpus=2, cohort="ml"),
        "b": TeamQuota(4, cohort="ml"),
    }
    res = simulate(_borrow_jobs(), c, "fifo", quota_mode="kueue", quotas=capped)
    assert [res.job(f"a{k}")["start_s"] for k in range(4)] == [0.0, 1.0, 2.0, 1000.0]
    lending = {"a": TeamQuota(4, cohort="ml"), "b": TeamQuota(4, lending_limit_gpus=2, cohort="ml")}
    res = simulate(_borrow_jobs(), c, "fifo", quota_mode="kueue", quotas=lending)
    assert res.job("a3")["start_s"] == 1000.0
    alone = {"a": TeamQuota(4), "b": TeamQuota(4)}  # no cohort: no borrowing
    res = simulate(_borrow_jobs(), c, "fifo", quota_mode="kueue", quotas=alone)
    assert [res.job(f"a{k}")["start_s"] for k in range(4)] == [0.0, 1.0, 1000.0, 1001.0]


def test_kueue_reclaims_lent_quota_with_preemption():
    c = Cluster.homogeneous(1, 8)
    quotas = {"a": TeamQuota(4, cohort="ml"), "b": TeamQuota(4, cohort="ml")}
    jobs = [*_borrow_jobs(), job("b1", 50, 100, 4, team="b")]
    no = simulate(jobs, c, "fifo", quota_mode="kueue", quotas=quotas)
    # a borrowed b's quota and keeps it until two of its jobs end (1000, 1001)
    assert no.job("b1")["start_s"] == 1001.0
    yes = simulate(jobs, c, "fifo", quota_mode="kueue", quotas=quotas, preemption=True)
    assert yes.job("b1")["start_s"] == 50.0  # reclaimed
    evicted = [f"a{k}" for k in range(4) if yes.job(f"a{k}")["preemptions"]]
    assert len(evicted) == 2  # exactly the 4 borrowed GPUs
    # within its nominal quota a team is never evicted
    assert yes.job("a0")["preemptions"] == 0 and yes.job("a1")["preemptions"] == 0


def test_quota_unschedulable_and_bad_values():
    quotas = {"a": TeamQuota(2)}
    with pytest.raises(InputError, match="team 'a' may use at most 2"):
        simulate(
            [job(1, 0, 10, 4, team="a")],
            ONE_NODE,
            "fifo",
            quota_mode="resourcequota",
            quotas=quotas,
        )
    with pytest.raises(InputError, match="unknown quota mode"):
        simulate([job(1, 0, 10, 1)], ONE_NODE, "fifo", quota_mode="slurm")


@pytest.mark.parametrize("quota_mode", ["kueue", "resourcequota"])
@pytest.mark.parametrize("policy", ["fifo", "backfill", "fair-share", "priority", "drf"])
def test_skipping_teams_without_quota_changes_no_decision(quota_mode, policy):
    # The engine sets aside the queue of a team that has no quota left, and passes over a
    # team's jobs at least as big as one that just failed its quota, instead of skipping
    # them one by one; with those shortcuts off the schedule is the same.
    from gpuplan.scheduling.engine import Engine, SimOptions

    classes = ("low", "normal", "high")
    jobs = [
        job(j.job_id, j.submit_s, j.duration_s, j.num_gpus, team=j.team, cls=classes[k % 3])
        for k, j in enumerate(random_jobs(13, 800, 8))
    ]
    quotas = {
        "a": TeamQuota(8, cohort="x", borrowing_limit_gpus=8),
        "b": TeamQuota(8, cohort="x"),
        "c": TeamQuota(16),
    }
    starts = []
    for shortcut in (True, False):
        opts = SimOptions(
            policy=policy,
            quota_mode=quota_mode,
            quotas=quotas,
            preemption=True,
            checkpoint_interval_s=100.0,
            on_unschedulable="drop",
        )
        eng = Engine(jobs, Cluster.homogeneous(3, 8), opts)
        eng.quota_shortcuts = shortcut
        run = eng.run()
        starts.append((run.first_start, run.end, run.preemptions))
        assert (run.counters["quota_shortcuts"] > 0) == shortcut
    assert starts[0] == starts[1]
    assert sum(starts[0][2]) > 0  # preemptions happened: the re-entry paths were used
