"""gpuplan.catalogs (see DESIGN.md section 2)."""
