"""Resolving the names people type ("H100 80GB HBM3", "A100-SXM4-80GB (Selene)") to catalog ids.

Rule, applied in order until something matches:

1. **Exact key**: the name and every id/alias are reduced to a key: lowercase, with spaces,
   underscores, hyphens, parentheses, brackets, commas and slashes removed
   (``"H100-SXM5-80GB"``, ``"h100 sxm5 80gb"`` and ``"H100_SXM5_80GB"`` share one key).
2. **Descriptive strings**: published tables add context to the GPU name. Parenthesised
   notes are dropped; the text is cut at the first comma and at a spaced `` / ``; then the
   words ``node``, ``per``, ``host``, ``server``, ``gpu(s)``, ``ranks``, vendor names
   (``nvidia``, ``amd``, ``intel``, ``instinct``...) and counts (``8x``, ``x8``) are removed.
   ``"AMD MI300X node (8x)"`` -> ``mi300x``; ``"B200 (DGX B200)"`` -> ``b200``.
3. **Alternatives**: a token with a slash (``"Gaudi 2/3"``) expands to each alternative;
   when they name different rows the name is ambiguous.
4. **Checkpoint names** (models only): a Hugging Face repository id names a checkpoint of an
   architecture. The organisation (``meta-llama/``), a leading ``Meta``, and the words
   that name a fine-tune, a quantisation or a release of the same weights' shape
   (``Instruct``, ``Thinking``, ``chat``, ``hf``, ``it``, ``FP8``, ``FP4``, ``KV``, ``AWQ``,
   ``v0.1``, dates such as ``0528`` or ``2507``...) are dropped:
   ``"meta-llama/Llama-3.1-70B-Instruct"`` -> ``llama 3.1 70b``;
   ``"nvidia/DeepSeek-R1-0528-FP4"`` -> ``deepseek r1``. The release tag is tried first, kept:
   a release that lengthened the context has its own row (``"Qwen/Qwen3-235B-A22B-Instruct-2507"``
   -> ``qwen3 235b a22b 2507``, the 256K-context row; without such a row the name falls back to
   the architecture's).
   MLPerf Inference names a benchmark by its model, a scenario variant and an accuracy
   target (the mlcommons/inference submission checker's model list: ``llama2-70b-99.9``,
   ``llama2-70b-interactive-99``, ``llama3.1-8b-edge``, ``gptj-99``). The variant
   (``interactive``, ``edge``) and a trailing accuracy target (``99``, ``99.9``) are
   dropped the same way: ``"llama2-70b-interactive-99.9"`` -> ``llama2 70b``; ``gptj`` is
   an alias of GPT-J 6B.

5. **System configuration words** (accelerators only, :meth:`Catalog.gpu`): benchmark
   submissions name the part with its configuration: power limit (``750W``), partition
   modes (``NPS1``, ``SPX``), cooling (``CTS``), module (``OAM``), host architecture
   (``aarch64``), a count glued to the part (``8xH100``); the memory technology NVML reports
   (``HBM3e`` in ``"NVIDIA H200 141GB HBM3e"``) and ``VF``, the SR-IOV virtual function a
   cloud VM's ROCm reports (``"AMD Instinct MI300X VF"``). They are dropped; then, if nothing matched, the memory size too, and the
   part found must hold within 7% of the memory the name states
   (``"MI300X-NPS1-SPX-192GB-750W"`` -> ``mi300x``; ``"H200-SXM-141GB-CTS"`` -> the H200 SXM).
   A TPU slice's size is dropped the same way (``"v5p-1024"`` -> ``tpu-v5p``).
6. **Instances** (accelerators only): a cloud instance type or TPU slice from the instance
   catalog names its accelerator (``"p5.48xlarge"`` -> the H100 SXM, ``"trn1.32xlarge"`` ->
   Trainium).

An unknown or ambiguous name raises :class:`gpuplan.errors.NotFoundError` listing the
closest ids (difflib).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable, Mapping

from gpuplan.errors import NotFoundError

_SEPARATORS = re.compile(r"[\s_\-()\[\],/]+")
_PARENS = re.compile(r"\([^)]*\)|\[[^\]]*\]")
_NOISE = {
    "node",
    "nodes",
    "per",
    "host",
    "server",
    "gpu",
    "gpus",
    "ranks",
    "on",
    "one",
    "nvidia",
    "amd",
    "intel",
    "google",
    "aws",
    "instinct",
    "tesla",
    "habana",
    # the system a part is sold in: "DGX B200", "HGX H100", "Trn2 UltraServer"
    "dgx",
    "hgx",
    "ultraserver",
}
_COUNT = re.compile(r"^(\d+x|x\d+)$")
#: words of a checkpoint name that say how the weights were tuned, quantised or released,
#: not which architecture they fill (rule 4)
_CHECKPOINT_WORDS = {
    "instruct",
    # a reasoning post-train of the same weights' shape: Qwen3-235B-A22B-Thinking-2507 (94
    # layers, 64 Q / 4 KV heads, 128 experts of 1,536, 8 active, vocab 151,936: the
    # Qwen3-235B-A22B row; apxml.com/models/qwen3-235b-a22b-thinking), Kimi-K2-Thinking
    # ("Starting with Kimi K2, we built it as a thinking agent", the model card as copied
    # by huggingface.co/unsloth/Kimi-K2-Thinking-GGUF). Their 256K native context has rows of
    # its own (qwen3-235b-a22b-2507 by the release tag, kimi-k2-0905 by alias).
    "thinking",
    "chat",
    "hf",
    "it",
    "base",
    "pretrain",
    "pretrained",
    "preview",
    "latest",
    "fp8",
    "fp4",
    "nvfp4",
    "mxfp4",
    "fp16",
    "bf16",
    "int8",
    "int4",
    "w8a8",
    "w8a16",
    "w4a16",
    "w4a8",
    "awq",
    "gptq",
    "kv",
    "dynamic",
    "static",
    "quantized",
    "quant",
    "turbo",
}
#: an MLPerf Inference benchmark's scenario variant (``llama2-70b-interactive-99``,
#: ``llama3.1-8b-edge``): the same model under tighter latency targets or the edge suite
_BENCHMARK_VARIANT = {"interactive", "edge"}
#: an MLPerf Inference accuracy target, last in a benchmark's name (``llama2-70b-99.9``:
#: 99.9% of the reference model's accuracy)
_ACCURACY_TARGET = re.compile(r"^99(\.9)?$")
#: a release tag: v0.1, v3, a date (0528, 2507, 20240229)
_RELEASE = re.compile(r"^(v\d+(\.\d+)*|\d{4}|\d{6}|\d{8})$")
#: a parameter count: 7b, 70b, 8x7b, 1.5b, 17b, 405m
_SIZE = re.compile(r"^(\d+x)?\d+(\.\d+)?[bm]$")


#: The word that names every catalog accelerator in a comparison (``forecast infer --gpu
#: all``, a scenario's ``candidates.gpus: all``)
ALL_GPUS = "all"


def names_every_gpu(names: Iterable[str]) -> bool:
    """Whether a list of accelerator names is the one word :data:`ALL_GPUS`.

    >>> names_every_gpu(["All"]), names_every_gpu(["h100", "all"])
    (True, False)
    """
    return [n.strip().lower() for n in names] == [ALL_GPUS]


def name_key(name: str) -> str:
    """Reduce a name to its lookup key.

    >>> name_key("H100-SXM5-80GB") == name_key("h100 sxm5 80gb")
    True
    """
    return _SEPARATORS.sub("", str(name).casefold())


def _clean_descriptive(name: str) -> str:
    text = _PARENS.sub(" ", str(name).casefold())
    text = text.split(",", 1)[0].split(" / ", 1)[0].split("(", 1)[0]
    words = [w for w in re.split(r"[\s_]+", text) if w]
    words = [w for w in words if w not in _NOISE and not _COUNT.match(w)]
    return " ".join(words)


def _alternatives(text: str) -> list[str]:
    words = text.split()
    out = [""]
    for w in words:
        parts = w.split("/") if "/" in w and all(w.split("/")) else [w]
        out = [f"{prefix} {p}".strip() for prefix in out for p in parts]
    return out


def checkpoint_base(name: str, *, keep_release: bool = False) -> str:
    """The architecture a checkpoint name stands for (rule 4), spaced; ``keep_release``
    keeps its release tag (a date or version after the size).

    >>> checkpoint_base("meta-llama/Llama-3.1-70B-Instruct")
    'llama 3.1 70b'
    >>> checkpoint_base("nvidia/DeepSeek-R1-0528-FP4")
    'deepseek r1'
    >>> checkpoint_base("Meta-Llama-3-8B-Instruct")
    'llama 3 8b'
    >>> checkpoint_base("mistralai/Mixtral-8x7B-Instruct-v0.1")
    'mixtral 8x7b'
    >>> checkpoint_base("deepseek-ai/DeepSeek-V3-0324")
    'deepseek v3'
    >>> checkpoint_base("Qwen/Qwen3-30B-A3B-Instruct-2507-FP8", keep_release=True)
    'qwen3 30b a3b 2507'
    >>> checkpoint_base("llama2-70b-interactive-99.9"), checkpoint_base("gptj-99")
    ('llama2 70b', 'gptj')
    """
    text = str(name).strip().casefold().rsplit("/", 1)[-1]
    words = [w for w in re.split(r"[\s_\-]+", text) if w]
    if words and words[0] == "meta" and len(words) > 1:
        words = words[1:]
    if len(words) > 1 and _ACCURACY_TARGET.match(words[-1]):
        words = words[:-1]
    kept: list[str] = []
    # a release tag follows the parameter count or a dropped word (Mistral-7B-v0.3,
    # R1-FP4-v2), never the family alone (DeepSeek-V3)
    tail = False
    for w in words:
        release = bool(_RELEASE.match(w)) and (tail or w[0].isdigit())
        # RedHat AI's "quantized.w8a16" glues two such words with a dot
        dotted = "." in w and all(p in _CHECKPOINT_WORDS for p in w.split("."))
        variant = bool(kept) and w in _BENCHMARK_VARIANT
        if w in _CHECKPOINT_WORDS or dotted or variant or (release and not keep_release):
            tail = True
            continue
        kept.append(w)
        tail = tail or bool(_SIZE.match(w))
    return " ".join(kept or words)


#: words of a system's accelerator name that describe its configuration (rule 5)
_CONFIG_WORD = re.compile(
    r"^((?:tdp)?\d+w|nps\d+|[scdq]px|cts|oam|aarch64|x86|x86_64|superchip|hbm\d?e?|vf)$"
)
_MEMORY_WORD = re.compile(r"^(\d+(?:\.\d+)?)gb$")
_GLUED_COUNT = re.compile(r"^\d+x(?=[a-z])")
#: a TPU generation as a slice names it (``v5p-1024``, ``v5litepod-256``, ``tpu7x-64``): the
#: count after it is the slice's size, not part of the chip's name
_TPU_GENERATION = re.compile(r"^(v[2-7][a-z]*|v5litepod|tpu\d+x?)$")  # not v100


def configuration_stripped(name: str) -> tuple[str, str, float | None]:
    """Rule 5: ``name`` without its configuration words, without those and its memory
    size, and the memory it states (GB; None when it states none).

    >>> configuration_stripped("AMD Instinct MI300X-NPS1-SPX-192GB-750W")
    ('amd instinct mi300x 192gb', 'amd instinct mi300x', 192.0)
    """
    words = [w for w in re.split(r"[\s_\-]+", str(name).strip().casefold()) if w]
    # a count glued to the part (8xH100, 8xMI300X)
    words = [_GLUED_COUNT.sub("", w) for w in words]
    kept = [w for w in words if w and not _CONFIG_WORD.match(w)]
    # a TPU slice's size (v5p-1024, v6e-256)
    kept = [
        w
        for i, w in enumerate(kept)
        if not (w.isdigit() and i > 0 and _TPU_GENERATION.match(kept[i - 1]))
    ]
    mem = [float(m.group(1)) for w in kept if (m := _MEMORY_WORD.match(w))]
    bare = [w for w in kept if not _MEMORY_WORD.match(w)]
    return " ".join(kept), " ".join(bare), (mem[0] if mem else None)


#: the weight precision a checkpoint's name states (rule 4 drops these words)
_CHECKPOINT_PRECISION = {
    "fp8": "fp8",
    "fp4": "fp4",
    "nvfp4": "fp4",
    "mxfp4": "fp4",
    "int8": "int8",
    "w8a8": "int8",
    "w8a16": "w8a16",
    "int4": "int4",
    "w4a16": "int4",
    "awq": "int4",
    "gptq": "int4",
}


def checkpoint_precision(name: str) -> str | None:
    """The weight precision a checkpoint's name states (``"...-Instruct-FP8"``: fp8), None
    when it states none.

    >>> checkpoint_precision("nvidia/Llama-3.3-70B-Instruct-FP4"), checkpoint_precision("Llama-3.1-8B")
    ('fp4', None)
    >>> checkpoint_precision("RedHatAI/Meta-Llama-3.1-8B-Instruct-quantized.w8a16")
    'w8a16'
    """
    words = re.split(r"[\s_\-/.]+", str(name).strip().casefold())
    return next((_CHECKPOINT_PRECISION[w] for w in words if w in _CHECKPOINT_PRECISION), None)


def candidates(name: str, *, checkpoints: bool = False) -> list[list[str]]:
    """The keys to try for ``name``, in order; each inner list holds alternatives
    (``checkpoints``: rule 4 too, for models)."""
    cleaned = _clean_descriptive(name)
    steps = [[name_key(name)], [name_key(cleaned)]]
    if checkpoints:
        steps.append([name_key(checkpoint_base(name, keep_release=True))])
        steps.append([name_key(checkpoint_base(name))])
    alts = _alternatives(cleaned)
    if len(alts) > 1:
        steps.append([name_key(a) for a in alts])
    return steps


def resolve(name: str, index: Mapping[str, str], *, what: str, all_ids: Iterable[str]) -> str:
    """Return the id that ``name`` names in ``index`` (key -> id).

    Raises
    ------
    NotFoundError
        Unknown or ambiguous name; the message lists the closest ids.
    """
    if not str(name).strip():
        raise NotFoundError(
            f"empty {what} name", hint=f"use an id such as {next(iter(all_ids), '?')}"
        )
    for keys in candidates(name, checkpoints=what == "model"):
        hits = sorted({index[k] for k in keys if k in index})
        if len(hits) == 1:
            return hits[0]
        if len(hits) > 1:
            raise NotFoundError(
                f"{what} name {name!r} is ambiguous: it matches {', '.join(hits)}",
                hint="use one of these ids",
            )
    ids = sorted(set(all_ids))
    key = name_key(_clean_descriptive(name)) or name_key(name)
    by_key = difflib.get_close_matches(key, list(index), n=8, cutoff=0.5)
    close: list[str] = []
    for k in by_key:
        if index[k] not in close:
            close.append(index[k])
    for i in difflib.get_close_matches(str(name).lower(), ids, n=5, cutoff=0.4):
        if i not in close:
            close.append(i)
    hint = (
        f"closest ids: {', '.join(close[:5])}"
        if close
        else f"see 'gpuplan catalog ls' for the {len(ids)} known ids"
    )
    raise NotFoundError(f"unknown {what} {name!r}", hint=hint)
