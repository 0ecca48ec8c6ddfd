"""A program exported at size-1 examples loads accepting every size it was exported for.

Loading rebuilds each value's fake tensor with the saved example sizes as
hints; recording its tensor metadata asks whether a size-1 dim's stride
matters to its memory format, and that question, answered from the hint,
held the dim at 1: the loaded program of a softmax over a dynamic dim exported
at size 1 refused size 2. The loader answers size questions for the general
size, as export does.
"""
import pytest
import torch

import graphcap
from size_one_models import SIZE_ONE_EXAMPLES, operator_example


@pytest.mark.parametrize("name", sorted(SIZE_ONE_EXAMPLES))
def test_loaded_program_accepts_every_size_of_its_range(name, tmp_path):
    model, example, spec, sizes = operator_example(name)
    ep = graphcap.export(model, (example,), dynamic_shapes=spec)
    path = tmp_path / f"{name}.pt2"
    graphcap.save(ep, path)
    loaded = graphcap.load(path)
    assert loaded.range_constraints.keys() == ep.range_constraints.keys()
    x_name = loaded.graph_signature.user_inputs[0]
    x_val = next(n for n in loaded.graph.nodes if n.name == x_name).meta["val"]
    assert all(isinstance(x_val.shape[d], torch.SymInt) for d in spec["x"]), x_val.shape
    for k in (1, 2, 8):
        x = torch.randn(*sizes(k))
        torch.testing.assert_close(loaded.module()(x), model(x), equal_nan=True)
    # and saved again from the loaded program, the file reads back the same
    again = tmp_path / f"{name}_again.pt2"
    graphcap.save(loaded, again)
    x = torch.randn(*sizes(3))
    torch.testing.assert_close(graphcap.load(again).module()(x), model(x), equal_nan=True)
