"""``gpuplan results upload`` and the ``--server`` side of ``gpuplan results ls``.

``gpuplan.cli.results`` (the local results commands) calls :func:`register` to add the
``upload`` command, and calls :func:`ls_server` from its ``ls`` when ``--server`` is given.
"""

from __future__ import annotations

from pathlib import Path

import typer

from gpuplan.cli._common import FORMAT_OPTION, Format, emit, info, progress, simple_table, warn

UPLOAD_HELP = """Upload result files to a results service (keeps the local files).

RUN is a result file, a directory (searched recursively) or a run id (prefix) under
--results-dir. The token is checked with the server first. A file that cannot be read or
does not validate is reported and the others are still uploaded (the exit code is 2 when
any file did not succeed). Environment secrets and host names are stripped before sending
(--include-hostname keeps host names). Connection errors and 5xx answers are retried with
exponential backoff; acknowledged runs are remembered in a state file, so running the same
command again after a failure continues where it stopped. Uploading the same run twice is
harmless (the server answers 'duplicate').

\b
Examples:
  gpuplan results upload results/ --server https://gpuplan.example.org --token $TOKEN
  GPUPLAN_TOKEN=gpt_... gpuplan results upload 3f2a9c1e --server http://127.0.0.1:8000
  gpuplan results upload results/ --server URL --format json | jq '.uploads[].result'
"""

SERVER_OPTION = typer.Option(
    None, "--server", envvar="GPUPLAN_SERVER", help="Results service URL (also $GPUPLAN_SERVER)."
)
TOKEN_OPTION = typer.Option(
    None,
    "--token",
    envvar="GPUPLAN_TOKEN",
    help="API token (better: $GPUPLAN_TOKEN, kept out of shell history).",
)


def upload(
    runs: list[str] = typer.Argument(..., help="Result files, directories or run ids."),
    server: str | None = SERVER_OPTION,
    token: str | None = TOKEN_OPTION,
    results_dir: Path = typer.Option(
        Path("results"),
        "--results-dir",
        envvar="GPUPLAN_RESULTS",
        help="Where run ids are looked up.",
    ),
    include_hostname: bool = typer.Option(
        False, "--include-hostname", help="Send host names too (opt-in)."
    ),
    state_file: Path | None = typer.Option(
        None,
        "--state",
        help="Resume state file (default: ~/.local/state/gpuplan/upload-<server>.json).",
    ),
    resume: bool = typer.Option(
        True, "--resume/--no-resume", help="Skip runs already acknowledged."
    ),
    retries: int = typer.Option(
        7, "--retries", min=0, max=50, help="Retries per request on transient errors."
    ),
    timeout_s: float = typer.Option(
        60.0, "--timeout-s", min=1.0, help="Per-attempt timeout in seconds."
    ),
    fmt: Format = FORMAT_OPTION,
) -> None:
    from gpuplan.errors import GpuplanError
    from gpuplan.service.client import (
        RetryPolicy,
        ServiceClient,
        TransientError,
        UploadState,
        collect_files,
        default_state_path,
        resolve_server,
        upload_files,
    )

    server_url = resolve_server(server)
    files = collect_files(runs, results_dir)
    if not files:
        raise GpuplanError(
            f"no result files in {', '.join(runs)}", hint="run 'gpuplan probe' first"
        )
    state = (
        UploadState(state_file or default_state_path(server_url), server_url) if resume else None
    )
    outcomes = []
    with (
        ServiceClient(
            server_url, token, timeout_s=timeout_s, retry=RetryPolicy(max_attempts=retries + 1)
        ) as client,
        progress(enabled=len(files) > 1) as bar,
    ):
        # a refused token is an error even when every file would be skipped as acknowledged
        unreachable = False
        try:
            client.verify_token("write")
        except TransientError as exc:  # no answer: files still fail fast, skipped ones stay
            unreachable = True
            warn(f"token not verified: {exc.one_line()}")
        task = bar.add_task("uploading", total=len(files))

        def on_outcome(out) -> None:
            outcomes.append(out)
            bar.advance(task)
            if out.result in ("failed", "rejected", "conflict"):
                warn(f"{out.path}: {out.result}: {out.message}")

        upload_files(
            client,
            files,
            state=state,
            keep_hostname=include_hostname,
            on_outcome=on_outcome,
            unreachable=unreachable,
        )

    counts: dict[str, int] = {}
    for out in outcomes:
        counts[out.result] = counts.get(out.result, 0) + 1
    data = {
        "server": server_url,
        "state_file": str(state.path) if state else None,
        "counts": counts,
        "uploads": [o.as_dict() for o in outcomes],
    }

    def table(console) -> None:
        console.print(
            simple_table(
                f"uploads to {server_url}",
                ["run", "file", "result", "server status", "id", "note"],
                [
                    (
                        (o.run_id or "-")[:8],
                        o.path,
                        o.result,
                        o.server_status or "-",
                        o.id if o.id is not None else "-",
                        o.message or (f"{len(o.flags)} plausibility flag(s)" if o.flags else ""),
                    )
                    for o in outcomes
                ],
            )
        )

    emit(data, fmt, table)
    bad = [o for o in outcomes if not o.ok]
    if bad:
        failed = sum(1 for o in bad if o.result == "failed")
        hint = (
            "the local files are kept; run the same command again to resume"
            if failed
            else "the local files are kept; see the messages above"
        )
        raise GpuplanError(
            f"{len(bad)} of {len(outcomes)} upload(s) did not succeed ({', '.join(f'{k} {v}' for k, v in sorted(counts.items()))})",
            hint=hint,
        )
    info(f"{len(outcomes)} run(s): " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))


def ls_server(
    server: str,
    token: str | None,
    *,
    device: str | None = None,
    team: str | None = None,
    status: str | None = None,
    limit: int = 100,
    fmt: Format = Format.table,
) -> None:
    """``gpuplan results ls --server URL``: list the runs stored on a results service."""
    from gpuplan.service.client import ServiceClient

    with ServiceClient(server, token) as client:
        data = client.list_runs(device=device, team=team, status=status, limit=limit)

    def table(console) -> None:
        console.print(
            simple_table(
                f"runs on {client.server} ({data['total']} in all)",
                ["run", "device", "team", "machine", "started", "uploaded", "status"],
                [
                    (
                        r["run_id"][:8],
                        r["device_id"],
                        r["team"],
                        r["machine_id"] or "-",
                        r["started_at"] or "-",
                        r["uploaded_at"],
                        r["status"] + (f" ({r['num_flags']})" if r["num_flags"] else ""),
                    )
                    for r in data["runs"]
                ],
            )
        )

    emit(data, fmt, table)


def register(app: typer.Typer) -> None:
    """Add ``upload`` to the ``gpuplan results`` group."""
    app.command("upload", help=UPLOAD_HELP)(upload)
