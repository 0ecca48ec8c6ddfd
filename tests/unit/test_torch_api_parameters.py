"""Code written for torch.export calls graphcap's entry points with torch's argument names.

A user switches with one import line, so a call such as ``unflatten(module=ep)`` or
``save(ep, f, extra_files=...)`` must bind the same way: every parameter of torch's function is
one of graphcap's, of the same kind, positional ones in the same order; graphcap may add parameters of its own
after them (keyword-only, or with defaults).
"""
import inspect

import pytest
import torch
import torch.export

import graphcap

_FUNCTIONS = ["export", "save", "load", "draft_export", "unflatten", "register_dataclass"]
_METHODS = ["module", "run_decompositions", "validate"]


def _check_binds_the_same(theirs, ours, where):
    their_params = list(inspect.signature(theirs).parameters.values())
    our_params = inspect.signature(ours).parameters
    positions = list(our_params)
    last = -1
    for p in their_params:
        assert p.name in our_params, f"{where}: torch's parameter {p.name!r} is missing"
        mine = our_params[p.name]
        assert mine.kind == p.kind, f"{where}: {p.name!r} is {mine.kind.name} here, {p.kind.name} in torch"
        if p.kind is not inspect.Parameter.KEYWORD_ONLY:  # keywords bind by name in any order
            assert positions.index(p.name) > last, f"{where}: {p.name!r} comes in another order than torch's"
            last = positions.index(p.name)
        if p.default is inspect.Parameter.empty:
            continue
        assert mine.default is not inspect.Parameter.empty, f"{where}: {p.name!r} has a default in torch"
    for name in [n for n in positions if n not in {p.name for p in their_params}]:
        extra = our_params[name]
        assert extra.kind is inspect.Parameter.KEYWORD_ONLY or extra.default is not inspect.Parameter.empty, \
            f"{where}: graphcap's own parameter {name!r} must be optional"


@pytest.mark.parametrize("name", _FUNCTIONS)
def test_entry_points_take_torchs_parameters(name):
    _check_binds_the_same(getattr(torch.export, name), getattr(graphcap, name), f"graphcap.{name}")


@pytest.mark.parametrize("name", _METHODS)
def test_program_methods_take_torchs_parameters(name):
    _check_binds_the_same(getattr(torch.export.ExportedProgram, name), getattr(graphcap.ExportedProgram, name),
                          f"ExportedProgram.{name}")


class _Block(torch.nn.Module):
    def forward(self, x):
        return x.sin()


class _Outer(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.block = _Block()

    def forward(self, x):
        return self.block(x) + 1


def test_unflatten_by_torchs_keyword_runs():
    ep = graphcap.export(_Outer(), (torch.randn(2, 3),))
    unflat = graphcap.unflatten(module=ep)
    x = torch.randn(2, 3)
    torch.testing.assert_close(unflat(x), _Outer()(x))
