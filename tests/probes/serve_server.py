"""A tiny OpenAI-compatible streaming server for the serving-probe tests (a CPU stand-in).

It runs a real torch model on the CPU -- a 2-layer transformer with seeded random weights
and a 1024-token vocabulary -- and generates greedily one token per forward pass (no KV
cache: every step runs the whole sequence, so later tokens cost a little more, as a real
decode's attention does). ``POST /v1/completions`` with ``stream: true`` answers
server-sent events in the OpenAI format, one chunk per token, then a usage chunk when
``stream_options.include_usage`` is set, then ``data: [DONE]``; ``GET /v1/models`` lists the
one model; ``GET /stats`` says how many requests were answered to the end. Each request runs in its own thread, so concurrent requests share the CPU.

``--speculative K`` runs real speculative decoding with prompt-lookup drafts (vLLM's
``ngram`` method): each step proposes the K tokens that followed the last earlier occurrence
of the sequence's last token (or repeats the last token when there is none), one forward
pass verifies them against the greedy choice, and the longest matching prefix plus the
model's next token are emitted, so the output is the same as without speculation. The
server then exposes the speculation as the engine named by ``--metrics`` does:

* ``vllm`` (the default): ``GET /metrics``, the counters ``vllm:spec_decode_num_drafts_total``,
  ``vllm:spec_decode_num_draft_tokens_total`` and ``vllm:spec_decode_num_accepted_tokens_total``;
* ``sglang``: ``GET /metrics``, the gauge ``sglang:spec_accept_length`` (accepted drafts plus
  one per step over the last :data:`LOG_INTERVAL` verification steps, per step, as SGLang's
  scheduler logs it) and ``sglang:speculative_config_info{spec_num_steps="K"}``;
* ``trtllm``: ``GET /prometheus/metrics`` (``/metrics`` is 404, as on ``trtllm-serve``), the
  counters ``trtllm_spec_decode_num_draft_tokens_total`` and
  ``trtllm_spec_decode_num_accepted_tokens_total``, the last step's
  ``trtllm_spec_decode_acceptance_length`` and
  ``trtllm_speculative_config_info{spec_num_tokens="K"}``.

``--no-spec-config`` leaves the config info out (a server that does not name its draft
length). ``GET /stats`` also gives the true totals (drafts, draft tokens, accepted) and
every value the SGLang-style gauge took.

Run ``python tests/probes/serve_server.py --port 0 --model tiny``: it prints
``PORT <n>`` on stdout once it listens on 127.0.0.1 (only), then serves until killed.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

VOCAB = 1024
#: verification steps per logging interval of the SGLang-style gauge
LOG_INTERVAL = 8


def build_model(seed: int = 0) -> Any:
    import torch
    from torch import nn

    torch.manual_seed(seed)
    torch.set_num_threads(1)

    class Tiny(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(VOCAB, 64)
            layer = nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)
            self.blocks = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
            self.head = nn.Linear(64, VOCAB)

        def forward(self, ids: Any) -> Any:
            n = ids.shape[1]
            mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
            return self.head(self.blocks(self.embed(ids), mask=mask, is_causal=True))

    return Tiny().eval()


def draft_tokens(seq: list[int], k: int) -> list[int]:
    """Prompt-lookup draft: the ``k`` tokens after the last earlier occurrence of the last
    token, padded with the last token."""
    last = seq[-1]
    for i in range(len(seq) - 2, -1, -1):
        if seq[i] == last:
            out = seq[i + 1 : i + 1 + k]
            return out + [last] * (k - len(out))
    return [last] * k


class Handler(BaseHTTPRequestHandler):
    model: Any = None
    model_name = "tiny"
    completed = 0  # requests answered to the end (GET /stats), so a test can time a signal
    lock = threading.Lock()
    speculative = 0  # draft tokens per step (0: none)
    drafts = 0
    draft_tokens = 0
    accepted = 0
    metrics = "vllm"
    spec_config = True
    interval: ClassVar[list[int]] = [
        0,
        0,
    ]  # SGLang-style: steps and accepted drafts in the open interval
    gauge = 0.0  # acceptance length of the last closed interval (SGLang) or step (TRT-LLM)
    gauges: ClassVar[list[float]] = []  # every value the gauge took (GET /stats)

    def log_message(self, *args: Any) -> None:  # quiet: tests read stdout for the port
        return None

    def _json(self, code: int, obj: Any) -> None:
        body = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _text(self, body: str) -> None:
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _metrics(self) -> str:
        k = Handler.speculative
        label = f'model_name="{self.model_name}"'
        if Handler.metrics == "sglang":
            body = (
                "# TYPE sglang:spec_accept_length gauge\n"
                f'sglang:spec_accept_length{{{label},tp_rank="0",dp_rank="0"}} {Handler.gauge}\n'
            )
            if Handler.spec_config:
                body += (
                    f'sglang:speculative_config_info{{{label},spec_enabled="true",'
                    f'spec_algorithm="NGRAM",spec_num_draft_tokens="{k + 1}",'
                    f'spec_num_steps="{k}",spec_eagle_topk="1"}} 1.0\n'
                )
            return body
        if Handler.metrics == "trtllm":
            body = (
                f"trtllm_spec_decode_num_draft_tokens_total{{{label}}} {float(Handler.draft_tokens)}\n"
                f"trtllm_spec_decode_num_accepted_tokens_total{{{label}}} {float(Handler.accepted)}\n"
                f"trtllm_spec_decode_acceptance_length{{{label}}} {Handler.gauge}\n"
            )
            if Handler.spec_config:
                body += (
                    f'trtllm_speculative_config_info{{{label},spec_enabled="true",'
                    f'spec_method="NGram",spec_num_tokens="{k}"}} 1.0\n'
                )
            return body
        return "".join(
            f"# TYPE vllm:spec_decode_num_{name} counter\n"
            f'vllm:spec_decode_num_{name}_total{{engine="0",{label}}} {float(value)}\n'
            for name, value in (
                ("drafts", Handler.drafts),
                ("draft_tokens", Handler.draft_tokens),
                ("accepted_tokens", Handler.accepted),
            )
        )

    def do_GET(self) -> None:
        path = self.path.rstrip("/")
        metrics_path = "/prometheus/metrics" if Handler.metrics == "trtllm" else "/metrics"
        if path == metrics_path and Handler.speculative:
            self._text(self._metrics())
        elif self.path.rstrip("/") == "/stats":
            with Handler.lock:
                stats = {
                    "completed": Handler.completed,
                    "drafts": Handler.drafts,
                    "draft_tokens": Handler.draft_tokens,
                    "accepted": Handler.accepted,
                    "gauges": list(Handler.gauges),
                }
            self._json(200, stats)
        elif self.path.rstrip("/") == "/v1/models":
            self._json(
                200, {"object": "list", "data": [{"id": self.model_name, "object": "model"}]}
            )
        else:
            self._json(404, {"error": "not found"})

    def do_POST(self) -> None:
        import torch

        if self.path.rstrip("/") != "/v1/completions":
            self._json(404, {"error": "not found"})
            return
        req = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if req.get("model") != self.model_name:
            self._json(404, {"error": f"model {req.get('model')!r} not found"})
            return
        prompt = req["prompt"]
        ids = (
            [int(t) % VOCAB for t in prompt]
            if isinstance(prompt, list)
            else [ord(c) % VOCAB for c in str(prompt)]
        )
        max_tokens = int(req.get("max_tokens", 16))
        include_usage = bool((req.get("stream_options") or {}).get("include_usage"))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        seq = list(ids)
        k = Handler.speculative
        sent = 0
        with torch.inference_mode():
            while sent < max_tokens:
                draft = draft_tokens(seq, k) if k else []
                logits = self.model(torch.tensor([seq + draft]))[0]
                # greedy choice after the sequence and after each draft token
                greedy = [int(t) for t in logits[len(seq) - 1 :].argmax(dim=-1)]
                n_ok = 0
                while n_ok < len(draft) and draft[n_ok] == greedy[n_ok]:
                    n_ok += 1
                new = [*draft[:n_ok], greedy[n_ok]][: max_tokens - sent]
                if k:
                    with Handler.lock:
                        Handler.drafts += 1
                        Handler.draft_tokens += k
                        Handler.accepted += n_ok
                        if Handler.metrics == "trtllm":
                            Handler.gauge = float(n_ok + 1)
                        Handler.interval[0] += 1
                        Handler.interval[1] += n_ok
                        if Handler.metrics == "sglang" and Handler.interval[0] >= LOG_INTERVAL:
                            steps, ok = Handler.interval
                            Handler.gauge = (ok + steps) / steps
                            Handler.gauges.append(Handler.gauge)
                            Handler.interval = [0, 0]
                seq += new
                sent += len(new)
                text = "".join(f" t{t}" for t in new)
                chunk = {"object": "text_completion", "choices": [{"index": 0, "text": text}]}
                self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                self.wfile.flush()
        if include_usage:
            usage = {
                "prompt_tokens": len(ids),
                "completion_tokens": max_tokens,
                "total_tokens": len(ids) + max_tokens,
            }
            self.wfile.write(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()
        with Handler.lock:
            Handler.completed += 1


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--model", default="tiny")
    ap.add_argument("--speculative", type=int, default=0)
    ap.add_argument("--metrics", choices=("vllm", "sglang", "trtllm"), default="vllm")
    ap.add_argument("--no-spec-config", action="store_true")
    args = ap.parse_args()
    Handler.model = build_model()
    Handler.model_name = args.model
    Handler.speculative = args.speculative
    Handler.metrics = args.metrics
    Handler.spec_config = not args.no_spec_config
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Handler)
    server.daemon_threads = True
    print(f"PORT {server.server_address[1]}", flush=True)
    server.serve_forever()


@contextlib.contextmanager
def running_server(
    model: str = "tiny", speculative: int = 0, metrics: str = "vllm", spec_config: bool = True
) -> Iterator[str]:
    """Start the server in a subprocess; yield its base URL; stop it on exit."""
    proc = subprocess.Popen(
        [
            sys.executable,
            str(Path(__file__).resolve()),
            "--port",
            "0",
            "--model",
            model,
            "--speculative",
            str(speculative),
            "--metrics",
            metrics,
            *([] if spec_config else ["--no-spec-config"]),
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    try:
        assert proc.stdout is not None
        deadline = time.monotonic() + 60
        line = proc.stdout.readline()
        if not line.startswith("PORT ") or time.monotonic() > deadline:
            raise RuntimeError(f"the test server did not start (said {line!r})")
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    main()
