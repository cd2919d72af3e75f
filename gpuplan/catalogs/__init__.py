"""Catalogs: accelerators, fabrics and network gear, instances and prices, nodes, storage and
model architectures, every row sourced and dated (see docs/catalogs.md).

>>> from gpuplan.catalogs import get_catalog
>>> get_catalog().gpu("H100 80GB HBM3").id
'h100-sxm5-80gb'
"""

from __future__ import annotations

from gpuplan.catalogs.catalog import LISTINGS, Catalog, get_catalog, load_catalog, validate_catalog
from gpuplan.catalogs.loader import Problem
from gpuplan.catalogs.names import name_key
from gpuplan.catalogs.params import MLAConfig
from gpuplan.catalogs.schema import (
    DTYPES,
    Accelerator,
    Fabric,
    Instance,
    ModelArch,
    Nic,
    NicCount,
    Node,
    Optic,
    PriceObservation,
    Row,
    StorageTier,
    Switch,
    normalise_dtype,
)

__all__ = [
    "DTYPES",
    "LISTINGS",
    "Accelerator",
    "Catalog",
    "Fabric",
    "Instance",
    "MLAConfig",
    "ModelArch",
    "Nic",
    "NicCount",
    "Node",
    "Optic",
    "PriceObservation",
    "Problem",
    "Row",
    "StorageTier",
    "Switch",
    "get_catalog",
    "load_catalog",
    "name_key",
    "normalise_dtype",
    "validate_catalog",
]
