"""``gpuplan schedule`` end to end, in a subprocess."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

TRACE = (
    "job_id,submit_time,duration_s,num_gpus,vc\n"
    "a,0,3600,8,red\n"
    "b,10,600,4,blue\n"
    "c,20,7200,16,red\n"
    "d,30,60,1,blue\n"
    "e,40,1800,2,green\n"
)

SCENARIO = {
    "teams": [
        {
            "name": "research",
            "share": 2,
            "cohort": "ml",
            "arrival_rate_per_hour": 3,
            "gpu_count_distribution": {1: 0.7, 8: 0.3},
            "duration_distribution": {"kind": "exponential", "mean_s": 3600},
        },
        {
            "name": "prod",
            "share": 1,
            "cohort": "ml",
            "priority_class": "high",
            "arrival_rate_per_hour": 1,
            "gpu_count_distribution": {8: 1.0},
            "duration_distribution": {"kind": "fixed", "value_s": 1800},
        },
    ],
    "scheduling": {
        "cluster": {"gpus_per_node": 8, "nodes": 2},
        "horizon_days": 1,
        "policy": "fair-share",
        "seed": 4,
    },
}


def _trace(tmp_path: Path) -> Path:
    p = tmp_path / "jobs.csv"
    p.write_text(TRACE)
    return p


def test_json_has_the_contract_fields(run_cli, tmp_path):
    r = run_cli(
        "schedule",
        "--trace",
        str(_trace(tmp_path)),
        "--gpus",
        "16",
        "--policy",
        "fifo",
        "--format",
        "json",
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)  # stdout is exactly one JSON document
    assert 0 < data["utilization"] <= 1
    assert set(data["wait_s"]) == {"mean", "p50", "p95", "p99", "max"}
    assert {"mean", "p50", "p95"} <= set(data["jct_s"])
    assert set(data["per_team"]) == {"red", "blue", "green"}
    assert set(data["per_team"]["red"]["wait_s"]) == {"mean", "p50", "p95", "p99", "max"}
    assert isinstance(data["starved"], list)
    # strict FIFO, 16 GPUs: c (16 GPUs) waits for a (ends 3600) and b (ends 610);
    # d and e queue behind c until 3600 + 7200
    waits = {t: v["wait_s"]["max"] for t, v in data["per_team"].items()}
    assert waits["red"] == 3580.0
    assert waits["blue"] == 10800.0 - 30
    assert data["workload"] == {"trace": str(_trace(tmp_path)), "jobs": 5}
    assert "attribution" not in data


def test_table_output_and_help(run_cli, tmp_path):
    r = run_cli("schedule", "--trace", str(_trace(tmp_path)), "--gpus", "16", "--no-progress")
    assert r.returncode == 0, r.stderr
    assert "policy backfill on 16 GPUs" in r.stdout and "wait red" in r.stdout
    h = run_cli("schedule", "--help")
    assert h.returncode == 0 and "Examples:" in h.stdout and "--emit-config" in h.stdout


def test_philly_subset_cites_the_trace(run_cli):
    r = run_cli(
        "schedule",
        "--trace",
        "philly",
        "--limit",
        "2000",
        "--gpus",
        "256",
        "--format",
        "json",
        "--no-progress",
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["jobs_simulated"] == 2000
    assert "Jeon et al." in data["attribution"] and "Pollux" in data["attribution"]


def test_bad_input_is_one_line_exit_2(run_cli, tmp_path):
    bad = tmp_path / "bad.csv"
    bad.write_text("submit,duration,gpus\n0,60,2\n5,-1,1\n")
    cases = [
        (["--trace", str(bad), "--gpus", "8"], "bad.csv:3: column 'duration'"),
        (["--trace", str(_trace(tmp_path)), "--gpus", "12"], "not a whole number of 8-GPU"),
        (["--trace", str(_trace(tmp_path))], "needs a cluster size"),
        (["--gpus", "8"], "exactly one of --trace"),
        (["--trace", str(_trace(tmp_path)), "--gpus", "8"], "can never start: it needs 16"),
        (
            ["--trace", str(_trace(tmp_path)), "--gpus", "16", "--emit-config", "kueue"],
            "needs --out",
        ),
        (["--trace", str(_trace(tmp_path)), "--gpus", "16", "--sizes", "a,b"], "--sizes"),
        (["--scenario", str(tmp_path / "nope.yaml"), "--gpus", "8"], "does not exist"),
    ]
    for args, message in cases:
        r = run_cli("schedule", *args, "--no-progress")
        assert r.returncode == 2, (args, r.stderr)
        assert message in r.stderr, (args, r.stderr)
        assert r.stderr.count("\n") == 1 and "Traceback" not in r.stderr
        assert r.stdout == ""
    bad_yaml = tmp_path / "s.yaml"
    bad_yaml.write_text("teams: [{name: a, qouta_gpus: 1}]\n")
    r = run_cli("schedule", "--scenario", str(bad_yaml), "--gpus", "8")
    assert r.returncode == 2 and "teams.0.qouta_gpus" in r.stderr


def test_scenario_curve_compare_and_configs(run_cli, tmp_path):
    sc = tmp_path / "teams.yaml"
    sc.write_text(yaml.safe_dump(SCENARIO))
    out = tmp_path / "cfg"
    r = run_cli(
        "schedule",
        "--scenario",
        str(sc),
        "--quota",
        "kueue",
        "--preemption",
        "--sizes",
        "16,24,32",
        "--compare",
        "fifo,backfill",
        "--p95-target-s",
        "3600",
        "--emit-config",
        "kueue",
        "--emit-config",
        "slurm",
        "--emit-config",
        "resourcequota",
        "--out",
        str(out),
        "--format",
        "json",
    )
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["policy"] == "fair-share"
    assert data["cluster"]["total_gpus"] == 16
    assert [p["gpus"] for p in data["curve"]["points"]] == [16, 24, 32]
    assert set(data["comparison"]["policies"]) == {"fifo", "backfill"}
    assert data["smallest_cluster"]["target_p95_wait_s"] == 3600
    names = sorted(Path(p).name for p in data["configs"])
    assert names == ["kueue.yaml", "resourcequota.yaml", "sacctmgr.sh", "slurm.conf"]
    docs = [d for d in yaml.safe_load_all((out / "kueue.yaml").read_text()) if d]
    nominal = {
        d["metadata"]["name"]: d["spec"]["resourceGroups"][0]["flavors"][0]["resources"][0][
            "nominalQuota"
        ]
        for d in docs
        if d["kind"] == "ClusterQueue"
    }
    assert nominal == {"research": 11, "prod": 5}  # shares 2:1 of 16 GPUs
    assert data["options"]["quotas"]["research"]["nominal_gpus"] == 11
    # a second run refuses to overwrite, --force overwrites
    again = run_cli(
        "schedule",
        "--scenario",
        str(sc),
        "--emit-config",
        "kueue",
        "--out",
        str(out),
        "--no-progress",
    )
    assert again.returncode == 2 and "already exists" in again.stderr
    forced = run_cli(
        "schedule",
        "--scenario",
        str(sc),
        "--emit-config",
        "kueue",
        "--out",
        str(out),
        "--force",
        "--no-progress",
    )
    assert forced.returncode == 0, forced.stderr


def test_progress_goes_to_stderr_only(run_cli, tmp_path):
    r = run_cli("schedule", "--trace", str(_trace(tmp_path)), "--gpus", "16", "--format", "json")
    assert r.returncode == 0
    json.loads(r.stdout)
    assert "simulating" in r.stderr


def test_scenario_training_jobs_take_the_forecast_handed_in_by_the_cli(run_cli, tmp_path):
    """``gpuplan schedule --scenario`` hands the simulator the training forecast (the
    simulator itself does not import it): the run's job time is the forecast's time to
    train, computed here in-process with the same arguments."""
    from gpuplan.forecast.train import forecast_training

    sc = tmp_path / "train.yaml"
    job = {"model": "llama3.1-8b", "tokens": 1.0e11, "gpus": 64, "gpu": "h100"}
    sc.write_text(
        yaml.safe_dump(
            {
                "teams": [{"name": "llm", "training_jobs": [{**job, "submit_at_s": [0]}]}],
                "scheduling": {
                    "cluster": {"gpus_per_node": 8, "nodes": 8},
                    "horizon_days": 1,
                    "policy": "fifo",
                },
            }
        )
    )
    r = run_cli("schedule", "--scenario", str(sc), "--no-progress", "--format", "json")
    assert r.returncode == 0, r.stderr
    team = json.loads(r.stdout)["per_team"]["llm"]
    expected = forecast_training(model="llama3.1-8b", gpu="h100", num_gpus=64, tokens=1.0e11)
    assert team["jobs"] == 1 and team["wait_s"]["max"] == 0.0
    assert abs(team["jct_s"]["mean"] - expected["time_to_train_s"]) <= 1e-6 * team["jct_s"]["mean"]
