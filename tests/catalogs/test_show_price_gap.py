"""``gpuplan catalog show <instance>``: a price kind the catalog documents as unpublished
prints "no published rate: <the catalog's note>", never "None" or an empty cell."""

from __future__ import annotations

from gpuplan.catalogs.catalog import load_catalog
from gpuplan.cli.main import main


def test_show_instance_prints_the_note_of_a_price_gap(capsys, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "400")
    inst = load_catalog().instance("p6e-gb200.36xlarge")
    gap = inst.price_gap("on_demand")
    assert gap is not None and gap.notes  # the row documents why there is no on-demand rate
    code = main(["catalog", "show", "p6e-gb200.36xlarge"])
    out = capsys.readouterr().out
    assert code == 0
    flat = " ".join(out.replace("│", " ").split())
    assert "None" not in out
    assert "no published rate: " + " ".join(gap.notes.split())[:40] in flat
    # a priced kind still prints its rate
    block = inst.price("capacity_block")
    assert block is not None and str(block.usd_per_hour) in out
