"""Launchers for several nodes: the sbatch script and the Kubernetes manifest parse right."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest
import yaml

from gpuplan.errors import InputError
from gpuplan.probes.emit import k8s_manifest, slurm_script


def sbatch_directives(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("#SBATCH "):
            key, _, value = line[len("#SBATCH ") :].partition("=")
            out[key] = value
    return out


def test_slurm_script_lines_and_torchrun_arguments():
    text = slurm_script(
        nodes=4,
        gpus_per_node=8,
        probe_args=["--quick", "--only", "matmul,collectives"],
        out_dir="res",
    )
    assert text.startswith("#!/bin/bash\n")
    d = sbatch_directives(text)
    assert d["--nodes"] == "4"
    assert d["--gpus-per-node"] == "8"
    assert d["--ntasks-per-node"] == "1"
    assert d["--time"] == "00:30:00"
    srun = next(line for line in text.splitlines() if line.startswith("srun "))
    argv = shlex.split(srun)
    assert argv[:4] == ["srun", "--nodes=4", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    assert argv[4:6] == ["bash", "-c"]
    inner = shlex.split(argv[6])
    assert inner[0] == "torchrun"
    assert "--nnodes=4" in inner and "--nproc-per-node=8" in inner
    assert "--node-rank=$SLURM_NODEID" in inner
    assert "--master-addr=$HEAD_NODE" in inner
    tail = inner[inner.index("--no-python") + 1 :]
    assert tail == ["gpuplan", "probe", "--quick", "--only", "matmul,collectives", "--out", "res"]
    # the directives come before the first command, as sbatch requires
    lines = text.splitlines()
    first_cmd = next(i for i, line in enumerate(lines) if line and not line.startswith("#"))
    last_directive = max(i for i, line in enumerate(lines) if line.startswith("#SBATCH"))
    assert last_directive < first_cmd
    assert "find res -name '*.json'" in text


def test_slurm_optional_directives_and_bad_values():
    d = sbatch_directives(
        slurm_script(nodes=1, gpus_per_node=2, partition="gpu", account="ml", time_limit="01:00:00")
    )
    assert d["--partition"] == "gpu" and d["--account"] == "ml" and d["--time"] == "01:00:00"
    with pytest.raises(InputError, match="--nodes"):
        slurm_script(nodes=0, gpus_per_node=8)
    with pytest.raises(InputError, match="Slurm time"):
        slurm_script(nodes=1, gpus_per_node=8, time_limit="half an hour")


def test_k8s_manifest_is_a_headless_service_and_an_indexed_job():
    text = k8s_manifest(nodes=3, gpus_per_node=8, probe_args=["--quick"], image="reg/gpuplan:0.1")
    service, job = list(yaml.safe_load_all(text))
    assert service["kind"] == "Service" and service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"job-name": "gpuplan-probe"}
    assert job["kind"] == "Job" and job["apiVersion"] == "batch/v1"
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed"
    assert spec["completions"] == 3 and spec["parallelism"] == 3
    pod = spec["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"]
    (container,) = pod["containers"]
    assert container["image"] == "reg/gpuplan:0.1"
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    cmd = shlex.split(container["command"][2])
    assert cmd[0] == "torchrun" and "--nnodes=3" in cmd and "--nproc-per-node=8" in cmd
    assert "--node-rank=${JOB_COMPLETION_INDEX}" in cmd
    assert "--master-addr=gpuplan-probe-0.gpuplan-probe" in cmd
    assert cmd[-6:] == ["--no-python", "gpuplan", "probe", "--quick", "--out", "/results"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/results" in mounts
    claims = [
        v["persistentVolumeClaim"]["claimName"]
        for v in pod["volumes"]
        if "persistentVolumeClaim" in v
    ]
    assert claims == ["gpuplan-results"]
    json.dumps(job)  # plain data, nothing YAML-specific


def test_cli_emit_writes_files_and_never_overwrites(run_cli, tmp_path):
    r1 = run_cli(
        "probe",
        "--emit",
        "slurm",
        "--nodes",
        "2",
        "--gpus-per-node",
        "4",
        "--quick",
        "--out",
        str(tmp_path),
        "--format",
        "json",
    )
    assert r1.returncode == 0, r1.stderr
    d1 = json.loads(r1.stdout)
    r2 = run_cli(
        "probe",
        "--emit",
        "slurm",
        "--nodes",
        "2",
        "--gpus-per-node",
        "4",
        "--out",
        str(tmp_path),
        "--format",
        "json",
    )
    d2 = json.loads(r2.stdout)
    assert d1["path"] != d2["path"]
    text1, text2 = Path(d1["path"]).read_text(), Path(d2["path"]).read_text()
    assert sbatch_directives(text1)["--nodes"] == "2"
    assert "--quick" in text1 and "--quick" not in text2
    r3 = run_cli(
        "probe", "--emit", "k8s", "--nodes", "2", "--out", str(tmp_path), "--format", "json"
    )
    docs = list(yaml.safe_load_all(Path(json.loads(r3.stdout)["path"]).read_text()))
    assert [d["kind"] for d in docs] == ["Service", "Job"]


@pytest.mark.parametrize("kind", ["k8s", "slurm"])
def test_emit_to_a_pipe_is_the_file_byte_for_byte(run_cli, tmp_path, kind):
    """`gpuplan probe --emit ... > job.sbatch` and `| kubectl apply -f -` get the file as
    written under --out: no wrapping at 80 columns, nothing else on stdout."""
    import yaml

    out = tmp_path / "emit"
    r = run_cli(
        "probe",
        "--emit",
        kind,
        "--nodes",
        "2",
        "--gpus-per-node",
        "8",
        "--out",
        str(out),
        "--storage-path",
        str(tmp_path),
    )
    assert r.returncode == 0, r.stderr
    (written,) = [p for p in out.iterdir() if p.is_file()]
    assert r.stdout == written.read_text()
    assert any(len(line) > 80 for line in r.stdout.splitlines())  # long lines kept whole
    if kind == "k8s":
        docs = [d for d in yaml.safe_load_all(r.stdout) if d]
        assert {d["kind"] for d in docs} >= {"Service"}
    else:
        assert r.stdout.startswith("#!")
