"""Shared-cluster scheduling simulation (issue 8); see docs/scheduling.md."""
