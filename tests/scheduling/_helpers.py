"""Small workloads for the scheduling tests."""

from __future__ import annotations

import random

from gpuplan.scheduling import Job


def job(i: int | str, submit: float, dur: float, gpus: int, team: str = "t", cls: str = "normal"):
    return Job(
        job_id=str(i),
        submit_s=float(submit),
        duration_s=float(dur),
        num_gpus=gpus,
        team=team,
        priority_class=cls,
    )


def random_jobs(seed: int, n: int, gpus_per_node: int, *, teams=("a", "b", "c")) -> list[Job]:
    """Bursty random jobs: sizes from 1 GPU to two nodes, durations 1-3000 s."""
    rng = random.Random(seed)
    t = 0.0
    out = []
    g = gpus_per_node
    for i in range(n):
        t += rng.choice([0.0, 0.0, 1.0, 30.0, 200.0, rng.uniform(0, 600)])
        size = rng.choice([1, 1, 1, 2, 4, g, g, 2 * g, g + max(1, g // 2)])
        out.append(job(i, t, rng.uniform(1, 3000), size, team=rng.choice(teams)))
    return out
