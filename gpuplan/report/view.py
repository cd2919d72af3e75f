"""What the report's sections are built from: the figure index, the summary view and the
break-even rows of a plan document.

Job of this module: number every figure of a plan (:class:`FigureIndex`, the references
``[n]`` into the Figures appendix), say a figure's value and provenance in one line
(:func:`fmt`, :func:`prov_text`), and build the summary a reader sees first
(:func:`summary_view`, :func:`break_even_rows`). Both :mod:`gpuplan.report.sections` and
:mod:`gpuplan.report.render` read it; it imports neither.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from gpuplan.plan.provenance import format_number, is_figure_json

# ------------------------------------------------------------------ figure index


def _walk_figures(obj: Any) -> Iterator[dict[str, Any]]:
    if is_figure_json(obj):
        yield obj
        return
    if isinstance(obj, dict):
        for v in obj.values():
            yield from _walk_figures(v)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _walk_figures(v)


def _key(f: dict[str, Any]) -> str:
    return json.dumps(f, sort_keys=True, default=str)


class FigureIndex:
    """Numbers every distinct figure of a plan document, in document order: the summary's
    (:func:`summary_view`, kept as ``view``) first, as the report shows them."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self._num: dict[str, int] = {}
        self.entries: list[dict[str, Any]] = []
        self.view = summary_view(doc)
        for f in _walk_figures([self.view, doc]):
            k = _key(f)
            if k not in self._num:
                self._num[k] = len(self.entries) + 1
                self.entries.append(f)

    def num(self, f: dict[str, Any]) -> int:
        k = _key(f)
        if k not in self._num:  # a figure built after indexing (should not happen)
            self._num[k] = len(self.entries) + 1
            self.entries.append(f)
        return self._num[k]


#: a missing figure whose reason starts so prints the short text instead of "missing"
#: (storage tiers: gpuplan.plan.storage.missing_price_reason)
MISSING_SHORT = (
    ("price not published", "price not published"),
    ("price not in the catalog", "price not in catalog"),
)


def fmt(f: Any) -> str:
    """Display text of a figure's value (with its interval)."""
    if not is_figure_json(f):
        return "-" if f is None else str(f)
    if f.get("value") is None:
        why = str(f.get("missing") or "")
        return next((short for head, short in MISSING_SHORT if why.startswith(head)), "missing")
    text = format_number(f["value"], f["unit"])
    iv = f.get("interval")
    if iv and None not in iv and format_number(iv[0], f["unit"]) != format_number(iv[1], f["unit"]):
        text += f" ({format_number(iv[0], f['unit'])} to {format_number(iv[1], f['unit'])})"
    return text


def prov_text(f: dict[str, Any]) -> str:
    """One-line provenance of a figure."""
    p = f["provenance"]
    parts = [f"{p['kind']}: {p.get('ref', '')}"]
    if p.get("formula"):
        parts.append(f"= {p['formula']}")
    if p.get("inputs"):
        parts.append("from " + ", ".join(p["inputs"]))
    if p.get("source"):
        parts.append(f"source {p['source']}")
    if p.get("retrieved"):
        parts.append(f"retrieved {p['retrieved']}")
    if p.get("unverified"):
        parts.append("UNVERIFIED")
    if f.get("missing"):
        parts.append(f"missing: {f['missing']}")
    return "; ".join(parts)


# ------------------------------------------------------------------ summary


def _option(doc: dict[str, Any], oid: str) -> dict[str, Any] | None:
    return next((o for o in doc["options"] if o["id"] == oid), None)


def _input(doc: dict[str, Any], dotted: str) -> dict[str, Any] | None:
    """The plan's input figure for scenario field ``dotted`` (given or default)."""
    for f in doc.get("inputs") or []:
        ref = f["provenance"].get("ref", "")
        if ref.endswith(" " + dotted):
            return f
    return None


def _text(template: str, figs: dict[str, Any] | None = None) -> dict[str, Any]:
    from gpuplan.plan.provenance import Text, figure_from_json

    return Text(template, {k: figure_from_json(v) for k, v in (figs or {}).items()}).to_json()


def _ok(f: Any) -> bool:
    return is_figure_json(f) and isinstance(f.get("value"), (int, float))


def _deadline(doc: dict[str, Any], workload: str, gpu: str) -> dict[str, Any] | None:
    for c in doc.get("time_to_train_curves") or []:
        if c["workload"] == workload and c["gpu"] == gpu and _ok(c.get("deadline_days")):
            return c
    return None


def break_even_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Owning vs renting: every owned option's break-even utilisation against every priced
    purchasing model of every cloud option with the same GPU
    (:func:`gpuplan.plan.cost.break_even_against`), shared storage on both sides or on neither
    (:func:`gpuplan.plan.cost.storage_like_for_like`)."""
    from gpuplan.plan import cost as costmod
    from gpuplan.plan.provenance import figure_from_json

    rows = []
    for own in doc["options"]:
        tco = own.get("onprem_tco")
        if own["kind"] != "onprem" or not tco or not _ok(tco.get("total_per_year_usd")):
            continue
        total = figure_from_json(tco["total_per_year_usd"])
        own_st = tco.get("storage_in_total_per_year_usd")
        own_storage = figure_from_json(own_st) if own_st else None
        nodes = figure_from_json(own["nodes"])
        own_gpn = figure_from_json(own["gpus_per_node"])
        for cloud in doc["options"]:
            if cloud["kind"] != "cloud" or cloud["gpu"] != own["gpu"]:
                continue
            # every priced purchasing model of the cloud option, whichever the plan prices
            for model, c in (cloud.get("costs") or {}).items():
                if model == "onprem" or not c or not _ok(c.get("price_usd_per_node_hour")):
                    continue
                label = costmod.MODEL_LABEL.get(model, model)
                cloud_st = c.get("storage_usd_per_month")
                own_y, rented_st, left_out = costmod.storage_like_for_like(
                    total,
                    own_storage,
                    figure_from_json(cloud_st) if cloud_st else None,
                    cloud["id"],
                )
                price = costmod.per_owned_node_price(
                    figure_from_json(c["price_usd_per_node_hour"]),
                    figure_from_json(cloud["gpus_per_node"]),
                    own_gpn,
                    f"{cloud['id']} {label} per {own['platform']}-sized node",
                )
                rows.append(
                    {
                        "owned": own["id"],
                        "cloud": cloud["id"],
                        "purchasing_model": model,
                        "committed": model in costmod.COMMITTED,
                        "price_usd_per_node_hour": price.to_json(),
                        "break_even_utilisation": costmod.break_even_against(
                            own_y, nodes, price, rented_st, left_out
                        ).to_json(),
                    }
                )
    rows.sort(key=lambda r: (r["owned"], r["break_even_utilisation"]["value"] or 0.0))
    return rows


def summary_view(doc: dict[str, Any]) -> dict[str, Any]:
    """What the summary says, for both renderers (and the test that checks it against the
    sections below): the recommendation, what sets its size, what rules options out, the
    money (capex and yearly cost of ownership, or the rented fleet's cost), the utilisation
    assumed and the break-even against every cloud option, what is excluded, and the risk
    band (the forecast interval against the deadline, and the ranking's robustness).
    """
    from gpuplan.plan.cost import COMMITTED, MODEL_LABEL
    from gpuplan.plan.ranking import metric_label

    sm = doc["summary"]
    view: dict[str, Any] = {
        "headline": sm["headline"],
        "recommended": None,
        "facts": [],
        "sized_by": [],
        "ruled_out": sm.get("binding_constraints") or [],
        "money": [],
        "break_even": [],
        "excluded": [],
        "risk": [],
    }
    rec = sm.get("recommended")
    o = _option(doc, rec["option"]) if rec else None
    if rec is None or o is None:
        return view
    model = rec["purchasing_model"]
    owned = model == "onprem"
    mlabel = metric_label(sm["rank_by"], model)
    view["recommended"] = {"option": o["id"], "purchasing_model": model, "metric_label": mlabel}
    tco = o.get("onprem_tco") or {}
    if owned and _ok(tco.get("capex_usd")) and _ok(tco.get("total_per_year_usd")):
        view["headline"] = _text(
            f"Recommended: {o['label']}, bought: {{gpus}} on {{nodes}}; capex {{capex}}, "
            f"owned cost {{per_year}}; {mlabel}: {{metric}}",
            {
                "gpus": o["gpus"],
                "nodes": o["nodes"],
                "capex": tco["capex_usd"],
                "per_year": tco["total_per_year_usd"],
                "metric": rec["metric"],
            },
        )
    else:
        view["headline"] = _text(
            f"Recommended: {o['label']}, {MODEL_LABEL.get(model, model)}: {{gpus}} on "
            f"{{nodes}}; {mlabel}: {{metric}}",
            {"gpus": o["gpus"], "nodes": o["nodes"], "metric": rec["metric"]},
        )
    pw = o.get("power") or {}
    view["facts"] = [
        ("option", o["label"]),
        ("purchasing model", MODEL_LABEL.get(model, model)),
        ("GPUs", o["gpus"]),
        ("nodes", o["nodes"]),
        ("racks", pw.get("racks")),
        ("facility power", pw.get("facility_power_w")),
        (mlabel, rec["metric"]),
    ]
    # what sets the size
    for t in o.get("training") or []:
        c = _deadline(doc, t["name"], o["gpu"])
        if _ok(t.get("gpus")) and _ok(t.get("time_to_train_s")) and c is not None:
            view["sized_by"].append(
                _text(
                    f"{t['name']}: {{gpus}} to train within the deadline {{deadline}} "
                    "(forecast time to train {ttt})",
                    {
                        "gpus": t["gpus"],
                        "deadline": c["deadline_days"],
                        "ttt": t["time_to_train_s"],
                    },
                )
            )
    for sv in o.get("inference") or []:
        if _ok(sv.get("gpus")):
            view["sized_by"].append(
                _text(
                    f"{sv['name']}: {{gpus}} for its load and latency targets", {"gpus": sv["gpus"]}
                )
            )
    sizing = o.get("sizing")
    if sizing and sizing.get("message"):
        view["sized_by"].append(sizing["message"])
    view["binding"] = "scheduling.p95_wait_target_s" if sizing and sizing.get("binds") else None
    # money
    util = _input(doc, "costs.utilisation")
    cost = (o.get("costs") or {}).get(model) or {}
    if owned and tco:
        dep = _input(doc, "costs.depreciation_years")
        pue = _input(doc, "costs.pue")
        kwh = _input(doc, "costs.electricity_usd_per_kwh")
        capex_formula = str(((tco.get("capex_usd") or {}).get("provenance") or {}).get("formula"))
        view["money"] = [
            (
                "capex (nodes"
                + (
                    " + storage"
                    if "storage capex" in capex_formula
                    else ("" if _ok((o.get("fabric") or {}).get("capex_usd")) else " only")
                )
                + ")",
                tco.get("capex_usd"),
            ),
            ("depreciation per year", tco.get("capex_per_year_usd")),
            ("depreciation period", dep),
            ("power per year (facility power with PUE)", tco.get("energy_per_year_usd")),
            ("PUE", pue),
            ("electricity price", kwh),
            ("support, space and operations per year", tco.get("operations_per_year_usd")),
            ("owned cost per year (TCO)", tco.get("total_per_year_usd")),
            ("of which shared storage per year", tco.get("storage_in_total_per_year_usd")),
            ("utilisation assumed", util),
            (mlabel, rec["metric"]),
        ]
        view["excluded"].extend(tco.get("excludes") or [])
    else:
        view["money"] = [
            ("price per node-hour", cost.get("price_usd_per_node_hour")),
            ("fleet cost per month", cost.get("per_month_usd")),
            ("of which shared storage per month", cost.get("storage_usd_per_month")),
            ("all training runs", cost.get("all_runs_usd")),
            (
                "utilisation assumed"
                + (" (paid every hour)" if model in COMMITTED else " (not paid when idle)"),
                util,
            ),
        ]
    view["money"] = [(k, v) for k, v in view["money"] if v is not None]
    view["break_even"] = break_even_rows(doc)
    st = o.get("storage") or {}
    if "capacity_bytes" in st and not st.get("chosen"):
        view["excluded"].append("storage: no tier in the catalog fits (see the option's storage)")
    if not owned and st.get("chosen"):
        # the chosen tier's price is in the cloud cost (storage_usd_per_month) or excluded
        view["excluded"].extend(cost.get("excludes") or [])
    if not owned:
        view["excluded"].append(
            "network beyond the instances' price"
            if cost.get("storage_usd_per_month")
            else "network and storage beyond the instances' price"
        )
    # risk band
    for t in o.get("training") or []:
        ttt = t.get("time_to_train_s")
        c = _deadline(doc, t["name"], o["gpu"])
        if not _ok(ttt) or c is None or not ttt.get("interval"):
            continue
        slow_s = ttt["interval"][1]
        deadline_s = c["deadline_days"]["value"] * 86400.0
        if slow_s <= deadline_s:
            view["risk"].append(
                _text(
                    f"{t['name']}: time to train {{ttt}}; even the slow end of the forecast is "
                    "within the deadline {deadline}",
                    {"ttt": ttt, "deadline": c["deadline_days"]},
                )
            )
            continue
        safe = next(
            (
                p
                for p in c["points"]
                if "error" not in p
                and _ok(p.get("time_to_train_s"))
                and (p["time_to_train_s"].get("interval") or [p["time_to_train_s"]["value"]] * 2)[1]
                <= deadline_s
            ),
            None,
        )
        if safe is not None:
            view["risk"].append(
                _text(
                    f"{t['name']}: time to train {{ttt}}; the slow end misses the deadline "
                    "{deadline}: sized to the slow end, it needs {gpus} (time-to-train curve)",
                    {"ttt": ttt, "deadline": c["deadline_days"], "gpus": safe["gpus"]},
                )
            )
        else:
            view["risk"].append(
                _text(
                    f"{t['name']}: time to train {{ttt}}; the slow end misses the deadline "
                    "{deadline} at every size of the time-to-train curve",
                    {"ttt": ttt, "deadline": c["deadline_days"]},
                )
            )
    if _ok(rec["metric"]) and rec["metric"].get("interval"):
        view["risk"].append(
            _text(
                f"{mlabel}: {{metric}} (the forecast interval of throughput)",
                {"metric": rec["metric"]},
            )
        )
    sens = doc.get("sensitivity") or {}
    if sens.get("per_option"):
        moved = [c["case"] for c in sens.get("cases") or [] if c.get("order_changed")]
        view["risk"].append(
            "the ranking is robust to the MFU, price and utilisation moves of the sensitivity section"
            if sens.get("robust")
            else "the ranking changes when "
            + (", ".join(moved) if moved else "one option's MFU or prices move")
            + " (see the sensitivity section)"
        )
    return view
