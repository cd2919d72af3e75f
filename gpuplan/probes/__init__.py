"""gpuplan.probes (see DESIGN.md section 2)."""
