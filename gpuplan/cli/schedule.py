"""``gpuplan schedule``: simulate a shared GPU cluster under a scheduling policy."""

from __future__ import annotations

import enum
from pathlib import Path
from typing import Any

import typer

from gpuplan import limits
from gpuplan.cli._common import (
    FORMAT_OPTION,
    Format,
    emit,
    fmt_duration,
    make_app,
    number_option,
    progress,
)

HELP = """Simulate a shared GPU cluster: queueing delay, completion time, utilisation, starvation.

Replays a job trace (CSV) or the per-team job mix of a scenario file on a cluster of
GPU nodes under FIFO, EASY backfill, Slurm fair-share, priority classes (with preemption)
or DRF, optionally with Kueue or ResourceQuota quotas. Can also draw the wait-vs-size
curve, find the smallest cluster meeting a p95 wait target, compare policies, and write
the Kueue / ResourceQuota / Slurm configuration that expresses the simulated quotas.

\b
Examples:
  gpuplan schedule --trace philly --gpus 512 --policy backfill
  gpuplan schedule --trace jobs.csv --gpus 64 --gpus-per-node 8 --policy fair-share --format json
  gpuplan schedule --scenario examples/mixed-teams.yaml --gpus 128 --policy priority --preemption
  gpuplan schedule --trace philly --gpus 512 --sizes 384,512,768,1024 --format json
  gpuplan schedule --scenario teams.yaml --gpus 64 --quota kueue --emit-config kueue --out cfg/
  gpuplan schedule --trace philly --gpus 512 --compare fifo,backfill,fair-share,drf
"""

app = make_app(HELP, single=True)


class Policy(str, enum.Enum):
    fifo = "fifo"
    backfill = "backfill"
    fair_share = "fair-share"
    priority = "priority"
    drf = "drf"


class FairShareAlgo(str, enum.Enum):
    classic = "classic"
    fair_tree = "fair-tree"


class QuotaMode(str, enum.Enum):
    none = "none"
    kueue = "kueue"
    resourcequota = "resourcequota"


class ConfigKind(str, enum.Enum):
    kueue = "kueue"
    slurm = "slurm"
    resourcequota = "resourcequota"


def _int_list(text: str, what: str) -> list[int]:
    from gpuplan.errors import InputError

    try:
        vals = [int(x) for x in text.replace(" ", "").split(",") if x]
    except ValueError:
        raise InputError(
            f"{what} must be comma-separated whole numbers (got {text!r})",
            hint=f"e.g. {what} 256,384,512",
        ) from None
    if not vals or any(v <= 0 for v in vals):
        raise InputError(f"{what} needs positive numbers (got {text!r})", hint="e.g. 256,512")
    if max(vals) > limits.MAX_GPUS:
        raise InputError(
            f"{what}: {max(vals):,} GPUs is more than the {limits.MAX_GPUS:,} gpuplan simulates",
            hint="a bound on the simulation's cost (gpuplan/limits.py)",
        )
    return vals


def _load_scenario(path: Path) -> Any:
    import yaml

    from gpuplan.errors import SchemaError
    from gpuplan.scheduling.schema import parse_scenario
    from gpuplan.userfiles import read_text

    text = read_text(path, what="scenario file", hint="check the path")
    try:
        data = yaml.safe_load(text)
    except RecursionError:
        raise SchemaError(f"{path}: nested too deeply to be a scenario") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise SchemaError(
            f"{where}: not valid YAML ({getattr(exc, 'problem', None) or exc})",
            hint="fix the YAML syntax",
        ) from None
    return parse_scenario(data, where=str(path))


@app.command(help=HELP)
def schedule(
    trace: str | None = typer.Option(
        None, "--trace", help="Job trace CSV, or 'philly' for the shipped Philly trace."
    ),
    scenario: Path | None = typer.Option(
        None, "--scenario", help="Scenario YAML with a teams: list (and scheduling: block)."
    ),
    gpus: int | None = number_option(
        None, "--gpus", help="Cluster size in GPUs.", maximum=limits.MAX_GPUS
    ),
    gpus_per_node: int | None = number_option(
        None, "--gpus-per-node", help="GPUs per node [default: 8, or the scenario's]."
    ),
    policy: Policy | None = typer.Option(
        None, "--policy", help="Scheduling policy [default: backfill, or the scenario's]."
    ),
    fairshare: FairShareAlgo | None = typer.Option(
        None, "--fairshare", help="Fair-share algorithm for --policy fair-share."
    ),
    preemption: bool | None = typer.Option(
        None,
        "--preemption/--no-preemption",
        help="Let higher priority classes (and Kueue quota reclaim) evict running jobs.",
    ),
    backfill: bool | None = typer.Option(
        None, "--backfill/--no-backfill", help="EASY backfill on/off (default: by policy)."
    ),
    quota: QuotaMode | None = typer.Option(
        None, "--quota", help="Per-team quotas: Kueue nominal+borrowing, or hard ResourceQuota."
    ),
    checkpoint_interval_s: float | None = number_option(
        None, "--checkpoint-interval-s", help="Preempted jobs keep work saved this often."
    ),
    restart_cost_s: float | None = number_option(
        None, "--restart-cost-s", help="Restore time after a preemption (s).", bound="non_negative"
    ),
    limit: int | None = number_option(None, "--limit", help="Use only the first N trace jobs."),
    sizes: str | None = typer.Option(
        None, "--sizes", help="Wait-vs-size curve at these GPU counts ('auto' for defaults)."
    ),
    p95_target_s: float | None = number_option(
        None, "--p95-target-s", help="Find the smallest cluster meeting this p95 wait."
    ),
    compare: str | None = typer.Option(
        None, "--compare", help="Also run these policies (comma-separated) and compare."
    ),
    emit_config: list[ConfigKind] = typer.Option(
        [], "--emit-config", help="Write scheduler configuration (repeatable)."
    ),
    out: Path | None = typer.Option(None, "--out", help="Directory for --emit-config files."),
    force: bool = typer.Option(False, "--force", help="Overwrite existing config files."),
    drop_unschedulable: bool = typer.Option(
        False, "--drop-unschedulable", help="Leave out jobs that can never fit (counted)."
    ),
    starvation_wait_s: float | None = number_option(
        None, "--starvation-wait-s", help="A wait longer than this is starvation [1 day]."
    ),
    starvation_multiple: float | None = number_option(
        None, "--starvation-multiple", help="... or longer than this x the run time [10]."
    ),
    seed: int | None = number_option(
        None, "--seed", help="Seed of the scenario's job draw.", bound="non_negative"
    ),
    horizon_days: float | None = number_option(
        None, "--horizon-days", help="Length of the scenario's job draw (days)."
    ),
    include_jobs: bool = typer.Option(
        False, "--include-jobs", help="Add the per-job table to the JSON."
    ),
    no_progress: bool = typer.Option(False, "--no-progress", help="No progress bar on stderr."),
    fmt: Format = FORMAT_OPTION,
) -> None:
    """Simulate a shared GPU cluster (see the group help for examples)."""
    from gpuplan.errors import InputError
    from gpuplan.scheduling import capacity
    from gpuplan.scheduling.cluster import Cluster
    from gpuplan.scheduling.configs import quota_plan, render_config, write_config
    from gpuplan.scheduling.scenario import scenario_inputs, team_quotas
    from gpuplan.scheduling.schema import TeamSpec
    from gpuplan.scheduling.simulate import simulate
    from gpuplan.scheduling.workload import PHILLY_CITATION, load_philly, load_trace

    if (trace is None) == (scenario is None):
        raise InputError(
            "give exactly one of --trace FILE and --scenario FILE",
            hint="e.g. --trace philly or --scenario examples/mixed-teams.yaml",
        )
    if emit_config and out is None:
        raise InputError("--emit-config needs --out DIR", hint="e.g. --out cfg/")
    size_list = None  # --sizes auto: the default sizes
    if sizes is not None and sizes.strip().lower() != "auto":
        size_list = _int_list(sizes, "--sizes")  # before the simulation, not after it
    if emit_config:
        from gpuplan.userfiles import check_output_dir

        assert out is not None
        check_output_dir(out, what="--out")  # before the simulation, not after it

    attribution = None
    options: dict[str, Any] = {}
    team_specs: list[Any]
    sc = None
    if scenario is not None:
        sc = _load_scenario(scenario)
        spec = sc.scheduling
        updates: dict[str, Any] = {}
        if seed is not None:
            updates["seed"] = seed
        if horizon_days is not None:
            updates["horizon_days"] = horizon_days
        if updates:
            sc = sc.model_copy(update={"scheduling": spec.model_copy(update=updates)})
            spec = sc.scheduling
        cluster = None
        if gpus is not None:
            g = gpus_per_node or (
                spec.cluster.gpus_per_node if spec.cluster and spec.cluster.gpus_per_node else 8
            )
            cluster = Cluster.from_gpus(gpus, g)
        from gpuplan.forecast.train import forecast_training  # training_jobs' durations

        jobs, cluster, options = scenario_inputs(sc, cluster, forecast=forecast_training)
        team_specs = list(sc.teams)
        base_policy = spec.policy
        source = {"scenario": str(scenario), "jobs": len(jobs)}
    else:
        assert trace is not None
        if trace.lower() == "philly":
            jobs = load_philly(limit=limit)
            attribution = PHILLY_CITATION
            source = {"trace": "philly (shipped, CC BY 4.0)", "jobs": len(jobs)}
        else:
            jobs = load_trace(trace, limit=limit)
            source = {"trace": trace, "jobs": len(jobs)}
        if gpus is None:
            raise InputError(
                "a trace needs a cluster size", hint="add --gpus N (and --gpus-per-node G)"
            )
        cluster = Cluster.from_gpus(gpus, gpus_per_node or 8)
        team_specs = [TeamSpec(name=t) for t in dict.fromkeys(j.team for j in jobs)]
        base_policy = "backfill"
        classes = sorted({j.priority_class for j in jobs})
        from gpuplan.scheduling.schema import DEFAULT_PRIORITY_CLASSES

        if not set(classes) <= set(DEFAULT_PRIORITY_CLASSES):
            raise InputError(
                f"trace priority classes {', '.join(classes)} are not all among "
                f"{', '.join(DEFAULT_PRIORITY_CLASSES)}",
                hint="use high/normal/low in the trace, or a scenario with priority_classes",
            )
    pol = policy.value if policy is not None else base_policy
    if fairshare is not None:
        options["fairshare_algorithm"] = fairshare.value
    if preemption is not None:
        options["preemption"] = preemption
    if backfill is not None:
        options["backfill"] = backfill
    if quota is not None:
        options["quota_mode"] = quota.value
    if options.get("quota_mode", "none") != "none" and "quotas" not in options:
        options["quotas"] = team_quotas(team_specs, cluster.total_gpus)
    if options.get("quota_mode", "none") == "none":
        options.pop("quotas", None)
    if checkpoint_interval_s is not None:
        options["checkpoint_interval_s"] = checkpoint_interval_s
    if restart_cost_s is not None:
        options["restart_cost_s"] = restart_cost_s
    if starvation_wait_s is not None:
        options["starvation_wait_s"] = starvation_wait_s
    if starvation_multiple is not None:
        options["starvation_runtime_multiple"] = starvation_multiple
    if drop_unschedulable:
        options["on_unschedulable"] = "drop"

    show = not no_progress
    with progress(show) as bar:
        task = bar.add_task(f"simulating {pol} ({len(jobs)} jobs)", total=len(jobs))
        result = simulate(
            jobs,
            cluster,
            pol,
            attribution=attribution,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
            **options,
        )
        data: dict[str, Any] = result.to_json(include_jobs=include_jobs)
        data["workload"] = source
        extra_opts = {k: v for k, v in options.items() if k != "on_unschedulable"}
        if sizes is not None:
            t2 = bar.add_task("wait-vs-size curve", total=len(size_list or [0]) or 1)
            data["curve"] = capacity.wait_vs_size_curve(
                jobs,
                cluster,
                size_list,
                pol,
                attribution=attribution,
                progress=lambda d, n: bar.update(t2, completed=d, total=n),
                teams=team_specs,
                **extra_opts,
            )
        if p95_target_s is not None:
            t3 = bar.add_task("smallest cluster (bisection)", total=None)
            data["smallest_cluster"] = capacity.smallest_cluster(
                jobs,
                cluster,
                p95_target_s,
                pol,
                progress=lambda d, n: bar.update(t3, completed=d),
                teams=team_specs,
                **{**extra_opts, "on_unschedulable": "drop"},
            )
        if compare:
            names = [p.strip() for p in compare.split(",") if p.strip()]
            t4 = bar.add_task("policy comparison", total=len(names))
            data["comparison"] = capacity.compare_policies(
                jobs,
                cluster,
                names,
                progress=lambda d, n: bar.update(t4, completed=d, total=n),
                **options,
            )
    if emit_config:
        assert out is not None
        rows = quota_plan(team_specs, cluster)
        written: list[str] = []
        for kind in dict.fromkeys(emit_config):
            files = render_config(
                kind.value,
                rows,
                cluster,
                policy=pol,
                preemption=bool(options.get("preemption", False)),
                quota_mode=options.get("quota_mode", "none")
                if options.get("quota_mode", "none") != "none"
                else ("resourcequota" if kind.value == "resourcequota" else "kueue"),
                fairshare_algorithm=options.get("fairshare_algorithm", "classic"),
                priority_classes=options.get("priority_classes"),
                options=options,
            )
            written += [str(p) for p in write_config(files, out, force=force)]
        data["configs"] = written

    emit(data, fmt, lambda console: _table(console, data))


def _stat_row(label: str, s: dict[str, Any]) -> list[str]:
    return [label] + [fmt_duration(s.get(k)) for k in ("mean", "p50", "p95", "p99", "max")]


def _table(console: Any, data: dict[str, Any]) -> None:
    from gpuplan.cli._common import simple_table

    cl = data["cluster"]
    console.print(
        f"policy {data['policy']} on {cl['total_gpus']} GPUs ({cl['total_nodes']} nodes): "
        f"{data['jobs_simulated']} jobs, utilisation {data['utilization']:.1%}"
    )
    rows = [_stat_row("wait (all)", data["wait_s"]), _stat_row("JCT (all)", data["jct_s"])]
    for team, t in data["per_team"].items():
        rows.append(_stat_row(f"wait {team}", t["wait_s"]))
    console.print(simple_table("queueing", ["", "mean", "p50", "p95", "p99", "max"], rows))
    starved = [s for s in data["starved"] if s["kind"] != "job"]
    if starved or data["starved_jobs_count"]:
        console.print(
            f"starved: {data['starved_jobs_count']} jobs; "
            + ("; ".join(f"{s['name']} ({s['reason']})" for s in starved) or "no team or class")
        )
    pre = data["preemption"]
    if pre["preemptions"]:
        console.print(
            f"preemptions: {pre['preemptions']} ({pre['gpu_hours_lost']:.1f} GPU-hours lost)"
        )
    curve = data.get("curve")
    if curve:
        console.print(
            simple_table(
                "wait vs cluster size",
                ["GPUs", "utilisation", "mean wait", "p95 wait", "unschedulable"],
                [
                    [
                        p["gpus"],
                        f"{p['utilization']:.1%}",
                        fmt_duration(p["wait_s"]["mean"]),
                        fmt_duration(p["wait_s"]["p95"]),
                        p["unschedulable_jobs"],
                    ]
                    for p in curve["points"]
                ],
            )
        )
    sm = data.get("smallest_cluster")
    if sm:
        overall = sm["overall"]
        console.print(
            f"smallest cluster with p95 wait <= {fmt_duration(sm['target_p95_wait_s'])}: "
            + (f"{overall['gpus']} GPUs" if overall else "not reached")
            + "; per team: "
            + ", ".join(f"{t}: {v['gpus'] if v else '-'}" for t, v in sm["per_team"].items())
        )
    comp = data.get("comparison")
    if comp:
        console.print(
            simple_table(
                "policy comparison",
                ["policy", "utilisation", "mean wait", "p95 wait", "starved jobs"],
                [
                    [
                        name,
                        f"{s['utilization']:.1%}",
                        fmt_duration(s["wait_s"]["mean"]),
                        fmt_duration(s["wait_s"]["p95"]),
                        s["starved_jobs_count"],
                    ]
                    for name, s in comp["policies"].items()
                ],
            )
        )
    for path in data.get("configs", []):
        console.print(f"wrote {path}")
    if data.get("attribution"):
        console.print(f"Data: {data['attribution']}")
