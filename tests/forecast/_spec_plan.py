"""The plan and ``forecast infer`` size a speculative serving workload alike: one check for
the draft-head and draft-model tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

SCENARIO = """
name: speculative-serving
workloads:
  inference:
    - name: chat
      model: llama3.3-70b
      qps: {qps}
      input_tokens: {{mean: 1024, p99: 4096}}
      output_tokens: {{mean: 256, p99: 1024}}
      ttft_slo_s: 2.0
      tpot_slo_s: {tpot}
      speculative: {speculative}
candidates:
  gpus: [h100]
  clouds: [aws]
  onprem_nodes: []
"""


def plan_and_forecast_agree(
    run_cli: Any, tmp_path: Path, *, qps: float, tpot: float, speculative: str, flags: list[str]
) -> list[str]:
    """Plan the workload with ``speculative`` (YAML) and forecast it with the same
    ``flags``; assert both buy the same GPUs; return the plan's notes."""
    scenario = tmp_path / "spec.yaml"
    scenario.write_text(SCENARIO.format(qps=qps, tpot=tpot, speculative=speculative))
    plan = run_cli("plan", str(scenario), "--out", str(tmp_path / "out"), "--format", "json")
    assert plan.returncode == 0, plan.stderr[-2000:]
    doc = json.loads(plan.stdout)
    opts = [o for o in doc["options"] if o["inference"]]
    s = opts[0]["inference"][0]
    r = run_cli(
        "forecast", "infer", "--model", "llama3.3-70b", "--gpu", opts[0]["gpu"],
        "--qps", str(qps), "--input-tokens", "1024", "--input-tokens-p99", "4096",
        "--output-tokens", "256", "--output-tokens-p99", "1024", "--ttft-slo-s", "2",
        "--tpot-slo-s", str(tpot), *flags,
        "--node-gpus", str(opts[0]["gpus_per_node"]["value"]), "--format", "json",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert s["gpus_for_load"]["value"] == json.loads(r.stdout)["num_gpus"]
    notes: list[str] = doc["summary"]["notes"]
    return notes
