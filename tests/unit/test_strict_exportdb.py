"""torch's ExportDB examples that torch.export supports, exported with strict=True by graphcap.

ExportDB (``torch._export.db.examples``, imported here by the test only) is
torch's catalogue of export cases. Each supported one must export in strict
mode and its program must compute what the model computes on the example.
Two of them change state dynamo leaves out of the program (a module attribute,
an attribute of an input tensor): strict mode exports them, as torch does (a
store into a global or closed-over variable is left out too, with a warning).
"""
from __future__ import annotations

import copy

import pytest
import torch

import graphcap


def _supported_cases():
    from torch._export.db.case import SupportLevel
    from torch._export.db.examples import all_examples
    return {name: case for name, case in sorted(all_examples().items())
            if case.support_level == SupportLevel.SUPPORTED}


CASES = _supported_cases()


@pytest.mark.parametrize("name", list(CASES))
def test_exportdb_example_in_strict_mode(name):
    case = CASES[name]
    ep = graphcap.export(case.model, case.example_args, case.example_kwargs,
                         dynamic_shapes=case.dynamic_shapes, strict=True)
    args, kwargs = copy.deepcopy((case.example_args, case.example_kwargs))
    args2, kwargs2 = copy.deepcopy((case.example_args, case.example_kwargs))
    torch.testing.assert_close(ep.module()(*args2, **kwargs2), case.model(*args, **kwargs))


def test_the_catalogue_is_not_empty():
    assert len(CASES) >= 30
