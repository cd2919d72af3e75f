"""``gpuplan validate training|inference|microbench``: forecast published runs, print the error."""

from gpuplan.cli import validate_inference, validate_microbench, validate_plan, validate_training
from gpuplan.cli._common import make_app

app = make_app(
    "Forecast every published run shipped with gpuplan and report coverage, median/p90 absolute "
    "error, bias and interval coverage, per source and overall."
)
validate_training.register(app)
validate_inference.register(app)
validate_microbench.register(app)
validate_plan.register(app)
