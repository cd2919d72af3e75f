"""gpuplan.service (see DESIGN.md section 2)."""
