"""Launch files for probing several nodes: a Slurm batch script or a Kubernetes manifest.

gpuplan does not invent a launcher: both files start ``torchrun`` on every node, and
``torchrun`` starts one ``gpuplan probe`` per GPU. The collectives probe then uses every
rank of the job (``scope: inter`` across nodes); rank 0 also measures its own node and is
the only one that writes a result file, into the results directory.

The inter-node network is never left to chance: ``fabric`` (``ib``, ``roce``, ``efa``,
``tcp``) sets the NCCL/libfabric environment so that NCCL uses that network or fails,
instead of falling back to TCP sockets while the result is read as fabric data
(:func:`fabric_env`). The variables are allowlisted, so the result file records them.

* Slurm: ``srun`` starts one task per node (``--cpus-per-task``: every CPU of the node
  unless given, since torchrun's ranks share the task), optionally inside a container
  image through pyxis/enroot (``--container-image``, the results directory mounted at the
  same path). ``--node-rank`` is ``$SLURM_NODEID``; the rendezvous is the first node of
  the allocation on ``port``, so rank 0 runs where the batch script runs and the file
  lands in ``out_dir`` there (usually a shared filesystem). The script lists the new
  result files at the end.
* Kubernetes: a JobSet (jobset.x-k8s.io/v1alpha2, one Indexed Job with one pod per node;
  JobSet makes the headless Service) or, without the JobSet controller, an Indexed Job
  plus a headless Service (the pattern of the Kubernetes docs "Job with Pod-to-Pod
  Communication"). Pods get the GPUs, the RDMA/EFA devices, ``IPC_LOCK`` (RDMA pins
  memory), and requests equal to limits (Guaranteed QoS, so they are not evicted first).
  A Kueue queue (``kueue.x-k8s.io/queue-name``) admits all pods at once (gang). Results
  go to a ReadWriteMany PersistentVolumeClaim, read back through a reader pod (``kubectl
  cp`` needs a running pod, a Completed one cannot serve it), or to an S3 prefix that
  pod 0 uploads to when the probe is done.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from gpuplan.errors import InputError

#: torchrun's default rendezvous port (``--master-port``), the default of ``port``.
RDZV_PORT = 29500
#: The inter-node networks :func:`fabric_env` knows.
FABRICS = ("auto", "ib", "roce", "efa", "tcp")
#: Kubernetes manifest forms.
K8S_FORMS = ("jobset", "indexed-job")
#: Device-plugin resource per RDMA fabric (Mellanox/NVIDIA RDMA device plugin, AWS EFA
#: device plugin); other plugins name theirs differently (``rdma_resource``).
RDMA_RESOURCE = {"ib": "rdma/ib", "roce": "rdma/ib", "efa": "vpc.amazonaws.com/efa"}
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
JOBSET_API = "jobset.x-k8s.io/v1alpha2"
#: The replicated job of the JobSet (pod names ``<name>-node-0-<index>``).
JOBSET_REPLICATED_JOB = "node"

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$")
_SLURM_WORD = re.compile(r"^[A-Za-z0-9_.,:@+-]+$")
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@#+-]*$")  # '#': enroot's registry#image
_HCA = re.compile(r"^[\^=]?[A-Za-z0-9_]+(:\d+)?(,[A-Za-z0-9_]+(:\d+)?)*$")
_IFNAME = re.compile(r"^[\^=]?[A-Za-z0-9_.-]+(,[A-Za-z0-9_.-]+)*$")
_QUANTITY = re.compile(r"^\d+(\.\d+)?(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E)?$")
_K8S_NAME = re.compile(r"^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$")
_S3 = re.compile(r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s'\"]*)?$")


def _check(nodes: int, gpus_per_node: int) -> None:
    if nodes < 1:
        raise InputError(f"--nodes must be at least 1 (got {nodes})", hint="e.g. --nodes 2")
    if gpus_per_node < 1:
        raise InputError(
            f"--gpus-per-node must be at least 1 (got {gpus_per_node})",
            hint="e.g. --gpus-per-node 8",
        )


def _check_port(port: int) -> None:
    if not 1 <= port <= 65535:
        raise InputError(f"--port must be 1-65535 (got {port})", hint=f"e.g. --port {RDZV_PORT}")


def _check_cpus(cpus_per_task: int | None) -> None:
    if cpus_per_task is not None and cpus_per_task < 1:
        raise InputError(
            f"--cpus-per-task must be at least 1 (got {cpus_per_task})",
            hint="e.g. --cpus-per-task 96",
        )


def _check_word(value: str | None, option: str, pattern: re.Pattern[str], hint: str) -> None:
    if value is not None and not pattern.match(value):
        raise InputError(f"{option} {value!r} is not valid", hint=hint)


def fabric_env(
    fabric: str, *, ib_hca: str | None = None, socket_ifname: str | None = None
) -> dict[str, str]:
    """The NCCL/libfabric environment that makes NCCL use ``fabric`` between nodes.

    ``ib`` and ``roce`` set ``NCCL_NET=IB`` (NCCL's verbs transport; RoCE is verbs over
    Ethernet, and NCCL >= 2.21 picks the RoCEv2 GID itself): without an HCA NCCL then
    fails instead of silently using sockets. ``efa`` selects libfabric's EFA provider with
    GPUDirect RDMA (``FI_PROVIDER=efa``, ``FI_EFA_USE_DEVICE_RDMA=1``) for the aws-ofi-nccl
    plugin. ``tcp`` asks for NCCL's socket transport on purpose. ``auto`` pins nothing:
    NCCL picks the network itself (and may fall back to sockets; the launcher says so).
    ``socket_ifname`` (NCCL's
    bootstrap and socket interface, e.g. ``eth0`` or ``^lo,docker``) sets
    ``NCCL_SOCKET_IFNAME`` and ``GLOO_SOCKET_IFNAME``.

    >>> fabric_env("tcp", socket_ifname="eth0")["NCCL_NET"]
    'Socket'
    >>> sorted(fabric_env("efa"))
    ['FI_EFA_USE_DEVICE_RDMA', 'FI_PROVIDER']
    """
    if fabric not in FABRICS:
        raise InputError(f"--fabric {fabric!r} is not one of {', '.join(FABRICS)}")
    _check_word(ib_hca, "--ib-hca", _HCA, "NCCL_IB_HCA syntax, e.g. mlx5_0,mlx5_1 or =mlx5_0:1")
    _check_word(socket_ifname, "--socket-ifname", _IFNAME, "e.g. eth0, or ^lo,docker to exclude")
    if ib_hca and fabric not in ("ib", "roce"):
        raise InputError(
            f"--ib-hca applies to --fabric ib or roce, not {fabric}", hint="drop --ib-hca"
        )
    env: dict[str, str] = {}
    if fabric == "auto":
        pass
    elif fabric in ("ib", "roce"):
        env["NCCL_NET"] = "IB"
        env["NCCL_IB_DISABLE"] = "0"
        if ib_hca:
            env["NCCL_IB_HCA"] = ib_hca
    elif fabric == "efa":
        env["FI_PROVIDER"] = "efa"
        env["FI_EFA_USE_DEVICE_RDMA"] = "1"
    else:
        env["NCCL_NET"] = "Socket"
        env["NCCL_IB_DISABLE"] = "1"
    if socket_ifname:
        env["NCCL_SOCKET_IFNAME"] = socket_ifname
        env["GLOO_SOCKET_IFNAME"] = socket_ifname
    return env


def _torchrun(
    *, nodes: int, gpus_per_node: int, node_rank: str, head: str, port: int, probe: str
) -> str:
    return (
        f"torchrun --nnodes={nodes} --nproc-per-node={gpus_per_node}"
        f" --node-rank={node_rank} --master-addr={head} --master-port={port}"
        f" --no-python {probe}"
    )


def _probe_cmd(probe_args: Sequence[str], out_arg: str) -> str:
    """``gpuplan probe ARGS --out OUT``; ``out_arg`` is inserted as shell text."""
    return " ".join(shlex.quote(a) for a in ["gpuplan", "probe", *probe_args]) + f" --out {out_arg}"


def _storage_path(probe_args: Sequence[str]) -> str | None:
    args = list(probe_args)
    if "--storage-path" in args[:-1]:
        return args[args.index("--storage-path") + 1]
    return None


def slurm_script(
    *,
    nodes: int,
    gpus_per_node: int,
    fabric: str,
    probe_args: Sequence[str] = (),
    out_dir: str = "results",
    job_name: str = "gpuplan-probe",
    time_limit: str = "00:30:00",
    partition: str | None = None,
    account: str | None = None,
    cpus_per_task: int | None = None,
    container_image: str | None = None,
    port: int = RDZV_PORT,
    ib_hca: str | None = None,
    socket_ifname: str | None = None,
    setup: str | None = None,
) -> str:
    """An sbatch script running the probe under torchrun on ``nodes`` x ``gpus_per_node``.

    Parameters
    ----------
    fabric
        Inter-node network, one of :data:`FABRICS` (sets the environment of
        :func:`fabric_env`).
    cpus_per_task
        CPUs of the one task per node; None: every CPU of the node (``$SLURM_CPUS_ON_NODE``,
        the job is exclusive).
    container_image
        Run under pyxis/enroot (``srun --container-image``); ``out_dir`` and the
        ``--storage-path`` of ``probe_args`` are mounted at the same path.
    port
        Rendezvous TCP port on the first node.
    setup
        Shell line before ``srun`` (e.g. ``module load ...``); None: ``source
        .venv/bin/activate`` without a container, nothing with one.
    """
    _check(nodes, gpus_per_node)
    _check_port(port)
    _check_cpus(cpus_per_task)
    if not re.fullmatch(r"\d{1,3}:\d{2}:\d{2}|\d+-\d{1,2}(:\d{2}){0,2}|\d+", time_limit):
        raise InputError(
            f"--time {time_limit!r} is not a Slurm time", hint="use HH:MM:SS, e.g. 00:30:00"
        )
    for value, option in ((partition, "--partition"), (account, "--account"), (job_name, "name")):
        _check_word(value, option, _SLURM_WORD, "one word: letters, digits, '_', '-', '.'")
    _check_word(container_image, "--image", _IMAGE, "e.g. nvcr.io#myorg/gpuplan:0.1")
    env = fabric_env(fabric, ib_hca=ib_hca, socket_ifname=socket_ifname)
    lines = [
        "#!/bin/bash",
        f"#SBATCH --job-name={job_name}",
        f"#SBATCH --nodes={nodes}",
        "#SBATCH --ntasks-per-node=1",
        f"#SBATCH --gpus-per-node={gpus_per_node}",
        *([f"#SBATCH --cpus-per-task={cpus_per_task}"] if cpus_per_task else []),
        "#SBATCH --exclusive",
        f"#SBATCH --time={time_limit}",
        f"#SBATCH --output={job_name}-%j.log",
    ]
    if partition:
        lines.append(f"#SBATCH --partition={partition}")
    if account:
        lines.append(f"#SBATCH --account={account}")
    torchrun = _torchrun(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        node_rank='"$SLURM_NODEID"',
        head='"$HEAD_NODE"',
        port=port,
        probe=_probe_cmd(probe_args, '"$PROBE_RESULTS_DIR"'),
    )
    srun = [
        "srun",
        f"--nodes={nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={cpus_per_task}"
        if cpus_per_task
        else '--cpus-per-task="$SLURM_CPUS_ON_NODE"',
        "--kill-on-bad-exit=1",
    ]
    if container_image:
        mounts = ['"$PROBE_RESULTS_DIR:$PROBE_RESULTS_DIR"']
        storage = _storage_path(probe_args)
        if storage:
            mounts.append(shlex.quote(f"{storage}:{storage}"))
        srun += [
            f"--container-image={shlex.quote(container_image)}",
            "--container-mounts=" + ",".join(mounts),
        ]
    if setup is None and not container_image:
        setup = "source .venv/bin/activate"
    lines += [
        "# Generated by `gpuplan probe --emit slurm`: one torchrun per node, one rank per GPU.",
        "# Rank 0 runs on the first node (where this script runs) and alone writes the result.",
        "set -euo pipefail",
        *([setup] if setup else []),
        f"mkdir -p {shlex.quote(out_dir)}",
        f"PROBE_RESULTS_DIR=$(cd {shlex.quote(out_dir)} && pwd -P)",
        'HEAD_NODE=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        "export PROBE_RESULTS_DIR HEAD_NODE",
        (
            "# inter-node fabric: not pinned (NCCL picks it and may fall back to TCP sockets;"
            " emit with --fabric ib|roce|efa|tcp to pin it)"
            if fabric == "auto"
            else f"# inter-node fabric: {fabric} (NCCL uses it or fails; recorded in the result's env)"
        ),
        *(f"export {k}={shlex.quote(v)}" for k, v in env.items()),
        'START=$(mktemp "$PROBE_RESULTS_DIR/.gpuplan-probe-start.XXXXXX")',
        "rc=0",
        " ".join(srun) + f" bash -c {shlex.quote(torchrun)} || rc=$?",
        "echo 'gpuplan: result files of this job:'",
        "find \"$PROBE_RESULTS_DIR\" -name '*.json' ! -name '*.partial.json' -newer \"$START\" -print",
        'rm -f "$START"',
        'exit "$rc"',
    ]
    return "\n".join(lines) + "\n"


def _block_dumper() -> type:
    import yaml

    class BlockDumper(yaml.SafeDumper):
        """Multi-line strings (the pod's shell script) as literal blocks, readable."""

    def text(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
        style = "|" if "\n" in value else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)

    BlockDumper.add_representer(str, text)
    return BlockDumper


def _k8s_env(env: Mapping[str, str]) -> list[dict[str, Any]]:
    return [{"name": k, "value": v} for k, v in env.items()]


def collector_pod(
    *, name: str, claim: str, image: str, namespace: str | None = None
) -> dict[str, Any]:
    """A pod that mounts the results claim read-only and waits, for ``kubectl cp``."""
    meta: dict[str, Any] = {"name": f"{name}-collect"}
    if namespace:
        meta["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "collect",
                    "image": image,
                    "command": ["sleep", "3600"],
                    "volumeMounts": [
                        {"name": "results", "mountPath": "/results", "readOnly": True}
                    ],
                }
            ],
            "volumes": [
                {
                    "name": "results",
                    "persistentVolumeClaim": {"claimName": claim, "readOnly": True},
                }
            ],
        },
    }


def k8s_manifest(
    *,
    nodes: int,
    gpus_per_node: int,
    image: str,
    fabric: str,
    cpus_per_pod: int,
    memory: str,
    results_pvc: str | None = None,
    results_s3: str | None = None,
    results_s3_secret: str | None = None,
    form: str = "jobset",
    probe_args: Sequence[str] = (),
    name: str = "gpuplan-probe",
    namespace: str | None = None,
    queue: str | None = None,
    gpu_resource: str = "nvidia.com/gpu",
    rdma_resource: str | None = None,
    rdma_count: int | None = None,
    port: int = RDZV_PORT,
    ib_hca: str | None = None,
    socket_ifname: str | None = "eth0",
) -> str:
    """A JobSet, or an Indexed Job and its headless Service (multi-document YAML).

    Parameters
    ----------
    cpus_per_pod, memory
        CPU count and memory (a Kubernetes quantity, e.g. ``1500Gi``) of each pod, set as
        requests and limits alike (Guaranteed QoS).
    results_pvc, results_s3
        Exactly one: a ReadWriteMany claim mounted at ``/results``, or an ``s3://`` prefix
        pod 0 uploads ``/results`` to (``aws s3 cp``; credentials from the pod's service
        account or the secret ``results_s3_secret``).
    rdma_resource, rdma_count
        Device-plugin resource of the fabric (default :data:`RDMA_RESOURCE`) and how many
        per pod (default 1, a shared RDMA device; EFA needs the instance's count).
    socket_ifname
        NCCL's bootstrap interface: the pod network, ``eth0``.
    """
    import yaml

    _check(nodes, gpus_per_node)
    _check_port(port)
    _check_cpus(cpus_per_pod)
    if form not in K8S_FORMS:
        raise InputError(f"--k8s-form {form!r} is not one of {', '.join(K8S_FORMS)}")
    if not _DNS_LABEL.match(name):
        raise InputError(
            f"name {name!r} is not a DNS label", hint="lower-case letters, digits and '-'"
        )
    _check_word(image, "--image", _IMAGE, "e.g. registry.example.com/gpuplan:0.1")
    _check_word(memory, "--memory", _QUANTITY, "a Kubernetes quantity, e.g. 1500Gi")
    for value, option in (
        (queue, "--queue"),
        (results_pvc, "--results-pvc"),
        (namespace, "--namespace"),
        (results_s3_secret, "--results-s3-secret"),
    ):
        _check_word(value, option, _K8S_NAME, "a Kubernetes name: lower-case letters, digits, '-'")
    if (results_pvc is None) == (results_s3 is None):
        raise InputError(
            "--emit k8s needs exactly one of --results-pvc CLAIM or --results-s3 s3://BUCKET/PREFIX",
            hint="a ReadWriteMany claim mounted on every pod, or an S3 prefix pod 0 uploads to",
        )
    if results_s3 is not None and not _S3.match(results_s3):
        raise InputError(
            f"--results-s3 {results_s3!r} is not an s3:// URI", hint="e.g. s3://my-bucket/gpuplan"
        )
    if results_s3_secret and results_s3 is None:
        raise InputError("--results-s3-secret applies with --results-s3", hint="add --results-s3")
    env = fabric_env(fabric, ib_hca=ib_hca, socket_ifname=socket_ifname)
    rdma_name = rdma_resource or RDMA_RESOURCE.get(fabric)
    if fabric == "tcp" and (rdma_resource or rdma_count):
        raise InputError("--rdma-resource/--rdma-count apply to ib, roce or efa, not tcp")
    if fabric == "efa" and rdma_count is None:
        raise InputError(
            "--fabric efa needs --rdma-count N: the EFA interfaces of the instance type",
            hint="see the instance type's network specification (AWS EC2 docs)",
        )
    if rdma_count is not None and rdma_count < 1:
        raise InputError(f"--rdma-count must be at least 1 (got {rdma_count})")
    if rdma_resource is not None and not re.match(r"^[a-z0-9.-]+/[A-Za-z0-9._-]+$", rdma_resource):
        raise InputError(
            f"--rdma-resource {rdma_resource!r} is not a resource name", hint="e.g. rdma/ib"
        )

    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    top_meta = {**meta, "labels": {KUEUE_QUEUE_LABEL: queue}} if queue else dict(meta)
    if form == "jobset":
        head = f"{name}-{JOBSET_REPLICATED_JOB}-0-0.{name}"
    else:
        head = f"{name}-0.{name}"  # pod 0 of the Indexed Job, through the headless Service
    torchrun = _torchrun(
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        node_rank="${JOB_COMPLETION_INDEX}",
        head=head,
        port=port,
        probe=_probe_cmd(probe_args, "/results"),
    )
    if results_s3 is not None:
        dest = results_s3.rstrip("/")
        command = (
            "rc=0\n"
            f"{torchrun} || rc=$?\n"
            'if [ "${JOB_COMPLETION_INDEX}" = "0" ]; then\n'
            f"  aws s3 cp --recursive --exclude '*' --include '*.json' /results {shlex.quote(dest)}"
            f" || {{ echo 'gpuplan: upload to {dest} failed' >&2; rc=1; }}\n"
            "fi\n"
            'exit "$rc"\n'
        )
    else:
        command = f"exec {torchrun}"
    limits: dict[str, Any] = {
        "cpu": str(cpus_per_pod),
        "memory": memory,
        gpu_resource: str(gpus_per_node),
    }
    if rdma_name and fabric != "tcp":
        limits[rdma_name] = str(rdma_count or 1)
    container: dict[str, Any] = {
        "name": "probe",
        "image": image,
        "command": ["bash", "-c", command],
        "env": _k8s_env(env),
        "ports": [{"name": "rdzv", "containerPort": port}],
        "resources": {"requests": dict(limits), "limits": dict(limits)},
        "volumeMounts": [
            {"name": "results", "mountPath": "/results"},
            {"name": "dshm", "mountPath": "/dev/shm"},
        ],
    }
    if fabric != "tcp":
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    if results_s3_secret:
        container["envFrom"] = [{"secretRef": {"name": results_s3_secret}}]
    results_volume: dict[str, Any] = (
        {"name": "results", "persistentVolumeClaim": {"claimName": results_pvc}}
        if results_pvc
        else {"name": "results", "emptyDir": {}}
    )
    pod_spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [container],
        "volumes": [results_volume, {"name": "dshm", "emptyDir": {"medium": "Memory"}}],
    }
    job_spec: dict[str, Any] = {
        "completionMode": "Indexed",
        "completions": nodes,
        "parallelism": nodes,
        "backoffLimit": 0,
    }
    docs: list[dict[str, Any]]
    if form == "jobset":
        job_spec["template"] = {"spec": pod_spec}
        jobset = {
            "apiVersion": JOBSET_API,
            "kind": "JobSet",
            "metadata": top_meta,
            "spec": {
                "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
                "failurePolicy": {"maxRestarts": 0},
                "replicatedJobs": [
                    {"name": JOBSET_REPLICATED_JOB, "replicas": 1, "template": {"spec": job_spec}}
                ],
            },
        }
        docs = [jobset]
    else:
        pod_spec["subdomain"] = name
        job_spec["template"] = {"metadata": {"labels": {"app": name}}, "spec": pod_spec}
        if queue:
            job_spec["suspend"] = True  # Kueue admits (unsuspends) every pod at once
        service = {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta,
            "spec": {
                "clusterIP": "None",
                "publishNotReadyAddresses": True,
                "selector": {"job-name": name},
                "ports": [{"name": "rdzv", "port": port}],
            },
        }
        job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": top_meta, "spec": job_spec}
        docs = [service, job]
    ns = f" -n {namespace}" if namespace else ""
    kind = "jobset" if form == "jobset" else "job"
    done = "Completed" if form == "jobset" else "complete"
    header = [
        f"# Generated by `gpuplan probe --emit k8s --k8s-form {form}`: one pod per node",
        f"# ({nodes}), torchrun rendezvous on pod 0 at {head}:{port};",
        "# rank 0 alone writes the result.",
        f"# Network: {fabric} (NCCL uses it or fails)"
        + (f"; {rdma_name} x{rdma_count or 1} per pod" if fabric != "tcp" else ""),
        "# Scheduling: "
        + (
            f"Kueue queue '{queue}' admits all pods at once (gang)."
            if queue
            else "no --queue: pods may start on part of the nodes and wait in the rendezvous."
        ),
        *(["# Needs the JobSet controller (jobset.x-k8s.io)."] if form == "jobset" else []),
        f"# Wait:    kubectl{ns} wait --for=condition={done} {kind}/{name} --timeout=2h",
    ]
    if results_pvc:
        reader = json.dumps(
            collector_pod(name=name, claim=results_pvc, image=image, namespace=namespace),
            separators=(",", ":"),
        )
        header += [
            f"# Results: PersistentVolumeClaim '{results_pvc}' at /results; it must be",
            "#   ReadWriteMany (every pod mounts it, on different nodes). Create it first.",
            "# Collect (kubectl cp needs a running pod; a Completed one cannot serve it):",
            f"#   kubectl{ns} apply -f - <<'EOF'",
            f"#   {reader}",
            "#   EOF",
            f"#   kubectl{ns} wait --for=condition=Ready pod/{name}-collect --timeout=5m",
            f"#   kubectl{ns} cp {name}-collect:/results ./results",
            f"#   kubectl{ns} delete pod {name}-collect",
        ]
    else:
        header += [
            f"# Results: pod 0 uploads /results to {results_s3} when the probe is done"
            + (
                f" (credentials: secret '{results_s3_secret}')."
                if results_s3_secret
                else " (credentials: the pod's service account)."
            ),
            f"# Collect: aws s3 cp --recursive {results_s3} ./results",
        ]
    body = yaml.dump_all(docs, Dumper=_block_dumper(), sort_keys=False, width=1 << 20)
    return "\n".join(header) + "\n" + body
