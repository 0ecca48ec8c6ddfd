"""Every mistake in a dynamic_shapes spec is torch's ``UserError`` (what code written against
torch.export catches) and still graphcap's ``ExportInputError`` / ``ValueError``."""
from __future__ import annotations

import pytest
import torch
from torch._dynamo.exc import UserError

import graphcap
from graphcap import Dim


class Add(torch.nn.Module):
    def forward(self, x, y):
        return x + y


class Nested(torch.nn.Module):
    def forward(self, d, xs):
        return d["a"] + xs[0] + xs[1]


X, Y = torch.randn(4, 3), torch.randn(4, 3)
NESTED = ({"a": torch.randn(4)}, [torch.randn(4), torch.randn(4)])

SPEC_MISTAKES = {
    "unknown top-level key": (Add(), (X, Y), {"a": {0: Dim("b")}, "y": None}),
    "missing top-level key": (Add(), (X, Y), {"x": {0: Dim("b")}}),
    "too few entries": (Add(), (X, Y), ({0: Dim("b")},)),
    "too many entries": (Add(), (X, Y), ({0: Dim("b")}, None, None)),
    "dim index out of rank": (Add(), (X, Y), ({0: Dim("b"), 2: Dim("c")}, None)),
    "list longer than rank": (Add(), (X, Y), ([None, None, None], None)),
    "static int differs from example": (Add(), (X, Y), ({0: 5}, None)),
    "not a spec at all": (Add(), (X, Y), ({0: "batch"}, None)),
    "dim key not an int": (Add(), (X, Y), ({"0": Dim("b")}, None)),
    "spec is a set": (Add(), (X, Y), {0, 1}),
    "nested dict keys differ": (Nested(), NESTED, ({"b": {0: Dim("n")}}, None)),
    "nested list arity": (Nested(), NESTED, (None, [{0: Dim("n")}])),
    "nested dict given a list": (Nested(), NESTED, ([{0: Dim("n")}], None)),
    "shape spec on a non-tensor": (Nested(), NESTED, (None, {0: Dim("n")})),
}


@pytest.mark.parametrize("case", sorted(SPEC_MISTAKES))
def test_spec_mistake_is_a_user_error_and_a_value_error(case):
    m, args, spec = SPEC_MISTAKES[case]
    with pytest.raises(UserError) as info:
        graphcap.export(m, args, dynamic_shapes=spec)
    assert isinstance(info.value, graphcap.ExportInputError)
    assert isinstance(info.value, ValueError)
    assert "dynamic_shapes" in str(info.value)


def test_importing_graphcap_errors_does_not_import_torch_dynamo():
    """The errors that are also torch's UserError are made on first use: a process that imports
    graphcap's errors (to catch them) pays no torch._dynamo import for it; on first use they are
    torch's UserError, printed and pickled under graphcap.errors."""
    import pickle
    import subprocess
    import sys

    code = ("import sys, graphcap.errors as e\n"
            "assert 'torch._dynamo' not in sys.modules, 'import graphcap.errors imported torch._dynamo'\n"
            "from graphcap.errors import ConstraintViolationError\n"
            "assert 'torch._dynamo' in sys.modules\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    from torch._dynamo.exc import UserError

    from graphcap import errors
    for name in ("ExportArgsError", "ConstraintViolationError", "DynamicSpecError"):
        cls = getattr(errors, name)
        assert issubclass(cls, UserError) and issubclass(cls, errors.GraphcapError)
        assert f"{cls.__module__}.{cls.__qualname__}" == f"graphcap.errors.{name}"
        again = pickle.loads(pickle.dumps(cls("what", where="where", fix="fix")))
        assert type(again) is cls and again.where == "where"
