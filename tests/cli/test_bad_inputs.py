"""Every bad input found when gpuplan was tried as a new user (issue 13, item 3): one line on
stderr naming what is wrong and how to fix it, exit code 2, no traceback.

Each test reproduces one input as measured on main before the fix (a traceback, a misleading
message or a silent exit 0) with real files and a real ``python -m gpuplan`` process.
"""

from __future__ import annotations

import json

import pytest

from tests.cli._helpers import (
    EXAMPLES,
    HF_DEEPSEEK_V3,
    HF_LLAMA,
    HF_MIXTRAL,
    HF_QWEN3_MOE,
    SMALL_SCENARIO,
    binary_file,
    one_line_error,
    unreadable_file,
    utf16_file,
    write_json,
)

TRAIN = ["forecast", "train", "--model", "llama3.1-8b", "--gpu", "h100", "--gpus", "8"]
INFER = ["forecast", "infer", "--model", "llama3.1-8b", "--gpu", "h100"]


# ---------------------------------------------------------------- were tracebacks


def test_model_file_binary(run_cli, tmp_path):
    f = binary_file(tmp_path / "model.yaml")
    line = one_line_error(run_cli("forecast", "train", "--model-file", str(f), "--gpu", "h100"))
    assert "--model-file" in line and str(f) in line and "not UTF-8" in line


def test_model_file_utf16(run_cli, tmp_path):
    f = utf16_file(tmp_path / "model.yaml", "layers: 2\n")
    line = one_line_error(run_cli("forecast", "infer", "--model-file", str(f)))
    assert "UTF-16" in line and "iconv" in line


def test_schedule_scenario_binary(run_cli, tmp_path):
    f = binary_file(tmp_path / "teams.yaml")
    line = one_line_error(run_cli("schedule", "--scenario", str(f)))
    assert "scenario file" in line and str(f) in line and "not UTF-8" in line


def test_schedule_scenario_utf16(run_cli, tmp_path):
    f = utf16_file(tmp_path / "teams.yaml")
    line = one_line_error(run_cli("schedule", "--scenario", str(f)))
    assert "UTF-16" in line


@pytest.mark.parametrize("maker", [binary_file, utf16_file], ids=["binary", "utf16"])
def test_plan_scenario_not_utf8(run_cli, tmp_path, maker):
    f = maker(tmp_path / "s.yaml")
    line = one_line_error(run_cli("plan", str(f), "--no-progress"))
    assert str(f) in line


def _calibration_commands(tmp_path):
    scen = tmp_path / "s.yaml"
    scen.write_text(SMALL_SCENARIO)
    return {
        "forecast-train": TRAIN,
        "forecast-infer": INFER,
        "plan": ["plan", str(scen), "--no-progress", "--out", str(tmp_path / "rep")],
        "validate-training": ["validate", "training"],
        "validate-inference": ["validate", "inference"],
    }


CALIBRATION_COMMANDS = [
    "forecast-train",
    "forecast-infer",
    "plan",
    "validate-training",
    "validate-inference",
]
BAD_ARTIFACTS = ["directory", "binary", "not-json", "unreadable", "missing", "not-an-artifact"]


@pytest.mark.parametrize("kind", BAD_ARTIFACTS)
@pytest.mark.parametrize("command", CALIBRATION_COMMANDS)
def test_bad_calibration_for_every_command(run_cli, tmp_path, command, kind):
    target = tmp_path / "cal.json"
    if kind == "directory":
        target.mkdir()
        expect = "is a directory"
    elif kind == "binary":
        binary_file(target)
        expect = "not UTF-8"
    elif kind == "not-json":
        target.write_text('{"artifact_version": 1, ')  # truncated
        expect = "not valid JSON"
    elif kind == "unreadable":
        unreadable_file(target)
        expect = "cannot read"
    elif kind == "missing":
        expect = "no calibration artifact"
    else:
        write_json(target, {"artifact_version": 1, "models": []})
        expect = "not a calibration artifact"
    args = _calibration_commands(tmp_path)[command]
    line = one_line_error(run_cli(*args, "--calibration", str(target)))
    assert expect in line and str(target) in line
    assert not (tmp_path / "rep").exists()  # refused before any work or output


@pytest.mark.parametrize("requests", ["0", "-10"])
def test_infer_requests_not_positive(run_cli, requests):
    line = one_line_error(run_cli(*INFER, "--qps", "5", "--requests", requests))
    assert f"--requests must be >= 1 (got {requests})" in line


def test_serving_library_refuses_zero_requests():
    """The library check behind --requests (callers other than the CLI)."""
    from gpuplan.errors import InputError
    from gpuplan.forecast.serving import check_num_requests, size_fleet

    with pytest.raises(InputError, match="--requests must be a whole number >= 1, got 0"):
        check_num_requests(0)
    with pytest.raises(InputError, match="got -10"):
        size_fleet([], 5.0, None, None, 1.0, 0.1, num_requests=-10)  # type: ignore[arg-type]
    assert check_num_requests(1) == 1


def test_schedule_trace_unreadable(run_cli, tmp_path):
    f = unreadable_file(tmp_path / "trace.csv")
    line = one_line_error(run_cli("schedule", "--trace", str(f), "--gpus", "8"))
    assert "cannot read trace file" in line and str(f) in line


def test_plan_out_unwritable_fails_before_planning(run_cli, tmp_path):
    scen = tmp_path / "s.yaml"
    scen.write_text(SMALL_SCENARIO)
    blocker = tmp_path / "a-file"
    blocker.write_text("keep me\n")
    # a path under a regular file cannot be created, by root either
    proc = run_cli("plan", str(scen), "--no-progress", "--out", str(blocker / "report"))
    line = one_line_error(proc)
    assert str(blocker) in line and "is a file, not a folder" in line
    assert blocker.read_text() == "keep me\n"
    assert proc.stdout == ""  # refused before the plan: nothing computed was thrown away


# ---------------------------------------------------------------- were misleading / silent


def test_schedule_trace_directory(run_cli, tmp_path):
    line = one_line_error(run_cli("schedule", "--trace", str(tmp_path), "--gpus", "8"))
    assert "is a directory" in line and "does not exist" not in line


@pytest.mark.parametrize(
    ("cfg", "catalog_id", "infer_args"),
    [
        (HF_LLAMA, "llama3.1-8b", []),
        (HF_MIXTRAL, "mixtral-8x7b", []),
        (HF_DEEPSEEK_V3, "deepseek-v3", ["--gpu", "h200", "--tp", "8", "--precision", "fp8"]),
        (HF_QWEN3_MOE, "qwen3-30b-a3b", []),
    ],
    ids=["llama", "mixtral", "deepseek-v3", "qwen3-moe"],
)
def test_hf_config_loads_as_the_catalog_model(run_cli, tmp_path, cfg, catalog_id, infer_args):
    """A Hugging Face config.json gives the same forecasts as the catalog row made from it."""
    f = write_json(tmp_path / "config.json", cfg)
    infer = ["forecast", "infer", "--gpu", "h100", *infer_args, "--format", "json"]
    a = run_cli(*infer, "--model-file", str(f))
    b = run_cli(*infer, "--model", catalog_id)
    assert a.returncode == 0 and b.returncode == 0, a.stderr + b.stderr
    ja, jb = json.loads(a.stdout), json.loads(b.stdout)
    for key in ("ttft_s", "tpot_s", "memory_per_gpu_bytes", "kv_cache_bytes_per_token"):
        assert ja[key] == pytest.approx(jb[key], rel=1e-12), key
    train = ["forecast", "train", "--gpu", "h100", "--gpus", "1024", "--format", "json"]
    t = run_cli(*train, "--model-file", str(f))
    u = run_cli(*train, "--model", catalog_id)
    assert t.returncode == 0 and u.returncode == 0, t.stderr + u.stderr
    for key in ("step_time_s", "memory_per_gpu_bytes", "model_tflops_per_gpu"):
        assert json.loads(t.stdout)[key] == pytest.approx(json.loads(u.stdout)[key], rel=1e-12)


def test_hf_config_of_an_unmodelled_architecture_names_the_fields(run_cli, tmp_path):
    jamba = {**HF_MIXTRAL, "model_type": "jamba", "attn_layer_period": 8, "mamba_d_state": 16}
    f = write_json(tmp_path / "config.json", jamba)
    line = one_line_error(run_cli("forecast", "infer", "--model-file", str(f)))
    assert "cannot model" in line and "attn_layer_period" in line and "mamba_d_state" in line


def test_hf_config_missing_fields_are_named(run_cli, tmp_path):
    cfg = {k: v for k, v in HF_LLAMA.items() if k not in ("hidden_size", "vocab_size")}
    cfg["num_attention_heads"] = 32
    f = write_json(tmp_path / "config.json", cfg)
    line = one_line_error(run_cli("forecast", "train", "--model-file", str(f), "--gpu", "h100"))
    assert "lacks hidden_size, vocab_size" in line


def test_model_file_wrong_type_names_the_field(run_cli, tmp_path):
    f = tmp_path / "m.yaml"
    f.write_text("layers: 2\nhidden: 64\nheads: 4\nffn_hidden: 256\nvocab: 100\nkv_heads: two\n")
    line = one_line_error(run_cli("forecast", "train", "--model-file", str(f), "--gpu", "h100"))
    assert "kv_heads must be a whole number" in line


def test_plan_unknown_trial_run(run_cli, tmp_path):
    scen = tmp_path / "s.yaml"
    scen.write_text(SMALL_SCENARIO)
    results = tmp_path / "results"
    results.mkdir()
    proc = run_cli(
        "plan",
        str(scen),
        "--trial",
        "deadbeef",
        "--results",
        str(results),
        "--no-progress",
        "--out",
        str(tmp_path / "rep"),
    )
    line = one_line_error(proc)
    assert "deadbeef" in line and str(results) in line


def _scenario(tmp_path, old: str, new: str):
    text = SMALL_SCENARIO.replace(old, new)
    assert text != SMALL_SCENARIO
    f = tmp_path / "s.yaml"
    f.write_text(text)
    return f


def test_plan_infinite_deadline(run_cli, tmp_path):
    text = (EXAMPLES / "llama-pretrain.yaml").read_text()
    assert "deadline_days:" in text
    import re

    f = tmp_path / "s.yaml"
    f.write_text(re.sub(r"deadline_days: *[0-9.]+", "deadline_days: .inf", text, count=1))
    line = one_line_error(run_cli("plan", str(f), "--no-progress"))
    assert "deadline_days" in line and "finite" in line


def test_plan_unknown_cloud(run_cli, tmp_path):
    f = _scenario(tmp_path, "  gpus: [h100]\n", "  gpus: [h100]\n  clouds: [oracle]\n")
    line = one_line_error(run_cli("plan", str(f), "--no-progress", "--out", str(tmp_path / "r")))
    assert "oracle" in line and "candidates.clouds" in line
    assert "aws" in line and "gcp" in line and "azure" in line


def test_plan_p99_below_mean_refused_like_the_cli(run_cli, tmp_path):
    f = _scenario(tmp_path, "input_tokens: 512", "input_tokens: {mean: 1000, p99: 50}")
    plan_line = one_line_error(run_cli("plan", str(f), "--no-progress"))
    cli_line = one_line_error(
        run_cli(*INFER, "--input-tokens", "1000", "--input-tokens-p99", "50", "--qps", "1")
    )
    message = "p99 length 50 must be above the mean 1000"
    assert message in plan_line and message in cli_line
    assert "line 7" in plan_line and "input_tokens" in plan_line


def test_validate_inference_missing_calibration(run_cli, tmp_path):
    line = one_line_error(
        run_cli("validate", "inference", "--calibration", str(tmp_path / "nope.json"))
    )
    assert "nope.json" in line


@pytest.mark.parametrize("value", ["inf", "nan", "-1", "0"])
def test_train_tokens_must_be_positive_finite(run_cli, value):
    line = one_line_error(run_cli(*TRAIN, "--tokens", value))
    assert "--tokens must be a finite number > 0" in line or "--tokens must be >= 1" in line


def test_train_node_with_another_gpu(run_cli):
    line = one_line_error(run_cli(*TRAIN, "--node", "dgx-b200"))
    assert "dgx-b200" in line and "h100-sxm5-80gb" in line and "dgx-h100" in line


@pytest.mark.parametrize(
    "option",
    [
        "--starvation-wait-s",
        "--starvation-multiple",
        "--checkpoint-interval-s",
        "--restart-cost-s",
        "--p95-target-s",
    ],
)
@pytest.mark.parametrize("value", ["nan", "inf", "-5"])
def test_schedule_float_options(run_cli, option, value):
    line = one_line_error(run_cli("schedule", "--trace", "philly", "--gpus", "64", option, value))
    assert f"{option} must be" in line


@pytest.mark.parametrize(
    "option",
    ["--qps", "--ttft-slo-s", "--tpot-slo-s", "--input-tokens-p99", "--output-tokens-p99"],
)
@pytest.mark.parametrize("value", ["nan", "inf", "-1"])
def test_infer_float_options(run_cli, option, value):
    line = one_line_error(run_cli(*INFER, option, value))
    assert f"{option} must be" in line


def test_plan_without_a_feasible_option_exits_1_with_the_reasons(run_cli, tmp_path):
    out = tmp_path / "rep"
    proc = run_cli(
        "plan",
        str(EXAMPLES / "impossible-power.yaml"),
        "--no-progress",
        "--format",
        "json",
        "--out",
        str(out),
        "--results",
        str(tmp_path / "none"),
    )
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    doc = json.loads(proc.stdout)  # the JSON is still printed
    assert doc["summary"]["feasible"] is False
    reasons = [ln for ln in proc.stderr.splitlines() if ln.startswith("gpuplan: not feasible:")]
    assert len(reasons) == len(doc["unranked"]) >= 1
    assert any("facility power" in r for r in reasons)
    assert (out / "plan.json").exists()  # the plan that says what binds is kept


@pytest.mark.parametrize("command", ["training", "inference", "microbench"])
@pytest.mark.parametrize("kind", ["directory", "binary", "unreadable", "missing"])
def test_validate_data_file(run_cli, tmp_path, command, kind):
    target = tmp_path / "table.csv"
    if kind == "directory":
        target.mkdir()
    elif kind == "binary":
        binary_file(target)
    elif kind == "unreadable":
        unreadable_file(target)
    line = one_line_error(run_cli("validate", command, "--data", str(target)))
    assert f"--data {target}" in line


def test_validate_fit_constants_into_a_directory(run_cli, tmp_path):
    line = one_line_error(run_cli("validate", "training", "--fit-constants", str(tmp_path)))
    assert "--fit-constants" in line and "is a directory" in line


def test_schedule_emit_config_out_checked_before_the_simulation(run_cli, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = run_cli(
        "schedule",
        "--trace",
        "philly",
        "--gpus",
        "64",
        "--emit-config",
        "slurm",
        "--out",
        str(blocker / "cfg"),
        "--no-progress",
    )
    line = one_line_error(proc)
    assert "--out" in line and "is a file, not a folder" in line
    assert proc.stdout == ""


def _shipped_artifact() -> dict:
    from gpuplan.calibration.artifact import default_artifact_path

    return json.loads(default_artifact_path().read_text())


@pytest.mark.parametrize(
    ("path", "value", "expect"),
    [
        (("inputs",), 5, "'inputs' must be a list"),
        (
            ("devices", "h100-sxm5-80gb", "matmul_bf16_flops_per_s", "value"),
            "x",
            "must be a number",
        ),
        (
            ("devices", "h100-sxm5-80gb", "matmul_bf16_flops_per_s", "value"),
            -1.0,
            "finite number > 0",
        ),
        (("devices", "h100-sxm5-80gb", "matmul_bf16_flops_per_s", "low"), 1e300, "low <= value"),
        (
            ("devices", "h100-sxm5-80gb", "matmul_bf16_flops_per_s", "basis"),
            "guess",
            "basis must be",
        ),
        (("device_specs",), [], "'device_specs' must be a JSON object"),
    ],
)
def test_artifact_fields_are_checked_on_load(tmp_path, path, value, expect):
    """A hand-edited artifact is refused naming the field, before a forecast reads it."""
    from gpuplan.calibration import load_artifact
    from gpuplan.errors import SchemaError

    doc = _shipped_artifact()
    node = doc
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    f = write_json(tmp_path / "edited.json", doc)
    with pytest.raises(SchemaError, match=expect) as exc:
        load_artifact(f)
    assert str(f) in exc.value.one_line()
    assert ".".join(path[1:]) in exc.value.one_line() or path[0] in exc.value.one_line()


def test_artifact_with_nan_refused_by_the_cli(run_cli, tmp_path):
    doc = _shipped_artifact()
    doc["devices"]["h100-sxm5-80gb"]["matmul_bf16_flops_per_s"]["value"] = float("nan")
    f = tmp_path / "nan.json"
    f.write_text(json.dumps(doc))  # json writes NaN, and json.loads reads it back
    line = one_line_error(run_cli(*INFER, "--calibration", str(f)))
    assert "matmul_bf16_flops_per_s.value" in line and "finite" in line


# ---------------------------------------------------------------- sizes beyond gpuplan.limits
# Measured before the bounds: the first three ran for minutes (killed at 60-120 s), the last
# two were tracebacks (OverflowError in the layout search).


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        ([*TRAIN[:-2], "--gpus", "1000000000"], "--gpus must be <= 16,777,216"),
        (["schedule", "--trace", "philly", "--gpus", "1000000000"], "--gpus must be <= "),
        ([*INFER, "--qps", "5", "--requests", "100000000"], "--requests must be <= 1,000,000"),
        ([*TRAIN[:-2], "--tokens", "1e308", "--target-days", "1"], "--tokens must be <= 1e+18"),
        ([*TRAIN, "--global-batch-tokens", "1e300"], "--global-batch-tokens must be <="),
        (["schedule", "--trace", "philly", "--gpus", "64", "--sizes", "1000000000"], "--sizes"),
    ],
)
def test_sizes_beyond_the_limits_are_refused_at_once(run_cli, args, expect):
    proc = run_cli(*args, timeout=60)
    line = one_line_error(proc)
    assert expect in line and "gpuplan/limits.py" in line


def test_scenario_cluster_beyond_the_limits(run_cli, tmp_path):
    f = tmp_path / "s.yaml"
    f.write_text(
        SMALL_SCENARIO.replace(
            "  inference:\n",
            "  training:\n    - name: pre\n      model: llama3.1-8b\n      tokens: 1e12\n"
            "      seq_len: 8192\n      num_gpus: 1000000000\n  inference:\n",
        )
    )
    line = one_line_error(run_cli("plan", str(f), "--no-progress", timeout=60))
    assert "workloads.training[0].num_gpus" in line and "line 8" in line


@pytest.mark.parametrize(
    ("extra", "expect"),
    [
        (["--qps", "3"], "give either --qps"),
        (["--batch", "8"], "--concurrency sets the batch"),
        (["--batching", "static"], "--concurrency simulates continuous batching"),
        (["--concurrency", "0"], "--concurrency must be >= 1"),
    ],
)
def test_infer_concurrency_conflicts(run_cli, extra, expect):
    args = [*INFER, *(["--concurrency", "4"] if "--concurrency" not in extra else []), *extra]
    line = one_line_error(run_cli(*args))
    assert expect in line


@pytest.mark.parametrize("model", ["gpt-j-6b", "falcon-180b"])
def test_infer_defaults_fit_a_short_context(run_cli, model):
    """A 2,048-token model on the command's defaults: the default prompt is shortened so
    that prompt and answer fit (it used to stop with '2048 + 256 tokens exceed'), and the
    note says so; a prompt the user gives is never changed."""
    proc = run_cli("forecast", "infer", "--model", model, "--gpu", "h100", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["input_tokens"]["mean"] == 2048 - 256
    assert doc["output_tokens"]["mean"] == 256
    assert "defaults to 1792" in proc.stderr
    given = run_cli(
        "forecast", "infer", "--model", model, "--gpu", "h100", "--input-tokens", "2000"
    )
    assert "2000 + 256 tokens exceed the 2048-token context" in one_line_error(given)


def test_infer_defaults_unchanged_for_a_long_context(run_cli):
    proc = run_cli(*INFER, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert (doc["input_tokens"]["mean"], doc["output_tokens"]["mean"]) == (2048, 256)
    assert "defaults to" not in proc.stderr


def test_gpu_all_without_a_load(run_cli):
    cmd = ["forecast", "infer", "--model", "llama3.1-8b", "--gpu", "all"]
    line = one_line_error(run_cli(*cmd))
    assert "--gpu all" in line and "--qps" in line
