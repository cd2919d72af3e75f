"""Build a capacity plan from a scenario: the entry point of ``gpuplan plan``.

:func:`build_plan` resolves the candidates in the catalog, reads the trial node's latest
probe run, forecasts every workload on every candidate GPU (with the calibration artifact),
builds and prices each option (:mod:`gpuplan.plan.options`), ranks them, tests the
ranking's sensitivity, simulates the shared cluster when the scenario has teams, and
returns a :class:`Plan`: a tree of figures with their provenance plus the ledger of every
catalog row, calibration and measurement used. Rendering lives in :mod:`gpuplan.report`.
"""

from __future__ import annotations

import datetime as _dt
import difflib
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from gpuplan import __version__
from gpuplan.errors import GpuplanError
from gpuplan.forecast.serving import THROUGHPUT_ONLY_NOTE
from gpuplan.forecast.serving_deviations import serving_caveats
from gpuplan.plan import cost as costmod
from gpuplan.plan import ranking as rankmod
from gpuplan.plan.context import PlanContext
from gpuplan.plan.cost import link_break_even
from gpuplan.plan.options import Option, candidate_options, evaluate_option
from gpuplan.plan.provenance import (
    Figure,
    FigureDict,
    Text,
    calibration_fig,
    derived,
    figures_to_json,
    input_fig,
    join_texts,
)
from gpuplan.plan.scenario import LoadedScenario
from gpuplan.plan.workloads import forecast_training_cached

if TYPE_CHECKING:
    from gpuplan.catalogs.catalog import Catalog
    from gpuplan.plan.trial import TrialNode

PLAN_VERSION = 1


class BindingSummary(TypedDict):
    """One constraint that binds somewhere: the options it binds and one example message."""

    constraint: str
    options: list[str]
    example: str | Text


CURVE_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)


@dataclass
class Plan:
    """A capacity plan: the JSON document (figures inside) and what the charts need."""

    doc: FigureDict
    options: list[Option] = field(default_factory=list)
    curves: list[FigureDict] = field(default_factory=list)
    trial: TrialNode | None = None
    roofline_spec: FigureDict | None = None

    def to_json(self) -> FigureDict:
        """The plan as JSON types (figures become ``{value, unit, provenance...}``)."""
        out: FigureDict = figures_to_json(self.doc)
        return out


def _load_artifact(path: str | Path | None) -> tuple[FigureDict | None, str | None]:
    if path is None:
        return None, None
    from gpuplan.calibration import load_artifact

    return load_artifact(path), str(path)


def _calibration_section(ctx: PlanContext, gpu_ids: Iterable[str]) -> FigureDict:
    """Per candidate GPU: the calibrated summary (DESIGN.md 3.2), each with its basis."""
    out: FigureDict = {
        "artifact": ctx.artifact_path or "default artifact shipped with gpuplan",
    }
    art = ctx.artifact
    if art is None:
        try:
            from gpuplan.calibration import default_artifact_path, load_artifact

            p = default_artifact_path()
            art = load_artifact(p)
            out["artifact"] = f"{p} (default)"
        except (GpuplanError, ImportError, OSError) as exc:
            out["error"] = f"no calibration artifact could be read: {exc}"
            art = None
    if art is not None:
        out["created_at"] = art.get("created_at")
        out["training_data_sha256"] = art.get("training_data_sha256")
        out["inputs"] = [str(x) for x in art.get("inputs", [])]
    ctx.ledger.calibration = {k: v for k, v in out.items()}
    devices: FigureDict = {}
    try:
        from gpuplan.calibration import calibrated_summary
    except ImportError:
        calibrated_summary = None  # type: ignore[assignment]
    for gid in gpu_ids:
        if calibrated_summary is None:
            break
        try:
            summ = calibrated_summary(gid, artifact=ctx.artifact)
        except GpuplanError as exc:
            devices[gid] = {"error": exc.one_line()}
            continue
        figs = {}
        for q, est in (summ or {}).items():
            if not isinstance(est, dict) or est.get("value") is None:
                continue
            unit = (
                "FLOP/s"
                if q.endswith("flops_per_s")
                else "B/s"
                if q.endswith("bytes_per_s")
                else ""
            )
            lo, hi = est.get("low"), est.get("high")
            figs[q] = calibration_fig(
                est["value"],
                unit,
                f"{gid} {q}",
                f"calibration {gid} {q}",
                basis=str(est.get("basis", "spec")),
                source=str(out.get("artifact")),
                interval=(lo, hi) if lo is not None and hi is not None else None,
            )
        devices[gid] = figs
    out["devices"] = devices
    return out


def _curves(ctx: PlanContext, options: list[Option]) -> list[FigureDict]:
    """Time to train vs cluster size for each training workload and candidate GPU."""
    curves: list[FigureDict] = []
    seen = set()
    for opt in options:
        for t in opt.training:
            key = (t.name, opt.gpu.id)
            if key in seen or t.gpus is None:
                continue
            seen.add(key)
            w = ctx.scenario.workloads.training[t.index]
            gpn = int(opt.gpus_per_node.value)
            if w.sizes:
                sizes = sorted(set(w.sizes))
            else:
                n = int(t.gpus.value)
                sizes = sorted({max(gpn, round(n * f / gpn) * gpn) for f in CURVE_FACTORS})
            points = []
            for i, n in enumerate(sizes):
                res, err = forecast_training_cached(
                    ctx, w, opt.gpu.id, num_gpus=n, target_days=None
                )
                size = (
                    ctx.inp(
                        ("workloads", "training", t.index, "sizes", i),
                        "GPUs",
                        f"{w.name}: curve size",
                    )
                    if w.sizes
                    else derived(
                        n,
                        "GPUs",
                        f"{w.name}: curve size {n}",
                        "planned GPUs x {1/4, 1/2, 1, 2, 4}, rounded to whole nodes",
                        [t.gpus],
                    )
                )
                if res is None:  # the size still carries its provenance, beside the reason
                    points.append({"gpus": size, "error": err})
                    continue
                points.append(
                    {
                        "gpus": size,
                        "time_to_train_s": ctx.fc(
                            res.time_to_train_s,
                            "time_to_train_s",
                            "s",
                            f"{w.name}: time to train on {n} x {opt.gpu.id}",
                            f"forecast train {w.name} on {opt.gpu.id} x{n}",
                        ),
                        "mfu": ctx.fc(
                            res.mfu,
                            "mfu",
                            "fraction",
                            f"{w.name}: MFU on {n} x {opt.gpu.id}",
                            f"forecast train {w.name} on {opt.gpu.id} x{n}",
                        ),
                    }
                )
            deadline = None
            if w.deadline_days is not None:
                deadline = ctx.inp(
                    ("workloads", "training", t.index, "deadline_days"),
                    "days",
                    f"{w.name}: deadline",
                )
            curves.append(
                {"workload": w.name, "gpu": opt.gpu.id, "points": points, "deadline_days": deadline}
            )
    return curves


def _roofline_spec(ctx: PlanContext) -> FigureDict | None:
    """Catalog spec of the trial node's accelerator (for the roofline chart), if any."""
    trial = ctx.trial
    if trial is None or not trial.catalog_id:
        return None
    try:
        gpu = ctx.catalog.gpu(trial.catalog_id)
    except GpuplanError:
        return None
    dtype = trial.best_dtype() or "bf16"
    peak = gpu.peak_flops_per_s(dtype)
    return {
        "gpu": gpu.id,
        "dtype": dtype,
        "peak_flops_per_s": ctx.cat(
            "accelerator",
            gpu,
            f"peak_flops_per_s.{dtype}",
            "FLOP/s",
            f"{gpu.id} {dtype} peak",
            value=peak,
        ),
        "memory_bandwidth_bytes_per_s": ctx.cat(
            "accelerator", gpu, "memory_bandwidth_bytes_per_s", "B/s", f"{gpu.id} memory bandwidth"
        ),
    }


def _reprice_factory(ctx: PlanContext, metric: str) -> Callable[[Option, float], Figure | None]:
    from gpuplan.plan.cost import _cloud_storage, _loads, _reliabilities

    def reprice(opt: Option, utilisation: float) -> Figure | None:
        util = input_fig(
            utilisation, "fraction", f"utilisation {utilisation:g}", "sensitivity.utilisation"
        )
        trainings, servings = _loads(ctx, opt)
        best = None
        for model, mc in opt.costs.items():
            rel = _reliabilities(ctx, opt, trainings, spot=model == "spot")
            again = costmod.price_model(
                model,
                mc.price_usd_per_node_hour,
                trainings=trainings,
                servings=servings,
                utilisation=util,
                interruptions=rel,
                fleet_nodes=opt.nodes,  # as the option was priced: the teams' nodes included
                terms=mc.terms,
            )
            if opt.kind == "cloud":
                _cloud_storage(opt, again, trainings)
            fig = rankmod.model_metric(again, metric, opt)
            if fig is not None and fig.ok and (best is None or fig.value < best.value):
                best = fig
        return best

    return reprice


def _shared_cluster(
    ctx: PlanContext, ranked: list[rankmod.Entry], options: list[Option]
) -> FigureDict | None:
    """Simulate the teams on the recommended fleet (gpuplan.plan.shared), if any teams."""
    if not ctx.scenario.teams:
        return None
    from gpuplan.plan.shared import shared_cluster_section

    top = ranked[0].option if ranked else next((o for o in options if o.nodes is not None), None)
    return shared_cluster_section(ctx, top)


def _binding_summary(options: list[Option], ranked: list[rankmod.Entry]) -> list[BindingSummary]:
    """Which constraints bind, over all options (one line per constraint)."""
    by: dict[str, BindingSummary] = {}
    for opt in options:
        for b in opt.binding:
            entry = by.setdefault(
                b["constraint"],
                {"constraint": b["constraint"], "options": [], "example": b["message"]},
            )
            if opt.id not in entry["options"]:
                entry["options"].append(opt.id)
    return list(by.values())


def _headline(
    metric: str, ranked: list[rankmod.Entry], options: list[Option], binding: list[BindingSummary]
) -> Text:
    if ranked:
        e = ranked[0]
        return Text(
            f"Recommended: {e.option.label}, {costmod.MODEL_LABEL.get(e.model, e.model)}: "
            f"{{gpus}} on "
            f"{{nodes}}; {rankmod.metric_label(metric, e.model)}: {{metric}}",
            {"gpus": e.option.sized_gpus, "nodes": e.option.sized_nodes, "metric": e.metric},
        )
    if binding:
        parts = [join_texts([f"{b['constraint']}: ", b["example"]], sep="") for b in binding]
        return join_texts(["No option meets all constraints. Binding: ", join_texts(parts)], sep="")
    if not options:
        return Text(
            "No candidate option: the catalog has no instance in candidates.clouds (or "
            "candidates.instances) and no node in candidates.onprem_nodes with a candidate GPU"
        )
    return Text("No option could be priced: see each option's missing prices")


def _check_quote_keys(ctx: PlanContext) -> None:
    """Price quotes must name catalog rows by id (an alias or typo would be silently unused)."""
    from gpuplan.errors import NotFoundError, SchemaError

    cat = ctx.catalog
    costs = ctx.scenario.costs
    lookups = {
        "onprem_node_prices_usd": (costs.onprem_node_prices_usd, (cat.node,)),
        "network_prices_usd": (costs.network_prices_usd, (cat.switch, cat.optic, cat.nic)),
        "storage_usd_per_gib_month": (costs.storage_usd_per_gib_month, (cat.storage_tier,)),
    }
    for field_name, (quotes, finders) in lookups.items():
        for key in quotes:
            where = f"{ctx.loaded.display_path} line {ctx.loaded.line('costs', field_name, key)}"
            found, first_error = None, None
            for find in finders:
                try:
                    found = find(key)
                    break
                except NotFoundError as exc:
                    first_error = first_error or exc
            if found is None:
                assert first_error is not None
                raise NotFoundError(
                    f"{where}: costs.{field_name}.{key}: {first_error.message}",
                    hint=first_error.hint,
                )
            if found.id != key:
                raise SchemaError(
                    f"{where}: costs.{field_name}.{key}: write the catalog id {found.id!r}",
                    hint="quotes are keyed by catalog id (gpuplan catalog ls)",
                )


def _check_price_scope(ctx: PlanContext) -> None:
    """``costs.price_overrides`` must name catalog instances and ``constraints.regions`` the
    catalog's clouds (a typo would silently keep the catalog price or drop a cloud)."""
    from gpuplan.errors import NotFoundError

    insts = ctx.catalog.instances
    for key, override in ctx.scenario.costs.price_overrides.items():
        if not any(costmod.find_override({key: override}, i) for i in insts):
            line = ctx.loaded.line("costs", "price_overrides", key)
            at = f" line {line}" if line else ""
            near = difflib.get_close_matches(key.lower(), [i.id for i in insts], n=3)
            raise NotFoundError(
                f"{ctx.loaded.display_path}{at}: costs.price_overrides: unknown instance {key!r}",
                hint=(f"closest: {', '.join(near)}; " if near else "")
                + "gpuplan catalog ls instances lists the ids",
            )
    known = sorted({i.cloud.lower() for i in insts})
    for cloud in ctx.scenario.constraints.regions:
        if cloud not in known:
            line = ctx.loaded.line("constraints", "regions", cloud)
            at = f" line {line}" if line else ""
            raise NotFoundError(
                f"{ctx.loaded.display_path}{at}: constraints.regions: unknown cloud {cloud!r}",
                hint=f"the catalog's clouds are {', '.join(known)}",
            )


def _check_clouds(ctx: PlanContext) -> None:
    """``candidates.clouds`` must name clouds the catalog has (a typo would drop them all)."""
    from gpuplan.errors import NotFoundError

    clouds = ctx.scenario.candidates.clouds
    if not clouds:
        return
    known = sorted({inst.cloud.lower() for inst in ctx.catalog.instances})
    for i, name in enumerate(clouds):
        if name.lower() not in known:
            line = ctx.loaded.line("candidates", "clouds", i)
            at = f" line {line}" if line else ""
            raise NotFoundError(
                f"{ctx.loaded.display_path}{at}: candidates.clouds: unknown cloud {name!r}",
                hint=f"the catalog's clouds are {', '.join(known)} (gpuplan catalog ls instances)",
            )


def build_plan(
    loaded: LoadedScenario,
    *,
    catalog: Catalog | None = None,
    artifact_path: str | Path | None = None,
    results_paths: Iterable[str | Path] = ("results",),
    trial_run: str | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> Plan:
    """Plan the scenario (module docstring). Never raises for a constraint that cannot be
    met: the plan says which constraint binds. Raises :class:`GpuplanError` for unknown
    names (GPUs, instances, models) and unreadable artifacts."""
    from gpuplan.plan.trial import find_trial_run

    if catalog is None:
        from gpuplan.catalogs import get_catalog

        catalog = get_catalog()
    artifact, art_path = _load_artifact(artifact_path)
    ctx = PlanContext(loaded, catalog, artifact, art_path, on_progress=on_progress)
    sc = ctx.scenario
    ctx.progress("reading the trial node's probe results")
    ctx.trial = find_trial_run(results_paths, trial_run)  # NotFoundError for an unknown --trial
    if ctx.trial is not None:
        ctx.ledger.measurements[ctx.trial.run_id] = {
            "path": ctx.trial.path,
            "started_at": ctx.trial.started_at,
            "machine_id": ctx.trial.machine_id,
            "device": ctx.trial.device,
            "accelerator": ctx.trial.accelerator_name,
            "catalog_id": ctx.trial.catalog_id,
            "probes": ctx.trial.probes,
        }
    # models must exist (NotFoundError names the closest) before any forecast runs
    models = [w.model for w in sc.workloads.training] + [s.model for s in sc.workloads.inference]
    for m in models:
        catalog.model(m)
    _check_quote_keys(ctx)
    _check_clouds(ctx)
    _check_price_scope(ctx)
    options, cand_notes = candidate_options(ctx)
    for svc in sc.workloads.inference:
        if svc.ttft_slo_s is None and svc.tpot_slo_s is None:
            cand_notes.append(
                f"{svc.name}: {THROUGHPUT_ONLY_NOTE} (set ttft_slo_s and tpot_slo_s on the "
                "workload to size for latency)"
            )
        if svc.speculative is not None:
            sp = svc.speculative.speculation()
            cand_notes.append(
                f"{svc.name}: sized with speculative decoding, {sp.describe()} ("
                + ("given" if sp.basis == "given" else "a DeepSeek MTP head's published rate")
                + "); TPOT and throughput are per emitted token"
            )
        row = catalog.model(svc.model)
        said = row.released_precision_note(svc.precision)
        if said is not None:
            cand_notes.append(
                f"{svc.name}: {said} (on the workload, set "
                f"{row.released_precision_hint('precision:')})"
            )
    # rows the forecasts read (architecture, accelerator specs): cited even where the plan's
    # own arithmetic does not touch them
    for m in models:
        ctx.ledger.use_row("model", catalog.model(m), ["architecture (forecasts)"])
    for gpu in {o.gpu.id: o.gpu for o in options}.values():
        ctx.ledger.use_row("accelerator", gpu, ["specs read by the forecasts and calibration"])
    for i, opt in enumerate(options):
        ctx.progress(f"option {i + 1}/{len(options)}: {opt.id}")
        evaluate_option(ctx, opt)
    link_break_even(options)
    # published runs known to be slower than the forecast, on the GPUs a serving workload was
    # sized on with the shipped constants (a serve-probe calibration there replaces them)
    for svc in sc.workloads.inference:
        row = catalog.model(svc.model)
        sized_on = sorted(
            {
                gpu
                for (name, gpu, _), (sizing, _) in ctx.serving_cache.items()
                if name == svc.name and sizing is not None and sizing.serving_calibration is None
            }
        )
        for said in serving_caveats(sized_on, row.attention, row.num_experts):
            cand_notes.append(f"{svc.name}: {said}")
    metric = rankmod.rank_metric(sc)
    ranked, unranked = rankmod.rank(options, metric)
    sens = rankmod.sensitivity(
        ranked,
        metric,
        price_fraction=sc.sensitivity.price_fraction,
        mfu_fraction=sc.sensitivity.mfu_fraction,
        utilisations=sc.sensitivity.utilisation,
        reprice=_reprice_factory(ctx, metric),
    )
    ctx.progress("time to train vs cluster size")
    curves = _curves(ctx, options)
    shared = _shared_cluster(ctx, ranked, options)
    calibration = _calibration_section(ctx, sorted({o.gpu.id for o in options}))
    roof = _roofline_spec(ctx)
    binding = _binding_summary(options, ranked)
    headline = _headline(metric, ranked, options, binding)
    ranking_json = []
    for i, e in enumerate(ranked):
        ranking_json.append({"rank": i + 1, **e.to_json()})
    doc: FigureDict = {
        "plan_version": PLAN_VERSION,
        "gpuplan_version": __version__,
        "created_at": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "scenario": {
            "name": sc.name,
            "description": sc.description,
            "path": loaded.display_path,
            "sha256": loaded.sha256,
        },
        "summary": {
            "headline": headline,
            "rank_by": metric,
            "rank_by_label": rankmod.METRIC_LABEL[metric],
            "recommended": ranked[0].to_json() if ranked else None,
            "feasible": bool(ranked),
            "binding_constraints": binding,
            "notes": cand_notes,
        },
        "inputs": sorted(ctx.inputs.values(), key=lambda f: f.prov.ref),
        "trial_node": ctx.trial.to_json() if ctx.trial is not None else None,
        "roofline_spec": roof,
        "calibration": calibration,
        "options": [o.to_json() for o in options],
        "ranking": ranking_json,
        "purchase_options": rankmod.rank_purchases(options, metric),
        "unranked": unranked,
        "sensitivity": sens,
        "time_to_train_curves": curves,
        "shared_cluster": shared,
        "provenance": ctx.ledger.to_json(),
    }
    return Plan(doc, options=options, curves=curves, trial=ctx.trial, roofline_spec=roof)
