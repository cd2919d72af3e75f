"""Trace loading (liberal names, strict values), the shipped Philly trace, generation."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np
import pytest

from gpuplan.errors import EnvironmentProblem, InputError, NotFoundError, SchemaError
from gpuplan.scheduling import (
    PHILLY_CITATION,
    generate_workload,
    load_philly,
    load_trace,
    parse_scenario,
)
from gpuplan.scheduling.schema import TeamSpec, derived_quotas
from gpuplan.scheduling.workload import philly_path


def _write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_liberal_column_names_and_both_time_formats(tmp_path):
    p = _write(
        tmp_path,
        "Job ID,Submit Time,Run-Time,GPUs,Queue,QoS\n"
        "x,2024-01-01T00:00:10,60,2,alpha,high\n"
        "y,2024-01-01T00:00:00,30,1,beta,\n",
    )
    jobs = load_trace(p)
    assert [j.job_id for j in jobs] == ["y", "x"]  # sorted by submit time
    assert [j.submit_s for j in jobs] == [0.0, 10.0]
    assert jobs[1].num_gpus == 2 and jobs[1].team == "alpha"
    assert jobs[1].priority_class == "high" and jobs[0].priority_class == "normal"
    q = _write(tmp_path, "submit,duration_s,num_gpus\n100,5,1\n250.5,7.5,4\n", "s.csv")
    jobs = load_trace(q)
    assert [(j.submit_s, j.duration_s, j.team) for j in jobs] == [
        (0.0, 5.0, "default"),
        (150.5, 7.5, "default"),
    ]
    assert jobs[0].job_id == "j000001"


def test_naive_date_times_are_utc(tmp_path):
    # 2024-03-31 in Europe has a DST jump; UTC reading keeps the hour between the two
    p = _write(
        tmp_path, "submit_time,duration,gpus\n2024-03-31 00:30:00,1,1\n2024-03-31 03:30:00,1,1\n"
    )
    assert load_trace(p)[1].submit_s == 3 * 3600.0


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ("a,0,-5,1", r"t.csv:2: column 'duration': duration must be a positive number"),
        ("a,0,5,1.5", r"t.csv:2: column 'gpus': GPUs must be a whole number >= 1"),
        ("a,0,5,0", r"t.csv:2: column 'gpus': GPUs must be a whole number >= 1"),
        ("a,0,five,1", r"t.csv:2: column 'duration': not a number of seconds"),
        ("a,yesterday,5,1", r"t.csv:2: column 'submit': not a number of seconds or an ISO"),
        ("a,0,nan,1", r"column 'duration': duration must be a positive"),
        ("a,0,5", r"t.csv:2: 3 fields where the header has 4"),
    ],
)
def test_bad_values_name_row_and_column(tmp_path, row, match):
    p = _write(tmp_path, f"id,submit,duration,gpus\n{row}\n")
    with pytest.raises(InputError, match=match) as exc:
        load_trace(p)
    assert "\n" not in exc.value.one_line()


def test_structural_errors(tmp_path):
    with pytest.raises(InputError, match="no column for duration, gpus"):
        load_trace(_write(tmp_path, "submit,team\n1,a\n"))
    with pytest.raises(InputError, match="duplicate job id"):
        load_trace(_write(tmp_path, "id,submit,duration,gpus\na,0,1,1\na,1,1,1\n"))
    with pytest.raises(InputError, match="mixes date-times and numbers"):
        load_trace(_write(tmp_path, "submit,duration,gpus\n0,1,1\n2024-01-01,1,1\n"))
    with pytest.raises(InputError, match="empty"):
        load_trace(_write(tmp_path, ""))
    with pytest.raises(InputError, match="no jobs"):
        load_trace(_write(tmp_path, "submit,duration,gpus\n"))
    with pytest.raises(NotFoundError, match="does not exist"):
        load_trace(tmp_path / "missing.csv")


def test_gzipped_trace_and_limit(tmp_path):
    p = tmp_path / "t.csv.gz"
    with gzip.open(p, "wt") as fh:
        fh.write("submit,duration,gpus\n" + "".join(f"{k},10,1\n" for k in range(50)))
    assert len(load_trace(p)) == 50
    assert len(load_trace(p, limit=7)) == 7


def test_shipped_philly_trace_matches_its_notes():
    # Facts stated in the data's NOTES.md (independent of this loader).
    jobs = load_philly()
    assert len(jobs) == 82247
    gpus = np.asarray([j.num_gpus for j in jobs])
    dur = np.asarray([j.duration_s for j in jobs])
    assert np.mean(gpus == 1) == pytest.approx(0.93, abs=0.005)  # "93% of jobs use one GPU"
    big = gpus >= 5
    assert np.mean(big) == pytest.approx(0.023, abs=0.0005)  # "5+ GPUs are 2.3% of jobs"
    share = np.sum(gpus[big] * dur[big]) / np.sum(gpus * dur)
    assert share == pytest.approx(0.62, abs=0.01)  # "about 62% of GPU-hours"
    assert np.median(dur) == 1144  # "median duration 1,144 s"
    assert len({j.team for j in jobs}) == 15
    assert jobs[0].submit_s == 0.0 and jobs[0].job_id == "p00000"


def test_philly_ships_with_its_attribution():
    notice = philly_path().parent / "NOTICE.md"
    text = notice.read_text()
    for needle in (
        "CC BY 4.0",
        "Myeongjae Jeon",
        "Multi-Tenant GPU Clusters",
        "USENIX ATC 2019",
        "Pollux",
        "OSDI 2021",
    ):
        assert needle in text
    assert "Jeon et al." in PHILLY_CITATION and "Pollux" in PHILLY_CITATION


# --------------------------------------------------------------------------- generation
def _team(**kw) -> TeamSpec:
    base = {
        "name": "a",
        "arrival_rate_per_hour": 10.0,
        "duration_distribution": {"kind": "lognormal", "median_s": 600, "sigma": 0.5},
    }
    return TeamSpec(**{**base, **kw})


def test_generation_is_seeded_and_per_team_independent():
    a = _team()
    b = _team(name="b", arrival_rate_per_hour=3.0)
    one = generate_workload([a], horizon_s=86400, seed=3)
    two = generate_workload([a, b], horizon_s=86400, seed=3)
    assert one == generate_workload([a], horizon_s=86400, seed=3)
    assert [j for j in two if j.team == "a"] == one  # adding b leaves a's jobs alone
    assert one != generate_workload([a], horizon_s=86400, seed=4)


def test_generated_rates_sizes_and_durations_follow_the_spec():
    horizon = 30 * 86400.0
    team = _team(
        gpu_count_distribution={1: 0.6, 8: 0.4},
        duration_distribution={"kind": "lognormal", "median_s": 3600, "sigma": 1.0},
    )
    jobs = generate_workload([team], horizon_s=horizon, seed=1)
    expected = 10.0 * horizon / 3600
    assert abs(len(jobs) - expected) < 4 * math.sqrt(expected)  # Poisson: 4 sigma
    frac8 = np.mean([j.num_gpus == 8 for j in jobs])
    assert abs(frac8 - 0.4) < 4 * math.sqrt(0.24 / len(jobs))
    med = np.median([j.duration_s for j in jobs])
    assert med == pytest.approx(3600, rel=0.08)
    assert all(0 <= j.submit_s < horizon for j in jobs)


def test_time_of_day_pattern_shapes_arrivals():
    team = _team(time_of_day_pattern="office-hours", arrival_rate_per_hour=20.0)
    jobs = generate_workload([team], horizon_s=20 * 86400, seed=2)
    hours = np.asarray([int(j.submit_s // 3600) % 24 for j in jobs])
    pattern = np.asarray(team.hourly_pattern())
    busy = (hours >= 9) & (hours < 18)
    want = pattern[9:18].sum() / pattern.sum()
    assert abs(busy.mean() - want) < 4 * math.sqrt(want * (1 - want) / len(jobs))
    night = _team(time_of_day_pattern=[0.0] * 12 + [1.0] * 12)
    assert all(
        int(j.submit_s // 3600) % 24 >= 12
        for j in generate_workload([night], horizon_s=5 * 86400, seed=0)
    )


def test_training_jobs_take_their_duration_from_the_forecast():
    # The caller hands the training forecast in (the scheduler does not import it); a fake
    # with the documented signature tests this path on its own.
    calls = []

    def fake_forecast_training(*, model, gpu, num_gpus, tokens, **kw):
        calls.append((model, gpu, num_gpus, tokens))
        return {"time_to_train_s": tokens / (num_gpus * 1e6)}

    team = TeamSpec(
        name="llm",
        training_jobs=[
            {
                "model": "llama3.1-8b",
                "tokens": 6.4e12,
                "gpus": 64,
                "count": 3,
                "submit_at_s": [0, 10, 20],
            }
        ],
    )
    jobs = generate_workload([team], horizon_s=86400, seed=0, forecast=fake_forecast_training)
    assert [j.duration_s for j in jobs] == [1e5, 1e5, 1e5]
    assert [j.submit_s for j in jobs] == [0.0, 10.0, 20.0]
    assert all(j.kind == "training" and j.num_gpus == 64 for j in jobs)
    assert calls == [("llama3.1-8b", "h100", 64, 6.4e12)]  # one forecast per distinct run

    def broken(**kw):
        return {"step_time_s": 1.0}

    with pytest.raises(InputError, match="no time_to_train_s"):
        generate_workload([team], horizon_s=86400, seed=0, forecast=broken)


def test_training_jobs_without_a_forecast_say_so():
    team = TeamSpec(name="llm", training_jobs=[{"model": "m", "tokens": 1e9, "gpus": 8}])
    with pytest.raises(EnvironmentProblem, match="need the training forecast"):
        generate_workload([team], horizon_s=86400, seed=0)
    # teams without training runs need no forecast
    plain = TeamSpec(
        name="web",
        arrival_rate_per_hour=2.0,
        duration_distribution={"kind": "lognormal", "median_s": 3600, "sigma": 1.0},
    )
    assert generate_workload([plain], horizon_s=86400, seed=0)


def test_training_jobs_with_the_real_forecast():
    from gpuplan.forecast import train

    team = TeamSpec(
        name="llm",
        training_jobs=[{"model": "llama3.1-8b", "tokens": 1.0e11, "gpus": 64, "gpu": "h100"}],
    )
    (job,) = generate_workload([team], horizon_s=86400, seed=0, forecast=train.forecast_training)
    direct = train.forecast_training(model="llama3.1-8b", gpu="h100", num_gpus=64, tokens=1.0e11)
    assert job.duration_s == pytest.approx(direct["time_to_train_s"])
    # 1e11 tokens x 6 x 8e9 params at a few hundred TFLOP/s per GPU: hours, not weeks
    assert 3600 < job.duration_s < 7 * 86400


# --------------------------------------------------------------------------- schema
def test_scenario_schema_errors_are_one_line():
    with pytest.raises(SchemaError, match=r"teams\.0\.qouta_gpus: Extra inputs"):
        parse_scenario({"teams": [{"name": "a", "qouta_gpus": 3}]})
    with pytest.raises(SchemaError, match="no duration_distribution"):
        parse_scenario({"teams": [{"name": "a", "arrival_rate_per_hour": 1}]})
    with pytest.raises(SchemaError, match="unique; repeated: a"):
        parse_scenario({"teams": [{"name": "a"}, {"name": "a"}]})
    with pytest.raises(SchemaError, match="priority class 'urgent'"):
        parse_scenario({"teams": [{"name": "a", "priority_class": "urgent"}]})
    with pytest.raises(SchemaError, match="no 'teams' list"):
        parse_scenario({"name": "x"})
    with pytest.raises(SchemaError, match="24 non-negative values"):
        parse_scenario({"teams": [{"name": "a", "time_of_day_pattern": [1, 2]}]})
    with pytest.raises(SchemaError, match="node type 'tpu'"):
        parse_scenario(
            {
                "teams": [{"name": "a", "node_type": "tpu"}],
                "scheduling": {
                    "cluster": {"node_types": [{"name": "h100", "gpus_per_node": 8, "nodes": 2}]}
                },
            }
        )
    ok = parse_scenario({"teams": [{"name": "a"}], "workloads": {"ignored": True}})
    assert ok.scheduling.policy == "backfill"


def test_derived_quotas_sum_to_the_cluster():
    teams = [
        TeamSpec(name="a", share=1),
        TeamSpec(name="b", share=1),
        TeamSpec(name="c", share=1),
        TeamSpec(name="d", quota_gpus=10),
    ]
    q = derived_quotas(teams, 64)
    assert q["d"] == 10 and sum(q.values()) == 64
    assert sorted(q[t] for t in "abc") == [18, 18, 18]
