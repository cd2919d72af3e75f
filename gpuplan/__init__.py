"""gpuplan: a benchmark-calibrated capacity planner for GPU clusters.

Probe a trial node, calibrate the vendor catalog against what it measured (and against
published benchmarks), forecast training and inference at full scale, and plan the fleet,
fabric, storage, power and cost. See README.md and docs/.
"""

__version__ = "0.1.0"
