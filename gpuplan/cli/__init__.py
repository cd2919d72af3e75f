"""The ``gpuplan`` command: one typer module per command group (parse -> call library -> render).

Command modules import only typer, the standard library and ``gpuplan.cli._common`` at
module level; everything heavy (torch, scikit-learn, pandas, the forecast models) is
imported inside the command functions so that ``gpuplan --help`` stays fast.
"""
