"""Every public-zoo model: static export, module() against eager, input checks (the heaviest
vision models full-size with -m slow, shrunk by default: test_zoo_blocks.py)."""
from __future__ import annotations

import pytest
import torch
from test_zoo_blocks import BLOCKS

import graphcap
from conftest import assert_same_outputs, run_eager_and_exported, zoo_case, zoo_export, zoo_names, zoo_params

# The heavy vision models run full-size with -m slow; their shrunk builds (same classes,
# same forward code) run by default in test_zoo_blocks.py with the same assertions.
_DEFAULT_RUN = {n for n in zoo_names() if n not in BLOCKS}


@pytest.mark.parametrize("name", zoo_params(_DEFAULT_RUN))
def test_zoo_static_export_matches_eager(name):
    built, ep = zoo_case(name), zoo_export(name)
    ep.validate()
    expected, got = run_eager_and_exported(built.model, ep, built.args, built.kwargs)
    assert_same_outputs(expected, got)

    # fresh values of the same shapes are accepted and computed correctly
    fresh = torch.utils._pytree.tree_map(
        lambda t: torch.randn_like(t) if isinstance(t, torch.Tensor) and t.is_floating_point() else t,
        (built.args, built.kwargs))
    expected, got = run_eager_and_exported(built.model, ep, *fresh)
    assert_same_outputs(expected, got)

    # inputs of other sizes are refused before computing, naming the input path
    if built.args2 is not None:
        with pytest.raises(graphcap.RuntimeInputError, match=r"Expected input at \S+\.shape\[\d\]"):
            ep.module()(*built.args2, **built.kwargs2)


def test_gpt2_default_cache_output_is_rebuilt():
    """torch.export 2.14 fails on GPT-2's DynamicCache output; graphcap flattens it."""
    built, ep = zoo_case("hf_gpt2_cache"), zoo_export("hf_gpt2_cache")  # its warning: tests/unit/test_pytree.py
    assert "transformers.cache_utils.DynamicCache" in graphcap.pytree.auto_registered_classes().values()
    expected, got = run_eager_and_exported(built.model, ep, built.args, built.kwargs)
    assert type(got.past_key_values) is type(expected.past_key_values)
    assert_same_outputs(expected, got)
