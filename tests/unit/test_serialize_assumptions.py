"""The export's assumptions (graphcap.dynamic.assumptions) travel in the file and come back on load."""
import torch
from test_export_record import Branchy  # a specialization, a guard and a relation

import graphcap
from graphcap import Dim
from graphcap.dynamic.assumptions import Assumption


def _export():
    return graphcap.export(Branchy(), (torch.randn(6, 3), torch.randn(6, 2)),
                           dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO}, "y": {0: Dim.AUTO}})


def test_assumptions_are_restored_by_load_with_and_without_mmap(tmp_path):
    ep = _export()
    assert {a.kind for a in ep.export_assumptions} >= {"specialization", "relation", "guard"}
    graphcap.save(ep, tmp_path / "p.pt2")
    for mmap in (False, True):
        loaded = graphcap.load(tmp_path / "p.pt2", mmap=mmap)
        assert loaded.export_assumptions == ep.export_assumptions
        assert all(type(a) is Assumption for a in loaded.export_assumptions)
    structure = graphcap.load(tmp_path / "p.pt2", weights=False)
    assert structure.export_assumptions == ep.export_assumptions


def test_a_report_of_a_loaded_program_lists_the_assumptions(tmp_path):
    ep = _export()
    graphcap.save(ep, tmp_path / "p.pt2")
    loaded = graphcap.load(tmp_path / "p.pt2")
    text = graphcap.report(loaded, tmp_path / "r.html").read_text()
    assert "does not carry" not in text
    assert "if x.shape[1] == 3" in text and "if x.shape[0] &gt; 4" in text


def test_static_programs_carry_an_empty_list_and_old_files_none(tmp_path):
    ep = graphcap.export(Branchy(), (torch.randn(6, 3), torch.randn(6, 2)))
    graphcap.save(ep, tmp_path / "s.pt2")
    assert graphcap.load(tmp_path / "s.pt2").export_assumptions == []
    from pathlib import Path
    golden_v2 = Path(__file__).resolve().parents[1] / "golden" / "format_v2.pt2"
    assert graphcap.load(golden_v2).export_assumptions is None  # written before the format carried them


def test_saving_a_loaded_program_keeps_them(tmp_path):
    ep = _export()
    graphcap.save(ep, tmp_path / "p.pt2")
    graphcap.save(graphcap.load(tmp_path / "p.pt2"), tmp_path / "again.pt2")
    assert graphcap.load(tmp_path / "again.pt2").export_assumptions == ep.export_assumptions
