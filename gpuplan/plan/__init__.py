"""gpuplan.plan (see DESIGN.md section 2)."""
