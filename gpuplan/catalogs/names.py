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
}
_COUNT = re.compile(r"^(\d+x|x\d+)$")


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


def candidates(name: str) -> list[list[str]]:
    """The keys to try for ``name``, in order; each inner list holds alternatives."""
    cleaned = _clean_descriptive(name)
    steps = [[name_key(name)], [name_key(cleaned)]]
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
    for keys in candidates(name):
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
