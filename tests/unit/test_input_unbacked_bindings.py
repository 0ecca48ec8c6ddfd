"""torch_private.shapes.claim_input_bindings: the unbacked symbols graph inputs carry are taken
off the shape engine's pending list before make_fx makes its placeholders (torch 2.13's make_fx
refuses to bind them; graphcap writes the placeholders' bindings itself on every line)."""
from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

from graphcap.torch_private.shapes import claim_input_bindings


def test_symbols_the_inputs_carry_are_claimed_per_input_and_others_stay_pending():
    env = ShapeEnv()
    with FakeTensorMode(shape_env=env):
        u_rows, u_cols, u_other = (env.create_unbacked_symint() for _ in range(3))
        a = torch.empty(u_rows, 3)
        b = torch.empty(2, u_cols)
    claimed = claim_input_bindings(env, [a, 7, b])
    assert set(claimed) == {0, 2}
    (sym_a, path_a), = claimed[0].items()
    (sym_b, path_b), = claimed[2].items()
    assert (sym_a, sym_b) == (u_rows.node.expr, u_cols.node.expr)
    assert str(path_a).endswith("SequenceKey(idx=0))") and str(path_b).endswith("SequenceKey(idx=1))")
    assert env.pending_fresh_unbacked_symbols == [u_other.node.expr]  # no input holds it: left for torch


def test_nothing_pending_claims_nothing():
    env = ShapeEnv()
    assert claim_input_bindings(env, [torch.ones(2)]) == {}
    assert claim_input_bindings(None, [torch.ones(2)]) == {}
