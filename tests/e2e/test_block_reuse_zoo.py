"""Repeated blocks traced once: every zoo model exports to the same program with reuse on and off.

The printed program, every node's name, target, arguments and metadata (values' layouts, module
stacks, stack traces, torch_fn, source_fn_stack), the signature, the range constraints and the
module call graph must be identical (``tests/block_reuse_compare.py``); static and dynamic.
"""
from __future__ import annotations

import copy

import pytest

from block_reuse_compare import assert_same_program, export_both
from conftest import quiet_warnings, zoo_case, zoo_params

# models with repeated blocks that run in the default test command; the rest with -m slow
_DEFAULT = ("hf_llama", "hf_bert", "hf_gpt2", "tv_resnet18", "custom_")


@pytest.mark.parametrize("name", zoo_params(_DEFAULT))
def test_zoo_program_identical_with_and_without_block_reuse(name):
    built = zoo_case(name)
    specs = [None] if built.dynamic_shapes is None else [None, built.dynamic_shapes]  # static, and dynamic
    for spec in specs:
        with quiet_warnings():
            model = copy.deepcopy(built.model)
            with_reuse, without, _ = export_both(model, built.args, built.kwargs, dynamic_shapes=spec)
        assert_same_program(with_reuse, without)
