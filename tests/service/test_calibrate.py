"""The server's calibration is the one ``gpuplan calibrate`` computes locally on the same runs."""

from __future__ import annotations

import json
import time

from gpuplan.calibration.fit import calibrate_documents
from gpuplan.catalogs import get_catalog
from gpuplan.results.store import load_result
from gpuplan.service.client import RetryPolicy, ServiceClient, calibrate_from_server, upload_files
from gpuplan.service.db import Database
from gpuplan.service.testing import LiveServer
from gpuplan.service.tokens import create_token

from .service_docs import make_doc, write_doc


def _without_created_at(artifact: dict) -> dict:
    return {k: v for k, v in artifact.items() if k != "created_at"}


def test_server_artifact_equals_the_local_calibration_of_the_same_runs(
    sqlite_url, tmp_path, run_cli
):
    db = Database(sqlite_url)
    db.migrate()
    token, _ = create_token(db, team="lab")
    admin, _ = create_token(db, team="ops", scopes=("admin",))
    peak = get_catalog().gpu("h100").peak_flops_per_s("bf16")
    good = [
        make_doc(seed=300, machine_id="node-a"),
        make_doc(seed=301, machine_id="node-b", matmul_flops_per_s=0.66 * peak),
        make_doc(
            seed=302,
            machine_id="node-c",
            accelerator="NVIDIA A100-SXM4-80GB",
            matmul_flops_per_s=2.5e14,
            membw_bytes_per_s=1.7e12,
            pcie_bytes_per_s=2.3e10,
        ),
    ]
    forged = make_doc(seed=303, machine_id="node-d", matmul_flops_per_s=3 * peak)  # flagged
    files = [write_doc(tmp_path / "results", d) for d in good]
    forged_file = write_doc(tmp_path / "forged", forged)

    def wait_for(client, run_ids):
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            status = client._json("GET", "/v1/calibration/status")
            latest = status["latest"]
            if latest and latest["run_ids"] == run_ids and not status["recalibration"]["running"]:
                return status
            time.sleep(0.2)
        raise AssertionError(f"no artifact over {run_ids}: {status}")

    # background recalibration, as deployed
    server = LiveServer(sqlite_url, log_path=tmp_path / "serve.log").start()
    client = ServiceClient(server.url, token, retry=RetryPolicy(base_s=0.05, seed=1))
    try:
        outcomes = upload_files(client, [*files, forged_file])
        assert [o.server_status for o in outcomes] == [
            "accepted",
            "accepted",
            "accepted",
            "flagged",
        ]
        expected_runs = sorted(d["run_id"] for d in good)
        status = wait_for(client, expected_runs)
        assert status["flagged_runs"] == 1 and status["included_runs"] == 3
        provenance = client.calibration()
        downloaded = calibrate_from_server(server.url, token)
        refitted = calibrate_from_server(server.url, token, refit=True)
        local = calibrate_documents([load_result(f) for f in files], include_reference=True)
        assert _without_created_at(downloaded) == _without_created_at(local)
        assert _without_created_at(refitted) == _without_created_at(local)
        # provenance: which runs, hashed inputs, and the flagged run left out
        assert provenance["run_ids"] == expected_runs
        assert set(expected_runs) <= set(local["inputs"])
        assert forged["run_id"] not in downloaded["inputs"]
        assert provenance["artifact"]["training_data_sha256"] == local["training_data_sha256"]
        assert len(provenance["inputs_sha256"]) == 64

        # the same through the command line: `gpuplan calibrate --server` vs local files
        pooled, alone = tmp_path / "pooled.json", tmp_path / "local.json"
        r = run_cli(
            "calibrate",
            "--server",
            server.url,
            "--out",
            str(pooled),
            "--no-validate",
            "--format",
            "json",
            env={"GPUPLAN_TOKEN": token},
        )
        assert r.returncode == 0, r.stderr
        r = run_cli(
            "calibrate",
            str(tmp_path / "results"),
            "--out",
            str(alone),
            "--no-validate",
            "--format",
            "json",
        )
        assert r.returncode == 0, r.stderr
        assert _without_created_at(json.loads(pooled.read_text())) == _without_created_at(
            json.loads(alone.read_text())
        )

        # the forged run counts once an admin approves it
        with ServiceClient(server.url, admin) as c:
            assert c.approve(forged["run_id"])["status"] == "approved"
        wait_for(client, sorted([*expected_runs, forged["run_id"]]))
        assert forged["run_id"] in calibrate_from_server(server.url, token)["inputs"]
    finally:
        client.close()
        server.stop()
    db.dispose()
