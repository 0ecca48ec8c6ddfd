"""Every specialization of a hand-written spec is shown with its line and what would keep the dim
dynamic: in ``graphcap inspect`` (table and --json) and in the HTML report (issue 29, item 3)."""
import json

import torch
from test_export_record import Branchy  # a specialization, a guard and a relation

import graphcap
from graphcap import Dim
from graphcap.cli import main
from graphcap.dynamic.assumptions import how_to_keep_dynamic


class WeightFixed(torch.nn.Module):
    """x's last dim is fixed by the weight, not by a line of the user's code."""

    def __init__(self):
        super().__init__()
        self.proj = torch.nn.Linear(8, 4)

    def forward(self, x):
        return self.proj(x)


def _saved(tmp_path, model, args, spec):
    ep = graphcap.export(model, args, dynamic_shapes=spec)
    path = tmp_path / "p.pt2"
    graphcap.save(ep, path)
    return ep, str(path)


def test_each_kind_gets_a_hint_that_fits_it():
    ep = graphcap.export(Branchy(), (torch.randn(6, 3), torch.randn(6, 2)),
                         dynamic_shapes={"x": {0: Dim.AUTO, 1: Dim.AUTO}, "y": {0: Dim.AUTO}})
    hints = {a.kind: how_to_keep_dynamic(a) for a in ep.export_assumptions}
    assert "make that line independent of the size" in hints["specialization"]
    assert "one Dim" in hints["relation"] and "checks this when it runs" in hints["guard"]
    # the record's data (what a loaded file or the JSON output holds) gives the same hint
    assert [how_to_keep_dynamic(a.to_dict()) for a in ep.export_assumptions] == \
        [how_to_keep_dynamic(a) for a in ep.export_assumptions]


def test_a_weight_fixed_dim_is_not_the_specs_to_keep():
    ep = graphcap.export(WeightFixed(), (torch.randn(3, 8),), dynamic_shapes=({0: Dim.AUTO, 1: Dim.AUTO},))
    fixed = [a for a in ep.export_assumptions if a.kind == "specialization"]
    assert [a.text for a in fixed] == ["*args[0].shape[1] = 8"]
    assert fixed[0].framework and how_to_keep_dynamic(fixed[0]).startswith("not through the spec")
    assert ep.module()(torch.randn(5, 8)).shape == (5, 4)  # dim 0 stayed dynamic


def test_inspect_lists_the_assumptions_with_hints(tmp_path, capsys):
    _, path = _saved(tmp_path, Branchy(), (torch.randn(6, 3), torch.randn(6, 2)),
                     {"x": {0: Dim.AUTO, 1: Dim.AUTO}, "y": {0: Dim.AUTO}})
    assert main(["inspect", path, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_kind = {a["kind"]: a for a in doc["assumptions"]}
    assert "if x.shape[1] == 3" in by_kind["specialization"]["where"]
    assert by_kind["specialization"]["keep_dynamic"] and by_kind["relation"]["keep_dynamic"]
    assert main(["inspect", path]) == 0
    text = capsys.readouterr().out
    assert "Assumptions" in text and "to keep it dynamic" in text


def test_a_static_program_shows_no_assumptions(tmp_path, capsys):
    _, path = _saved(tmp_path, Branchy(), (torch.randn(6, 3), torch.randn(6, 2)), None)
    assert main(["inspect", path, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["assumptions"] == []
    assert main(["inspect", path]) == 0
    assert "Assumptions" not in capsys.readouterr().out


def test_the_report_has_the_column(tmp_path):
    ep, _ = _saved(tmp_path, Branchy(), (torch.randn(6, 3), torch.randn(6, 2)),
                   {"x": {0: Dim.AUTO, 1: Dim.AUTO}, "y": {0: Dim.AUTO}})
    text = graphcap.report(ep, tmp_path / "r.html").read_text()
    section = text[text.index('<section id="assumptions">'):text.index('<section id="operators">')]
    assert "to keep it dynamic" in section and "make that line independent of the size" in section
