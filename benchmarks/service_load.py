"""Load test of the results service on loopback: many clients uploading at once.

Fixed work per backend: 1,000 distinct result documents (seeded, realistic shape: matmul,
memory, PCIe and all-reduce probes with raw samples, about 9 kB each) uploaded by 20
concurrent clients (threads, one HTTP connection each, the real ``ServiceClient`` with its
retries) to a real ``gpuplan serve`` (uvicorn subprocess) in front of

* SQLite (a file, WAL, ``synchronous=FULL``), and
* PostgreSQL (a private cluster started for the run, fsync on),

while the server recalibrates in the background as deployed. Each client then sends 10 of
its documents a second time, which must come back as duplicates. Afterwards the database
is read directly and checked: every run id sent is stored exactly once with the content
hash the client computed (0 lost, 0 duplicated, 0 altered).

Prints per backend: uploads/s over the upload phase, latency p50/p95/max, retries, and the
lost/duplicated counts; exits 1 if anything was lost or duplicated. Run::

    python -m benchmarks.service_load                 # both backends
    python -m benchmarks.service_load --backends sqlite --uploads 200
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any


def _documents(n: int, seed0: int) -> list[dict[str, Any]]:
    """``n`` distinct documents (the test suite's realistic generator, seeded)."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "service"))
    from service_docs import make_doc

    return [make_doc(seed=seed0 + i, samples=20) for i in range(n)]


def run_backend(
    backend: str, uploads: int, clients: int, resend: int, recalibrate: str
) -> dict[str, Any]:
    from sqlalchemy import func, select

    from gpuplan.service.client import RetryPolicy, ServiceClient
    from gpuplan.service.db import Database, RunRow
    from gpuplan.service.sanitize import content_sha256, sanitize_document
    from gpuplan.service.testing import LiveServer, TempPostgres
    from gpuplan.service.tokens import create_token

    tmp = Path(tempfile.mkdtemp(prefix=f"gpuplan-load-{backend}-"))
    pg = TempPostgres() if backend == "postgresql" else None
    if pg is not None:
        pg.__enter__()
        url = pg.new_database("gpuplan_load")
    else:
        url = f"sqlite:///{tmp / 'service.db'}"
    db = Database(url)
    db.migrate()
    token, _ = create_token(db, team="load")
    docs = _documents(uploads, seed0=10_000 if backend == "sqlite" else 20_000)
    expected = {d["run_id"]: content_sha256(sanitize_document(d)[0]) for d in docs}
    shards = [docs[i::clients] for i in range(clients)]
    latencies: list[float] = []
    outcomes: list[Any] = []
    lock = threading.Lock()
    server = LiveServer(
        url,
        args=["--recalibrate", recalibrate, "--log-level", "warning"],
        log_path=tmp / "serve.log",
    )
    try:
        server.start()

        def worker(shard: list[dict[str, Any]]) -> None:
            with ServiceClient(
                server.url, token, retry=RetryPolicy(max_attempts=10, base_s=0.1, cap_s=2.0)
            ) as client:
                client.max_upload_bytes()
                for doc in [*shard, *shard[:resend]]:
                    t0 = time.perf_counter()
                    out = client.upload_document(doc)
                    dt = time.perf_counter() - t0
                    with lock:
                        latencies.append(dt)
                        outcomes.append(out)

        t0 = time.perf_counter()
        with ThreadPoolExecutor(clients) as pool:
            list(pool.map(worker, shards))
        wall_s = time.perf_counter() - t0
    finally:
        server.stop()
    with db.read() as s:
        stored = {r.run_id: r.content_sha256 for r in s.scalars(select(RunRow))}
        total_rows = s.scalar(select(func.count()).select_from(RunRow))
    db.dispose()
    if pg is not None:
        pg.drop_database(url)
        pg.__exit__(None, None, None)

    results = [o.result for o in outcomes]
    lost = sorted(set(expected) - set(stored))
    altered = sorted(r for r in expected if r in stored and stored[r] != expected[r])
    requests = len(outcomes)
    return {
        "backend": backend,
        "uploads": uploads,
        "clients": clients,
        "requests": requests,
        "wall_s": wall_s,
        "requests_per_s": requests / wall_s,
        "latency_p50_s": statistics.median(latencies),
        "latency_p95_s": statistics.quantiles(latencies, n=20)[18],
        "latency_max_s": max(latencies),
        "created": results.count("created"),
        "duplicate_answers": results.count("duplicate"),
        "failed": results.count("failed") + results.count("rejected") + results.count("conflict"),
        "retried_requests": sum(1 for o in outcomes if o.attempts > 1),
        "rows": total_rows,
        "lost": len(lost),
        "duplicated_rows": total_rows - len(stored),  # rows minus distinct run ids
        "unexpected_rows": len(set(stored) - set(expected)),
        "altered": len(altered),
        "recalibrate": recalibrate,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backends", default="sqlite,postgresql")
    p.add_argument("--uploads", type=int, default=1000)
    p.add_argument("--clients", type=int, default=20)
    p.add_argument("--resend", type=int, default=10, help="documents each client sends twice")
    p.add_argument("--recalibrate", default="background", choices=["background", "off"])
    p.add_argument("--format", default="table", choices=["table", "json"])
    args = p.parse_args(argv)
    rows = []
    for backend in args.backends.split(","):
        print(
            f"service_load: {backend}: {args.uploads} uploads from {args.clients} clients ...",
            file=sys.stderr,
        )
        rows.append(
            run_backend(backend.strip(), args.uploads, args.clients, args.resend, args.recalibrate)
        )
    if args.format == "json":
        print(json.dumps(rows, indent=2))
    else:
        print(f"{'backend':<11} {'requests':>8} {'req/s':>7} {'p50 ms':>7} {'p95 ms':>7} {'max ms':>7} "
              f"{'created':>7} {'dup.ans':>7} {'retried':>7} {'rows':>5} {'lost':>4} {'dup.rows':>8} {'altered':>7}")  # fmt: skip
        for r in rows:
            print(
                f"{r['backend']:<11} {r['requests']:>8} {r['requests_per_s']:>7.1f} {1e3 * r['latency_p50_s']:>7.1f} "
                f"{1e3 * r['latency_p95_s']:>7.1f} {1e3 * r['latency_max_s']:>7.1f} {r['created']:>7} "
                f"{r['duplicate_answers']:>7} {r['retried_requests']:>7} {r['rows']:>5} {r['lost']:>4} "
                f"{r['duplicated_rows']:>8} {r['altered']:>7}"
            )
    bad = any(
        r["lost"]
        or r["duplicated_rows"]
        or r["altered"]
        or r["unexpected_rows"]
        or r["rows"] != r["uploads"]
        for r in rows
    )
    if bad:
        print("service_load: FAILED: runs lost, duplicated or altered", file=sys.stderr)
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
