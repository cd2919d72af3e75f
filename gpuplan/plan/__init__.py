"""The capacity plan (DESIGN.md section 4, "Plan"; docs/plan.md).

Entry point: :func:`gpuplan.plan.planner.build_plan` (scenario -> :class:`Plan`), rendered by
:mod:`gpuplan.report`. Modules: ``scenario`` (the YAML schema with line-numbered errors),
``provenance`` (figures and their sources), ``fabric``, ``storage``, ``power``, ``cost``
(pure arithmetic with the papers they follow), ``trial`` (the trial node's probe results),
``workloads`` (sizing through the forecasts), ``options``, ``ranking``, ``shared`` (the
teams on the planned fleet, through :mod:`gpuplan.scheduling`).

Nothing is imported here so that ``import gpuplan.plan.<module>`` stays light.
"""
