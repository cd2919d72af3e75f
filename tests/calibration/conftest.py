"""Fixtures of the calibration tests: the catalog, the reference set, fitted artifacts."""

from __future__ import annotations

import copy

import pytest


@pytest.fixture(scope="session")
def catalog():
    from gpuplan.catalogs import get_catalog

    return get_catalog()


@pytest.fixture(scope="session")
def reference_docs(catalog):
    from gpuplan.calibration.fit import reference_documents

    return reference_documents(catalog)


@pytest.fixture(scope="session")
def _reference_artifact(catalog):
    from gpuplan.calibration.fit import calibrate_documents

    return calibrate_documents([], catalog=catalog, created_at="2026-01-01T00:00:00Z")


@pytest.fixture
def reference_artifact(_reference_artifact):
    """The artifact calibrated on the reference set alone (a fresh copy per test)."""
    return copy.deepcopy(_reference_artifact)


def make_doc(
    *,
    machine_id: str = "test-node",
    run_id: str = "00000000-0000-4000-8000-000000000001",
    probes: list[dict],
    accelerators: list[dict] | None = None,
    cpu_model: str = "Test CPU 9000",
    source: str | None = None,
) -> dict:
    """A result document (DESIGN.md 3.1) built from probe dicts."""
    return {
        "schema_version": 1,
        "run_id": run_id,
        "started_at": "2026-01-01T00:00:00Z",
        "gpuplan_version": "0.1.0",
        "host": {
            "machine_id": machine_id,
            "cpu_model": cpu_model,
            "cpu_count": 2,
            "accelerators": accelerators or [],
        },
        "probes": probes,
        "source": source,
    }
