"""Render a plan (its JSON document) as a self-contained HTML report and as Markdown.

Both renderers read the plan JSON only. Every figure is printed with a reference number
``[n]`` into the *Figures* appendix, which lists its provenance (input line, catalog row
with source and date, calibration basis, measurement run, forecast, or the formula of a
derived figure and the figures it used). In the HTML, every element that shows a number
carries a ``data-kind`` attribute naming where the number comes from; the tests walk the
rendered DOM and fail on any number outside such an element.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from gpuplan.plan.provenance import format_number, is_figure_json, is_text_json, portable_text

REPORT_FILES = {"html": "report.html", "md": "report.md", "json": "plan.json"}


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


def fmt(f: Any) -> str:
    """Display text of a figure's value (with its interval)."""
    if not is_figure_json(f):
        return "-" if f is None else str(f)
    if f.get("value") is None:
        return "missing"
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
    (:func:`gpuplan.plan.cost.break_even_against`)."""
    from gpuplan.plan import cost as costmod
    from gpuplan.plan.provenance import figure_from_json

    rows = []
    for own in doc["options"]:
        tco = own.get("onprem_tco")
        if own["kind"] != "onprem" or not tco or not _ok(tco.get("total_per_year_usd")):
            continue
        total = figure_from_json(tco["total_per_year_usd"])
        nodes = figure_from_json(own["nodes"])
        own_gpn = figure_from_json(own["gpus_per_node"])
        for cloud in doc["options"]:
            if cloud["kind"] != "cloud" or cloud["gpu"] != own["gpu"]:
                continue
            for model in ("on_demand", "spot", "reserved_1y", "reserved_3y"):
                c = (cloud.get("costs") or {}).get(model)
                if not c or not _ok(c.get("price_usd_per_node_hour")):
                    continue
                price = costmod.per_owned_node_price(
                    figure_from_json(c["price_usd_per_node_hour"]),
                    figure_from_json(cloud["gpus_per_node"]),
                    own_gpn,
                    f"{cloud['id']} {costmod.MODEL_LABEL[model]} per {own['platform']}-sized node",
                )
                rows.append(
                    {
                        "owned": own["id"],
                        "cloud": cloud["id"],
                        "purchasing_model": model,
                        "committed": model in costmod.COMMITTED,
                        "price_usd_per_node_hour": price.to_json(),
                        "break_even_utilisation": costmod.break_even_against(
                            total, nodes, price
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
    from gpuplan.plan.cost import MODEL_LABEL
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
        view["money"] = [
            (
                "capex (nodes"
                + ("" if _ok((o.get("fabric") or {}).get("capex_usd")) else " only")
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
            ("utilisation assumed", util),
            (mlabel, rec["metric"]),
        ]
        view["excluded"].extend(tco.get("excludes") or [])
    else:
        view["money"] = [
            ("price per node-hour", cost.get("price_usd_per_node_hour")),
            ("fleet cost per month", cost.get("per_month_usd")),
            ("all training runs", cost.get("all_runs_usd")),
            (
                "utilisation assumed"
                + (
                    " (paid every hour)"
                    if model in ("reserved_1y", "reserved_3y")
                    else " (not paid when idle)"
                ),
                util,
            ),
        ]
    view["money"] = [(k, v) for k, v in view["money"] if v is not None]
    view["break_even"] = break_even_rows(doc)
    st = o.get("storage") or {}
    if "capacity_bytes" in st and not st.get("chosen"):
        view["excluded"].append("storage: no tier in the catalog fits (see the option's storage)")
    if not owned and st.get("chosen"):
        view["excluded"].append(
            f"storage ({st['chosen']}): priced in the option's storage, not in the fleet cost"
        )
    if not owned:
        view["excluded"].append("network and storage beyond the instances' price")
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


# ------------------------------------------------------------------ HTML


def _env(index: FigureIndex):
    import jinja2
    from markupsafe import Markup, escape

    def fig_html(f: Any) -> Any:
        if f is None:
            return Markup('<span class="na">-</span>')
        if not is_figure_json(f):
            return escape(str(f))
        n = index.num(f)
        p = f["provenance"]
        cls = ["fig", f"k-{p['kind']}"]
        if p.get("unverified"):
            cls.append("unverified")
        if f.get("value") is None:
            cls.append("missing")
        full = fmt(f)
        value_text = fmt({**f, "interval": None})
        body: Any = escape(full)
        if full != value_text and full.startswith(value_text):
            body = Markup(
                f'{escape(value_text)} <span class="iv">{escape(full[len(value_text) + 1 :])}</span>'
            )
        mark = (
            Markup('<sup class="unv" title="unverified catalog value">&#8224;</sup>')
            if p.get("unverified")
            else ""
        )
        return Markup(
            f'<span class="{" ".join(cls)}" data-kind="{escape(p["kind"])}" '
            f'title="{escape(prov_text(f))}">{body}{mark}'
            f'<a class="fn" href="#fig-{n}">[{n}]</a></span>'
        )

    def text_html(t: Any) -> Any:
        if t is None:
            return ""
        if not is_text_json(t):
            return ident(t)
        import string

        out = []
        for literal, name, _spec, _conv in string.Formatter().parse(t["template"]):
            if literal:
                out.append(ident(literal))
            if name is not None:
                out.append(fig_html(t["figures"][name]))
        return Markup("").join(out)

    def ident(s: Any, kind: str = "label") -> Any:
        """Names and sentences built from catalog ids and scenario names."""
        if s is None:
            return ""
        return Markup(f'<span class="id" data-kind="{escape(kind)}">{escape(str(s))}</span>')

    def meta(s: Any) -> Any:
        """Provenance metadata: dates, paths, hashes, URLs, line references."""
        if s is None or s == "":
            return ""
        return Markup(f'<span class="meta" data-kind="provenance">{escape(str(s))}</span>')

    def idx(n: Any) -> Any:
        return Markup(f'<span class="idx" data-kind="index">{escape(str(n))}</span>')

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("gpuplan.report", "templates"),
        autoescape=jinja2.select_autoescape(["html", "j2"]),
        trim_blocks=True,
        lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )
    env.filters["fig"] = fig_html
    env.filters["text"] = text_html
    env.filters["ident"] = ident
    env.filters["meta"] = meta
    env.filters["idx"] = idx
    env.filters["prov"] = prov_text
    env.filters["fmt"] = fmt
    env.tests["figure"] = is_figure_json
    env.tests["textjson"] = is_text_json
    return env


def render_html(doc: dict[str, Any], charts: dict[str, str | None] | None = None) -> str:
    """The self-contained HTML report (inline CSS and PNG charts; no scripts, no fetches)."""
    if charts is None:
        from gpuplan.report.charts import all_charts

        charts = all_charts(doc)
    charts = {
        k: charts.get(k)
        for k in (
            "cost_by_option",
            "time_to_train",
            "roofline",
            "shared_wait_vs_size",
            "reference_wait_vs_size",
        )
    }
    index = FigureIndex(doc)
    view = index.view
    env = _env(index)
    template = env.get_template("report.html.j2")
    from gpuplan.plan.ranking import metric_label

    html = template.render(
        doc=doc,
        charts=charts,
        index=index,
        model_label=_model_label,
        metric_label=metric_label,
        sv=view,
    )
    return portable_text(html)


def _model_label(model: str) -> str:
    from gpuplan.report.charts import MODEL_LABEL

    return MODEL_LABEL.get(model, model)


# ------------------------------------------------------------------ Markdown


def _md_escape(s: Any) -> str:
    return re.sub(r"([|*_`\\])", r"\\\1", portable_text(str(s))).replace("\n", " ")


def render_markdown(doc: dict[str, Any]) -> str:
    """The same content as the HTML as Markdown: figures as ``value [n]``, appendix of
    provenance at the end."""
    index = FigureIndex(doc)
    view = index.view

    def f(x: Any) -> str:
        if x is None:
            return "-"
        if not is_figure_json(x):
            return _md_escape(x)
        n = index.num(x)
        dag = "†" if x["provenance"].get("unverified") else ""
        return f"{_md_escape(fmt(x))}{dag} [{n}]"

    def t(x: Any) -> str:
        if x is None:
            return ""
        if not is_text_json(x):
            return _md_escape(x)
        import string

        out = []
        for literal, name, _s, _c in string.Formatter().parse(x["template"]):
            out.append(_md_escape(literal))
            if name is not None:
                out.append(f(x["figures"][name]))
        return "".join(out)

    from gpuplan.plan.ranking import metric_label

    L: list[str] = []
    sc = doc["scenario"]
    sm = doc["summary"]
    L.append(f"# Capacity plan: {_md_escape(sc['name'])}\n")
    if sc.get("description"):
        L.append(_md_escape(sc["description"]) + "\n")
    L.append(
        f"Scenario `{sc['path']}` (sha256 `{sc['sha256'][:12]}`), gpuplan {doc['gpuplan_version']}, created {doc['created_at']}. "
        "Each number is followed by its entry in the *Figures* appendix; † marks catalog values still unverified.\n"
    )
    L.append("## Summary\n")
    L.append(t(view["headline"]) + "\n")
    if view["recommended"]:
        L.append("| recommendation | |\n|---|---|")
        L.extend(
            f"| {_md_escape(k)} | {f(v) if is_figure_json(v) else t(v)} |"
            for k, v in view["facts"]
            if v is not None
        )
        L.append("\n| cost | |\n|---|---|")
        L.extend(f"| {_md_escape(k)} | {f(v)} |" for k, v in view["money"])
        L.append("\n### What sets the size\n")
        if view.get("binding"):
            L.append(f"Binding constraint: `{view['binding']}`.\n")
        L.extend(f"- {t(x)}" for x in view["sized_by"])
        L.append("\n### Risk band\n")
        L.extend(f"- {t(x)}" for x in view["risk"])
        L.append("\n### Excluded\n")
        L.extend(
            f"- {_md_escape(x)}"
            for x in view["excluded"] or ["nothing the scenario's costs leave out"]
        )
        if view["break_even"]:
            L.append("\n### Owning vs renting: break-even utilisation\n")
            L.append(
                "| owned | cloud option | purchasing model | rented price per owned-node-hour | break-even utilisation |\n|---|---|---|---|---|"
            )
            for r in view["break_even"]:
                L.append(
                    f"| {_md_escape(r['owned'])} | {_md_escape(r['cloud'])} | {_model_label(r['purchasing_model'])} | {f(r['price_usd_per_node_hour'])} | {f(r['break_even_utilisation'])} |"
                )
        L.append("")
    if sm["binding_constraints"]:
        L.append("### Constraints that rule options out\n")
        L.append("| constraint | options | example |\n|---|---|---|")
        for b in sm["binding_constraints"]:
            L.append(
                f"| {b['constraint']} | {_md_escape(', '.join(b['options']))} | {t(b['example'])} |"
            )
        L.append("")
    for n in sm.get("notes") or []:
        L.append(f"- {_md_escape(n)}")
    L.append("\n## Ranking\n")
    L.append(
        f"Ranked by {sm['rank_by_label']}: each option at its cheapest priced purchasing model within budget.\n"
    )
    if doc["ranking"]:
        L.append("| rank | option | purchasing model | metric |\n|---|---|---|---|")
        for r in doc["ranking"]:
            L.append(
                f"| {r['rank']} | {_md_escape(r['option'])} | {_model_label(r['purchasing_model'])} | {f(r['metric'])}"
                + (
                    f" ({_md_escape(metric_label(sm['rank_by'], 'onprem'))})"
                    if r["purchasing_model"] == "onprem"
                    else ""
                )
                + " |"
            )
    else:
        L.append("No option could be ranked.")
    if doc["unranked"]:
        L.append("\nNot ranked:\n")
        for u in doc["unranked"]:
            L.append(f"- {_md_escape(u['option'])}: {t(u['reason'])}")
    L.append("\n## Options\n")
    for o in doc["options"]:
        L.append(f"### {_md_escape(o['label'])} (`{o['id']}`)\n")
        L.append(f"Feasible: {'yes' if o['feasible'] else 'no'}.")
        for b in o["binding"]:
            L.append(f"- binding {b['constraint']}: {t(b['message'])}")
        for e in o["errors"]:
            L.append(f"- error: {_md_escape(e)}")
        for n in o["notes"]:
            L.append(f"- note: {t(n)}")
        L.append("")
        L.append("| fleet | value |\n|---|---|")
        L.append(
            f"| GPUs | {f(o['gpus'])} |\n| nodes | {f(o['nodes'])} |\n| GPUs per node | {f(o['gpus_per_node'])} |"
        )
        for tr in o["training"]:
            for key, label in (
                ("gpus", "GPUs"),
                ("nodes", "nodes"),
                ("time_to_train_s", "time to train"),
                ("time_to_train_on_fabric_s", "time to train on the fabric"),
                ("tokens_per_s", "tokens/s"),
                ("mfu", "MFU"),
                ("step_time_s", "step time"),
                ("memory_per_gpu_bytes", "memory per GPU"),
            ):
                if tr.get(key) is not None:
                    L.append(f"| {_md_escape(tr['name'])}: {label} | {f(tr[key])} |")
            if tr.get("parallelism"):
                L.append(
                    f"| {_md_escape(tr['name'])}: parallelism | {_md_escape(tr['parallelism'])} |"
                )
            if tr.get("error"):
                L.append(f"| {_md_escape(tr['name'])}: error | {_md_escape(tr['error'])} |")
        for sv in o["inference"]:
            for key, label in (
                ("gpus", "GPUs"),
                ("nodes", "nodes"),
                ("replicas", "replicas"),
                ("ttft_s", "TTFT"),
                ("tpot_s", "TPOT"),
                ("throughput_output_tokens_per_s_per_replica", "output tokens/s per replica"),
                ("output_tokens_per_month", "output tokens per month"),
            ):
                if sv.get(key) is not None:
                    L.append(f"| {_md_escape(sv['name'])}: {label} | {f(sv[key])} |")
            if sv.get("error"):
                L.append(f"| {_md_escape(sv['name'])}: error | {_md_escape(sv['error'])} |")
        fb = o["fabric"]
        L.append("\n| fabric | value |\n|---|---|")
        L.append(f"| kind | {_md_escape(fb.get('kind'))} |")
        for key in ("switch", "nic"):
            if fb.get(key):
                L.append(f"| {key} | {_md_escape(fb[key])} |")
        for key in (
            "tiers",
            "leaf_switches",
            "spine_switches",
            "core_switches",
            "switches",
            "cables",
            "transceivers",
            "nics_per_node",
            "per_gpu_bandwidth_worst_bytes_per_s",
            "per_gpu_bandwidth_best_bytes_per_s",
            "capex_usd",
            "power_w",
        ):
            if fb.get(key) is not None:
                L.append(f"| {key.replace('_', ' ')} | {f(fb[key])} |")
        for c in fb.get("communication_check") or []:
            L.append(
                f"| communication check {_md_escape(c['workload'])} | {c['status']}: {t(c.get('note'))} {f(c.get('ratio')) if c.get('ratio') else ''} |"
            )
        st = o["storage"]
        if st.get("capacity_bytes") is not None:
            L.append("\n| storage | value |\n|---|---|")
            for key in (
                "capacity_bytes",
                "read_bytes_per_s",
                "checkpoint_write_bytes_per_s",
                "checkpoint_write_s",
                "restart_read_s",
            ):
                if st.get(key) is not None:
                    L.append(f"| {key.replace('_', ' ')} | {f(st[key])} |")
            L.append(f"| chosen tier | {_md_escape(st.get('chosen') or 'none fits')} |")
            for tier in st.get("tiers") or []:
                L.append(
                    f"| tier {_md_escape(tier['tier'])} | {f(tier['provisioned_bytes'])}, read {f(tier['read_bytes_per_s'])}, write {f(tier['write_bytes_per_s'])}, {f(tier['usd_per_month'])}; {'fits' if tier['fits'] else _md_escape(tier['reason'])} |"
                )
            if st.get("local_nvme"):
                ln = st["local_nvme"]
                L.append(
                    f"| local NVMe (trial fio) | need {f(ln['read_needed_per_node_bytes_per_s'])} per node, measured {f(ln['measured_read_per_node_bytes_per_s'])}: {'sufficient' if ln['local_nvme_sufficient'] else 'not sufficient'} |"
                )
        elif st.get("note"):
            L.append(f"\nStorage: {_md_escape(st['note'])}")
        pw = o["power"]
        if pw.get("node_power_w") is not None:
            L.append("\n| power | value |\n|---|---|")
            for key in (
                "node_power_w",
                "nodes_per_rack",
                "racks",
                "it_power_w",
                "facility_power_w",
                "floor_area_m2",
                "max_gpus_within_site_power",
            ):
                if pw.get(key) is not None:
                    L.append(f"| {key.replace('_', ' ')} | {f(pw[key])} |")
            L.append(f"| basis | {pw.get('basis')} |")
        L.append(
            "\n| purchasing model | price per node-hour | all training runs | per month | per million output tokens | goodput |\n|---|---|---|---|---|---|"
        )
        for m, c in o["costs"].items():
            mtok = (
                "; ".join(
                    f"{_md_escape(k)} {f(v)}"
                    for k, v in (c.get("per_million_output_tokens_usd") or {}).items()
                )
                or "-"
            )
            good = (
                "; ".join(
                    f"{_md_escape(k)} {f(r['goodput'])}"
                    for k, r in (c.get("reliability") or {}).items()
                )
                or "-"
            )
            age = c.get("price_age") or {}
            stale = (
                f" (stale price, as of {_md_escape(str(age.get('as_of') or 'no date'))})"
                if age.get("stale")
                else ""
            )
            L.append(
                f"| {_model_label(m)} | {f(c['price_usd_per_node_hour'])}{stale} | {f(c.get('all_runs_usd'))} | {f(c.get('per_month_usd'))} | {mtok} | {good} |"
            )
        if o.get("onprem_tco"):
            tco = o["onprem_tco"]
            L.append("\n| owned fleet | value |\n|---|---|")
            for key in (
                "capex_usd",
                "capex_per_year_usd",
                "energy_per_year_usd",
                "operations_per_year_usd",
                "total_per_year_usd",
                "usd_per_node_hour",
            ):
                L.append(f"| {key.replace('_', ' ')} | {f(tco[key])} |")
            if tco["excludes"]:
                L.append(f"| excludes | {_md_escape('; '.join(tco['excludes']))} |")
            L.append(
                f"| break-even utilisation vs {_md_escape(o.get('break_even_against') or '-')} | {f(o.get('break_even_utilisation'))} |"
            )
        L.append("")
    L.append("## Sensitivity\n")
    sens = doc["sensitivity"]
    if sens.get("per_option"):
        L.append(
            "| option | nominal | high MFU | low MFU | prices lower | prices higher | rank (nominal / if moved) |\n|---|---|---|---|---|---|---|"
        )
        for p in sens["per_option"]:
            ranks = ", ".join(f"{k} {v}" for k, v in p["rank_if"].items())
            L.append(
                f"| {_md_escape(p['option'])} | {f(p['nominal'])} | {f(p['throughput_range'])} | {f(p['throughput_range_high'])} | {f(p['price_low'])} | {f(p['price_high'])} | {p['rank_nominal']} / {ranks} |"
            )
        for c in sens.get("cases") or []:
            L.append(
                f"- {c['case']}: winner {c['winner']}{' (order changes)' if c['order_changed'] else ''}"
            )
        L.append(f"\nRanking robust to these moves: {'yes' if sens.get('robust') else 'no'}.")
    else:
        L.append("Nothing ranked, so no sensitivity.")
    L.append("\n## Time to train vs cluster size\n")
    for c in doc.get("time_to_train_curves") or []:
        L.append(
            f"**{_md_escape(c['workload'])} on {_md_escape(c['gpu'])}** (deadline {f(c.get('deadline_days'))})\n"
        )
        L.append("| GPUs | time to train | MFU |\n|---|---|---|")
        for p in c["points"]:
            if "error" in p:
                L.append(f"| {f(p['gpus'])} | error: {_md_escape(p['error'])} | |")
            else:
                L.append(f"| {f(p['gpus'])} | {f(p['time_to_train_s'])} | {f(p['mfu'])} |")
        L.append("")
    L.append("## Trial node\n")
    tn = doc.get("trial_node")
    if tn:
        L.append(
            f"Run `{tn['run_id']}` on `{tn['machine_id']}` ({_md_escape(tn.get('accelerator_name') or tn['device'])}), file `{tn['path']}`.\n"
        )
        L.append("| quantity | measured | catalog spec |\n|---|---|---|")
        spec = doc.get("roofline_spec") or {}
        for dt, fig in (tn.get("matmul_flops_per_s") or {}).items():
            sp = spec.get("peak_flops_per_s") if spec.get("dtype") == dt else None
            L.append(f"| {dt} matmul | {f(fig)} | {f(sp)} |")
        L.append(
            f"| memory bandwidth | {f(tn.get('memory_bandwidth_bytes_per_s'))} | {f(spec.get('memory_bandwidth_bytes_per_s'))} |"
        )
        for key in ("gpu_power_w", "storage_read_bytes_per_s", "storage_write_bytes_per_s"):
            if tn.get(key) is not None:
                L.append(f"| {key.replace('_', ' ')} | {f(tn[key])} | |")
    else:
        L.append("No probe run of a trial node was found (run `gpuplan probe --quick`).")
    L.append("\n## Calibration\n")
    cal = doc.get("calibration") or {}
    L.append(
        f"Artifact: `{cal.get('artifact')}`"
        + (f", created {cal['created_at']}" if cal.get("created_at") else "")
        + ".\n"
    )
    for gid, qs in (cal.get("devices") or {}).items():
        if isinstance(qs, dict) and "error" in qs:
            L.append(f"- {gid}: {_md_escape(qs['error'])}")
            continue
        L.append(f"- {gid}: " + "; ".join(f"{q} {f(v)}" for q, v in qs.items()))
    if doc.get("shared_cluster") is not None:
        L.append("\n## Shared cluster\n")
        shared = doc["shared_cluster"]
        L.extend(_md_tree({k: v for k, v in shared.items() if k not in _SHARED_TABLES}, f))
        L.extend(_md_shared_tables(shared, f))
    L.append("\n## Inputs\n")
    L.append("| input | value | where |\n|---|---|---|")
    for fig in doc["inputs"]:
        L.append(
            f"| {_md_escape(fig['label'])} | {f(fig)} | {_md_escape(fig['provenance']['ref'])} |"
        )
    L.append("\n## Assumptions and provenance\n")
    pv = doc["provenance"]
    L.append("### Catalog rows\n")
    L.append("| row | fields used | source | retrieved | unverified |\n|---|---|---|---|---|")
    for r in pv["catalog_rows"]:
        L.append(
            f"| {r['kind']}/{r['id']} | {_md_escape(', '.join(r['fields_used']))} | {_md_escape(r['source'])} | {r['retrieved']} | {_md_escape(', '.join(r['unverified'])) or '-'} |"
        )
    L.append("\n### Measurements\n")
    for m in pv["measurements"] or [{"run_id": None}]:
        if m["run_id"] is None:
            L.append("None.")
        else:
            L.append(
                f"- run `{m['run_id']}` ({_md_escape(m.get('device'))}, {_md_escape(m.get('accelerator'))}) from `{m['path']}`, started {m['started_at']}"
            )
    L.append("\n### Forecasts\n")
    for fc in pv["forecasts"]:
        L.append(
            f"- {_md_escape(fc['call'])}"
            + (f": error {_md_escape(fc['error'])}" if fc.get("error") else "")
        )
    L.append("\n## Figures\n")
    L.append("| # | figure | value | provenance |\n|---|---|---|---|")
    for i, fig in enumerate(index.entries, start=1):
        L.append(
            f"| {i} | {_md_escape(fig['label'])} | {_md_escape(fmt(fig))}{'†' if fig['provenance'].get('unverified') else ''} | {_md_escape(prov_text(fig))} |"
        )
    return portable_text("\n".join(L) + "\n")


_SHARED_TABLES = ("wait_vs_size", "smallest_cluster", "reference_curve")
_WAIT_KEYS = ("mean", "p50", "p95", "p99", "max")


def _md_shared_tables(sc: dict[str, Any], f: Any) -> list[str]:
    """The shared cluster's wait-vs-size curves, smallest cluster and reference curve."""
    L: list[str] = []
    w = sc.get("wait_vs_size")
    if w:
        L.append("\n### Wait vs cluster size\n")
        L.append(
            f"The same jobs on smaller and larger clusters of the same nodes (teams' mean GPU "
            f"demand {f(w.get('mean_demand_gpus'))}); sizes: {_md_escape(w.get('sizes_from'))}.\n"
        )
        for c in w.get("curves") or []:
            L.append(
                f"**{_md_escape(c['policy'])}**{' (scenario)' if c.get('scenario_policy') else ''}\n"
            )
            if c.get("error"):
                L.append(f"Error: {_md_escape(c['error'])}\n")
                continue
            teams = list(dict.fromkeys(t for p in c["points"] for t in p["per_team_p95_wait_s"]))
            head = ["GPUs", "nodes", "GPU utilisation"] + [f"wait {k}" for k in _WAIT_KEYS]
            head += ["starved jobs"] + [f"{_md_escape(t)} wait p95" for t in teams]
            L.append("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
            for p in c["points"]:
                cells = [f(p["gpus"]), f(p["nodes"]), f(p.get("utilization"))]
                cells += [f(p["wait_s"].get(k)) for k in _WAIT_KEYS]
                cells += [f(p.get("starved_jobs_count"))]
                cells += [f(p["per_team_p95_wait_s"].get(t)) for t in teams]
                L.append("| " + " | ".join(cells) + " |")
            L.append("")
    sm = sc.get("smallest_cluster")
    if sm:
        L.append("### Smallest cluster meeting the p95 wait target\n")
        L.append(
            f"Target {f(sm['target_p95_wait_s'])} on each team's p95 wait under {_md_escape(sm['policy'])} "
            "(bisection over node counts; it assumes more nodes never lengthen the p95 wait, "
            "which holds for strict FIFO and usually, not always, for the other policies).\n"
        )
        if sm.get("error"):
            L.append(f"Error: {_md_escape(sm['error'])}\n")
        else:
            miss = f"not met up to {f(sm.get('largest_size_tried_gpus'))}"
            L.append("| for | GPUs | nodes |\n|---|---|---|")
            rows = [("every team", sm.get("overall")), *(sm.get("per_team") or {}).items()]
            for who, e in rows:
                if e:
                    L.append(f"| {_md_escape(who)} | {f(e['gpus'])} | {f(e['nodes'])} |")
                else:
                    L.append(f"| {_md_escape(who)} | {miss} | |")
            if sm.get("overall"):
                waits = "; ".join(
                    f"{_md_escape(t)} {f(v)}"
                    for t, v in sm["overall"]["per_team_p95_wait_s"].items()
                )
                L.append(f"\nAt that size, p95 wait per team: {waits}.")
            L.append("")
    ref = sc.get("reference_curve")
    if ref:
        L.append("### Reference: the Microsoft Philly trace\n")
        demand = (
            f", mean GPU demand {f(ref['mean_demand_gpus'])}" if ref.get("mean_demand_gpus") else ""
        )
        L.append(
            f"The wait-vs-size curve of a real multi-tenant GPU cluster's jobs (trace "
            f"{_md_escape(ref['trace'])}, policy {_md_escape(ref['policy'])}{demand}).\n"
        )
        L.append(f"Data: {_md_escape(ref['attribution'])}\n")
        if ref.get("error"):
            L.append(f"Error: {_md_escape(ref['error'])}\n")
        else:
            head = ["GPUs", "nodes", "GPU utilisation"] + [f"wait {k}" for k in _WAIT_KEYS]
            head += ["jobs simulated", "starved jobs"]
            L.append("| " + " | ".join(head) + " |\n|" + "---|" * len(head))
            for p in ref["points"]:
                cells = [f(p["gpus"]), f(p["nodes"]), f(p.get("utilization"))]
                cells += [f(p["wait_s"].get(k)) for k in _WAIT_KEYS]
                cells += [f(p.get("jobs_simulated")), f(p.get("starved_jobs_count"))]
                L.append("| " + " | ".join(cells) + " |")
            L.append("")
    return L


def _md_tree(obj: Any, f: Any, depth: int = 0) -> list[str]:
    out = []
    pad = "  " * depth
    if isinstance(obj, dict):
        for k, v in obj.items():
            if is_figure_json(v) or not isinstance(v, (dict, list)):
                out.append(f"{pad}- {k}: {f(v)}")
            else:
                out.append(f"{pad}- {k}:")
                out.extend(_md_tree(v, f, depth + 1))
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            if is_figure_json(v) or not isinstance(v, (dict, list)):
                out.append(f"{pad}- {f(v)}")
            else:
                out.append(f"{pad}- [{i}]")
                out.extend(_md_tree(v, f, depth + 1))
    return out


# ------------------------------------------------------------------ files


def write_report(doc: dict[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Write ``plan.json``, ``report.html`` and ``report.md`` into ``out_dir`` as one set.

    Everything is rendered in memory first, then written into a temporary folder beside
    ``out_dir`` that is renamed into place (:func:`gpuplan.userfiles.write_file_set`): a
    failure (disk full, permission) raises a domain error and leaves an earlier report in
    ``out_dir`` intact, never a mix of new and old files. Other files in ``out_dir`` are
    kept.
    """
    from gpuplan.fsio import to_json_text
    from gpuplan.userfiles import write_file_set

    texts = {
        "json": to_json_text(doc) + "\n",
        "md": render_markdown(doc),
        "html": render_html(doc),
    }
    written = write_file_set(out_dir, {REPORT_FILES[k]: v for k, v in texts.items()})
    return {k: written[name] for k, name in REPORT_FILES.items()}


def template_text() -> str:
    """The HTML template source (for tests and for people who want to restyle it)."""
    return resources.files("gpuplan.report").joinpath("templates/report.html.j2").read_text()
