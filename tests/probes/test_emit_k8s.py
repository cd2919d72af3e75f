"""``--emit k8s``: the manifests validate against the Kubernetes schemas and would run.

The core objects (Service, Job, the reader Pod, the JobSet's Job template) are checked with
kubernetes-validate, whose schemas ship in the package (no network), in strict mode: an
unknown or misspelt field fails. JobSet is a CRD that kubernetes-validate does not carry;
its envelope is checked against the fields of the published CRD (kubernetes-sigs/jobset,
config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml, version v1alpha2) transcribed
below, and its Job template against the batch/v1 schema, which is what the CRD embeds.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import jsonschema
import kubernetes_validate
import pytest
import yaml

from gpuplan.errors import InputError
from gpuplan.probes.emit import KUEUE_QUEUE_LABEL, fabric_env, k8s_manifest

K8S_VERSION = "1.30"  # a release still in service on managed clusters; strict schemas

# JobSet v1alpha2 as its CRD defines it (the parts a manifest can set); additionalProperties
# false where the CRD lists properties, which is how `kubectl apply --validate=strict`
# treats a structural schema.
_JOBSET_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "additionalProperties": False,
    "properties": {
        "apiVersion": {"const": "jobset.x-k8s.io/v1alpha2"},
        "kind": {"const": "JobSet"},
        "metadata": {"type": "object"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "coordinator": {"type": "object"},
                "failurePolicy": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "maxRestarts": {"type": "integer"},
                        "restartStrategy": {"enum": ["Recreate", "BlockingRecreate"]},
                        "rules": {"type": "array"},
                    },
                },
                "managedBy": {"type": "string"},
                "network": {
                    "type": "object",
                    "additionalProperties": False,
                    "properties": {
                        "enableDNSHostnames": {"type": "boolean"},
                        "publishNotReadyAddresses": {"type": "boolean"},
                        "subdomain": {"type": "string"},
                    },
                },
                "replicatedJobs": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "required": ["name", "template"],
                        "additionalProperties": False,
                        "properties": {
                            "dependsOn": {"type": "array"},
                            "groupName": {"type": "string"},
                            "name": {"type": "string"},
                            "replicas": {"type": "integer"},
                            "template": {
                                "type": "object",
                                "additionalProperties": False,
                                "properties": {
                                    "metadata": {"type": "object"},
                                    "spec": {"type": "object"},
                                },
                            },
                        },
                    },
                },
                "startupPolicy": {"type": "object"},
                "successPolicy": {"type": "object"},
                "suspend": {"type": "boolean"},
                "ttlSecondsAfterFinished": {"type": "integer"},
                "volumeClaimPolicies": {"type": "array"},
            },
        },
    },
}


def validate(obj: dict[str, Any]) -> None:
    """kubernetes-validate, strict: raises on an unknown field or a wrong type."""
    kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


def validate_jobset(jobset: dict[str, Any]) -> None:
    jsonschema.validate(jobset, _JOBSET_SCHEMA)
    for rj in jobset["spec"]["replicatedJobs"]:
        validate(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": f"{jobset['metadata']['name']}-{rj['name']}-0"},
                **rj["template"],
            }
        )


def manifest(**kw: Any) -> list[dict[str, Any]]:
    args: dict[str, Any] = {
        "nodes": 4,
        "gpus_per_node": 8,
        "image": "registry.example.com/gpuplan:0.1",
        "fabric": "ib",
        "cpus_per_pod": 96,
        "memory": "1500Gi",
        "results_pvc": "gpuplan-results",
        "probe_args": ["--quick"],
    }
    args.update(kw)
    text = k8s_manifest(**args)
    return [d for d in yaml.safe_load_all(text) if d]


def pod_of(doc: dict[str, Any]) -> dict[str, Any]:
    job_spec = (
        doc["spec"]["replicatedJobs"][0]["template"]["spec"]
        if doc["kind"] == "JobSet"
        else doc["spec"]
    )
    return job_spec["template"]["spec"]


def test_validator_is_offline_and_catches_a_wrong_field():
    """The check itself can fail: a misspelt field and a wrong type are rejected."""
    (jobset,) = manifest()
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"}}
    job |= jobset["spec"]["replicatedJobs"][0]["template"]
    validate(job)
    bad = json.loads(json.dumps(job))
    bad["spec"]["template"]["spec"]["containers"][0]["resource"] = {}  # not "resources"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad)
    bad = json.loads(json.dumps(job))
    bad["spec"]["completions"] = "four"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(bad)
    wrong = json.loads(json.dumps(jobset))
    wrong["spec"]["replicatedJob"] = wrong["spec"].pop("replicatedJobs")
    with pytest.raises(jsonschema.ValidationError):
        validate_jobset(wrong)


@pytest.mark.parametrize("fabric", ["ib", "roce", "efa", "tcp"])
def test_jobset_validates_and_has_devices_ipc_lock_guaranteed_qos(fabric):
    kw: dict[str, Any] = {"fabric": fabric, "queue": "team-a"}
    if fabric == "efa":
        kw["rdma_count"] = 32
    (jobset,) = manifest(**kw)
    validate_jobset(jobset)
    assert jobset["metadata"]["labels"] == {KUEUE_QUEUE_LABEL: "team-a"}
    assert jobset["spec"]["network"]["enableDNSHostnames"] is True
    rj = jobset["spec"]["replicatedJobs"][0]
    job_spec = rj["template"]["spec"]
    assert rj["replicas"] == 1
    assert job_spec["completionMode"] == "Indexed"
    assert job_spec["completions"] == job_spec["parallelism"] == 4
    (container,) = pod_of(jobset)["containers"]
    res = container["resources"]
    assert res["requests"] == res["limits"]  # Guaranteed QoS
    assert res["limits"]["cpu"] == "96" and res["limits"]["memory"] == "1500Gi"
    assert res["limits"]["nvidia.com/gpu"] == "8"
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == fabric_env(fabric, socket_ifname="eth0")
    caps = container.get("securityContext", {}).get("capabilities", {}).get("add", [])
    if fabric == "tcp":
        assert not any(k.startswith(("rdma/", "vpc.")) for k in res["limits"])
        assert env["NCCL_NET"] == "Socket"
    else:
        assert caps == ["IPC_LOCK"]
        want = {"ib": "rdma/ib", "roce": "rdma/ib", "efa": "vpc.amazonaws.com/efa"}[fabric]
        assert res["limits"][want] == ("32" if fabric == "efa" else "1")
    if fabric in ("ib", "roce"):
        assert env["NCCL_NET"] == "IB"  # fails instead of falling back to sockets
    if fabric == "efa":
        assert env["FI_PROVIDER"] == "efa" and env["FI_EFA_USE_DEVICE_RDMA"] == "1"
    # torchrun: node rank from the completion index, rendezvous on JobSet's pod 0 hostname
    cmd = shlex.split(container["command"][2])
    assert cmd[0] == "exec" and cmd[1] == "torchrun"
    assert "--node-rank=${JOB_COMPLETION_INDEX}" in cmd and "--nnodes=4" in cmd
    assert "--master-addr=gpuplan-probe-node-0-0.gpuplan-probe" in cmd
    assert cmd[-5:] == ["gpuplan", "probe", "--quick", "--out", "/results"]


def test_indexed_job_form_validates_service_job_and_reader_pod():
    text = k8s_manifest(
        nodes=2,
        gpus_per_node=4,
        image="reg/gpuplan:0.1",
        fabric="roce",
        ib_hca="mlx5_0,mlx5_1",
        cpus_per_pod=32,
        memory="500Gi",
        results_pvc="probe-rwx",
        form="indexed-job",
        queue="q1",
        namespace="ml",
        port=29411,
    )
    service, job = [d for d in yaml.safe_load_all(text) if d]
    validate(service)
    validate(job)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"] == {"job-name": "gpuplan-probe"}
    assert service["spec"]["ports"][0]["port"] == 29411
    assert job["metadata"]["namespace"] == "ml"
    assert job["metadata"]["labels"][KUEUE_QUEUE_LABEL] == "q1"
    assert job["spec"]["suspend"] is True  # Kueue unsuspends all pods at once
    pod = job["spec"]["template"]["spec"]
    assert pod["subdomain"] == service["metadata"]["name"]
    (container,) = pod["containers"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["NCCL_IB_HCA"] == "mlx5_0,mlx5_1"
    cmd = shlex.split(container["command"][2])
    assert "--master-addr=gpuplan-probe-0.gpuplan-probe" in cmd and "--master-port=29411" in cmd
    claims = [v["persistentVolumeClaim"]["claimName"] for v in pod["volumes"] if "persistentVolumeClaim" in v]  # fmt: skip
    assert claims == ["probe-rwx"]
    assert "ReadWriteMany" in text
    # collection: a running reader pod on the claim (kubectl cp cannot read a Completed pod)
    header = [line[1:].strip() for line in text.splitlines() if line.startswith("#")]
    reader_json = next(line for line in header if line.startswith("{"))
    reader = json.loads(reader_json)
    validate(reader)
    assert reader["kind"] == "Pod" and reader["metadata"]["namespace"] == "ml"
    assert reader["spec"]["volumes"][0]["persistentVolumeClaim"]["claimName"] == "probe-rwx"
    assert reader["spec"]["containers"][0]["image"] == "reg/gpuplan:0.1"
    name = reader["metadata"]["name"]
    assert f"kubectl -n ml cp {name}:/results ./results" in header
    assert f"kubectl -n ml wait --for=condition=Ready pod/{name} --timeout=5m" in header
    assert not any("cp gpuplan-probe-0" in line for line in header)


def test_s3_results_pod0_uploads_and_fails_loudly(tmp_path):
    (jobset,) = manifest(
        results_pvc=None, results_s3="s3://my-bucket/probes/", results_s3_secret="s3-creds"
    )
    validate_jobset(jobset)
    pod = pod_of(jobset)
    (container,) = pod["containers"]
    assert container["envFrom"] == [{"secretRef": {"name": "s3-creds"}}]
    results = next(v for v in pod["volumes"] if v["name"] == "results")
    assert results == {"name": "results", "emptyDir": {}}
    script = container["command"][2]
    assert "aws s3 cp --recursive" in script and "s3://my-bucket/probes" in script
    # run the pod's script with stand-ins for torchrun and aws: index 0 uploads, others do
    # not, a failed upload or probe is the pod's exit status
    import os
    import subprocess

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "calls.log"
    for tool, rc_var in (("torchrun", "TORCHRUN_RC"), ("aws", "AWS_RC")):
        path = bin_dir / tool
        path.write_text(f'#!/bin/bash\necho "{tool} $*" >> {log}\nexit "${{{rc_var}:-0}}"\n')
        path.chmod(0o755)

    def run(index: str, **rcs: str) -> int:
        log.write_text("")
        env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
        env |= {"JOB_COMPLETION_INDEX": index, **rcs}
        return subprocess.run(["bash", "-c", script], env=env, timeout=30).returncode

    assert run("0") == 0
    calls = log.read_text().splitlines()
    assert calls[0].startswith("torchrun ") and calls[1].startswith("aws s3 cp --recursive")
    assert calls[1].endswith("/results s3://my-bucket/probes")
    assert run("1") == 0 and "aws" not in log.read_text()
    assert run("0", AWS_RC="1") == 1
    assert run("0", TORCHRUN_RC="3") == 3 and "aws s3 cp" in log.read_text()  # still uploads


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"results_pvc": None}, "exactly one of --results-pvc"),
        ({"results_s3": "s3://b/p"}, "exactly one of --results-pvc"),
        ({"results_pvc": None, "results_s3": "http://b/p"}, "not an s3:// URI"),
        (
            {"results_pvc": None, "results_s3": "s3://b/p", "results_s3_secret": "Bad_Name"},
            "--results-s3-secret",
        ),
        ({"fabric": "efa"}, "--rdma-count"),
        ({"fabric": "tcp", "rdma_count": 2}, "not tcp"),
        ({"fabric": "infiniband"}, "--fabric"),
        ({"memory": "lots"}, "--memory"),
        ({"image": "my image"}, "--image"),
        ({"form": "deployment"}, "--k8s-form"),
        ({"cpus_per_pod": 0}, "--cpus-per-task"),
        ({"port": 70000}, "--port"),
        ({"queue": "Team A"}, "--queue"),
        ({"fabric": "efa", "rdma_count": 4, "ib_hca": "mlx5_0"}, "--ib-hca"),
    ],
)
def test_bad_k8s_options_are_input_errors(kw, match):
    with pytest.raises(InputError, match=match):
        manifest(**kw)


K8S_CLI = [
    "probe", "--emit", "k8s", "--nodes", "2", "--gpus-per-node", "8", "--fabric", "ib",
    "--image", "reg/gpuplan:0.1", "--cpus-per-task", "64", "--memory", "900Gi",
]  # fmt: skip


@pytest.mark.parametrize("form", ["jobset", "indexed-job"])
def test_cli_stdout_piped_into_a_yaml_parser_validates(run_cli, tmp_path, form):
    """`gpuplan probe --emit k8s ... | kubectl apply -f -`: stdout is the manifest, whole."""
    out = tmp_path / "emit"
    r = run_cli(
        *K8S_CLI, "--k8s-form", form, "--results-pvc", "rwx", "--queue", "q", "--out", str(out)
    )
    assert r.returncode == 0, r.stderr
    (written,) = [p for p in out.iterdir() if p.is_file()]
    assert r.stdout == written.read_text()  # byte for byte, no wrapping at 80 columns
    assert any(len(line) > 80 for line in r.stdout.splitlines())
    assert "Traceback" not in r.stderr and "wrote" in r.stderr
    docs = [d for d in yaml.safe_load_all(r.stdout) if d]
    if form == "jobset":
        (jobset,) = docs
        validate_jobset(jobset)
    else:
        assert [d["kind"] for d in docs] == ["Service", "Job"]
        for d in docs:
            validate(d)


@pytest.mark.parametrize(
    ("extra", "names"),
    [
        ([], ["--image", "--cpus-per-task", "--memory"]),  # no gpuplan:latest default
        (["--image", "r/g:1", "--cpus-per-task", "8"], ["--memory"]),
    ],
)
def test_cli_k8s_required_options_one_line_exit_2(run_cli, tmp_path, extra, names):
    out = tmp_path / "emit"
    r = run_cli(
        "probe", "--emit", "k8s", "--nodes", "2", "--fabric", "ib", "--results-pvc", "c",
        *extra, "--out", str(out),
    )  # fmt: skip
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in r.stderr
    assert all(n in lines[0] for n in names)
    assert r.stdout == "" and not out.exists()  # nothing written


def test_cli_slurm_only_option_with_k8s_is_refused(run_cli, tmp_path):
    r = run_cli(*K8S_CLI, "--results-pvc", "c", "--account", "ml", "--out", str(tmp_path / "o"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "--account" in r.stderr and "--emit slurm" in r.stderr
