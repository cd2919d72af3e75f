"""Speed and fidelity benchmarks (not timed tests): ``python -m benchmarks`` runs them all."""
