"""graphcap.report writes one self-contained, well-formed HTML page with every part the
issue names: the graph per module call, histogram, signature, ranges, assumptions with
source lines, stage timings, and the verification / draft tables when given."""
import re
from html.parser import HTMLParser

import torch

import graphcap
from graphcap import Dim

VOID = {"meta", "br", "img", "input", "link", "hr", "col", "area", "base", "source", "wbr"}


class Balance(HTMLParser):
    """Every element closed in order; SVG's self-closing elements count as closed."""

    def __init__(self):
        super().__init__()
        self.stack, self.errors, self.urls = [], [], []

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("src", "href") and value and re.match(r"\s*(https?:)?//", value):
                self.urls.append(value)
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        for name, value in attrs:
            if name in ("src", "href") and value and re.match(r"\s*(https?:)?//", value):
                self.urls.append(value)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:]}")
            return
        self.stack.pop()


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.norm = torch.nn.LayerNorm(4)

    def forward(self, x):
        return torch.relu(self.norm(self.lin(x))) + x


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.Sequential(Block(), Block())
        self.head = torch.nn.Linear(4, 2)

    def forward(self, x):
        if x.shape[0] > 2:  # a guard the report lists with this line
            x = x * 2
        return self.head(self.blocks(x))


def _export():
    return graphcap.export(Net(), (torch.randn(5, 4),), dynamic_shapes={"x": {0: Dim.AUTO}})


class FakeVerification:
    def as_dict(self):
        return {"passed": False, "samples": 2, "seed": 0, "skipped": [],
                "input_sets": [{"label": "example", "sizes": {"s0": 5}, "shapes": {"x": [5, 4]}, "passed": True,
                                "error": None, "outputs": [{"name": "out", "max_abs_error": 1e-7,
                                                            "max_rel_error": 2e-7}]},
                               {"label": "min", "sizes": {"s0": 3}, "shapes": {"x": [3, 4]}, "passed": False,
                                "error": "boom <b>", "outputs": []}],
                "refusals": [{"label": "x.shape[0] = 2", "refused": True, "passed": True, "message": "refused"}]}


class FakeFailure:
    failure_type = type("Kind", (), {"name": "DATA_DEPENDENT_ERROR"})()

    def __str__(self):
        return "u0 > 3 could not be decided"


class FakeDraft:
    failures = [FakeFailure()]


class Problem:  # graphcap's draft report names the kind ``kind``
    kind = "constraint_violation"

    def __str__(self):
        return "n must be >= 5\n  fix: n = Dim('n', min=5)"


class GraphcapStyleDraft:
    failures = [Problem()]
    refined_dynamic_shapes = {"x": {0: "n"}}


def test_report_is_self_contained_well_formed_and_has_every_part(tmp_path):
    ep = _export()
    path = graphcap.report(ep, tmp_path / "r.html", verification=FakeVerification(), draft_report=FakeDraft(),
                           title="Net")
    text = path.read_text()
    parser = Balance()
    parser.feed(text)
    assert parser.errors == [] and parser.stack == []
    assert parser.urls == []
    assert not re.search(r"""(src|href)\s*=\s*["']?https?:""", text)
    assert "<script src" not in text and "@import" not in text and "url(http" not in text
    for anchor in ("graph", "signature", "ranges", "assumptions", "operators", "timings", "verification", "draft",
                   "program"):
        assert f'<section id="{anchor}">' in text
    # the graph: a view per module call, the root's children collapsed to clickable boxes
    assert text.count('<div class="view"') == 1 + 1 + 2 + 2 * 2 + 1  # root, blocks, 2 blocks, lin+norm each, head
    assert 'data-open="L__self__blocks"' in text and "<svg" in text
    # histogram, ranges, assumptions with the user's line, timings
    assert "aten.linear.default" in text and "aten.layer_norm.default" in text
    assert "x.shape[0]" in text
    assert "if x.shape[0] &gt; 2" in text and "test_html_report.py" in text
    assert "capture" in text and " ms" in text
    # verification and draft tables, escaped
    assert "DIFFERS" in text and "boom &lt;b&gt;" in text and "refused" in text
    assert "DATA_DEPENDENT_ERROR" in text and "could not be decided" in text


def test_draft_report_kinds_and_refined_spec(tmp_path):
    ep = graphcap.export(torch.nn.Linear(3, 2), (torch.randn(2, 3),))
    text = graphcap.report(ep, tmp_path / "r.html", draft_report=GraphcapStyleDraft()).read_text()
    assert "constraint_violation" in text and "Dim(&#x27;n&#x27;, min=5)" in text
    assert "refined spec" in text


def test_report_of_a_static_program_without_records_says_so(tmp_path):
    ep = graphcap.export(torch.nn.Linear(3, 2), (torch.randn(2, 3),))
    ep.export_timings, ep.export_assumptions = {}, None
    text = graphcap.report(ep, tmp_path / "r.html").read_text()
    assert "All sizes are static." in text
    assert "Not recorded" in text and "does not carry" in text


def test_runtime_asserts_are_listed_with_their_message(tmp_path):
    class M(torch.nn.Module):
        def forward(self, x):
            n = x.sum().to(torch.int64).item()
            torch._check(n >= 0)
            return torch.zeros(n)

    ep = graphcap.export(M(), (torch.ones(3),))
    text = graphcap.report(ep, tmp_path / "r.html").read_text()
    assert "runtime assert" in text


def test_a_big_flat_graph_stays_drawable(tmp_path):
    class Chain(torch.nn.Module):
        def forward(self, x):
            for i in range(300):
                x = x * 1.01 + i if i % 2 else torch.sin(x)
            return x

    ep = graphcap.export(Chain(), (torch.randn(3),))
    text = graphcap.report(ep, tmp_path / "r.html").read_text()
    assert text.count("<g class=\"unit node") >= 300


def test_a_loaded_program_reports_its_timings_as_unknown(tmp_path):
    ep = _export()
    graphcap.save(ep, tmp_path / "p.pt2")
    loaded = graphcap.load(tmp_path / "p.pt2")
    # the assumptions travel in the file (format 3); the timings do not
    assert loaded.export_assumptions == ep.export_assumptions and loaded.export_timings == {}
    text = graphcap.report(loaded, tmp_path / "r.html").read_text()
    assert "does not carry" not in text and "Not recorded" in text
    assert "<svg" in text and "aten.linear.default" in text


def test_control_flow_subgraphs_get_views_opened_from_their_boxes(tmp_path):
    class M(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda t: t.tanh(), lambda t: t.sin() * 2, (x,))

    ep = graphcap.export(M(), (torch.randn(4),))
    text = graphcap.report(ep, tmp_path / "r.html").read_text()
    for sub in ("true_graph_0/", "false_graph_0/"):
        assert f'data-key="{sub}"' in text and f'data-open="{sub}"' in text
    assert "aten.tanh.default" in text and "aten.sin.default" in text  # the histogram counts subgraphs
