"""What a serving engine says about its speculative decoding, read from its Prometheus metrics.

The serving probe (:mod:`gpuplan.probes.serve`) reads the server's metrics before and after
each concurrency level, and every :data:`SAMPLE_INTERVAL_S` during it, and records the
level's draft length ``k`` and acceptance length ``tau`` (tokens a verification step emits,
the bonus token included), so that ``gpuplan calibrate`` forecasts the level with the
speculation it ran. Each engine exposes it differently:

* **vLLM** (``GET /metrics``; ``vllm/v1/spec_decode/metrics.py`` ``SpecDecodingProm``):
  cumulative counters of drafts, draft tokens and accepted draft tokens. Over a level,
  ``k = draft_tokens / drafts`` and ``tau = 1 + accepted / drafts`` (vLLM's "mean acceptance
  length"): exact over the level's requests.
* **TensorRT-LLM** (``trtllm-serve``, ``GET /prometheus/metrics``;
  ``tensorrt_llm/metrics/collector.py`` ``MetricsCollector``): cumulative counters of draft
  tokens and accepted draft tokens, and the draft length as the ``spec_num_tokens`` label of
  ``trtllm_speculative_config_info``. Every request drafts ``k`` tokens a step, so over a level
  ``drafts = draft_tokens / k`` and ``tau = 1 + accepted / drafts``: exact. Without the info
  metric (or ``--spec-tokens``) the acceptance-length gauge is sampled as SGLang's.
* **SGLang** (``GET /metrics`` with ``--enable-metrics``; ``python/sglang/srt/metrics/
  collector.py``): a gauge, ``sglang:spec_accept_length``, the acceptance length (bonus token
  included) of the scheduler's last logging interval on each rank, and the draft steps as the
  ``spec_num_steps`` label of ``speculative_config_info`` (with a draft tree, its width
  ``spec_eagle_topk`` and the tokens it verifies, ``spec_num_draft_tokens``, recorded too). The level's ``tau`` is the mean of
  the gauge sampled during the level (the ranks averaged; the first sample, which may still
  hold the previous level's interval, dropped) and at its end: an estimate, not a count.

A server that gives the acceptance but not the draft length records ``draft_tokens: null``
(and the probe says to pass ``--spec-tokens K``); ``calibrate`` leaves such levels out, since
it cannot forecast them with the speculation they ran.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

#: where the engines serve their Prometheus text exposition: vLLM and SGLang ``/metrics``,
#: TensorRT-LLM's ``trtllm-serve`` ``/prometheus/metrics``
METRICS_PATHS = ("/metrics", "/prometheus/metrics")
#: seconds between two reads of a gauge during a level
SAMPLE_INTERVAL_S = 0.25

#: vLLM's counters (vllm/v1/spec_decode/metrics.py SpecDecodingProm)
SPEC_COUNTERS = {
    "drafts": "vllm:spec_decode_num_drafts_total",
    "draft_tokens": "vllm:spec_decode_num_draft_tokens_total",
    "accepted": "vllm:spec_decode_num_accepted_tokens_total",
}
#: TensorRT-LLM's counters, gauge and config info (tensorrt_llm/metrics/collector.py)
TRTLLM_COUNTERS = {
    "draft_tokens": "trtllm_spec_decode_num_draft_tokens_total",
    "accepted": "trtllm_spec_decode_num_accepted_tokens_total",
}
TRTLLM_GAUGE = "trtllm_spec_decode_acceptance_length"
TRTLLM_INFO = ("trtllm_speculative_config_info",)
TRTLLM_DRAFT_LABEL = "spec_num_tokens"
#: SGLang's gauge and config info (python/sglang/srt/metrics/collector.py)
SGLANG_GAUGE = "sglang:spec_accept_length"
SGLANG_INFO = ("sglang:speculative_config_info", "speculative_config_info")
SGLANG_DRAFT_LABEL = "spec_num_steps"
#: a draft tree's width and the tokens it verifies (``--speculative-eagle-topk``,
#: ``--speculative-num-draft-tokens``)
SGLANG_TREE_LABEL = "spec_eagle_topk"
SGLANG_VERIFY_LABEL = "spec_num_draft_tokens"

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    r"""``(name, labels, value)`` of every sample of a Prometheus text exposition (version
    0.0.4: ``name{label="value",...} value [timestamp]``; comments and unparsable lines
    skipped).

    >>> parse_samples('# TYPE a gauge\na{x="1",y="a\\"b"} 2.5\nb 3 1700000000')
    [('a', {'x': '1', 'y': 'a\\"b'}, 2.5), ('b', {}, 3.0)]
    """
    out: list[tuple[str, dict[str, str], float]] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        if m is None:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out.append((m.group(1), dict(_LABEL.findall(m.group(2) or "")), value))
    return out


def parse_counters(text: str, names: tuple[str, ...]) -> dict[str, float]:
    r"""Sum each named sample over its label sets; names absent are left out.

    >>> parse_counters('# TYPE a counter\na_total{e="0"} 2.0\na_total{e="1"} 3\nb 1', ("a_total",))
    {'a_total': 5.0}
    """
    out: dict[str, float] = {}
    for name, _, value in parse_samples(text):
        if name in names:
            out[name] = out.get(name, 0.0) + value
    return out


@dataclass(frozen=True)
class SpecReading:
    """One read of a server's speculative-decoding metrics.

    Attributes
    ----------
    engine:
        Whose metrics they are: ``vllm``, ``trtllm`` or ``sglang``.
    counters:
        Cumulative counters, summed over label sets: vLLM's ``drafts``, ``draft_tokens``,
        ``accepted``; TensorRT-LLM's ``draft_tokens``, ``accepted``; none for SGLang.
    gauge:
        The engine's acceptance-length gauge averaged over its ranks (SGLang, TensorRT-LLM),
        None where it has none or none yet above 0.
    draft_tokens:
        The draft length the server's config info names (SGLang ``spec_num_steps``,
        TensorRT-LLM ``spec_num_tokens``), else None.
    tree_width, verify_tokens:
        A draft tree's shape where the config info names one wider than a chain (SGLang
        ``spec_eagle_topk`` > 1 and ``spec_num_draft_tokens``), else None.
    """

    engine: str
    counters: dict[str, float] = field(default_factory=dict)
    gauge: float | None = None
    draft_tokens: int | None = None
    tree_width: int | None = None
    verify_tokens: int | None = None

    @property
    def counted(self) -> bool:
        """Whether a level's acceptance comes from counters (exact) rather than the gauge."""
        return self.engine == "vllm" or (
            self.engine == "trtllm" and len(self.counters) == len(TRTLLM_COUNTERS)
        )


def _mean_gauge(samples: list[tuple[str, dict[str, str], float]], name: str) -> float | None:
    values = [v for n, _, v in samples if n == name and v > 0]
    return statistics.fmean(values) if values else None


def _info_label(
    samples: list[tuple[str, dict[str, str], float]], names: tuple[str, ...], label: str
) -> int | None:
    for n, labels, _ in samples:
        if n in names and label in labels:
            try:
                k = int(float(labels[label]))
            except ValueError:
                return None
            return k if k > 0 else None
    return None


def read_spec(text: str) -> SpecReading | None:
    """The speculative-decoding metrics in a Prometheus exposition, or None when it has none
    of vLLM's, TensorRT-LLM's or SGLang's.

    >>> read_spec('trtllm_spec_decode_num_draft_tokens_total 30\\n'
    ...           'trtllm_spec_decode_num_accepted_tokens_total 12\\n'
    ...           'trtllm_speculative_config_info{spec_num_tokens="3"} 1').draft_tokens
    3
    """
    samples = parse_samples(text)
    names = {n for n, _, _ in samples}
    if all(v in names for v in SPEC_COUNTERS.values()):
        got = parse_counters(text, tuple(SPEC_COUNTERS.values()))
        return SpecReading("vllm", {k: got[v] for k, v in SPEC_COUNTERS.items()})
    if TRTLLM_GAUGE in names or any(v in names for v in TRTLLM_COUNTERS.values()):
        got = parse_counters(text, tuple(TRTLLM_COUNTERS.values()))
        return SpecReading(
            "trtllm",
            {k: got[v] for k, v in TRTLLM_COUNTERS.items() if v in got},
            _mean_gauge(samples, TRTLLM_GAUGE),
            _info_label(samples, TRTLLM_INFO, TRTLLM_DRAFT_LABEL),
        )
    if SGLANG_GAUGE in names:
        width = _info_label(samples, SGLANG_INFO, SGLANG_TREE_LABEL)
        tree = width is not None and width > 1
        return SpecReading(
            "sglang",
            {},
            _mean_gauge(samples, SGLANG_GAUGE),
            _info_label(samples, SGLANG_INFO, SGLANG_DRAFT_LABEL),
            width if tree else None,
            _info_label(samples, SGLANG_INFO, SGLANG_VERIFY_LABEL) if tree else None,
        )
    return None


def _source(engine: str, counted: bool) -> str:
    if engine == "vllm":
        return "GET /metrics: " + ", ".join(SPEC_COUNTERS.values()) + ", over the level"
    if engine == "trtllm" and counted:
        return (
            "GET /prometheus/metrics: "
            + ", ".join(TRTLLM_COUNTERS.values())
            + f" over the level, drafts = draft tokens / {TRTLLM_DRAFT_LABEL}"
        )
    gauge = TRTLLM_GAUGE if engine == "trtllm" else SGLANG_GAUGE
    return f"{gauge} (gauge of the engine's last logging interval), mean of reads over the level"


def speculative_summary(
    before: SpecReading | None,
    after: SpecReading | None,
    samples: Sequence[SpecReading] = (),
    draft_tokens: int | None = None,
) -> dict[str, Any] | None:
    """A level's speculation from the readings around it (and, for a gauge, during it):
    ``{draft_tokens, acceptance_length, drafts (counted only), source}``; None when the
    server ran no speculative step in the level. ``draft_tokens`` is the user's ``k``
    (``--spec-tokens``) for a server that does not name it.

    >>> speculative_summary(SpecReading("vllm", {"drafts": 10, "draft_tokens": 30, "accepted": 5}),
    ...     SpecReading("vllm", {"drafts": 110, "draft_tokens": 330, "accepted": 125}))["acceptance_length"]
    2.2
    """
    if after is None:
        return None
    k = after.draft_tokens or draft_tokens
    if after.engine == "vllm":
        if before is None or before.engine != "vllm":
            return None
        delta = {key: after.counters[key] - before.counters[key] for key in SPEC_COUNTERS}
        if delta["drafts"] <= 0:
            return None
        return {
            "draft_tokens": round(delta["draft_tokens"] / delta["drafts"]),
            "acceptance_length": 1.0 + delta["accepted"] / delta["drafts"],
            "drafts": int(delta["drafts"]),
            "source": _source("vllm", True),
        }
    if after.counted and k and before is not None and before.counted:
        proposed = after.counters["draft_tokens"] - before.counters["draft_tokens"]
        if proposed <= 0:
            return None
        drafts = proposed / k
        accepted = after.counters["accepted"] - before.counters["accepted"]
        return {
            "draft_tokens": int(k),
            "acceptance_length": 1.0 + accepted / drafts,
            "drafts": round(drafts),
            "source": _source(after.engine, True),
        }
    if (
        before is not None
        and before.counted
        and after.counted
        and after.counters["draft_tokens"] <= before.counters["draft_tokens"]
    ):
        return None  # counted, no draft length, and the level drafted nothing
    reads = [s.gauge for s in samples[1:] if s.gauge is not None]
    if after.gauge is not None:
        reads.append(after.gauge)
    if not reads:
        return None
    tree = (
        {"tree_width": after.tree_width, "verify_tokens": after.verify_tokens}
        if after.tree_width and after.verify_tokens
        else {}
    )
    return {
        "draft_tokens": int(k) if k else None,
        "acceptance_length": statistics.fmean(reads),
        **tree,
        "source": _source(after.engine, False),
    }
