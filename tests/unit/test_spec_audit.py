"""dynamic_shapes spec audit (docs/torch-suite.md, "dynamic_shapes spec audit"): what the probes of
bench/probes/spec_audit.py found, as behaviour: messages in the spec's Dim names, suggested fixes
for specs whose dims are all derived, and the re-export after applying them."""
from __future__ import annotations

import io

import pytest
import torch

import graphcap
from graphcap import Dim
from graphcap.errors import ConstraintViolationError, InputGuardError


class Scale(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * 2


class AtMost8(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        torch._check(x.shape[0] <= 8)
        return x + 1


class Threes(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.view(-1, 3).sum(1)


def _roundtrip(ep: graphcap.ExportedProgram) -> graphcap.ExportedProgram:
    buf = io.BytesIO()
    graphcap.save(ep, buf)
    return graphcap.load(io.BytesIO(buf.getvalue()))


@pytest.mark.parametrize("form, size, bad, words", [
    (lambda d: 2 * d + 1, 7, 4, "2*batch + 1"),
    (lambda d: 2 * d, 8, 5, "2*batch"),
    (lambda d: 3 * d - 1, 5, 6, "3*batch - 1"),
])
def test_a_size_not_of_its_derived_form_is_refused_in_the_dims_names(form, size, bad, words):
    """module() refuses a size a derived dim cannot take, naming the form by the user's Dim
    (``2*batch + 1``), not the engine's symbol (``2*s77 + 1``); so after save/load too."""
    spec = ({0: form(Dim("batch", min=1, max=5))},)
    ep = graphcap.export(Scale(), (torch.randn(size, 2),), dynamic_shapes=spec)
    for prog in (ep, _roundtrip(ep)):
        with pytest.raises(InputGuardError) as info:
            prog.module()(torch.randn(bad, 2))
        text = str(info.value)
        assert f"of the form {words}, but got {bad}" in text
        assert "integer batch" in text
        assert "s77" not in text and "s" + "0" not in text.split()


def test_a_derived_size_that_differs_from_its_root_is_told_in_dim_names():
    class Cat(torch.nn.Module):
        def forward(self, x, y):
            return torch.cat([x, x]) + y

    d = Dim("d", max=10)
    ep = graphcap.export(Cat(), (torch.randn(3), torch.randn(6)), dynamic_shapes=({0: d}, {0: 2 * d}))
    with pytest.raises(InputGuardError, match=r"equal to 8, but got 6") as info:
        ep.module()(torch.randn(4), torch.randn(6))
    assert "2*d" in str(info.value)


def test_a_range_problem_of_a_dim_used_only_derived_names_the_form():
    """The size at the input is ``d + 1``, not ``d``: the problem says so, and the fix re-exports."""
    spec = ({0: Dim("d", min=1, max=20) + 1},)
    with pytest.raises(ConstraintViolationError) as info:
        graphcap.export(AtMost8(), (torch.randn(5),), dynamic_shapes=spec)
    text = str(info.value)
    assert "(*args[0].shape[0] is d + 1)" in text
    assert "d = Dim('d', min=1, max=7)" in text
    new = graphcap.refine_dynamic_shapes_from_suggested_fixes(info.value, spec)
    ep = graphcap.export(AtMost8(), (torch.randn(5),), dynamic_shapes=new)
    mod = ep.module()
    for n in (2, 8):
        assert torch.equal(mod(torch.ones(n)), torch.ones(n) + 1)
    for n in (1, 9):
        with pytest.raises(InputGuardError):
            mod(torch.ones(n))


def test_a_multiple_needed_of_a_dim_used_only_derived_is_refined_into_a_spec_that_exports():
    """``d + 1`` must be a multiple of 3: the fix makes ``d`` itself derived from a new root, and
    the refined spec, printed in that root (``(3*_d) - 1) + 1``), exports and takes sizes 3, 6, 9."""
    spec = ({0: Dim("d", max=10) + 1},)
    with pytest.raises(ConstraintViolationError) as info:
        graphcap.export(Threes(), (torch.randn(6),), dynamic_shapes=spec)
    assert "(L['x'].size()[0] is d + 1)" in str(info.value)
    new = graphcap.refine_dynamic_shapes_from_suggested_fixes(str(info.value), spec)
    assert "_d" in repr(new) and "d + 1" not in repr(new)
    ep = graphcap.export(Threes(), (torch.randn(6),), dynamic_shapes=new)
    mod = ep.module()
    for n in (3, 6, 9):
        assert torch.equal(mod(torch.ones(n)), torch.ones(n).view(-1, 3).sum(1))
    for n in (2, 5, 12):
        with pytest.raises(InputGuardError):
            mod(torch.ones(n))


def test_refining_equal_dims_rewrites_a_dim_derived_from_the_one_replaced():
    """A fix equating two Dims (``a = b`` or ``b = a``) also rewrites ``2*b`` when ``b`` is the one
    replaced, so the refined spec is consistent and exports."""
    class Three(torch.nn.Module):
        def forward(self, x, y, z):
            return x.sum() + y.sum() + (x + z).sum()

    a, b = Dim("a", max=9), Dim("b", max=9)
    spec = ({0: a}, {0: 2 * b}, {0: b})
    args = (torch.randn(3), torch.randn(6), torch.randn(3))
    with pytest.raises(ConstraintViolationError) as info:
        graphcap.export(Three(), args, dynamic_shapes=spec)
    new = graphcap.refine_dynamic_shapes_from_suggested_fixes(info.value, spec)
    assert repr(new[1][0]) == f"2*{new[2][0].__name__}" == f"2*{new[0][0].__name__}"
    ep = graphcap.export(Three(), args, dynamic_shapes=new)
    with pytest.raises(InputGuardError):
        ep.module()(torch.randn(4), torch.randn(6), torch.randn(4))


def test_torchs_dim_with_a_negative_min_ranges_sizes_from_zero():
    """torch's ``Dim("b", min=-1)`` is accepted by torch.export, which ranges the size from 0;
    graphcap gave the size the range [-1, 8]. graphcap's own Dim still refuses min=-1."""
    import torch.export as te

    class Mean(torch.nn.Module):
        def forward(self, x):
            return x.mean(0, keepdim=True) * x

    ep = graphcap.export(Mean(), (torch.randn(4, 3),), dynamic_shapes=({0: te.Dim("b", min=-1, max=8)},))
    (rng,) = ep.range_constraints.values()
    assert (int(rng.lower), int(rng.upper)) == (0, 8)
    mod = ep.module()
    for n in (0, 1, 8):
        x = torch.randn(n, 3)
        assert torch.allclose(mod(x), Mean()(x), equal_nan=True)
    with pytest.raises(InputGuardError):
        mod(torch.randn(9, 3))
    with pytest.raises(ValueError, match="negative"):
        Dim("b", min=-1, max=8)


@pytest.mark.parametrize("size", [0, 1])
@pytest.mark.parametrize("spec", [lambda: Dim.AUTO, lambda: Dim.DYNAMIC, lambda: Dim("b"), lambda: Dim("b", min=0)])
def test_an_unbounded_dim_exported_at_zero_or_one_decomposes(spec, size):
    """run_decompositions of a program whose dim has no upper bound (int_oo) and an example of 0 or 1
    failed (AttributeError inside sympy: int_oo taken for a finite bound); it decomposes, keeps the
    range and matches eager at 0, 1 and larger sizes, also after save/load."""
    class Mean(torch.nn.Module):
        def forward(self, x):
            return x.mean(0, keepdim=True) * x + x.shape[0]

    ep = graphcap.export(Mean(), (torch.randn(size, 3),), dynamic_shapes=({0: spec()},))
    for prog in (ep.run_decompositions(), _roundtrip(ep).run_decompositions()):
        assert [(int(r.lower), str(r.upper)) for r in prog.range_constraints.values()] == [(0, "int_oo")]
        for n in (0, 1, 2, 7):
            x = torch.randn(n, 3)
            assert torch.allclose(prog.module()(x), Mean()(x), equal_nan=True)


@pytest.mark.parametrize("make, words", [
    (lambda d: d // 2, "d // 2"),
    (lambda d: d / 2, "d / 2"),
    (lambda d: d % 3, "d % 3"),
    (lambda d: (d + 1) // 2, "(d + 1) // 2"),
])
def test_dim_arithmetic_that_is_not_a_derived_dim_says_how_to_write_it(make, words):
    """``d // 2`` was Python's bare "unsupported operand type(s)" TypeError (torch's too); it is still
    a TypeError (and an ExportInputError) that names the expression and the a*dim + b form."""
    with pytest.raises(TypeError) as info:
        make(Dim("d", max=20))
    assert isinstance(info.value, graphcap.ExportInputError)
    text = str(info.value)
    assert text.startswith(f"{words}: a derived dim is a*dim + b")
    if words == "d // 2":
        assert "_d = Dim('_d'), then 2*_d where you wrote d" in text


def test_the_half_size_spec_the_fix_describes_exports():
    class Halves(torch.nn.Module):
        def forward(self, x, y):
            return x.reshape(-1, 2).sum(1) + y

    _d = Dim("_d", max=10)
    ep = graphcap.export(Halves(), (torch.randn(8), torch.randn(4)), dynamic_shapes=({0: 2 * _d}, {0: _d}))
    x, y = torch.randn(6), torch.randn(3)
    assert torch.allclose(ep.module()(x, y), Halves()(x, y))


@pytest.mark.parametrize("strict", [False, True])
def test_a_violation_names_no_generated_or_graphcap_code_as_the_users_line(strict):
    """strict=True told two equated Dims as "(at <string>:1 in <lambda>:)", the location of graphcap's
    replay of dynamo's guards. It gives the user's line, as non-strict does; a generated file is never
    told as one."""
    class Add(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    with pytest.raises(ConstraintViolationError) as info:
        graphcap.export(Add(), (torch.randn(4), torch.randn(4)), dynamic_shapes=({0: Dim("a")}, {0: Dim("b")}),
                        strict=strict)
    text = str(info.value)
    assert "<string>" not in text and "<lambda>" not in text and "graphcap/" not in text.split("Suggested")[0]
    assert "in forward: return x + y" in text  # strict: dynamo's record of the line it tied them at
    assert graphcap.refine_dynamic_shapes_from_suggested_fixes(info.value, ({0: Dim("a")}, {0: Dim("b")}))


@pytest.mark.parametrize("how", ["additional_inputs", "dynamic"])
def test_a_dynamic_dim_the_program_fixes_is_told_without_a_refine_advice(how):
    """Without a suggested fix (a Dim.DYNAMIC the program fixes, AdditionalInputs whose sizes
    differ where the program fixes one) the message no longer sends the user to the refine helper,
    which would refuse a message without fixes; it says what to change."""
    class Grid(torch.nn.Module):
        def forward(self, x):
            return x.view(3, 4) + 1

    if how == "dynamic":
        spec = ({0: Dim.DYNAMIC},)
    else:
        spec = graphcap.AdditionalInputs()
        spec.add((torch.randn(24),))
    with pytest.raises(ConstraintViolationError) as info:
        graphcap.export(Grid(), (torch.randn(12),), dynamic_shapes=spec)
    text = str(info.value)
    assert "specialized it to be a constant (12)" in text
    assert "refine_dynamic_shapes_from_suggested_fixes" not in text and "Suggested fixes" not in text
    assert "Mark each dim listed Dim.STATIC, or Dim.AUTO" in text and "AdditionalInputs" in text


def test_a_line_typed_at_the_prompt_is_still_told():
    """Only code made at run time is dropped as a location: a forward typed at the interpreter's
    prompt (``<stdin>``) keeps its line."""
    namespace: dict = {"torch": torch}
    exec(compile("class Grid(torch.nn.Module):\n    def forward(self, x):\n        return x.view(3, 4)\n",
                 "<stdin>", "exec"), namespace)
    with pytest.raises(ConstraintViolationError, match=r"\(at <stdin>:3 in forward"):
        graphcap.export(namespace["Grid"](), (torch.randn(12),), dynamic_shapes=({0: Dim.DYNAMIC},))


@pytest.mark.parametrize("make, torch_type", [
    (lambda: Dim("b", min=4, max=4), AssertionError),
    (lambda: Dim("b", min=8, max=2), AssertionError),
    (lambda: Dim("b b"), AssertionError),
    (lambda: Dim("b") * 0, NotImplementedError),
    (lambda: 3 - Dim("b"), NotImplementedError),
    (lambda: Dim("b") + Dim("c"), NotImplementedError),
    (lambda: Dim("b") // 2, TypeError),
])
def test_dim_mistakes_are_also_the_class_torchs_dim_raises(make, torch_type):
    """torch.export's Dim raises AssertionError for bad bounds or names, NotImplementedError for
    arithmetic no derived dim expresses, TypeError for ``//``; graphcap's errors are those classes
    too (and ExportInputErrors with a fix), so code catching torch's catches graphcap's."""
    with pytest.raises(torch_type) as info:
        make()
    assert isinstance(info.value, graphcap.ExportInputError) and info.value.fix


def test_torchs_additional_inputs_verify_a_graphcap_program():
    """torch's ``AdditionalInputs.verify(ep)`` checks each example set with torch's own input check
    on ``ep.module()``, which reads the module's ``range_constraints``; graphcap's module lacked
    them (AttributeError). torch's verify also needs ``torch.export._unlift`` imported, which its
    own export does and graphcap's does not: a torch matter, done here by hand."""
    import copy

    import torch.export as te
    import torch.export._unlift  # torch's verify reaches it through torch.export

    class Add(torch.nn.Module):
        def forward(self, x, y):
            return x + y

    sets = te.AdditionalInputs()
    sets.add((torch.randn(7, 3), torch.randn(7, 3)))
    sets.add((torch.randn(2, 3), torch.randn(2, 3)))
    args = (torch.randn(4, 3), torch.randn(4, 3))
    ep = graphcap.export(Add(), args, dynamic_shapes=sets.dynamic_shapes(Add(), args))
    sets.verify(ep)
    assert copy.deepcopy(ep.module()).range_constraints == ep.range_constraints
    narrow = Dim("b", min=3, max=8)
    ep = graphcap.export(Add(), args, dynamic_shapes=({0: narrow}, {0: narrow}))
    with pytest.raises(RuntimeError, match=">= 3, but got 2"):
        sets.verify(ep)


def test_strict_specialization_by_an_operator_names_the_users_line():
    """A Dim that ``view(3, 4)`` fixes under strict=True: dynamo records the operator's frame and the
    user's line it ran under; the message gives that line, as non-strict does."""
    class Grid(torch.nn.Module):
        def forward(self, x):
            return x.view(3, 4) + 1

    with pytest.raises(ConstraintViolationError) as info:
        graphcap.export(Grid(), (torch.randn(12),), dynamic_shapes=({0: Dim("b")},), strict=True)
    assert "only works for b = 12 (at " in str(info.value)
    assert "in forward: return x.view(3, 4) + 1)" in str(info.value)
