"""The serving probe: a concurrency sweep against an OpenAI-compatible streaming endpoint.

``gpuplan probe --workload serve --endpoint URL --model NAME`` sends ``requests_per_level``
completions at each concurrency level (at most ``concurrency`` in flight, the next request
sent as soon as one ends: vLLM ``benchmark_serving.py --max-concurrency`` with an infinite
request rate) to ``/v1/completions`` with ``stream: true`` and records every request.

Metric definitions follow one convention, vLLM's serving benchmark (vllm-project/vllm,
``benchmarks/backend_request_func.py`` ``async_request_openai_completions`` and
``benchmarks/benchmark_serving.py`` ``calculate_metrics``):

* **TTFT**: from sending the request to the first streamed chunk that carries text;
* **ITL**: the gap between two successive chunks with text (one per chunk, so a chunk of
  several tokens counts once, as in vLLM);
* **TPOT**: ``(e2e - ttft) / (output_tokens - 1)``, for requests with more than one token;
* **E2E latency**: from sending the request to the last chunk;
* **output tokens**: the server's ``usage.completion_tokens`` (asked for with
  ``stream_options.include_usage``), else the number of chunks with text;
* **throughput** per level: completed requests and output tokens over the level's wall time;
  percentiles are numpy's (linear) over the successful requests.

The prompt is a list of token ids (the OpenAI completions API takes ``prompt`` as an array
of integers), so its length is exact without the server's tokenizer: seeded random ids in
[``PROMPT_TOKEN_LOW``, ``PROMPT_TOKEN_HIGH``), like vLLM's ``random`` dataset draws ids.
``ignore_eos`` (vLLM, SGLang) keeps every answer at ``output_tokens``; servers that ignore
it may stop earlier, and the recorded ``output_tokens`` says so.

Speculative decoding: the server's Prometheus metrics (vLLM's and SGLang's ``GET /metrics``,
TensorRT-LLM's ``GET /prometheus/metrics``) are read before and after each level, and during
it where the engine gives a gauge, and the level records ``speculative``: draft tokens per
step and the acceptance length, tokens a verification step emits with the bonus token
(:mod:`gpuplan.probes.serve_spec` says how, per engine: counted exactly over the level for
vLLM and TensorRT-LLM, the gauge's mean for SGLang). ``gpuplan calibrate`` then forecasts the
level with that speculation before it takes the measured-over-forecast factors. A server
without such metrics records none; one that does not name its draft length takes
``--spec-tokens K``.

Ctrl-C stops the sweep: finished levels are kept, and a level stopped part-way is kept with
``interrupted: true`` and the requests that finished (calibration leaves it out).
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import json
import os
import random
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from gpuplan.errors import InputError
from gpuplan.probes.base import ProbeContext
from gpuplan.probes.serve_spec import (
    METRICS_PATHS,
    SAMPLE_INTERVAL_S,
    SpecReading,
    read_spec,
    speculative_summary,
)

PROBE_VERSION = 1
CONVENTION = (
    "vLLM benchmark_serving (vllm-project/vllm benchmarks/backend_request_func.py, "
    "benchmarks/benchmark_serving.py): TTFT to first text chunk, ITL per chunk, "
    "TPOT = (e2e - ttft) / (output_tokens - 1)"
)
#: token ids of the synthetic prompts: above the special tokens of common vocabularies and
#: below every vocabulary size a served LLM has
PROMPT_TOKEN_LOW, PROMPT_TOKEN_HIGH = 100, 1000
#: environment variable with a bearer token for the endpoint (sent, never recorded)
API_KEY_ENV = "GPUPLAN_SERVE_API_KEY"
DEFAULT_CONCURRENCY = (1, 2, 4, 8)


@dataclass(frozen=True, kw_only=True)
class ServeOptions:
    """What the serving probe measures.

    Attributes
    ----------
    endpoint:
        Base URL of the server (``http://host:8000``, ``.../v1`` or ``.../v1/completions``).
    model:
        The served model name (the request's ``model`` field).
    concurrency:
        Levels of requests in flight, each > 0.
    input_tokens, output_tokens:
        Prompt length and ``max_tokens`` of every request (tokens).
    requests_per_level:
        Requests sent at each level (> 0).
    timeout_s:
        Per-request time limit (seconds).
    seed:
        Seed of the prompts.
    spec_tokens:
        Draft tokens per step of a server that runs speculative decoding without saying so in
        its metrics (``--spec-tokens``); None to take it from the server.
    """

    endpoint: str
    model: str
    concurrency: tuple[int, ...] = DEFAULT_CONCURRENCY
    input_tokens: int = 128
    output_tokens: int = 64
    requests_per_level: int = 16
    timeout_s: float = 300.0
    seed: int = 0
    spec_tokens: int | None = None

    def __post_init__(self) -> None:
        completions_url(self.endpoint)
        if not self.model.strip():
            raise InputError("--model is empty", hint="give the served model name")
        if not self.concurrency or any(c <= 0 for c in self.concurrency):
            raise InputError(
                f"--concurrency must be positive integers (got {list(self.concurrency)})",
                hint="e.g. --concurrency 1,2,4,8",
            )
        for name in ("input_tokens", "output_tokens", "requests_per_level"):
            if getattr(self, name) <= 0:
                flag = "--" + name.replace("_", "-")
                raise InputError(f"{flag} must be positive (got {getattr(self, name)})")
        if self.timeout_s <= 0:
            raise InputError(f"the request timeout must be positive (got {self.timeout_s:g})")
        if self.spec_tokens is not None and not 1 <= self.spec_tokens <= 16:
            raise InputError(
                f"--spec-tokens must be between 1 and 16 (got {self.spec_tokens})",
                hint="the server's draft tokens per step (SGLang --speculative-num-steps)",
            )


def parse_concurrency(text: str) -> tuple[int, ...]:
    """``"1,2,4,8"`` -> (1, 2, 4, 8) (sorted, duplicates dropped)."""
    try:
        levels = sorted({int(t) for t in text.split(",") if t.strip()})
    except ValueError:
        raise InputError(
            f"--concurrency {text!r} is not a list of integers", hint="e.g. --concurrency 1,2,4,8"
        ) from None
    if not levels or levels[0] <= 0:
        raise InputError(
            f"--concurrency {text!r} needs positive integers", hint="e.g. --concurrency 1,2,4,8"
        )
    return tuple(levels)


def _base_url(endpoint: str) -> tuple[str, str]:
    parts = urlsplit(endpoint.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError(
            f"--endpoint {endpoint!r} is not an http(s) URL",
            hint="e.g. --endpoint http://127.0.0.1:8000",
        )
    path = parts.path.rstrip("/")
    for tail in ("/completions", "/v1"):
        if path.endswith(tail):
            path = path[: -len(tail)]
    netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
    return parts.scheme, urlunsplit((parts.scheme, netloc, path, "", ""))


def completions_url(endpoint: str) -> str:
    """The ``/v1/completions`` URL of ``endpoint`` (user info and query dropped).

    >>> completions_url("http://127.0.0.1:8000/v1")
    'http://127.0.0.1:8000/v1/completions'
    """
    return _base_url(endpoint)[1] + "/v1/completions"


def public_endpoint(endpoint: str) -> str:
    """The endpoint as recorded in the result: no user name, password or query."""
    return _base_url(endpoint)[1]


def _headers() -> dict[str, str]:
    key = os.environ.get(API_KEY_ENV)
    return {"Authorization": f"Bearer {key}"} if key else {}


def check_endpoint(options: ServeOptions) -> list[str]:
    """Ask the server for its models (``GET /v1/models``) before a run; return their ids.

    Raises
    ------
    InputError
        The server cannot be reached, or it does not serve ``options.model`` (the message
        lists the models it serves).
    """
    import httpx

    url = _base_url(options.endpoint)[1] + "/v1/models"
    try:
        resp = httpx.get(url, headers=_headers(), timeout=min(options.timeout_s, 30.0))
    except httpx.HTTPError as exc:
        raise InputError(
            f"--endpoint {public_endpoint(options.endpoint)}: cannot reach the server "
            f"({type(exc).__name__}: {exc})",
            hint="start the server first, or check the host and port",
        ) from None
    if resp.status_code != 200:
        raise InputError(
            f"--endpoint {public_endpoint(options.endpoint)}: GET /v1/models answered "
            f"HTTP {resp.status_code}",
            hint=f"is it an OpenAI-compatible server? (an API key goes in ${API_KEY_ENV})",
        )
    try:
        ids = [str(m["id"]) for m in resp.json().get("data", [])]
    except (ValueError, KeyError, TypeError, AttributeError):
        raise InputError(
            f"--endpoint {public_endpoint(options.endpoint)}: /v1/models is not an OpenAI model list",
            hint="point --endpoint at an OpenAI-compatible server",
        ) from None
    if ids and options.model not in ids:
        raise InputError(
            f"--model {options.model!r} is not served at {public_endpoint(options.endpoint)}",
            hint=f"it serves: {', '.join(ids[:10])}",
        )
    return ids


class SpecMeter:
    """Reads the server's speculative-decoding metrics (:mod:`gpuplan.probes.serve_spec`)
    around each level and, for an engine that gives a gauge, every
    :data:`~gpuplan.probes.serve_spec.SAMPLE_INTERVAL_S` during it."""

    def __init__(self, client: Any, options: ServeOptions) -> None:
        self.client = client
        self.base = _base_url(options.endpoint)[1]
        self.timeout = min(options.timeout_s, 10.0)
        self.spec_tokens = options.spec_tokens
        self.path: str | None = None  # the metrics path that answered

    def read(self) -> SpecReading | None:
        import httpx

        for path in (self.path,) if self.path else METRICS_PATHS:
            try:
                resp = self.client.get(self.base + path, headers=_headers(), timeout=self.timeout)
            except httpx.HTTPError:
                continue
            got = read_spec(resp.text) if resp.status_code == 200 else None
            if got is not None:
                self.path = path
                return got
        return None

    def needs_samples(self, before: SpecReading | None) -> bool:
        """Whether the level's acceptance comes from the gauge (read during the level)."""
        if before is None or before.engine == "vllm":
            return False
        return not (before.counted and (before.draft_tokens or self.spec_tokens))

    @contextlib.contextmanager
    def sampling(self, before: SpecReading | None) -> Iterator[list[SpecReading]]:
        """Read the gauge in a background thread while the block runs; yields the reads."""
        reads: list[SpecReading] = []
        if not self.needs_samples(before):
            yield reads
            return
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(SAMPLE_INTERVAL_S):
                got = self.read()
                if got is not None:
                    reads.append(got)

        thread = threading.Thread(target=loop, name="gpuplan-serve-metrics", daemon=True)
        thread.start()
        try:
            yield reads
        finally:
            stop.set()
            thread.join(timeout=self.timeout + 1.0)


def prompt_tokens(rng: random.Random, n: int) -> list[int]:
    """``n`` random token ids in [PROMPT_TOKEN_LOW, PROMPT_TOKEN_HIGH)."""
    return [rng.randrange(PROMPT_TOKEN_LOW, PROMPT_TOKEN_HIGH) for _ in range(n)]


def one_request(
    client: Any,
    url: str,
    body: dict[str, Any],
    stop: threading.Event,
    timeout_s: float,
) -> dict[str, Any]:
    """Send one streaming completion; its ``ServeRequest`` dict (vLLM's definitions)."""
    import httpx

    out: dict[str, Any] = {"ok": False, "error": None, "prompt_tokens": len(body["prompt"])}
    itl: list[float] = []
    ttft = None
    chunks = 0
    usage_tokens = None
    start = time.perf_counter()
    last = start
    try:
        with client.stream("POST", url, json=body, headers=_headers(), timeout=timeout_s) as resp:
            if resp.status_code != 200:
                resp.read()
                out["error"] = f"HTTP {resp.status_code}: {resp.text[:200]}"
                return out
            for line in resp.iter_lines():
                if stop.is_set():
                    out["error"] = "stopped"
                    return out
                line = line.strip()
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    break
                now = time.perf_counter()
                msg = json.loads(data)
                choices = msg.get("choices") or []
                if choices and choices[0].get("text"):
                    if ttft is None:
                        ttft = now - start
                    else:
                        itl.append(now - last)
                    last = now
                    chunks += 1
                usage = msg.get("usage")
                if usage and usage.get("completion_tokens") is not None:
                    usage_tokens = int(usage["completion_tokens"])
                    if usage.get("prompt_tokens") is not None:
                        out["prompt_tokens"] = int(usage["prompt_tokens"])
    except (httpx.HTTPError, ValueError) as exc:
        out["error"] = f"{type(exc).__name__}: {exc}"
        return out
    if ttft is None:
        out["error"] = "the stream carried no text"
        return out
    e2e = last - start
    tokens = usage_tokens if usage_tokens else chunks
    out.update(
        ok=True,
        output_tokens=tokens,
        ttft_s=ttft,
        e2e_s=e2e,
        tpot_s=(e2e - ttft) / (tokens - 1) if tokens > 1 else None,
        itl_s=itl,
    )
    return out


def level_summary(
    requests: list[dict[str, Any]], concurrency: int, options: ServeOptions, duration_s: float
) -> dict[str, Any]:
    """The ``ServeMeasurement`` of one level (vLLM ``calculate_metrics``)."""
    import numpy as np

    good = [r for r in requests if r["ok"]]

    def pct(values: list[float], q: float) -> float | None:
        return float(np.percentile(values, q)) if values else None

    def mean(values: list[float]) -> float | None:
        return float(np.mean(values)) if values else None

    ttft = [r["ttft_s"] for r in good]
    tpot = [r["tpot_s"] for r in good if r.get("tpot_s") is not None]
    itl = [x for r in good for x in r["itl_s"]]
    e2e = [r["e2e_s"] for r in good]
    total_out = int(sum(r["output_tokens"] for r in good))
    dur = max(duration_s, 1e-9)
    return {
        "concurrency": concurrency,
        "num_requests": len(requests),
        "completed": len(good),
        "failed": len(requests) - len(good),
        "input_tokens": options.input_tokens,
        "output_tokens": options.output_tokens,
        "duration_s": duration_s,
        "request_throughput_per_s": len(good) / dur,
        "output_throughput_tokens_per_s": total_out / dur,
        "total_output_tokens": total_out,
        "ttft_p50_s": pct(ttft, 50),
        "ttft_p99_s": pct(ttft, 99),
        "ttft_mean_s": mean(ttft),
        "tpot_p50_s": pct(tpot, 50),
        "tpot_p99_s": pct(tpot, 99),
        "tpot_mean_s": mean(tpot),
        "itl_p50_s": pct(itl, 50),
        "itl_p99_s": pct(itl, 99),
        "e2e_p50_s": pct(e2e, 50),
        "e2e_p99_s": pct(e2e, 99),
        "requests": requests,
    }


def _body(options: ServeOptions, prompt: list[int]) -> dict[str, Any]:
    return {
        "model": options.model,
        "prompt": prompt,
        "max_tokens": options.output_tokens,
        "temperature": 0.0,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


def run_level(
    ctx: ProbeContext,
    client: Any,
    options: ServeOptions,
    concurrency: int,
    rng: random.Random,
    done: list[dict[str, Any]],
) -> float:
    """Send one level's requests, at most ``concurrency`` in flight; return its wall time.

    Each finished request is appended to ``done`` as it ends, so that what a Ctrl-C or the
    probe's time budget interrupts (the exception propagates) is still there.
    """
    url = completions_url(options.endpoint)
    stop = threading.Event()
    task = ctx.progress.task(
        f"serve c={concurrency} ({options.requests_per_level} requests)",
        options.requests_per_level,
    )
    bodies = [
        _body(options, prompt_tokens(rng, options.input_tokens))
        for _ in range(options.requests_per_level)
    ]
    pool = cf.ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="gpuplan-serve")
    start = time.perf_counter()
    try:
        pending = {
            pool.submit(one_request, client, url, b, stop, options.timeout_s) for b in bodies
        }
        while pending:
            finished, pending = cf.wait(pending, timeout=0.2, return_when=cf.FIRST_COMPLETED)
            for f in finished:
                done.append(f.result())
                task.advance()
            if pending:
                ctx.check_deadline()
    finally:
        stop.set()
        pool.shutdown(wait=False, cancel_futures=True)
    return time.perf_counter() - start


def run(ctx: ProbeContext) -> None:
    """The ``serve`` probe (``ctx.workload`` holds :class:`ServeOptions` fields and the
    calibration labels ``engine``, ``catalog_model``, ``device_id``, ``tp``, ``precision``)."""
    import httpx

    work = dict(ctx.workload)
    labels = {
        k: work.pop(k, None) for k in ("engine", "catalog_model", "device_id", "tp", "precision")
    }
    options = ServeOptions(**work)
    rec = ctx.record(
        "serve",
        PROBE_VERSION,
        device="cuda:0" if ctx.device.is_gpu else "cpu",
        endpoint=public_endpoint(options.endpoint),
        model=options.model,
        concurrency=list(options.concurrency),
        input_tokens=options.input_tokens,
        output_tokens=options.output_tokens,
        requests_per_level=options.requests_per_level,
        seed=options.seed,
        convention=CONVENTION,
        **({"spec_tokens": options.spec_tokens} if options.spec_tokens else {}),
        **{k: v for k, v in labels.items() if v is not None},
    )
    rng = random.Random(options.seed)
    limits = httpx.Limits(max_connections=max(options.concurrency) + 1)
    with httpx.Client(limits=limits) as client:
        # one request before the sweep (vLLM sends a test prompt first): kept apart
        warm = one_request(
            client,
            completions_url(options.endpoint),
            _body(options, prompt_tokens(rng, options.input_tokens)),
            threading.Event(),
            options.timeout_s,
        )
        rec.params["warmup"] = warm
        if not warm["ok"]:
            rec.fail(f"the warmup request failed: {warm['error']}")
            return
        meter = SpecMeter(client, options)
        unnamed = False
        for c in options.concurrency:
            done: list[dict[str, Any]] = []
            before = meter.read()
            start = time.perf_counter()
            try:
                with meter.sampling(before) as reads:
                    duration = run_level(ctx, client, options, c, rng, done)
            except BaseException:
                # Ctrl-C or the time budget: keep what this level finished, then stop
                partial = [r for r in done if r["ok"]]
                if partial:
                    m = level_summary(partial, c, options, time.perf_counter() - start)
                    rec.add({**m, "interrupted": True})
                raise
            m = level_summary(done, c, options, duration)
            spec = speculative_summary(before, meter.read(), reads, options.spec_tokens)
            if spec is not None:
                k, tau = spec["draft_tokens"], spec["acceptance_length"]
                if k is not None and not 1.0 <= tau <= k + 1:
                    rec.warn(
                        f"concurrency {c}: the server's acceptance length {tau:.3g} is outside "
                        f"[1, {k + 1}] for {k} draft tokens; the level is kept without them"
                    )
                    spec["draft_tokens"] = None
                elif k is None and not unnamed:
                    unnamed = True
                    rec.warn(
                        f"the server runs speculative decoding (acceptance length {tau:.3g}) "
                        "but its metrics do not name the draft length: rerun with "
                        "--spec-tokens K, or calibrate leaves these levels out"
                    )
                m["speculative"] = spec
            if m["completed"] == 0:
                rec.warn(f"concurrency {c}: every request failed ({done[0]['error']})")
                continue
            if m["failed"]:
                errors = sorted({str(r["error"]) for r in done if not r["ok"]})
                rec.warn(
                    f"concurrency {c}: {m['failed']} requests failed ({'; '.join(errors)[:200]})"
                )
            rec.add(m)
            ctx.point_done()
    rec.ok()
