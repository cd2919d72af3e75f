"""The :class:`Catalog`: every row of every kind, with name resolution."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from pathlib import Path

from gpuplan.catalogs.loader import Problem, default_data_dir, raise_for, read_dir
from gpuplan.catalogs.names import configuration_stripped, name_key, resolve
from gpuplan.catalogs.schema import (
    Accelerator,
    Fabric,
    Instance,
    ModelArch,
    Nic,
    Node,
    Optic,
    Row,
    StorageTier,
    Switch,
)
from gpuplan.errors import NotFoundError

#: ``gpuplan catalog ls`` names -> row kinds listed.
LISTINGS: dict[str, tuple[str, ...]] = {
    "gpus": ("accelerator",),
    "instances": ("instance",),
    "nodes": ("node",),
    "models": ("model",),
    "storage": ("storage",),
    "network": ("fabric", "switch", "nic", "optic"),
}

_WHAT = {
    "accelerator": "GPU/accelerator",
    "instance": "instance type",
    "node": "node type",
    "model": "model",
    "storage": "storage tier",
    "fabric": "fabric",
    "switch": "switch",
    "nic": "NIC",
    "optic": "optic/cable",
}


class Catalog:
    """All catalog rows, validated; look-ups resolve aliases case-insensitively.

    Use :func:`gpuplan.catalogs.get_catalog` (cached) rather than building one directly.
    """

    def __init__(self, rows: Sequence[Row], data_dir: Path | None = None) -> None:
        self.data_dir = data_dir
        self._by_kind: dict[str, tuple[Row, ...]] = {}
        for kind in _WHAT:
            self._by_kind[kind] = tuple(r for r in rows if r.kind == kind)
        self._by_id: dict[str, Row] = {r.id: r for r in rows}
        self._index: dict[str, dict[str, str]] = {}
        for kind, krows in self._by_kind.items():
            index: dict[str, str] = {}
            for r in krows:
                for n in (*r.aliases, r.id):  # the id wins over an alias of another row
                    index[name_key(n)] = r.id
            self._index[kind] = index

    # ---- lists ----------------------------------------------------------------------
    @property
    def gpus(self) -> list[Accelerator]:
        return list(self._by_kind["accelerator"])  # type: ignore[arg-type]

    accelerators = gpus

    @property
    def instances(self) -> list[Instance]:
        return list(self._by_kind["instance"])  # type: ignore[arg-type]

    @property
    def nodes(self) -> list[Node]:
        return list(self._by_kind["node"])  # type: ignore[arg-type]

    @property
    def models(self) -> list[ModelArch]:
        return list(self._by_kind["model"])  # type: ignore[arg-type]

    @property
    def storage(self) -> list[StorageTier]:
        return list(self._by_kind["storage"])  # type: ignore[arg-type]

    @property
    def fabrics(self) -> list[Fabric]:
        return list(self._by_kind["fabric"])  # type: ignore[arg-type]

    @property
    def switches(self) -> list[Switch]:
        return list(self._by_kind["switch"])  # type: ignore[arg-type]

    @property
    def nics(self) -> list[Nic]:
        return list(self._by_kind["nic"])  # type: ignore[arg-type]

    @property
    def optics(self) -> list[Optic]:
        return list(self._by_kind["optic"])  # type: ignore[arg-type]

    @property
    def network(self) -> list[Row]:
        """Fabrics, switches, NICs and optics."""
        return [*self.fabrics, *self.switches, *self.nics, *self.optics]

    def rows(self, kind: str | None = None) -> list[Row]:
        """Rows of one kind (``accelerator``, ``instance``...) or of all kinds."""
        if kind is None:
            return list(self._by_id.values())
        return list(self._by_kind[kind])

    def listing(self, what: str) -> list[Row]:
        """Rows for ``gpuplan catalog ls WHAT`` (gpus, instances, nodes, models, storage, network)."""
        return [r for kind in LISTINGS[what] for r in self._by_kind[kind]]

    # ---- look-ups -------------------------------------------------------------------
    def _get(self, kind: str, name: str) -> Row:
        if isinstance(name, Row):
            return name
        ids = [r.id for r in self._by_kind[kind]]
        try:
            rid = resolve(name, self._index[kind], what=_WHAT[kind], all_ids=ids)
        except NotFoundError as exc:
            if kind != "accelerator" or "ambiguous" in exc.message:
                raise
            row = self._configured_part(name, ids) or self._instance_part(name)
            if row is None:
                raise
            return row
        return self._by_id[rid]

    def _instance_part(self, name: str) -> Row | None:
        """Rule 6 of :mod:`gpuplan.catalogs.names`: the accelerator of the cloud instance
        type or TPU slice ``name`` names (``p5.48xlarge``: the H100 SXM)."""
        ids = [r.id for r in self._by_kind["instance"]]
        try:
            rid = resolve(name, self._index["instance"], what="instance", all_ids=ids)
        except NotFoundError:
            return None
        inst = self._by_id[rid]
        return self._by_id.get(getattr(inst, "accelerator_id", ""))

    def _configured_part(self, name: str, ids: list[str]) -> Row | None:
        """Rule 5 of :mod:`gpuplan.catalogs.names`: the part a benchmark system's
        accelerator name states with its configuration (power, partition mode, cooling),
        its memory within 7% of the stated size when only the part's name matches."""
        kept, bare, stated_gb = configuration_stripped(name)
        for text, check in ((kept, False), (bare, True)):
            if not text:
                continue
            try:
                rid = resolve(text, self._index["accelerator"], what="accelerator", all_ids=ids)
            except NotFoundError:
                continue
            row = self._by_id[rid]
            # the catalog keeps a part's "80GB" as 80 GiB; a system may state usable memory
            # (B300: "270GB" of 288)
            mem_gib = (getattr(row, "memory_bytes", None) or 0) / 2**30
            if check and stated_gb is not None and abs(mem_gib - stated_gb) > 0.07 * stated_gb:
                return None
            return row
        return None

    def resolve_id(self, kind: str, name: str) -> str:
        """The id ``name`` names among rows of ``kind`` (NotFoundError otherwise)."""
        return self._get(kind, name).id

    def gpu(self, name: str) -> Accelerator:
        """Accelerator by id or alias ("h100", "H100 80GB HBM3", "nvidia_h100_sxm")."""
        return self._get("accelerator", name)  # type: ignore[return-value]

    accelerator = gpu

    def instance(self, name: str) -> Instance:
        return self._get("instance", name)  # type: ignore[return-value]

    def node(self, name: str) -> Node:
        return self._get("node", name)  # type: ignore[return-value]

    def model(self, name: str) -> ModelArch:
        """Model architecture by id or alias ("llama3.1-405b", "Llama 3.1 405B")."""
        return self._get("model", name)  # type: ignore[return-value]

    def storage_tier(self, name: str) -> StorageTier:
        return self._get("storage", name)  # type: ignore[return-value]

    def fabric(self, name: str) -> Fabric:
        return self._get("fabric", name)  # type: ignore[return-value]

    def switch(self, name: str) -> Switch:
        return self._get("switch", name)  # type: ignore[return-value]

    def nic(self, name: str) -> Nic:
        return self._get("nic", name)  # type: ignore[return-value]

    def optic(self, name: str) -> Optic:
        return self._get("optic", name)  # type: ignore[return-value]

    def find(self, name: str) -> Row:
        """A row of any kind by id or alias (for ``gpuplan catalog show``).

        An exact id/alias match wins; otherwise each kind's descriptive-name rule is tried
        and the name must resolve in exactly one kind.
        """
        key = name_key(name)
        if name in self._by_id:
            return self._by_id[name]
        exact = {idx[key] for idx in self._index.values() if key in idx}
        if len(exact) == 1:
            return self._by_id[exact.pop()]
        if len(exact) > 1:
            raise NotFoundError(
                f"{name!r} names several rows: {', '.join(sorted(exact))}",
                hint="use one of these ids",
            )
        found: list[str] = []
        for kind in _WHAT:
            try:
                found.append(self.resolve_id(kind, name))
            except NotFoundError as exc:
                if "ambiguous" in exc.message:
                    raise
        if len(found) == 1:
            return self._by_id[found[0]]
        if len(found) > 1:
            raise NotFoundError(
                f"{name!r} names several rows: {', '.join(sorted(found))}",
                hint="use one of these ids",
            )
        index = {k: v for idx in self._index.values() for k, v in idx.items()}
        resolve(name, index, what="catalog row", all_ids=self._by_id)
        raise AssertionError("unreachable")  # pragma: no cover


def load_catalog(data_dir: str | Path | None = None) -> Catalog:
    """Read and validate a catalog folder; raise SchemaError naming file, row and field."""
    path = Path(data_dir) if data_dir is not None else default_data_dir()
    files, problems = read_dir(path)
    raise_for(problems, path)
    return Catalog([r for rows in files.values() for r in rows], data_dir=path)


def validate_catalog(data_dir: str | Path | None = None) -> list[Problem]:
    """Every problem in a catalog folder (empty list when it is valid)."""
    path = Path(data_dir) if data_dir is not None else default_data_dir()
    return read_dir(path)[1]


@functools.lru_cache(maxsize=4)
def _cached(path: str) -> Catalog:
    return load_catalog(path)


def get_catalog() -> Catalog:
    """The shipped catalog, loaded and validated once per process, with the prices a user
    imported (``gpuplan catalog import-prices``, :mod:`gpuplan.catalogs.user_prices`)."""
    from gpuplan.catalogs import user_prices

    base = _cached(str(default_data_dir()))
    path = user_prices.user_prices_path()
    try:
        st = path.stat()
    except OSError:
        return base
    return _with_user_prices(base, str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=4)
def _with_user_prices(base: Catalog, path: str, mtime_ns: int, size: int) -> Catalog:
    from gpuplan.catalogs import user_prices

    prices = user_prices.load_user_prices(Path(path))
    if not prices:
        return base
    others = [r for r in base.rows() if r.kind != "instance"]
    insts = user_prices.with_user_prices(base.instances, prices)
    return Catalog([*others, *insts], data_dir=base.data_dir)
