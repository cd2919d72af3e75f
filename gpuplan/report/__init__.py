"""gpuplan.report (see DESIGN.md section 2)."""
