"""Every case of the catalogue (graphcap.cases) does what its status says: a supported case
exports and its program gives eager's results on the example and on its other inputs; a
refused one raises its error type. docs/cases.md is what the generator writes now."""
import pytest
import torch

import graphcap
from conftest import TORCH_LINE
from graphcap.cases import all_cases, docs

CASES = all_cases()


def _same(a, b):
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.allclose(a, b, equal_nan=True)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if hasattr(a, "__dict__") and not isinstance(a, (int, float)):
        return type(a) is type(b) and _same(vars(a), vars(b))
    return a == b


def _clone(tree):
    if isinstance(tree, torch.Tensor):
        return tree.clone()
    if isinstance(tree, (list, tuple)):
        return type(tree)(_clone(t) for t in tree)
    if isinstance(tree, dict):
        return {k: _clone(v) for k, v in tree.items()}
    return tree


def test_catalogue_covers_the_topics():
    tags = set().union(*(c.tags for c in CASES.values()))
    for tag in ("python.control-flow", "torch.dynamic-shape", "torch.cond", "torch.map", "torch.mutation",
                "python.closure", "torch.data-dependent", "python.data-structure", "python.context-manager",
                "python.object-model", "python.assert", "python.builtin", "torch.escape-hatch"):
        assert tag in tags, tag
    assert len(CASES) >= 40
    assert sum(c.beyond_torch for c in CASES.values()) >= 4
    assert any(c.raises is not None for c in CASES.values())


# map over a dim of dynamic size is refused on torch 2.10 (tests/unit/test_map_dynamic_dim_release.py)
_NEEDS_TORCH_2_11 = pytest.mark.skipif(TORCH_LINE < (2, 11), reason="map over a dim of dynamic size needs torch 2.11")


@pytest.mark.parametrize("name", [pytest.param(n, marks=_NEEDS_TORCH_2_11) if n == "map_over_rows" else n
                                  for n in sorted(CASES)])
def test_case_status(name):
    c = CASES[name]
    args, kwargs, spec = c.inputs()
    if c.raises is not None:
        with pytest.raises(c.raises):
            graphcap.export(c.model(), args, kwargs, dynamic_shapes=spec)
        return
    ep = graphcap.export(c.model(), _clone(args), _clone(kwargs), dynamic_shapes=spec)
    program = ep.module()
    for a, k in [(args, kwargs), *c.more_inputs()]:
        # a fresh model: eager state as at export. Eager torch.cond compiles its branches with
        # dynamo, and torch 2.15's dynamo turns a closed-over float that changed since an earlier
        # case's call into a SymFloat that cond then rejects: the reference runs without dynamo.
        with torch.compiler.set_stance("force_eager"):
            expected = c.model()(*_clone(a), **_clone(k))
        got = program(*_clone(a), **_clone(k))
        assert _same(expected, got), f"{name}: program differs from eager on {a}, {k}"


def test_docs_cases_md_is_up_to_date():
    assert docs.DOC_PATH.exists(), "run: python -m graphcap.cases.docs"
    recorded = docs.generated_with(docs.DOC_PATH.read_text())
    page, fresh = docs.DOC_PATH.read_text(), docs.render()
    if recorded != docs.torch_version():
        # printed programs differ a little between torch releases: on another release the page
        # must still list the same cases, in the same order, under the same headings
        def headings(text):
            return [line for line in text.splitlines() if line.startswith("#")]
        assert headings(page) == headings(fresh), \
            f"docs/cases.md (torch {recorded}) lists other cases than this catalogue: run python -m graphcap.cases.docs"
        return
    assert page == fresh, "docs/cases.md is out of date: run python -m graphcap.cases.docs"
