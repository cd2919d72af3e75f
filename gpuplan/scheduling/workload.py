"""Workloads for the shared-cluster simulation: job traces and per-team job mixes.

Two sources give a list of :class:`Job`:

* :func:`load_trace` reads a CSV trace (submit time, duration, GPUs, team, optional
  priority). Column names are matched liberally (``submit_time``/``submit``/``arrival``...,
  see :data:`COLUMN_ALIASES`), values strictly: a bad value stops with one line naming the
  file, row and column. :func:`load_philly` reads the shipped Microsoft Philly trace.
* :func:`generate_workload` draws a seeded job mix from the teams of a scenario: Poisson
  arrivals whose rate follows a time-of-day pattern (thinning, Lewis and Shedler 1979),
  GPU counts and durations from the team's distributions, plus training runs whose
  duration comes from the training forecast (``forecast_training(...)["time_to_train_s"]``).
"""

from __future__ import annotations

import csv
import gzip
import io
import math
import zlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuplan.errors import EnvironmentProblem, InputError
from gpuplan.scheduling.schema import (
    EmpiricalDuration,
    FixedDuration,
    LognormalDuration,
    TeamSpec,
    TrainingJobSpec,
    UniformDuration,
)

if TYPE_CHECKING:  # numpy is imported where it is used (the package stays light to import)
    import numpy as np
    from numpy.typing import NDArray

    from gpuplan.scheduling.schema import DurationDistribution

#: Citation that must accompany anything published from the Philly trace (CC BY 4.0).
PHILLY_CITATION = (
    "Microsoft Philly trace (CC BY 4.0): Jeon et al., 'Analysis of Large-Scale Multi-Tenant "
    "GPU Clusters for DNN Training Workloads', USENIX ATC 2019; processed version from Qiao "
    "et al., 'Pollux: Co-adaptive Cluster Scheduling for Goodput-Optimized Deep Learning', "
    "OSDI 2021."
)

#: Accepted column names (compared after lower-casing and removing spaces, '-' and '_').
COLUMN_ALIASES: dict[str, tuple[str, ...]] = {
    "job_id": ("jobid", "id", "job", "jobname", "name"),
    "submit": (
        "submittime",
        "submit",
        "submits",
        "submittimes",
        "submitted",
        "submitts",
        "arrival",
        "arrivaltime",
        "arrivaltimes",
        "time",
        "timestamp",
        "starttime",
    ),
    "duration": (
        "durations",
        "duration",
        "runtime",
        "runtimes",
        "runtimesec",
        "elapsed",
        "elapseds",
        "walltime",
        "length",
    ),
    "gpus": ("numgpus", "gpus", "gpu", "ngpus", "gpucount", "gpusrequested", "numgpu"),
    "team": ("vc", "team", "virtualcluster", "queue", "account", "namespace", "group", "tenant"),
    "priority": ("priority", "priorityclass", "qos", "class"),
    "user": ("user", "username", "userid"),
    "node_type": ("nodetype", "gputype", "flavor", "partition"),
}


@dataclass(frozen=True, slots=True)
class Job:
    """One job of a workload.

    Attributes
    ----------
    job_id:
        Identifier (unique within the workload).
    submit_s:
        Submit time in seconds from the start of the workload.
    duration_s:
        Run time in seconds when it runs uninterrupted (gang-scheduled on all its GPUs).
    num_gpus:
        GPUs it needs, all at once.
    team:
        Team / virtual cluster / namespace that owns it.
    priority_class:
        Name of its priority class (see ``priority_classes`` of :func:`simulate`).
    node_type:
        Node type it must run on, or ``None`` for any.
    kind:
        ``"batch"`` or ``"training"`` (duration from the training forecast).
    user:
        Optional user name (kept for reports; fair-share works per team).
    """

    job_id: str
    submit_s: float
    duration_s: float
    num_gpus: int
    team: str = "default"
    priority_class: str = "normal"
    node_type: str | None = None
    kind: str = "batch"
    user: str | None = None


def _norm(name: str) -> str:
    return "".join(ch for ch in name.strip().lower() if ch.isalnum())


def _match_columns(header: Sequence[str], where: str) -> dict[str, int]:
    normalised = [_norm(h) for h in header]
    found: dict[str, int] = {}
    for field, aliases in COLUMN_ALIASES.items():
        for alias in aliases:
            if alias in normalised:
                found[field] = normalised.index(alias)
                break
    missing = [f for f in ("submit", "duration", "gpus") if f not in found]
    if missing:
        want = "; ".join(f"{f}: one of {', '.join(COLUMN_ALIASES[f][:4])}" for f in missing)
        raise InputError(
            f"{where}: no column for {', '.join(missing)} (columns: {', '.join(header)})",
            hint=f"rename the columns ({want}) - see docs/scheduling.md",
        )
    return found


def _parse_time(text: str) -> tuple[float, bool]:
    """Seconds (number) or an ISO-8601 date-time; returns (seconds, is_datetime)."""
    try:
        value = float(text)
    except ValueError:
        pass
    else:
        if not math.isfinite(value):
            raise ValueError("not a finite number")
        return value, False
    ts = datetime.fromisoformat(text.replace("Z", "+00:00"))
    # A naive date-time is read as UTC: local-time rules (DST) must not bend the trace.
    return (ts if ts.tzinfo else ts.replace(tzinfo=timezone.utc)).timestamp(), True


def _open_text(path: Path) -> io.TextIOBase:
    if path.suffix == ".gz":
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", newline="")
    return open(path, encoding="utf-8", newline="")


def parse_trace_rows(
    rows: Iterable[Sequence[str]],
    *,
    where: str = "trace",
    limit: int | None = None,
    default_priority: str = "normal",
) -> list[Job]:
    """Turn CSV rows (first row = header) into jobs; see :func:`load_trace`."""
    it = iter(rows)
    try:
        header = next(it)
    except StopIteration:
        raise InputError(
            f"{where}: the file is empty", hint="give a CSV with a header row"
        ) from None
    cols = _match_columns(header, where)
    c_sub, c_dur, c_gpu = cols["submit"], cols["duration"], cols["gpus"]
    c_id, c_team = cols.get("job_id"), cols.get("team")
    c_prio, c_user, c_type = cols.get("priority"), cols.get("user"), cols.get("node_type")
    ncols = len(header)
    submits: list[float] = []
    recs: list[tuple[str, float, int, str, str, str | None, str | None]] = []
    kind_dt: bool | None = None
    seen: set[str] = set()
    for line, row in enumerate(it, start=2):
        if limit is not None and len(recs) >= limit:
            break
        if not row or all(not c.strip() for c in row):
            continue
        if len(row) != ncols:
            raise InputError(
                f"{where}:{line}: {len(row)} fields where the header has {ncols}",
                hint="fix the row (quote fields that contain commas)",
            )

        def bad(col: int, problem: str, _row: Sequence[str] = row, _line: int = line) -> InputError:
            return InputError(
                f"{where}:{_line}: column '{header[col]}': {problem} (got {_row[col]!r})",
                hint="fix the value or drop the row",
            )

        text = row[c_sub].strip()
        try:
            sub, is_dt = _parse_time(text)
        except ValueError:
            raise bad(c_sub, "not a number of seconds or an ISO date-time") from None
        if kind_dt is None:
            kind_dt = is_dt
        elif kind_dt != is_dt:
            raise bad(c_sub, "mixes date-times and numbers of seconds in one column")
        try:
            dur = float(row[c_dur])
        except ValueError:
            raise bad(c_dur, "not a number of seconds") from None
        if not math.isfinite(dur) or dur <= 0:
            raise bad(c_dur, "duration must be a positive number of seconds")
        gtext = row[c_gpu].strip()
        try:
            gval = float(gtext)
        except ValueError:
            raise bad(c_gpu, "not a whole number of GPUs") from None
        if not math.isfinite(gval) or gval != int(gval) or gval < 1:
            raise bad(c_gpu, "GPUs must be a whole number >= 1")
        job_id = row[c_id].strip() if c_id is not None else f"j{line - 1:06d}"
        if not job_id:
            raise bad(c_id, "empty job id")  # type: ignore[arg-type]
        if job_id in seen:
            raise bad(c_id, "duplicate job id")  # type: ignore[arg-type]
        seen.add(job_id)
        team = (row[c_team].strip() if c_team is not None else "") or "default"
        prio = (row[c_prio].strip() if c_prio is not None else "") or default_priority
        user = row[c_user].strip() or None if c_user is not None else None
        ntype = row[c_type].strip() or None if c_type is not None else None
        submits.append(sub)
        recs.append((job_id, dur, int(gval), team, prio, user, ntype))
    if not recs:
        raise InputError(f"{where}: no jobs in the file", hint="add rows after the header")
    t0 = min(submits)
    jobs = [
        Job(
            job_id=r[0],
            submit_s=s - t0,
            duration_s=r[1],
            num_gpus=r[2],
            team=r[3],
            priority_class=r[4],
            user=r[5],
            node_type=r[6],
        )
        for s, r in zip(submits, recs, strict=True)
    ]
    jobs.sort(key=lambda j: j.submit_s)  # stable: file order breaks ties
    return jobs


def load_trace(
    path: str | Path, *, limit: int | None = None, default_priority: str = "normal"
) -> list[Job]:
    """Read a job trace CSV (optionally gzipped) into jobs sorted by submit time.

    Parameters
    ----------
    path:
        CSV file with a header row. Required columns: submit time (seconds or ISO date-time),
        duration (seconds, > 0) and GPUs (whole number >= 1); optional: job id, team
        (``vc``, ``team``, ``queue``...), priority class, user, node type.
    limit:
        Read only the first ``limit`` jobs of the file.

    Returns
    -------
    list of Job
        Submit times are shifted so that the first job is submitted at 0 s.

    Raises
    ------
    NotFoundError, InputError
        Missing file; missing column; a bad value (one line: ``file:row: column 'x': ...``).
    """
    from gpuplan.userfiles import check_input_file

    p = check_input_file(
        path,
        what="trace file",
        hint="give a CSV path, or --trace philly for the shipped Philly trace",
    )
    try:
        with _open_text(p) as fh:
            return parse_trace_rows(
                csv.reader(fh), where=str(p), limit=limit, default_priority=default_priority
            )
    except (UnicodeDecodeError, gzip.BadGzipFile, csv.Error, EOFError) as exc:
        raise InputError(f"{p}: not a readable CSV ({exc})", hint="give a UTF-8 CSV file") from None
    except OSError as exc:
        raise InputError(
            f"cannot read trace file {p}: {exc.strerror or exc}",
            hint="check its permissions (chmod u+r)",
        ) from None


def philly_path() -> Path:
    """Path of the shipped Philly trace (gzipped CSV; see data/NOTICE.md)."""
    return Path(str(resources.files("gpuplan.scheduling") / "data" / "philly.csv.gz"))


def load_philly(*, limit: int | None = None) -> list[Job]:
    """The Microsoft Philly trace as jobs (team = virtual cluster). Cite :data:`PHILLY_CITATION`."""
    return load_trace(philly_path(), limit=limit)


# --------------------------------------------------------------------------- generation
def _team_rng(seed: int, name: str) -> np.random.Generator:
    import numpy as np

    # One independent stream per team, stable under adding or reordering other teams.
    return np.random.default_rng([seed, zlib.crc32(name.encode())])


def _durations(
    dist: DurationDistribution, rng: np.random.Generator, size: int
) -> NDArray[np.float64]:
    import numpy as np

    if isinstance(dist, FixedDuration):
        return np.full(size, float(dist.value_s))
    if isinstance(dist, UniformDuration):
        return rng.uniform(dist.low_s, dist.high_s, size)
    if isinstance(dist, EmpiricalDuration):
        return rng.choice(np.asarray(dist.values_s, dtype=float), size=size, replace=True)
    if isinstance(dist, LognormalDuration):
        out = rng.lognormal(math.log(dist.median_s), dist.sigma, size)
    else:  # exponential
        out = rng.exponential(dist.mean_s, size)
    out = np.maximum(out, dist.min_s)
    if dist.max_s is not None:
        out = np.minimum(out, dist.max_s)
    return out


def _arrivals(team: TeamSpec, rng: np.random.Generator, horizon_s: float) -> NDArray[np.float64]:
    """Non-homogeneous Poisson arrivals by thinning (Lewis and Shedler, 1979).

    Candidates come from a homogeneous process at the peak rate; each is kept with
    probability rate(t) / peak, where rate(t) = mean rate x pattern[hour of day].
    """
    import numpy as np

    pattern = np.asarray(team.hourly_pattern())
    peak = float(pattern.max())
    lam_peak = team.arrival_rate_per_hour * peak / 3600.0
    count = rng.poisson(lam_peak * horizon_s)
    times = np.sort(rng.uniform(0.0, horizon_s, count))
    hours = (times // 3600.0).astype(np.int64) % 24
    keep = rng.uniform(0.0, 1.0, count) < pattern[hours] / peak
    return times[keep]


#: The training forecast a caller hands in (``gpuplan.forecast.train.forecast_training``
#: from the plan and ``gpuplan schedule``): keyword arguments ``model, gpu, num_gpus, tokens``
#: (and ``seq_len``, ``precision`` when the job sets them), a mapping with
#: ``time_to_train_s`` back. The simulator does not import the forecast itself, so
#: ``gpuplan.scheduling`` and ``gpuplan.forecast`` stay independent layers (pyproject.toml).
ForecastFn = Callable[..., Mapping[str, Any]]


def training_duration_s(spec: TrainingJobSpec, forecast: ForecastFn | None) -> float:
    """Duration of one training run from ``forecast(...)["time_to_train_s"]``."""
    if forecast is None:
        raise EnvironmentProblem(
            f"training_jobs ({spec.model} on {spec.gpus} GPUs) need the training forecast, "
            "and none was given to the scheduler",
            hint="run the scenario with 'gpuplan schedule --scenario' or 'gpuplan plan', "
            "or remove training_jobs from it",
        )
    kwargs: dict[str, Any] = {
        "model": spec.model,
        "gpu": spec.gpu,
        "num_gpus": spec.gpus,
        "tokens": spec.tokens,
    }
    if spec.seq_len is not None:
        kwargs["seq_len"] = spec.seq_len
    if spec.precision is not None:
        kwargs["precision"] = spec.precision
    out = forecast(**kwargs)
    value = out.get("time_to_train_s") if isinstance(out, Mapping) else None
    if value is None or not math.isfinite(float(value)) or float(value) <= 0:
        raise InputError(
            f"the training forecast gave no time_to_train_s for {spec.model} on {spec.gpus} "
            f"x {spec.gpu} with {spec.tokens:g} tokens",
            hint="check the model, GPU and token count with 'gpuplan forecast train'",
        )
    return float(value)


def generate_workload(
    teams: Sequence[TeamSpec],
    *,
    horizon_s: float,
    seed: int = 0,
    forecast: ForecastFn | None = None,
) -> list[Job]:
    """Draw a seeded job mix for ``teams`` over ``[0, horizon_s)``.

    Parameters
    ----------
    teams:
        Validated team specs (see :mod:`gpuplan.scheduling.schema`).
    horizon_s:
        Length of the submission window in seconds.
    seed:
        Seed; each team gets its own stream derived from (seed, team name), so adding a
        team does not change the jobs of the others.
    forecast:
        The training forecast (:data:`ForecastFn`), called once per distinct training
        run; needed only when a team lists ``training_jobs``.

    Returns
    -------
    list of Job
        Sorted by submit time.
    """
    import numpy as np

    if horizon_s <= 0:
        raise InputError("the generation window must be positive", hint="set horizon_days > 0")
    jobs: list[Job] = []
    cache: dict[tuple[str, str, int, float, int | None, str | None], float] = {}
    for team in teams:
        rng = _team_rng(seed, team.name)
        dist = team.duration_distribution  # set whenever the rate is (TeamSpec checks it)
        if team.arrival_rate_per_hour > 0 and dist is not None:
            times = _arrivals(team, rng, horizon_s)
            sizes = np.asarray(sorted(team.gpu_count_distribution), dtype=np.int64)
            weights = np.asarray([team.gpu_count_distribution[int(s)] for s in sizes], float)
            gpus = rng.choice(sizes, size=len(times), p=weights / weights.sum())
            durs = _durations(dist, rng, len(times))
            for k, (t, g, d) in enumerate(zip(times, gpus, durs, strict=True)):
                jobs.append(
                    Job(
                        job_id=f"{team.name}-{k:06d}",
                        submit_s=float(t),
                        duration_s=float(d),
                        num_gpus=int(g),
                        team=team.name,
                        priority_class=team.priority_class,
                        node_type=team.node_type,
                    )
                )
        for r, spec in enumerate(team.training_jobs):
            key = (spec.model, spec.gpu, spec.gpus, spec.tokens, spec.seq_len, spec.precision)
            if key not in cache:
                cache[key] = training_duration_s(spec, forecast)
            submits = (
                list(spec.submit_at_s)
                if spec.submit_at_s is not None
                else sorted(rng.uniform(0.0, horizon_s, spec.count).tolist())
            )
            for c, t in enumerate(submits):
                jobs.append(
                    Job(
                        job_id=f"{team.name}-train{r}-{c}",
                        submit_s=float(t),
                        duration_s=cache[key],
                        num_gpus=spec.gpus,
                        team=team.name,
                        priority_class=spec.priority_class or team.priority_class,
                        node_type=team.node_type,
                        kind="training",
                    )
                )
    jobs.sort(key=lambda j: j.submit_s)
    return jobs


def jobs_from_records(records: Iterable[dict[str, Any]], *, where: str = "jobs") -> list[Job]:
    """Build jobs from dicts with the :class:`Job` field names (validated like a trace)."""
    rows: list[list[str]] = [
        ["job_id", "submit_s", "duration_s", "num_gpus", "team", "priority", "node_type"]
    ]
    for k, r in enumerate(records):
        rows.append(
            [
                str(r.get("job_id", f"j{k:06d}")),
                str(r["submit_s"]),
                str(r["duration_s"]),
                str(r["num_gpus"]),
                str(r.get("team", "default")),
                str(r.get("priority_class", "normal")),
                str(r.get("node_type") or ""),
            ]
        )
    jobs = parse_trace_rows(rows, where=where)
    # parse_trace_rows shifts times to start at 0; keep the caller's absolute times.
    base = min(float(r[1]) for r in rows[1:])
    return [
        Job(
            job_id=j.job_id,
            submit_s=j.submit_s + base,
            duration_s=j.duration_s,
            num_gpus=j.num_gpus,
            team=j.team,
            priority_class=j.priority_class,
            node_type=j.node_type,
        )
        for j in jobs
    ]
