"""gpuplan.forecast (see DESIGN.md section 2)."""
