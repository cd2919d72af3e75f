"""One fleet answer: ``gpuplan plan`` and ``gpuplan forecast infer`` size a serving workload
with the same function (``size_serving_fleet``), so they give the same GPU count.

Everything runs the real CLI in subprocesses on the shipped catalog and calibration.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml

from gpuplan.forecast.inference import ServingDemand, size_serving_fleet
from gpuplan.forecast.serving import LengthDist
from gpuplan.plan import workloads

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted(
    p
    for p in (REPO / "examples").glob("*.yaml")
    if (yaml.safe_load(p.read_text()).get("workloads") or {}).get("inference")
)


def _infer_args(w: dict, gpu: str) -> list[str]:
    args = ["forecast", "infer", "--model", w["model"], "--gpu", gpu, "--qps", str(w["qps"])]
    for side in ("input", "output"):
        d = w[f"{side}_tokens"]
        d = d if isinstance(d, dict) else {"mean": d}
        args += [f"--{side}-tokens", str(round(d["mean"]))]
        if d.get("p99") is not None:
            args += [f"--{side}-tokens-p99", str(d["p99"])]
    for key, opt in (("ttft_slo_s", "--ttft-slo-s"), ("tpot_slo_s", "--tpot-slo-s")):
        if w.get(key) is not None:
            args += [opt, str(w[key])]
    args += ["--slo-percentile", w.get("slo_percentile", "p99")]
    args += ["--precision", w.get("precision", "bf16"), "--format", "json"]
    if w.get("tp"):
        args += ["--tp", str(w["tp"])]
    return args


def test_examples_with_serving_exist() -> None:
    assert len(EXAMPLES) >= 1


@pytest.mark.parametrize("example", EXAMPLES, ids=[p.stem for p in EXAMPLES])
def test_plan_and_forecast_infer_give_the_same_gpu_count(run_cli, tmp_path, example) -> None:
    scenario = yaml.safe_load(example.read_text())
    plan = run_cli("plan", str(example), "--out", str(tmp_path / "plan"), "--format", "json")
    assert plan.returncode == 0, plan.stderr[-2000:]
    doc = json.loads(plan.stdout)
    services = {w["name"]: w for w in scenario["workloads"]["inference"]}
    seen: dict[tuple[str, str, int], int] = {}
    compared = 0
    for opt in doc["options"]:
        gpn = opt["gpus_per_node"]["value"]
        for s in opt["inference"]:
            if s.get("error"):
                continue
            gpu = opt["gpu"]
            key = (s["name"], gpu, gpn)
            if key not in seen:
                # the option's machine: TP stays inside one (--node-gpus)
                r = run_cli(*_infer_args(services[s["name"]], gpu), "--node-gpus", str(gpn))
                assert r.returncode == 0, r.stderr
                seen[key] = json.loads(r.stdout)["num_gpus"]
            assert s["gpus_for_load"]["value"] == seen[key], (opt["id"], s["name"])
            # the plan buys whole nodes: the same count rounded up, nothing more
            assert s["gpus"]["value"] == math.ceil(seen[key] / gpn) * gpn
            compared += 1
    assert compared >= 2


def test_llm_serving_example_is_sized_from_the_distribution_not_at_p99(run_cli) -> None:
    """Sizing every request at the p99 lengths (4096 in / 1024 out) needs far more GPUs than
    requests drawn from the distribution: the plan must not size the former."""
    scenario = yaml.safe_load((REPO / "examples/llm-serving.yaml").read_text())
    w = scenario["workloads"]["inference"][0]
    dist = size_serving_fleet(
        ServingDemand(
            model=w["model"],
            gpus=("h100",),
            qps=w["qps"],
            inputs=LengthDist(w["input_tokens"]["mean"], w["input_tokens"]["p99"]),
            outputs=LengthDist(w["output_tokens"]["mean"], w["output_tokens"]["p99"]),
            ttft_slo_s=w["ttft_slo_s"],
            tpot_slo_s=w["tpot_slo_s"],
        )
    )
    at_p99 = size_serving_fleet(
        ServingDemand(
            model=w["model"],
            gpus=("h100",),
            qps=w["qps"],
            inputs=LengthDist(w["input_tokens"]["p99"]),
            outputs=LengthDist(w["output_tokens"]["p99"]),
            ttft_slo_s=w["ttft_slo_s"],
            tpot_slo_s=w["tpot_slo_s"],
        )
    )
    assert dist.num_gpus < at_p99.num_gpus
    assert dist.num_gpus == dist.replicas * dist.gpus_per_replica
    assert "lognormal mean 1024, p99 4096" in dist.sized_from


def test_cost_per_million_tokens_is_price_times_gpus_over_tokens_per_hour() -> None:
    r = size_serving_fleet(
        ServingDemand(
            model="llama3.1-8b",
            gpus=("h100",),
            qps=5,
            inputs=LengthDist(512),
            outputs=LengthDist(128),
            ttft_slo_s=1.0,
            tpot_slo_s=0.05,
        )
    )
    assert r.usd_per_hour is not None
    tokens_per_hour = 5 * 128 * 3600
    assert r.usd_per_million_output_tokens == pytest.approx(r.usd_per_hour / tokens_per_hour * 1e6)
    assert r.cost_derivation is not None and "USD per GPU-hour" in r.cost_derivation
    for c in r.result["candidates"]:
        if c.get("num_gpus") is None:
            assert "reason" in c
            continue
        assert c["usd_per_million_output_tokens"] == pytest.approx(
            c["usd_per_hour"] / tokens_per_hour * 1e6
        )
        assert f"x {c['num_gpus']} GPUs" in c["cost_derivation"]


def test_scenario_lengths_map_to_the_forecast_distribution() -> None:
    from gpuplan.plan.scenario import LengthDistribution

    d = workloads.length_dist(LengthDistribution(mean=1000, p50=700, p99=5000))
    assert d.kind == "lognormal" and d.describe()["fixed_by"] == ["mean", "p99"]
    assert d.quantile(0.99) == pytest.approx(5000)
    d50 = workloads.length_dist(LengthDistribution(mean=1000, p50=700))
    assert d50.quantile(0.5) == pytest.approx(700)
    assert workloads.length_dist(LengthDistribution(mean=300)).kind == "fixed"


def test_no_signature_inspection_left_in_plan_workloads() -> None:
    text = (REPO / "gpuplan/plan/workloads.py").read_text()
    assert "inspect" not in text and "forecast_inference(**" not in text


def test_plan_and_forecast_infer_apply_the_same_serving_calibration(run_cli, tmp_path) -> None:
    """With the user's serve-probe factors in the artifact (TTFT x2, TPOT x3 on H100 with
    vLLM), the plan and ``forecast infer --qps`` still agree, both say they applied them, and
    neither buys fewer GPUs than without them."""
    from tests.forecast.test_serving_calibrated_fleet import calibrated_artifact

    art = tmp_path / "cal.json"
    art.write_text(json.dumps(calibrated_artifact(2.0, 3.0)))
    scenario = yaml.safe_load((REPO / "examples/llm-serving.yaml").read_text())
    w = scenario["workloads"]["inference"][0]
    w.update(model="llama3.1-8b", engine="vllm", input_tokens=1024, output_tokens=256)
    scenario["candidates"]["gpus"] = ["h100"]
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))

    def plan_counts(*extra: str) -> tuple[set[int], list[dict]]:
        p = run_cli("plan", str(path), "--out", str(tmp_path / "p"), "--format", "json", *extra)
        assert p.returncode == 0, p.stderr[-2000:]
        rows = [s for o in json.loads(p.stdout)["options"] for s in o["inference"]]
        assert rows and not any(s.get("error") for s in rows)
        return {s["gpus_for_load"]["value"] for s in rows}, rows

    raw_counts, raw_rows = plan_counts()
    cal_counts, cal_rows = plan_counts("--calibration", str(art))
    assert len(raw_counts) == len(cal_counts) == 1
    assert min(cal_counts) >= max(raw_counts)
    assert all(s["serving_calibration"] is None for s in raw_rows)
    for s in cal_rows:
        sc = s["serving_calibration"]
        assert sc["applied"] and sc["engine"] == "vllm@0.6.0"
        assert sc["tpot_factor"]["value"] == pytest.approx(3.0)
    infer = run_cli(*_infer_args(w, "h100"), "--engine", "vllm", "--calibration", str(art))
    assert infer.returncode == 0, infer.stderr
    doc = json.loads(infer.stdout)
    assert doc["num_gpus"] in cal_counts
    assert doc["serving_calibration"]["ttft_factor"]["value"] == pytest.approx(2.0)


def test_a_plan_names_a_checkpoint_and_a_release_and_says_which_profile(run_cli, tmp_path) -> None:
    """A scenario written with a new user's names (a Hugging Face checkpoint id, a vLLM
    release without a profile) plans; its forecast ledger says which profile stood for the
    release, and the GPU count is the one ``forecast infer`` gives on that profile."""
    scenario = yaml.safe_load((REPO / "examples/llm-serving.yaml").read_text())
    w = scenario["workloads"]["inference"][0]
    w.update(model="meta-llama/Llama-3.3-70B-Instruct", engine="vLLM 0.10.1")
    scenario["candidates"]["gpus"] = ["h100"]
    path = tmp_path / "scenario.yaml"
    path.write_text(yaml.safe_dump(scenario))
    p = run_cli("plan", str(path), "--out", str(tmp_path / "p"), "--format", "json")
    assert p.returncode == 0, p.stderr[-2000:]
    doc = json.loads(p.stdout)
    calls = [f["call"] for f in doc["provenance"]["forecasts"] if f["kind"] == "infer"]
    assert calls and all("vllm@0.8.4 stands for it" in c for c in calls)
    counts = {s["gpus_for_load"]["value"] for o in doc["options"] for s in o["inference"]}
    w2 = {**w, "model": "llama3.3-70b"}
    infer = run_cli(*_infer_args(w2, "h100"), "--engine", "vllm@0.8.4")
    assert infer.returncode == 0, infer.stderr
    assert counts == {json.loads(infer.stdout)["num_gpus"]}


def test_a_plan_says_when_it_serves_a_model_at_another_precision_than_released(
    run_cli, tmp_path
) -> None:
    """DeepSeek-R1 is released as fp8 (catalog ``released_precision``): a plan that serves it
    at the bf16 default says so in its summary notes, one at fp8 does not."""
    scenario = yaml.safe_load((REPO / "examples/llm-serving.yaml").read_text())
    w = scenario["workloads"]["inference"][0]
    w.update(model="deepseek-r1", qps=1)
    w.pop("precision", None)
    scenario["candidates"]["gpus"] = ["h200"]
    notes = {}
    for precision in ("bf16", "fp8"):
        w["precision"] = precision
        path = tmp_path / f"{precision}.yaml"
        path.write_text(yaml.safe_dump(scenario))
        p = run_cli("plan", str(path), "--out", str(tmp_path / precision), "--format", "json")
        assert p.returncode == 0, p.stderr[-2000:]
        notes[precision] = json.loads(p.stdout)["summary"]["notes"]
    said = [n for n in notes["bf16"] if "released with fp8 weights" in n]
    assert said and f"{w['name']}:" in said[0] and "precision: fp8" in said[0]
    assert not any("released with" in n for n in notes["fp8"])


def test_a_plan_says_what_it_sized_without_slos_and_known_slower_runs(run_cli, tmp_path) -> None:
    """DeepSeek-R1 at fp8 on H200 and MI300X without latency targets: the summary notes say
    the fleet was sized for throughput alone, and carry the known-deviation caveat of MoE +
    MLA models on CDNA3 (data/serving_deviations.yaml) naming MI300X, not H200."""
    scenario = yaml.safe_load((REPO / "examples/llm-serving.yaml").read_text())
    w = scenario["workloads"]["inference"][0]
    w.update(model="deepseek-r1", qps=1, precision="fp8")
    w.pop("ttft_slo_s"), w.pop("tpot_slo_s")
    scenario["candidates"]["gpus"] = ["h200", "mi300x"]
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(scenario))
    p = run_cli("plan", str(path), "--out", str(tmp_path / "out"), "--format", "json")
    assert p.returncode == 0, p.stderr[-2000:]
    notes = json.loads(p.stdout)["summary"]["notes"]
    assert any(n.startswith(f"{w['name']}: ") and "sized for throughput alone" in n for n in notes)
    said = [n for n in notes if "ran slower in every published serving run" in n]
    assert len(said) == 1 and "(mi300x)" in said[0] and "h200" not in said[0], notes


def test_a_replica_stays_inside_the_machine_the_option_rents(run_cli, tmp_path) -> None:
    """An H100 NVL pair split over one-GPU Azure VMs (NC40ads_H100_v5) has no NVLink peer:
    the plan used to put TP 2 replicas of Llama 3.3 70B on them (2 replicas, 4 VMs). Every
    option's replicas now keep their TP inside one of its machines, and the 1-GPU option
    serves the model at TP 1, as `forecast infer --node-gpus 1` does."""
    scenario = {
        "name": "nvl-vm",
        "workloads": {
            "inference": [
                {
                    "name": "chat",
                    "model": "llama3.3-70b",
                    "qps": 5,
                    "input_tokens": {"mean": 1024, "p99": 4096},
                    "output_tokens": {"mean": 256, "p99": 1024},
                    "ttft_slo_s": 2.0,
                    "tpot_slo_s": 0.05,
                    "precision": "fp8",
                }
            ]
        },
        "candidates": {"gpus": ["h100-nvl-94gb", "l40s-48gb"], "clouds": ["aws", "azure"]},
    }
    path = tmp_path / "nvl.yaml"
    path.write_text(yaml.safe_dump(scenario))
    plan = run_cli("plan", str(path), "--out", str(tmp_path / "plan"), "--format", "json")
    assert plan.returncode == 0, plan.stderr[-2000:]
    options = json.loads(plan.stdout)["options"]
    machines = {opt["gpus_per_node"]["value"] for opt in options}
    assert 1 in machines and 8 in machines  # NC40ads_H100_v5, g6e.48xlarge
    for opt in options:
        (s,) = opt["inference"]
        assert not s.get("error"), (opt["id"], s["error"])
        tp = int(s["layout"].split()[0].removeprefix("tp="))
        assert tp <= opt["gpus_per_node"]["value"], (opt["id"], s["layout"])
    vm = next(o for o in options if o["gpus_per_node"]["value"] == 1)
    assert vm["inference"][0]["layout"].startswith("tp=1 ")
    r = run_cli(*_infer_args(scenario["workloads"]["inference"][0], vm["gpu"]), "--node-gpus", "1")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["num_gpus"] == vm["inference"][0]["gpus_for_load"]["value"]


def test_uniform_lengths_plan_as_forecast_infer_sizes_them(run_cli, tmp_path) -> None:
    """A scenario's ``input_tokens: {min, max}`` is the uniform lengths of ``forecast infer
    --min-length-ratio``: one fleet answer, and the tokens sold are priced at the range's mean."""
    from gpuplan.plan.scenario import LengthDistribution

    d = workloads.length_dist(LengthDistribution(min=1600, max=2000))
    assert (d.kind, d.low, d.high, d.mean) == ("uniform", 1600, 2000, 1800.0)
    service = {
        "name": "bench",
        "model": "llama3.1-8b",
        "qps": 6,
        "input_tokens": {"min": 1600, "max": 2000},
        "output_tokens": {"min": 160, "max": 200},
        "ttft_slo_s": 1.0,
        "tpot_slo_s": 0.03,
    }
    scenario = {
        "name": "uniform",
        "workloads": {"inference": [service]},
        "candidates": {"gpus": ["h100"], "instances": ["p5.48xlarge"], "onprem_nodes": []},
    }
    path = tmp_path / "uniform.yaml"
    path.write_text(yaml.safe_dump(scenario))
    plan = run_cli("plan", str(path), "--out", str(tmp_path / "plan"), "--format", "json")
    assert plan.returncode == 0, plan.stderr[-2000:]
    (opt,) = json.loads(plan.stdout)["options"]
    (s,) = opt["inference"]
    r = run_cli(
        "forecast", "infer", "--model", "llama3.1-8b", "--gpu", opt["gpu"], "--qps", "6",
        "--input-tokens", "2000", "--output-tokens", "200", "--min-length-ratio", "0.8",
        "--ttft-slo-s", "1.0", "--tpot-slo-s", "0.03", "--node-gpus",
        str(opt["gpus_per_node"]["value"]), "--format", "json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    infer = json.loads(r.stdout)
    assert infer["input_tokens"]["kind"] == "uniform"
    assert s["gpus_for_load"]["value"] == infer["num_gpus"]
    # 6 req/s x 180 tokens (the mean of 160-200) x 3600 s x the serving hours
    from gpuplan.plan.scenario import InferenceService

    hours = InferenceService.model_fields["hours_per_month"].default
    assert s["output_tokens_per_month"]["value"] == pytest.approx(6 * 180 * 3600 * hours)
