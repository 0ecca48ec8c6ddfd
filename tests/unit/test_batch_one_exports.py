"""Real models exported at batch 1 with a dynamic batch: every derived program accepts every batch.

Batch-1 examples are the common case for inference exports. A program exported
at batch 1 with ``Dim("batch", min=1)`` used to come back from
``run_decompositions`` and from save/load holding batch at 1 (its tensor
metadata and a reshape's view-or-copy choice decided from the example), so the
decomposed or loaded GPT-2 refused batch 3 (test_decomp_keeps_ranges.py,
test_serialize_size_one_examples.py for the mechanisms).
"""
import pytest
import torch

import graphcap
from conftest import TORCH_LINE
from small_models import BUILDERS


def _at_batch_one(inputs: dict) -> dict:
    return {k: v[:1].clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


def _assert_same(got, want):
    leaves_got, leaves_want = torch.utils._pytree.tree_leaves(got), torch.utils._pytree.tree_leaves(want)
    assert len(leaves_got) == len(leaves_want)
    for g, w in zip(leaves_got, leaves_want):
        torch.testing.assert_close(g, w, atol=1e-4, rtol=1e-4)


@pytest.mark.skipif(TORCH_LINE < (2, 13), reason="torch 2.10-2.12: scaled_dot_product_attention's meta "
                    "kernel decides batch = 1 at a batch-1 export, which graphcap refuses naming the line")
@pytest.mark.parametrize("name", ["hf_gpt2", "hf_bert"])
def test_decomposed_and_loaded_programs_take_other_batches(name, tmp_path):
    built = BUILDERS[name]()
    ep = graphcap.export(built.model, (), _at_batch_one(built.kwargs), dynamic_shapes=built.dynamic_shapes)
    path = tmp_path / f"{name}.pt2"
    graphcap.save(ep, path)
    want = built.model(**built.kwargs2)  # batch 3
    for program in (ep, ep.run_decompositions(), graphcap.load(path), graphcap.load(path).run_decompositions()):
        _assert_same(program.module()(**built.kwargs2), want)
