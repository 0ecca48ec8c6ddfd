"""Composition and repetition audit (bench/probes/composition_audit.py; docs/torch-suite.md).

What users do around export: wrap a program's module and export it again, unflatten it and
export that, compile it, copy and pickle it. The defects found there, each tested from the
behaviour:

- a positional ``dynamic_shapes`` tuple for a forward taking ``*args`` (an unflattened module,
  ``torch.compile``'s module, a user's forwarding wrapper) lists the values passed, one entry each,
  when torch's reading (one entry per parameter) does not fit;
- ``torch.compile`` of ``ep.module()`` or of an unflattened module checks its inputs: a program
  specialized to other sizes is refused, not run into wrong numbers;
- pickling a program or its module is refused when it is asked, naming ``graphcap.save``, instead
  of writing a file whose load fails inside fx.
"""
from __future__ import annotations

import copy
import enum
import functools
import io
import pickle

import pytest
import torch

import graphcap
from conftest import TORCH_LINE
from graphcap import Dim
from graphcap.errors import DynamicSpecError, InputGuardError, NotPicklableError, RuntimeInputError, SerializationError


class Pure(torch.nn.Module):
    def __init__(self, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return torch.sigmoid(self.lin(x)) * 2


class Counting(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("count", torch.zeros(4))

    def forward(self, x):
        self.count.add_(1)
        return self.lin(x) + self.count


class Nested(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = Pure()
        self.head = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.head(self.block(x) + x)


class Branchy(torch.nn.Module):
    def forward(self, x):
        return x * 2 if x.shape[0] > 4 else x + 1


def _x(n: int, cols: int = 4) -> torch.Tensor:
    return torch.randn(n, cols, generator=torch.Generator().manual_seed(n))


# -- a positional spec for a forward taking *args ---------------------------------------------
def test_an_unflattened_module_re_exports_with_the_spec_its_program_took():
    ep = graphcap.export(Nested(), (_x(3),), dynamic_shapes=({0: Dim("b", max=64)},))
    tree = graphcap.unflatten(ep)
    again = graphcap.export(tree, (_x(3),), dynamic_shapes=({0: Dim("b", max=64)},))
    for n in (2, 9, 64):
        torch.testing.assert_close(again.module()(_x(n)), tree(_x(n)))
    assert [str(r) for r in again.range_constraints.values()] == ["VR[0, 64]"]
    assert sorted(again.state_dict) == ["block.lin.bias", "block.lin.weight", "head.bias", "head.weight"]
    with pytest.raises(InputGuardError):
        again.module()(_x(65))


def test_torchs_reading_of_a_star_args_spec_still_works():
    ep = graphcap.export(Nested(), (_x(3),), dynamic_shapes=({0: Dim("b", max=64)},))
    tree = graphcap.unflatten(ep)
    again = graphcap.export(tree, (_x(3),), dynamic_shapes=(({0: Dim("b", max=64)},),))
    torch.testing.assert_close(again.module()(_x(7)), tree(_x(7)))


def test_a_forwarding_wrapper_takes_one_entry_per_value_and_keeps_shared_dims():
    class Two(torch.nn.Module):
        def forward(self, x, y):
            return x * y + 1

    class Forwarding(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inner = Two()

        def forward(self, *args):
            return self.inner(*args)

    b = Dim("b", min=2, max=32)
    ep = graphcap.export(Forwarding(), (_x(3), _x(3)), dynamic_shapes=({0: b}, {0: b}))
    x, y = _x(5), _x(5)
    torch.testing.assert_close(ep.module()(x, y), x * y + 1)
    assert len(ep.range_constraints) == 1  # one Dim for both
    with pytest.raises(InputGuardError):
        ep.module()(_x(5), _x(6))


def test_named_arguments_before_star_args_keep_their_entries():
    class Mixed(torch.nn.Module):
        def forward(self, x, *rest):
            return x + rest[0] * rest[1]

    b = Dim("b", max=16)
    ep = graphcap.export(Mixed(), (_x(3), _x(3), _x(1)), dynamic_shapes=({0: b}, {0: b}, None))
    row = _x(1)
    torch.testing.assert_close(ep.module()(_x(6), _x(6), row), _x(6) + _x(6) * row)
    with pytest.raises(InputGuardError):
        ep.module()(_x(6), _x(6), _x(6))  # the third input stayed static


def test_a_star_args_spec_of_another_length_is_refused_as_torch_refuses_it():
    class Forwarding(torch.nn.Module):
        def forward(self, *args):
            return args[0] + args[1]

    with pytest.raises(DynamicSpecError, match="has 3 entries, but there are 1 inputs"):
        graphcap.export(Forwarding(), (_x(3), _x(3)), dynamic_shapes=({0: Dim("b")}, None, None))
    # one entry per value, the second wrong: the error is about that entry
    with pytest.raises(DynamicSpecError) as info:
        graphcap.export(Forwarding(), (_x(3), _x(3)), dynamic_shapes=({0: Dim("b")}, ({0: Dim("c")},)))
    assert info.value.where == "dynamic_shapes['args'][1]"


@pytest.mark.parametrize("strict", [False, True])
def test_torch_compiled_module_exports_with_its_models_spec(strict):
    model = Pure()
    compiled = torch.compile(model, backend="eager")
    ep = graphcap.export(compiled, (_x(3),), dynamic_shapes=({0: Dim("b", max=64)},), strict=strict)
    for n in (1, 17):
        torch.testing.assert_close(ep.module()(_x(n)), model(_x(n)))


# -- torch.compile of a program's module checks its inputs ---------------------------------------

def _calls(fn, sizes):
    out = []
    for n in sizes:
        try:
            out.append(torch.allclose(fn(_x(n)), Branchy()(_x(n))))
        except InputGuardError:
            out.append("refused")
    return out


def test_compiled_module_of_a_static_program_refuses_another_size():
    torch.compiler.reset()
    ep = graphcap.export(Branchy(), (_x(3),))  # the branch taken at export: x + 1
    compiled = torch.compile(ep.module(), backend="eager")
    assert _calls(compiled, (3, 6, 3, 2)) == [True, "refused", True, "refused"]


def test_compiled_module_keeps_a_dynamic_programs_range_and_shared_dims():
    torch.compiler.reset()

    class Two(torch.nn.Module):
        def forward(self, x, y):
            return torch.cat([x, y], 1).sum(1)

    b = Dim("b", min=2, max=16)
    ep = graphcap.export(Two(), (_x(3), _x(3)), dynamic_shapes=({0: b}, {0: b}))
    compiled = torch.compile(ep.module(), backend="eager")
    for n in (3, 5, 16, 2):
        torch.testing.assert_close(compiled(_x(n), _x(n)), Two()(_x(n), _x(n)))
    for bad in ((_x(17), _x(17)), (_x(1), _x(1)), (_x(4), _x(5))):
        with pytest.raises(InputGuardError):
            compiled(*bad)
    with pytest.raises(RuntimeInputError, match="dtype"):
        compiled(_x(4).double(), _x(4).double())
    torch.testing.assert_close(compiled(_x(4), _x(4)), Two()(_x(4), _x(4)))  # still compiled and right


def test_fullgraph_compile_runs_the_valid_sizes_and_stops_at_the_others():
    torch.compiler.reset()
    ep = graphcap.export(Pure(), (_x(3),), dynamic_shapes=({0: Dim("b", min=2, max=8)},))
    compiled = torch.compile(ep.module(), backend="eager", fullgraph=True)
    for n in (3, 8, 2, 5):
        torch.testing.assert_close(compiled(_x(n)), Pure()(_x(n)))
    with pytest.raises(Exception):  # noqa: B017 -- dynamo's own refusal under fullgraph, as for torch's module
        compiled(_x(9))


def test_compiled_module_refuses_another_baked_in_value_and_an_int_out_of_range():
    torch.compiler.reset()

    class Flagged(torch.nn.Module):
        def forward(self, x, flag: bool, n: int):
            return (x * 2 if flag else x - 1) + n

    ep = graphcap.export(Flagged(), (torch.ones(3), True, 4),
                         dynamic_shapes=({0: Dim("b", max=8)}, None, Dim("n", min=1, max=10)))
    compiled = torch.compile(ep.module(), backend="eager")
    for args in ((torch.ones(3), True, 4), (torch.ones(5), True, 7)):
        torch.testing.assert_close(compiled(*args), Flagged()(*args))
    with pytest.raises(InputGuardError, match="to be equal to True, but got False"):
        compiled(torch.ones(3), False, 4)
    with pytest.raises(InputGuardError, match="to be <= 10, but got 11"):
        compiled(torch.ones(3), True, 11)


def test_compiled_module_takes_the_integer_dtypes_the_eager_check_takes():
    """The compiled checks accepted every integer dtype for an integer input (narrower ones too,
    running the program unchecked), where ``module()`` called eagerly accepts only wider ones."""
    torch.compiler.reset()

    class Doubles(torch.nn.Module):
        def forward(self, i):
            return i * 2

    ints = torch.tensor([1, 2, 3], dtype=torch.int32)
    module = graphcap.export(Doubles(), (ints,)).module()
    compiled = torch.compile(module, backend="eager")
    for dtype in (torch.int32, torch.int64):
        assert torch.equal(compiled(ints.to(dtype)), Doubles()(ints.to(dtype)))
    # torch 2.10-2.11's dynamo fails on the raise inside the traced dtype check (an internal error:
    # "'UserDefinedObjectVariable' object has no attribute '__context__'"): refused all the same,
    # before computing, but with dynamo's error rather than graphcap's
    compiled_error = RuntimeInputError if TORCH_LINE >= (2, 12) else Exception
    for dtype in (torch.int16, torch.uint8, torch.float32):
        for run, error in ((module, RuntimeInputError), (compiled, compiled_error)):
            with pytest.raises(error, match="dtype" if error is RuntimeInputError else None):
                run(ints.to(dtype))


@pytest.mark.parametrize("exported", [0.5, float("nan")])
def test_compiled_module_refuses_another_float_than_the_exported_one(exported):
    """A float input is baked into the program; the compiled checks let any float through, so a
    compiled ``module()`` computed with the exported value where eager uses the one passed (torch's
    compiled module refuses it, as ``module()`` called eagerly does)."""
    torch.compiler.reset()

    class Scales(torch.nn.Module):
        def forward(self, x, s: float):
            return x * s

    module = graphcap.export(Scales(), (torch.ones(3), exported)).module()
    compiled = torch.compile(module, backend="eager")
    for _ in range(2):
        torch.testing.assert_close(compiled(torch.arange(3.0), exported), Scales()(torch.arange(3.0), exported),
                                   equal_nan=True)
    for other in (0.7, 2.0 if exported != exported else float("nan")):
        for run in (module, compiled):
            with pytest.raises(InputGuardError, match="to be equal to"):
                run(torch.ones(3), other)


class _Mode(enum.Enum):
    DOUBLE = 2
    TRIPLE = 3


class _TakesConstant(torch.nn.Module):
    def forward(self, x, how):
        if isinstance(how, torch.dtype):
            return x.to(how)
        if isinstance(how, torch.device):
            return x.to(how) + 1
        return x * how.value


@pytest.mark.parametrize("exported, other", [
    (torch.float64, torch.float16), (torch.device("cpu"), torch.device("meta")), (_Mode.DOUBLE, _Mode.TRIPLE),
], ids=["dtype", "device", "enum"])
@pytest.mark.parametrize("fullgraph", [False, True])
def test_compiled_module_refuses_another_dtype_device_or_enum_input(exported, other, fullgraph):
    """A dtype, device or enum input is baked into the program: the compiled checks let any such
    value through (the program ran with the exported one), where ``module()`` called eagerly refuses
    it (torch.export does not take these inputs)."""
    torch.compiler.reset()
    module = graphcap.export(_TakesConstant(), (torch.ones(3), exported)).module()
    compiled = torch.compile(module, backend="eager", fullgraph=fullgraph)
    for _ in range(2):
        torch.testing.assert_close(compiled(torch.arange(3.0), exported), _TakesConstant()(torch.arange(3.0), exported))
    with pytest.raises(InputGuardError, match="to be equal to"):
        module(torch.ones(3), other)
    with pytest.raises(InputGuardError if not fullgraph else Exception):  # fullgraph: dynamo's own refusal
        compiled(torch.ones(3), other)



def test_compiled_module_of_a_buffer_writing_program_runs_as_eager():
    torch.compiler.reset()
    ep = graphcap.export(Counting(), (_x(3),), dynamic_shapes=({0: Dim("b", max=8)},))
    compiled, eager = torch.compile(ep.module(), backend="eager"), Counting()
    for n in (3, 5, 8):
        torch.testing.assert_close(compiled(_x(n)), eager(_x(n)))
    with pytest.raises(InputGuardError):
        compiled(_x(9))


def test_compiled_unflattened_module_refuses_another_size():
    torch.compiler.reset()
    ep = graphcap.export(Branchy(), (_x(3),))
    compiled = torch.compile(graphcap.unflatten(ep), backend="eager")
    assert _calls(compiled, (3, 6, 3)) == [True, "refused", True]


def test_strict_re_export_of_module_still_reads_the_new_spec():
    ep = graphcap.export(Pure(), (_x(3),), dynamic_shapes=({0: Dim("b", max=64)},))
    again = graphcap.export(ep.module(), (_x(3),), dynamic_shapes=({0: Dim("n", min=2, max=8)},), strict=True)
    assert [str(r) for r in again.range_constraints.values()] == ["VR[2, 8]"]
    torch.testing.assert_close(again.module()(_x(8)), Pure()(_x(8)))


# -- pickling a program or its module --------------------------------------------------------------
def _program():
    return graphcap.export(Counting(), (_x(3),), dynamic_shapes=({0: Dim("b", max=8)},))


@pytest.mark.parametrize("what", ["module", "program", "decomposed", "decomposed module", "loaded module"])
def test_pickling_is_refused_when_asked_naming_graphcaps_format(what):
    ep = _program()
    if what.startswith("decomposed"):
        ep = ep.run_decompositions()
    if what.startswith("loaded"):
        buf = io.BytesIO()
        graphcap.save(ep, buf)
        buf.seek(0)
        ep = graphcap.load(buf)
    obj = ep.module() if what.endswith("module") else ep
    with pytest.raises(NotPicklableError) as info:
        pickle.dumps(obj)
    assert isinstance(info.value, TypeError) and isinstance(info.value, SerializationError)
    assert "graphcap.save(ep, 'model.pt2')" in info.value.fix
    buf = io.BytesIO()
    with pytest.raises(TypeError):
        torch.save(obj, buf)


def test_the_pasted_fix_gives_the_module_back(tmp_path):
    ep = _program()
    module = ep.module()
    path = str(tmp_path / "model.pt2")
    graphcap.save(ep, path)
    loaded = graphcap.load(path).module()
    torch.testing.assert_close(loaded(_x(5)), module(_x(5)))
    torch.save(module.state_dict(), str(tmp_path / "weights.pt"))  # the weights alone pickle
    assert sorted(torch.load(str(tmp_path / "weights.pt"))) == ["count", "lin.bias", "lin.weight"]


def test_copies_still_work_without_pickling():
    ep = _program()
    shallow = copy.copy(ep)
    assert shallow.graph_module is ep.graph_module and shallow.state_dict is ep.state_dict
    torch.testing.assert_close(shallow.module()(_x(4)), Counting()(_x(4)))
    module = _program().module()
    twin = copy.deepcopy(module)
    twin(_x(4))
    twin(_x(4))
    assert twin.count.tolist() == [2.0] * 4 and module.count.tolist() == [0.0] * 4
    assert copy.copy(module)(_x(4)).shape == (4, 4)


# -- what already composes (kept: graphcap goes beyond torch.export here) ---------------------------
@pytest.mark.parametrize("make", [
    lambda m: functools.partial(lambda mod, x, k: mod(x) * k, m, k=3.0),
    lambda m: (lambda x: m(x) + 1),
    lambda m: m.lin.forward,
], ids=["partial", "lambda", "bound method"])
def test_a_callable_other_than_a_module_exports(make):
    model = Pure()
    fn = make(model)
    ep = graphcap.export(fn, (_x(3),), dynamic_shapes=({0: Dim("b", max=8)},))
    torch.testing.assert_close(ep.module()(_x(6)), fn(_x(6)))


def test_two_programs_composed_in_sequence_export_as_one_and_round_trip():
    a = graphcap.export(Pure(0), (_x(3),), dynamic_shapes=({0: Dim("b", max=64)},)).module()
    b = graphcap.export(Pure(1), (_x(3),), dynamic_shapes=({0: Dim("b", max=64)},)).module()
    seq = torch.nn.Sequential(a, b)
    ep = graphcap.export(seq, (_x(3),), dynamic_shapes=({0: Dim("b", max=64)},))
    buf = io.BytesIO()
    graphcap.save(ep.run_decompositions(), buf)
    buf.seek(0)
    loaded = graphcap.load(buf)
    for n in (1, 40):
        torch.testing.assert_close(loaded.module()(_x(n)), Pure(1)(Pure(0)(_x(n))))
    assert sorted(ep.state_dict) == ["0.lin.bias", "0.lin.weight", "1.lin.bias", "1.lin.weight"]


def test_programs_of_one_model_share_its_tensors_as_torchs_do():
    # as torch.export: a program holds the model's own parameters and buffers (no copy), so a weight
    # changed in place shows in module(), and one program's buffer update shows in the other
    model = Counting()
    first, second = graphcap.export(model, (_x(3),)), graphcap.export(model, (_x(3),))
    assert first.graph_module.code == second.graph_module.code
    assert first.state_dict["lin.weight"] is second.state_dict["lin.weight"]
    first.module()(_x(3))
    assert second.state_dict["count"].tolist() == [1.0] * 4 and model.count.tolist() == [1.0] * 4


# -- re-exporting a module the user hooked; exporting a program object -----------------------------
@pytest.mark.parametrize("strict", [False, True])
def test_a_hook_on_a_programs_module_is_part_of_its_re_export(strict):
    module = graphcap.export(Pure(), (_x(3),), dynamic_shapes=({0: Dim("b", max=64)},)).module()
    module.register_forward_hook(lambda mod, args, out: out + 100)
    module.register_forward_pre_hook(lambda mod, args: (args[0] * 2,))
    again = graphcap.export(module, (_x(3),), dynamic_shapes=({0: Dim("b", max=64)},), strict=strict)
    for n in (3, 10):
        torch.testing.assert_close(again.module()(_x(n)), Pure()(_x(n) * 2) + 100)
        torch.testing.assert_close(again.module()(_x(n)), module(_x(n)))


@pytest.mark.parametrize("source", ["graphcap", "torch", "graphcap hooked"])
def test_a_programs_module_keeps_its_nodes_metadata_when_re_exported(source):
    lib = torch.export if source == "torch" else graphcap  # torch's module carries hooks of its own
    module = lib.export(Nested(), (_x(3),)).module()
    if source == "graphcap hooked":
        module.register_forward_hook(lambda mod, args, out: out - 1)
    again = graphcap.export(module, (_x(3),))
    last = {n.name: list(n.meta["nn_module_stack"].values())[-1][0] for n in again.graph.nodes
            if n.op == "call_function" and n.meta.get("nn_module_stack")}
    assert last["linear"] == "block.lin" and last["linear_1"] == "head"
    torch.testing.assert_close(again.module()(_x(3)), module(_x(3)))
    assert "forward" not in module.__dict__  # the replay stood in for forward during the export only


@pytest.mark.parametrize("source", ["graphcap", "torch"])
def test_a_program_given_to_export_is_exported_as_its_module(source):
    lib = graphcap if source == "graphcap" else torch.export
    ep = lib.export(Counting(), (_x(3),), dynamic_shapes=({0: lib.Dim("b", max=64)},))
    again = graphcap.export(ep, (_x(3),), dynamic_shapes=({0: Dim("b", max=64)},))
    assert [s.kind.name for s in again.graph_signature.input_specs] == ["PARAMETER", "PARAMETER", "BUFFER",
                                                                       "USER_INPUT"]
    torch.testing.assert_close(again.module()(_x(9)), Counting()(_x(9)))
    pure = lib.export(Pure(), (_x(3),))
    drafted = graphcap.draft_export(pure, (_x(3),))
    torch.testing.assert_close(drafted.module()(_x(3)), Pure()(_x(3)))
