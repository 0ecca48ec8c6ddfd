"""graphcap.report writes one self-contained, well-formed HTML page with every part the
issue names: the graph per module call, histogram, signature, ranges, assumptions with
source lines, stage timings, and the verification / draft tables when given."""
import re
from html.parser import HTMLParser

import pytest
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


# --- a report that scales (issue 24): tools, collapsed runs, hidden size/mask edges, conditions,
# --- Dim names, tied weights, state kinds from the signature

class Layer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x, mask):
        return torch.relu(self.lin(x)).masked_fill(mask, 0.0) + x


class Stack(torch.nn.Module):
    """A mask made once and fed to every layer, as a transformer's causal mask is."""

    def __init__(self, n):
        super().__init__()
        self.embed = torch.nn.Linear(8, 8)
        self.layers = torch.nn.ModuleList(Layer() for _ in range(n))
        self.head = torch.nn.Linear(8, 8)

    def forward(self, x):
        mask = x.sum(-1, keepdim=True) > 100.0
        x = self.embed(x)
        for layer in self.layers:
            x = layer(x, mask)
        return self.head(x)


def _stack_report(tmp_path, n, **kw):
    ep = graphcap.export(Stack(n), (torch.randn(3, 8),), **kw)
    return ep, graphcap.report(ep, tmp_path / f"stack{n}.html").read_text()


def _views(text):
    """{view key: its markup} for every module view of the page."""
    starts = [(m.start(), m.group(1)) for m in re.finditer(r'<div class="view" data-key="([^"]*)"', text)]
    ends = [s for s, _ in starts[1:]] + [len(text)]
    return {key: text[s:e] for (s, key), e in zip(starts, ends)}


def _shown_view(text):
    """The markup of the view the page opens on (the one not hidden), its first drawing only."""
    for key, html in _views(text).items():
        head = html[:html.index(">") + 1]
        if " hidden" not in head:
            variant = re.search(r'<div class="variant collapsed">(.*?)</div><div class="variant expanded"', html, re.S)
            return key, (variant.group(1) if variant else html)
    raise AssertionError("no view is shown")


def test_the_page_has_search_zoom_pan_and_the_size_mask_toggle_inline(tmp_path):
    _, text = _stack_report(tmp_path, 4)
    assert '<input type="search" id="graph-search"' in text
    for zoom in ("in", "out", "fit", "1"):
        assert f'data-zoom="{zoom}"' in text
    assert 'id="show-aux"' in text and "show size/mask edges" in text
    assert "addEventListener('wheel'" in text and "mousedown" in text  # Ctrl+wheel zoom, drag to pan
    parser = Balance()
    parser.feed(text)
    assert parser.errors == [] and parser.stack == [] and parser.urls == []
    assert "<script src" not in text  # works offline: nothing fetched


def test_a_run_of_repeated_layers_is_one_box_that_expands(tmp_path):
    ep, text = _stack_report(tmp_path, 6)
    key, shown = _shown_view(text)
    assert key == ""
    assert shown.count('class="unit module run"') == 1 and 'data-expand="1"' in shown
    assert "layers.0 … layers.5" in shown and "6 × Layer" in shown
    assert 'data-open="L__self__layers.3"' not in shown  # members are not drawn one by one
    root = _views(text)[""]
    assert 'class="variant expanded" hidden' in root and 'class="expand" data-expand="1"' in root
    expanded = root[root.index('class="variant expanded"'):]
    for i in range(6):
        assert f'data-open="L__self__layers.{i}"' in expanded
    tree = text[text.index('<div class="tree">'):text.index('<div class="views"')]
    assert '<details class="run"><summary>layers.0 … layers.5 <small>6 × Layer' in tree  # folded in the tree
    # each layer's own view is still there (the tree and search open them)
    assert sum(k.startswith("L__self__layers.") and k.count(".") == 1 for k in _views(text)) == 6


def test_two_repeated_layers_are_drawn_as_they_are(tmp_path):
    _, text = _stack_report(tmp_path, 2)
    assert 'class="unit module run"' not in text and 'class="variant' not in text
    assert 'data-open="L__self__layers.0"' in text and 'data-open="L__self__layers.1"' in text


def test_a_run_is_not_collapsed_over_its_parents_own_operators(tmp_path):
    class Interleaved(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(4, 4) for _ in range(4))

        def forward(self, x):
            for layer in self.layers:
                x = layer(x).sin()  # the parent's own operator between the layers
            return x

    ep = graphcap.export(Interleaved(), (torch.randn(2, 4),))
    text = graphcap.report(ep, tmp_path / "r.html").read_text()
    assert 'class="unit module run"' not in text


def test_a_mask_fanning_out_to_every_layer_is_drawn_only_on_request(tmp_path):
    _, text = _stack_report(tmp_path, 6)
    root = _views(text)[""]
    expanded = root[root.index('class="variant expanded"'):]
    assert expanded.count('class="edge aux"') >= 6  # the mask to each of the 6 layers
    assert '<g class="auxpart">' in root  # the mask's computation, drawn apart
    assert "svg .edge.aux,svg .auxpart{display:none}" in text  # hidden until the toggle shows them
    assert ".show-aux svg .edge.aux" in text


def test_a_48_layer_model_opens_on_a_small_picture(tmp_path):
    ep, text = _stack_report(tmp_path, 48)
    assert len(ep.graph.nodes) > 250
    _, shown = _shown_view(text)
    drawn = shown.count('<g class="unit')
    assert drawn <= 20, drawn  # a box per top-level call and the few operators around them
    size = re.search(r'<svg class="graph" width="(\d+)" height="(\d+)"', shown)
    assert int(size.group(1)) < 1600 and int(size.group(2)) < 1200, size.groups()
    assert "layers.0 … layers.47" in shown and "48 × Layer" in shown


def test_runtime_checks_are_listed_with_their_conditions_no_empty_rows(tmp_path):
    class Convert(torch.nn.Module):
        def forward(self, x, n):
            k = n.item()
            torch._check(k >= 2)
            torch._check(k <= 10)
            return x.to(torch.float64) * k

    ep = graphcap.export(Convert(), (torch.randn(3), torch.tensor(4)))
    assert any("_assert_tensor_metadata" in str(n.target) for n in ep.graph.nodes)
    text = graphcap.report(ep, tmp_path / "r.html").read_text()
    section = text[text.index('<section id="assumptions">'):text.index('<section id="operators">')]
    rows = re.findall(r"<tr><td>([^<]*)</td><td>[^<]*</td><td>(.*?)</td>", section)
    assert rows
    for kind, condition in rows:
        assert re.sub(r"<[^>]+>", "", condition).strip(), (kind, condition)
        assert "aten._assert_tensor_metadata" not in condition
    assert any(kind == "tensor check" and "dtype float32" in cond for kind, cond in rows)
    assert any(kind == "runtime assert" for kind, _ in rows)


def test_a_record_without_a_condition_makes_no_row(tmp_path):
    ep = _export()
    recorded = list(ep.export_assumptions)
    ep.export_assumptions = recorded + [{"kind": "guard", "dim": "", "text": "", "where": ""}]
    text = graphcap.report(ep, tmp_path / "r.html").read_text()
    section = text[text.index('<section id="assumptions">'):text.index('<section id="operators">')]
    assert "<td><code></code></td>" not in section
    assert section.count("<tr><td>") == len([a for a in recorded if a.text]) + section.count("runtime assert")


def test_tied_weights_are_counted_once(tmp_path):
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(50, 16)
            self.head = torch.nn.Linear(16, 50, bias=False)
            self.head.weight = self.embed.weight

        def forward(self, ids):
            return self.head(self.embed(ids))

    ep = graphcap.export(Tied(), (torch.randint(0, 50, (2, 5)),))
    text = graphcap.report(ep, tmp_path / "r.html").read_text()
    assert "weights: <b>800 values" in text and "in 1 tensor (1 tied)" in text
    assert "tied to embed.weight" in text or "tied to head.weight" in text


def test_sizes_read_as_dim_names_not_engine_symbols(tmp_path):
    ep = graphcap.export(Net(), (torch.randn(5, 4),), dynamic_shapes={"x": {0: Dim("batch", min=3)}})
    sym = str(next(iter(ep.range_constraints)))
    text = graphcap.report(ep, tmp_path / "r.html").read_text()
    sig = text[text.index('<section id="signature">'):text.index('<section id="ranges">')]
    ranges = text[text.index('<section id="ranges">'):text.index('<section id="assumptions">')]
    graph = text[text.index('<section id="graph">'):text.index('<section id="signature">')]
    for part in (sig, graph):
        assert not re.search(rf"\b{sym}\b", part), part[:300]
    assert f"({sym} in the printed program)" in ranges  # the engine's symbol only beside the name
    name = "batch" if getattr(ep, "export_dim_names", None) else "x.shape[0]"
    assert f"float32[{name}, 4]" in sig


def test_dim_names_are_the_users_when_the_program_records_them(tmp_path):
    ep = graphcap.export(Net(), (torch.randn(5, 4),), dynamic_shapes={"x": {0: Dim("batch", min=3)}})
    if getattr(ep, "export_dim_names", None) is None:  # recorded at export once symbol names land
        sym = str(next(iter(ep.range_constraints)))
        ep.export_dim_names = {sym: "batch"}
    text = graphcap.report(ep, tmp_path / "r.html").read_text()
    assert "float32[batch, 4]" in text and "float32[batch, 2]" in text
    assert "<code>batch</code>" in text  # the range table's dim column


def test_state_is_told_by_the_signatures_kinds_not_by_name_prefixes(tmp_path):
    class Inner(torch.nn.Module):
        def forward(self, x, p_scale):
            return x * p_scale

    class Outer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Inner()
            self.register_buffer("offset", torch.ones(3))

        def forward(self, x, p_scale):  # a user input named like a lifted parameter
            return self.inner(x, p_scale) + self.offset

    ep = graphcap.export(Outer(), (torch.randn(3), torch.randn(3)))
    text = graphcap.report(ep, tmp_path / "r.html").read_text()
    views = _views(text)
    drawn_as_input = r'<g class="unit node op-input"[^>]*><title>p_scale \(input\)'
    assert re.search(drawn_as_input, views[""])  # a user input: drawn where the program starts
    assert not re.search(drawn_as_input, views["L__self__inner"])  # not moved in like a weight
    sig = text[text.index('<section id="signature">'):text.index('<section id="ranges">')]
    user = sig[:sig.index("<h3>Outputs</h3>")]
    assert "<code>p_scale</code></td><td>USER_INPUT" in user and "b_offset" not in user
    assert "1 buffer" in sig


def test_a_loaded_program_with_its_assumptions_lists_them(tmp_path):
    ep = _export()
    assert ep.export_assumptions
    graphcap.save(ep, tmp_path / "p.pt2")
    loaded = graphcap.load(tmp_path / "p.pt2")
    if loaded.export_assumptions is None:  # until the file keeps them: what a loader restores
        loaded.export_assumptions = [a.to_dict() for a in ep.export_assumptions]
    text = graphcap.report(loaded, tmp_path / "r.html").read_text()
    assert "does not carry" not in text
    assert "if x.shape[0] &gt; 2" in text


def test_stages_that_differ_are_not_a_run(tmp_path):
    class Stage(torch.nn.Module):
        def __init__(self, depth):
            super().__init__()
            self.body = torch.nn.Sequential(*(torch.nn.Linear(4, 4) for _ in range(depth)))

        def forward(self, x):
            return self.body(x)

    class Net4(torch.nn.Module):  # ResNet's layer1 .. layer4: same class, not the same layer
        def __init__(self):
            super().__init__()
            self.layer1, self.layer2, self.layer3, self.layer4 = (Stage(d) for d in (1, 2, 2, 2))
            self.stages = torch.nn.Sequential(Stage(1), Stage(2), Stage(3))

        def forward(self, x):
            return self.stages(self.layer4(self.layer3(self.layer2(self.layer1(x)))))

    ep = graphcap.export(Net4(), (torch.randn(2, 4),))
    text = graphcap.report(ep, tmp_path / "r.html").read_text()
    runs = re.findall(r'<g class="unit module run"[^>]*><title>[^<]*</title>(?:<rect[^>]*/>)*<text[^>]*>([^<]*)<', text)
    assert runs == ["body.0 … body.2"]  # only Stage(3)'s three identical Linears


@pytest.mark.slow
@pytest.mark.parametrize("layers", [12, 48])
def test_a_deep_gpt2_opens_on_its_blocks(tmp_path, layers):
    import transformers
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=256, n_embd=64, n_layer=layers, n_head=2, n_positions=128,
                                  use_cache=False)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    batch, seq = Dim("batch", max=64), Dim("seq", min=2, max=128)
    ep = graphcap.export(model, (), {"input_ids": torch.randint(0, 256, (2, 16)),
                                     "attention_mask": torch.ones(2, 16, dtype=torch.long)},
                         dynamic_shapes={"input_ids": {0: batch, 1: seq}, "attention_mask": {0: batch, 1: seq}})
    text = graphcap.report(ep, tmp_path / "r.html").read_text()
    key, shown = _shown_view(text)
    assert key == "L__self__transformer"  # GPT2LMHeadModel -> transformer: where the blocks are
    assert f"h.0 … h.{layers - 1}" in shown and f"{layers} × GPT2Block" in shown
    main = shown.split('<g class="auxpart">')[0]  # the size/mask computations are drawn only on request
    assert main.count('<g class="unit') <= 25, main.count('<g class="unit')
    guards = text[text.index('<section id="assumptions">'):text.index('<section id="operators">')]
    assert "_assert_tensor_metadata" not in guards and "has dtype bool, device cpu" in guards
    assert "(1 tied)" in text
