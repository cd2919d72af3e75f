"""Generated command lines and files never make gpuplan crash (issue 13, item 3).

Hypothesis draws argument lists for ``forecast train``, ``forecast infer``, ``plan``,
``schedule`` and ``catalog show``: option names from the real commands, values from
numbers (nan, inf, negative, huge), random strings, and paths to generated files (binary,
empty, truncated YAML, YAML of the wrong types, scenario dicts built from the shipped
examples with one field replaced). For every one: the exit code is 0, 1 or 2, no
traceback, and an exit 2 ends in exactly one stderr line.

Most examples run in-process through :func:`gpuplan.cli.main.main` (the console script's
own entry point, so the exception-to-exit-code mapping is the one users get), a few in a
real subprocess. Fixed budget: the whole file runs in well under 3 minutes on 2 cores.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import traceback
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, seed, settings
from hypothesis import strategies as st

from gpuplan.cli.main import main
from tests.cli._helpers import EXAMPLES, HF_LLAMA, HF_MIXTRAL, REPO, SMALL_SCENARIO

_COUNTER = itertools.count()

NUMBERS = st.one_of(
    st.sampled_from(
        [
            *["nan", "inf", "-inf", "-1", "0", "1", "2", "8", "64", "-0.5", "1e308", "1e-320"],
            *["99999999999999999999999", "1e12", "0x10", "", " ", "1,2"],
        ]
    ),
    st.integers(min_value=-(10**6), max_value=10**6).map(str),
    st.floats(allow_nan=True, allow_infinity=True, width=64).map(repr),
)
STRINGS = st.one_of(
    st.sampled_from(["h100", "H100 80GB HBM3", "llama3.1-8b", "mixtral-8x7b", "nope", "-x"]),
    st.text(min_size=0, max_size=12),
)


def _file(folder: Path, kind: str, payload: Any = None) -> str:
    """A generated file of ``kind`` under ``folder``; returns its path."""
    path = folder / f"gen-{next(_COUNTER)}.yaml"
    if kind == "binary":
        path.write_bytes(bytes(range(256)) * 2)
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "utf16":
        path.write_bytes(SMALL_SCENARIO.encode("utf-16"))
    elif kind == "truncated":
        path.write_text(SMALL_SCENARIO[: len(SMALL_SCENARIO) // 2] + "  - [unclosed\n")
    elif kind == "directory":
        path.mkdir()
    elif kind == "missing":
        pass
    else:  # a document
        path.write_text(yaml.safe_dump(payload, allow_unicode=True))
    return str(path)


def _leaves(obj: Any, here: tuple = ()) -> list[tuple]:
    out = [here]
    if isinstance(obj, dict):
        for k, v in obj.items():
            out += _leaves(v, (*here, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            out += _leaves(v, (*here, i))
    return out


def _replace(obj: Any, path: tuple, value: Any) -> Any:
    if not path:
        return value
    head, rest = path[0], path[1:]
    if isinstance(obj, dict):
        return {**obj, head: _replace(obj[head], rest, value)}
    copy = list(obj)
    copy[head] = _replace(copy[head], rest, value)
    return copy


def _small_from_examples() -> list[dict]:
    """Scenario dicts built from the examples' blocks, sized to plan in seconds."""
    base = yaml.safe_load(SMALL_SCENARIO)
    out = [base]
    for name in ("llama-pretrain", "llm-serving", "impossible-power"):
        ex = yaml.safe_load((EXAMPLES / f"{name}.yaml").read_text())
        small = {**ex, "candidates": base["candidates"]}
        small.pop("teams", None)
        small.pop("scheduling", None)
        out.append(small)
    return out


SCENARIOS = _small_from_examples()
TEAMS = yaml.safe_load((EXAMPLES / "mixed-teams.yaml").read_text())
REPLACEMENTS = st.one_of(
    st.sampled_from(
        [None, 0, -1, 1e308, float("inf"), float("nan"), "", "oracle", [], {}, [1, "x"], True]
    ),
    st.integers(min_value=-(10**9), max_value=10**9),
    st.text(max_size=8),
    st.dictionaries(st.text(max_size=5), st.integers(), max_size=2),
)


@st.composite
def scenario_docs(draw, bases: list[dict]) -> Any:
    doc = draw(st.sampled_from(bases))
    for _ in range(draw(st.integers(min_value=1, max_value=2))):
        # paths of the document as it is now (an earlier replacement may have removed some)
        doc = _replace(doc, draw(st.sampled_from(_leaves(doc))), draw(REPLACEMENTS))
    return doc


FILE_KINDS = ["binary", "empty", "utf16", "truncated", "directory", "missing"]

ARTIFACT = json.loads(
    (REPO / "gpuplan" / "calibration" / "data" / "default_artifact.json").read_text()
)
_DEVICE_LEAVES = [
    ("devices", dev, q, k)
    for dev, quantities in sorted(ARTIFACT["devices"].items())[:4]
    for q in sorted(quantities)[:3]
    for k in ("value", "low", "high", "basis")
]
ARTIFACT_PATHS = [(k,) for k in sorted(ARTIFACT)] + _DEVICE_LEAVES


@st.composite
def artifact_docs(draw) -> Any:
    """The shipped artifact with a top-level field or a device figure replaced."""
    return _replace(ARTIFACT, draw(st.sampled_from(ARTIFACT_PATHS)), draw(REPLACEMENTS))


@st.composite
def calibration_arg(draw, folder: Path) -> str:
    kind = draw(st.sampled_from([*FILE_KINDS, "artifact", "artifact"]))
    if kind != "artifact":
        return _file(folder, kind)
    path = folder / f"gen-{next(_COUNTER)}.json"
    path.write_text(json.dumps(draw(artifact_docs())))
    return str(path)


@st.composite
def hf_configs(draw) -> Any:
    """A Hugging Face config.json (Llama 3.1 8B or Mixtral 8x7B) with a field replaced."""
    base = draw(st.sampled_from([HF_LLAMA, HF_MIXTRAL]))
    return _replace(base, (draw(st.sampled_from(sorted(base))),), draw(REPLACEMENTS))


@st.composite
def file_arg(draw, folder: Path, docs=None) -> str:
    kind = draw(st.sampled_from([*FILE_KINDS, "doc", "doc"] if docs is not None else FILE_KINDS))
    payload = draw(docs) if kind == "doc" else None
    return _file(folder, kind, payload)


def _options(draw, spec: dict[str, Any], max_options: int) -> list[str]:
    names = draw(
        st.lists(st.sampled_from(sorted(spec)), unique=True, min_size=0, max_size=max_options)
    )
    args: list[str] = []
    for name in names:
        values = spec[name]
        if values is None:  # a flag
            args.append(name)
        else:
            args += [name, draw(values)]
    return args


def _run(args: list[str]) -> tuple[int, str]:
    """``gpuplan ARGS`` in-process through the console script's entry point."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = main(args)
        except SystemExit as exc:  # pragma: no cover - main() returns codes
            code = exc.code if isinstance(exc.code, int) else 1
        except BaseException:
            return -1, err.getvalue() + "\nTraceback (escaped main):\n" + traceback.format_exc()
    return code, err.getvalue()


STATS = {"inputs": 0, "exit_2_one_line": 0, "tracebacks": 0}


def _check(args: list[str], code: int, stderr: str) -> None:
    STATS["inputs"] += 1
    if "Traceback" in stderr:
        STATS["tracebacks"] += 1
    assert "Traceback" not in stderr, (args, stderr[-3000:])
    assert code in (0, 1, 2), (args, code, stderr[-2000:])
    if code == 2:
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        assert lines, (args, "exit 2 without a message")
        last = lines[-1]
        assert "\n" not in last and (last.startswith("gpuplan")), (args, stderr[-2000:])
        STATS["exit_2_one_line"] += 1


COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
#: budget multiplier for a longer local search (GPUPLAN_FUZZ_SCALE=20); CI runs the fixed 1x
SCALE = max(1, int(os.environ.get("GPUPLAN_FUZZ_SCALE", "1") or 1))


@pytest.fixture
def folder(tmp_path):
    return tmp_path


@seed(13 * SCALE)
@settings(max_examples=80 * SCALE, **COMMON)
@given(data=st.data())
def test_forecast_train_never_crashes(folder, data):
    model_files = file_arg(
        folder, st.one_of(st.sampled_from([{"layers": 2}, {"hidden": "x"}, [1, 2]]), hf_configs())
    )
    spec = {
        "--gpus": NUMBERS,
        "--tokens": NUMBERS,
        "--target-days": NUMBERS,
        "--seq-len": NUMBERS,
        "--global-batch": NUMBERS,
        "--global-batch-tokens": NUMBERS,
        "--tp": NUMBERS,
        "--pp": NUMBERS,
        "--zero": NUMBERS,
        "--micro-batch": NUMBERS,
        "--precision": STRINGS,
        "--recompute": STRINGS,
        "--node": STRINGS,
        "--instance": STRINGS,
        "--calibration": calibration_arg(folder),
        "--model-file": model_files,
        "--layers": NUMBERS,
        "--top": NUMBERS,
        "--fsdp": None,
    }
    base = data.draw(
        st.sampled_from(
            [["--model", "llama3.1-8b", "--gpu", "h100"], ["--gpu", "h100"], ["--model", "x"]]
        )
    )
    args = ["forecast", "train", *base, *_options(data.draw, spec, 3), "--format", "json"]
    if "--gpus" not in args and "--target-days" not in args:
        args += ["--gpus", "8"]
    _check(args, *_run(args))


@seed(13 * SCALE)
@settings(max_examples=80 * SCALE, **COMMON)
@given(data=st.data())
def test_forecast_infer_never_crashes(folder, data):
    spec = {
        "--qps": NUMBERS,
        "--requests": NUMBERS,
        "--batch": NUMBERS,
        "--tp": NUMBERS,
        "--input-tokens": NUMBERS,
        "--input-tokens-p99": NUMBERS,
        "--output-tokens": NUMBERS,
        "--ttft-slo-s": NUMBERS,
        "--tpot-slo-s": NUMBERS,
        "--precision": STRINGS,
        "--gpu": STRINGS,
        "--slo-percentile": STRINGS,
        "--seed": NUMBERS,
        "--calibration": calibration_arg(folder),
        "--model-file": file_arg(
            folder, st.one_of(st.sampled_from([{"layers": 2}, {"kv_heads": -1}]), hf_configs())
        ),
        "--max-throughput": None,
    }
    args = ["forecast", "infer", "--model", "llama3.1-8b", *_options(data.draw, spec, 3)]
    if "--qps" in args and "--requests" not in args:
        args += ["--requests", "200"]  # keep the simulation short
    _check(args, *_run([*args, "--format", "json"]))


@seed(13 * SCALE)
@settings(max_examples=50 * SCALE, **COMMON)
@given(data=st.data())
def test_plan_never_crashes(folder, data):
    scenario = data.draw(file_arg(folder, scenario_docs(SCENARIOS)))
    spec = {
        "--calibration": calibration_arg(folder),
        "--trial": STRINGS,
        "--out": st.sampled_from([str(folder / "out"), scenario, str(folder / "missing/x")]),
        "--results": st.sampled_from([str(folder), scenario]),
    }
    args = ["plan", scenario, "--no-progress", *_options(data.draw, spec, 2)]
    if "--results" not in args:
        args += ["--results", str(folder / "no-results")]
    _check(args, *_run([*args, "--format", "json"]))


@seed(13 * SCALE)
@settings(max_examples=60 * SCALE, **COMMON)
@given(data=st.data())
def test_schedule_never_crashes(folder, data):
    trace = folder / "trace.csv"
    trace.write_text("submit_s,duration_s,gpus\n0,10,1\n5,-3,2\n")
    source = data.draw(st.sampled_from(["philly", "scenario", "trace", "file"]))
    if source == "philly":
        args = ["schedule", "--trace", "philly", "--limit", "300", "--gpus", "64"]
    elif source == "trace":
        args = ["schedule", "--trace", str(trace), "--gpus", "8"]
    elif source == "file":
        args = ["schedule", "--trace", data.draw(file_arg(folder))]
    else:
        doc = data.draw(scenario_docs([TEAMS]))
        if isinstance(doc, dict) and isinstance(doc.get("scheduling"), dict):
            doc = {**doc, "scheduling": {**doc["scheduling"], "horizon_days": 0.25}}
        args = ["schedule", "--scenario", _file(folder, "doc", doc)]
    spec = {
        "--starvation-wait-s": NUMBERS,
        "--starvation-multiple": NUMBERS,
        "--checkpoint-interval-s": NUMBERS,
        "--restart-cost-s": NUMBERS,
        "--gpus-per-node": NUMBERS,
        "--policy": STRINGS,
        "--seed": NUMBERS,
        "--horizon-days": st.sampled_from(["0.1", "nan", "-1", "inf", "0"]),
        "--sizes": st.sampled_from(["auto", "8,16", "x", "-1", ""]),
    }
    args += [*_options(data.draw, spec, 2), "--no-progress"]
    _check(args, *_run([*args, "--format", "json"]))


@seed(13 * SCALE)
@settings(max_examples=80 * SCALE, **COMMON)
@given(data=st.data())
def test_catalog_show_never_crashes(data):
    name = data.draw(st.one_of(STRINGS, NUMBERS))
    args = ["catalog", "show", name, *data.draw(st.sampled_from([[], ["--calibrated"]]))]
    _check(args, *_run([*args, "--format", data.draw(st.sampled_from(["json", "table"]))]))


SUBPROCESS_CASES = [
    ["forecast", "train", "--model", "llama3.1-8b", "--gpu", "h100", "--gpus", "nan"],
    ["forecast", "infer", "--model", "llama3.1-8b", "--qps", "inf"],
    ["schedule", "--trace", "philly", "--gpus", "64", "--starvation-wait-s", "-inf"],
    ["catalog", "show", "\x00"],
    ["plan", "{binary}"],
    ["forecast", "train", "--gpu", "h100", "--gpus", "8", "--model-file", "{empty}"],
]


@pytest.mark.parametrize("args", SUBPROCESS_CASES, ids=lambda a: " ".join(a[:2]))
def test_real_process(run_cli, tmp_path, args):
    """The same checks on the real console process for a few of the inputs."""
    files = {"{binary}": _file(tmp_path, "binary"), "{empty}": _file(tmp_path, "empty")}
    args = [files.get(a, a) for a in args]
    if "\x00" in args:  # argv cannot hold NUL: the nearest the OS allows
        args = [a.replace("\x00", "\x01") for a in args]
    proc = run_cli(*args)
    _check(args, proc.returncode, proc.stderr)
    assert proc.returncode == 2
    assert len([ln for ln in proc.stderr.splitlines() if ln.strip()]) == 1, proc.stderr


def test_report_counts():
    """Print the counts of this file's run (inputs, exit-2 one-liners, tracebacks)."""
    print(json.dumps(STATS))
    assert STATS["tracebacks"] == 0
