"""``gpuplan forecast train|infer``: the group; each command lives in its own module."""

from gpuplan.cli import forecast_infer, forecast_train
from gpuplan.cli._common import make_app

app = make_app(
    "Forecast full-scale training (train) or serving (infer) from calibrated device models."
)
forecast_train.register(app)
forecast_infer.register(app)
