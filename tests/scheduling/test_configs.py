"""Emitted Kueue, ResourceQuota and Slurm configuration carries the simulated quotas."""

from __future__ import annotations

import re

import pytest
import yaml

from gpuplan.errors import InputError
from gpuplan.scheduling import Cluster, NodePool, quota_plan, render_config, write_config
from gpuplan.scheduling.schema import TeamSpec

TEAMS = [
    TeamSpec(name="Research", share=40, cohort="ml", borrowing_limit_gpus=16),
    TeamSpec(name="product", share=40, cohort="ml", lending_limit_gpus=8, priority_class="high"),
    TeamSpec(name="interns", share=20, quota_gpus=8, priority_class="low"),
]
CLUSTER = Cluster.homogeneous(8, 8)


def _docs(text: str) -> list[dict]:
    return [d for d in yaml.safe_load_all(text) if d is not None]


def test_quota_plan_splits_the_cluster():
    rows = {r.team: r for r in quota_plan(TEAMS, CLUSTER)}
    assert rows["interns"].nominal_gpus == 8
    assert rows["Research"].nominal_gpus + rows["product"].nominal_gpus == 56
    assert rows["Research"].nominal_gpus == 28
    assert rows["Research"].namespace == "research"
    assert rows["product"].parent == "ml"
    with pytest.raises(InputError, match="same namespace"):
        quota_plan([TeamSpec(name="a_b"), TeamSpec(name="a.b")], CLUSTER)


def test_kueue_yaml_expresses_the_quotas():
    rows = quota_plan(TEAMS, CLUSTER)
    (text,) = render_config("kueue", rows, CLUSTER, policy="fair-share", preemption=True).values()
    docs = _docs(text)
    kinds = [d["kind"] for d in docs]
    assert kinds.count("ClusterQueue") == 3 and kinds.count("LocalQueue") == 3
    assert kinds.count("ResourceFlavor") == 1 and kinds.count("WorkloadPriorityClass") == 3
    cqs = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "ClusterQueue"}
    quota = {
        name: spec["resourceGroups"][0]["flavors"][0]["resources"][0] for name, spec in cqs.items()
    }
    assert {n: q["nominalQuota"] for n, q in quota.items()} == {
        "research": 28,
        "product": 28,
        "interns": 8,
    }
    assert sum(q["nominalQuota"] for q in quota.values()) == CLUSTER.total_gpus
    assert quota["research"]["borrowingLimit"] == 16
    assert "borrowingLimit" not in quota["product"]
    assert quota["product"]["lendingLimit"] == 8
    assert cqs["research"]["cohort"] == "ml" and cqs["product"]["cohort"] == "ml"
    assert "cohort" not in cqs["interns"]
    assert cqs["research"]["preemption"]["reclaimWithinCohort"] == "Any"
    assert cqs["research"]["resourceGroups"][0]["coveredResources"] == ["nvidia.com/gpu"]
    lqs = {
        d["metadata"]["namespace"]: d["spec"]["clusterQueue"]
        for d in docs
        if d["kind"] == "LocalQueue"
    }
    assert lqs == {"research": "research", "product": "product", "interns": "interns"}
    prios = {
        d["metadata"]["name"]: d["value"] for d in docs if d["kind"] == "WorkloadPriorityClass"
    }
    assert prios == {"high": 1000, "normal": 100, "low": 10}
    # no preemption simulated: none configured
    (text2,) = render_config("kueue", rows, CLUSTER, policy="fifo").values()
    cq2 = next(d for d in _docs(text2) if d["kind"] == "ClusterQueue")
    assert cq2["spec"]["preemption"]["reclaimWithinCohort"] == "Never"
    assert cq2["spec"]["queueingStrategy"] == "StrictFIFO"


def test_kueue_flavors_per_node_type():
    c = Cluster((NodePool("h100", 8, 6), NodePool("a100", 8, 2)))
    teams = [TeamSpec(name="a", share=1), TeamSpec(name="b", share=1, node_type="a100")]
    (text,) = render_config("kueue", quota_plan(teams, c), c).values()
    docs = _docs(text)
    flavors = {
        d["metadata"]["name"]: d["spec"]["nodeLabels"]
        for d in docs
        if d["kind"] == "ResourceFlavor"
    }
    assert flavors == {
        "h100": {"gpuplan.io/node-type": "h100"},
        "a100": {"gpuplan.io/node-type": "a100"},
    }
    cqs = {d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "ClusterQueue"}
    per = {
        name: {
            f["name"]: f["resources"][0]["nominalQuota"]
            for f in spec["resourceGroups"][0]["flavors"]
        }
        for name, spec in cqs.items()
    }
    assert per["b"] == {"h100": 0, "a100": 32}
    assert per["a"] == {"h100": 24, "a100": 8}  # 32 GPUs split 48:16 like the pools


def test_resourcequota_yaml():
    rows = quota_plan(TEAMS, CLUSTER)
    (text,) = render_config("resourcequota", rows, CLUSTER).values()
    docs = _docs(text)
    hard = {
        d["metadata"]["namespace"]: d["spec"]["hard"] for d in docs if d["kind"] == "ResourceQuota"
    }
    assert hard == {
        "research": {"requests.nvidia.com/gpu": "28"},
        "product": {"requests.nvidia.com/gpu": "28"},
        "interns": {"requests.nvidia.com/gpu": "8"},
    }
    assert {d["metadata"]["name"] for d in docs if d["kind"] == "Namespace"} == set(hard)


def _conf(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


def test_slurm_conf_and_sacctmgr_express_quotas_and_policy():
    rows = quota_plan(TEAMS, CLUSTER)
    files = render_config(
        "slurm",
        rows,
        CLUSTER,
        policy="fair-share",
        preemption=True,
        quota_mode="resourcequota",
        fairshare_algorithm="classic",
        options={"decay_half_life_s": 3 * 86400, "weight_fairshare": 5000},
    )
    conf = _conf(files["slurm.conf"])
    assert conf["SchedulerType"] == ["sched/backfill"]
    assert conf["PriorityType"] == ["priority/multifactor"]
    assert conf["PriorityFlags"] == ["NO_FAIR_TREE"]
    assert conf["PriorityDecayHalfLife"] == ["3-00:00:00"]
    assert conf["PriorityWeightFairshare"] == ["5000"]
    assert conf["PreemptType"] == ["preempt/qos"] and conf["PreemptMode"] == ["REQUEUE"]
    assert conf["NodeName"] == ["gpu[0001-0008] Gres=gpu:8 State=UNKNOWN"]
    assert conf["PartitionName"][0].startswith("gpu Nodes=gpu[0001-0008]")
    script = files["sacctmgr.sh"]
    assert script.startswith("#!/bin/sh\n")
    accounts = {
        m["name"]: m
        for m in (
            re.match(
                r"sacctmgr -i add account (?P<name>\S+) Parent=(?P<parent>\S+) "
                r"Fairshare=(?P<fs>\d+)(?: GrpTRES=gres/gpu=(?P<gpus>\d+))?",
                line,
            )
            for line in script.splitlines()
        )
        if m
    }
    assert accounts["research"]["parent"] == "ml" and accounts["interns"]["parent"] == "root"
    assert {a: int(accounts[a]["fs"]) for a in ("research", "product", "interns")} == {
        "research": 40,
        "product": 40,
        "interns": 20,
    }
    assert {a: int(accounts[a]["gpus"]) for a in ("research", "product", "interns")} == {
        "research": 28,
        "product": 28,
        "interns": 8,
    }
    assert int(accounts["ml"]["fs"]) == 80
    qos = dict(re.findall(r"add qos (\S+) Priority=(\d+)", script))
    assert qos == {"high": "1000", "normal": "100", "low": "10"}
    assert "modify qos high set Preempt=normal,low PreemptMode=requeue" in script
    assert "modify qos normal set Preempt=low PreemptMode=requeue" in script
    assert "set QOS=high DefaultQOS=high" in script


def test_slurm_kueue_style_limits_and_other_policies():
    rows = quota_plan(TEAMS, CLUSTER)
    files = render_config("slurm", rows, CLUSTER, policy="fifo", quota_mode="kueue")
    script = files["sacctmgr.sh"]
    # borrowing becomes a cap of nominal + borrowingLimit; the cohort caps the sum
    assert "add account research Parent=ml Fairshare=40 GrpTRES=gres/gpu=44" in script
    assert re.search(r"add account product Parent=ml Fairshare=40\n", script)
    assert "add account ml Parent=root Fairshare=80 GrpTRES=gres/gpu=56" in script
    conf = _conf(files["slurm.conf"])
    assert conf["SchedulerType"] == ["sched/builtin"]
    assert conf["PriorityType"] == ["priority/basic"]
    assert "PreemptType" not in conf
    tree = _conf(
        render_config("slurm", rows, CLUSTER, policy="fair-share", fairshare_algorithm="fair-tree")[
            "slurm.conf"
        ]
    )
    assert "PriorityFlags" not in tree  # Fair Tree is Slurm's default


def test_write_config_is_atomic_and_does_not_overwrite(tmp_path):
    files = {"a.yaml": "x: 1\n", "s.sh": "#!/bin/sh\n"}
    paths = write_config(files, tmp_path / "cfg")
    assert [p.read_text() for p in paths] == ["x: 1\n", "#!/bin/sh\n"]
    assert paths[1].stat().st_mode & 0o111
    with pytest.raises(InputError, match="already exists"):
        write_config(files, tmp_path / "cfg")
    write_config({"a.yaml": "x: 2\n"}, tmp_path / "cfg", force=True)
    assert (tmp_path / "cfg" / "a.yaml").read_text() == "x: 2\n"
    assert not [p for p in (tmp_path / "cfg").iterdir() if p.name.startswith(".")]
    with pytest.raises(InputError, match="unknown config kind"):
        render_config("yarn", quota_plan(TEAMS, CLUSTER), CLUSTER)
