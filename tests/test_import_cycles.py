"""No import cycle in the package (issue 14): a module never imports, directly or through
others, a module that imports it back.

The graph is grimp's (the library import-linter is built on), built from the source with
the ``if TYPE_CHECKING:`` imports left out: those never run, and a record's type may name
the module that builds it (``plan.options.Option`` in the builders' signatures).
"""

from __future__ import annotations

import grimp


def cycles(package: str) -> list[tuple[str, str]]:
    graph = grimp.build_graph(package, cache_dir=None, exclude_type_checking_imports=True)
    mods = sorted(graph.modules)
    return [
        (a, b)
        for a in mods
        for b in mods
        if a < b
        and graph.direct_import_exists(importer=a, imported=b)
        and graph.chain_exists(importer=b, imported=a)
    ]


def test_no_import_cycle():
    assert cycles("gpuplan") == []


def test_the_check_sees_a_cycle(tmp_path, monkeypatch):
    pkg = tmp_path / "cyc"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from cyc import b\n")
    (pkg / "b.py").write_text("from cyc import a\n")
    (pkg / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from cyc import d\n"
    )
    (pkg / "d.py").write_text("from cyc import c\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert cycles("cyc") == [("cyc.a", "cyc.b")]
