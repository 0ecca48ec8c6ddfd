"""The errors of common user mistakes (docs/torch-suite.md, "User mistakes audit"): each says what,
where and how to fix, in the user's names, and the fix works when pasted."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import graphcap
from graphcap.errors import DecompTableError, ExportInputError, InputBindingError


class Lin(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 3)

    def forward(self, x):
        return self.lin(x).relu()


class Scaled(torch.nn.Module):
    def forward(self, x, *, scale):
        return x * scale


class Pair(torch.nn.Module):
    def forward(self, x, y, bias=None):
        return x + y


def _code_after(text: str, start: str) -> str:
    """The balanced call in ``text`` that begins with ``start``."""
    i = text.index(start)
    depth, j = 0, i
    while True:
        c = text[j]
        depth += c in "([{"
        depth -= c in ")]}"
        j += 1
        if depth == 0 and c in ")]}":
            return text[i:j]


# ---- export's arguments ----------------------------------------------------------------------

@pytest.mark.parametrize("strict", [False, True])
def test_a_keyword_only_input_given_by_position_gets_the_call_to_paste(strict):
    x, scale = torch.randn(2, 3), torch.tensor(2.0)
    with pytest.raises(InputBindingError) as info:
        graphcap.export(Scaled(), (x, scale), strict=strict)
    err = info.value
    assert isinstance(err, TypeError) and isinstance(err, ExportInputError)  # torch raises TypeError
    call = _code_after(err.fix, "export(")
    assert call == "export(mod, (x,), kwargs={'scale': scale})"
    ep = eval(call, {"export": graphcap.export, "mod": Scaled(), "x": x, "scale": scale})
    torch.testing.assert_close(ep.module()(x, scale=scale), x * scale)


def test_a_missing_input_gets_the_call_in_forwards_names():
    x = torch.randn(2, 3)
    with pytest.raises(TypeError) as info:
        graphcap.export(Pair(), (x,))
    call = _code_after(info.value.fix, "export(")
    assert call == "export(mod, (x, y))"  # bias has a default: not required
    ep = eval(call, {"export": graphcap.export, "mod": Pair(), "x": x, "y": x})
    torch.testing.assert_close(ep.module()(x, x), 2 * x)


def test_a_module_class_for_the_model_is_named_with_the_instance_to_pass():
    class Sized(torch.nn.Module):
        def __init__(self, width, depth=2):
            super().__init__()
            self.lin = torch.nn.Linear(width, width)

        def forward(self, x):
            return self.lin(x)

    for cls, built in ((Lin, "export(Lin(), args)"), (Sized, "export(Sized(width), args)")):
        with pytest.raises(ExportInputError) as info:
            graphcap.export(cls, (torch.randn(2, 4),))
        assert f"class {cls.__name__}, not a module" in info.value.what
        assert built in info.value.fix
    ep = eval("export(Lin(), args)", {"export": graphcap.export, "Lin": Lin, "args": (torch.randn(2, 4),)})
    assert isinstance(ep, torch.export.ExportedProgram)


@pytest.mark.parametrize("strict", [False, True])
def test_a_numpy_array_input_is_refused_with_its_path_and_conversion(strict):
    class M(torch.nn.Module):
        def forward(self, x, arrays):
            return x + arrays[1]

    x = torch.randn(2, 3)
    arr = np.ones((2, 3), dtype=np.float32)
    with pytest.raises(ExportInputError) as info:
        graphcap.export(M(), (x, [torch.ones(2, 3), arr]), strict=strict)
    err = info.value
    assert isinstance(err, ValueError)
    from torch._dynamo.exc import UserError  # what strict torch.export raises for it
    assert isinstance(err, UserError)
    assert err.where == "*args[1][1]" and "torch.from_numpy(arrays[1])" in err.fix
    arrays = [torch.ones(2, 3), arr]
    arrays[1] = eval("torch.from_numpy(arrays[1])", {"torch": torch, "arrays": arrays})
    ep = graphcap.export(M(), (x, arrays), strict=strict)
    torch.testing.assert_close(ep.module()(x, arrays), x + 1)


def test_a_numpy_array_keyword_input_is_named_by_its_key():
    with pytest.raises(ExportInputError) as info:
        graphcap.export(Scaled(), (torch.randn(2),), {"scale": np.float32(2.0) * np.ones(2, dtype=np.float32)})
    assert info.value.where == "**kwargs['scale']" and "torch.from_numpy(scale)" in info.value.fix


# ---- errors while tracing --------------------------------------------------------------------

class ThroughNumpy(torch.nn.Module):
    def forward(self, x):
        return torch.from_numpy(np.sin(x.numpy())) + 1


def test_numpy_in_forward_is_the_models_error_and_strict_takes_it():
    x = torch.randn(3, 4)
    with pytest.raises(graphcap.TraceError) as info:
        graphcap.export(ThroughNumpy(), (x,))
    err = info.value
    assert not isinstance(err, graphcap.InternalError) and isinstance(err, RuntimeError)
    assert "test_user_mistakes_audit.py" in err.where and "x.numpy()" in err.where
    assert "export(mod, args, strict=True)" in err.fix
    ep = graphcap.export(ThroughNumpy(), (x,), strict=True)  # the fix, pasted
    torch.testing.assert_close(ep.module()(x), ThroughNumpy()(x))


def test_an_operators_own_check_stays_the_users():
    # an operator refusing its arguments, as the .numpy() refusal above: the model's error
    class M(torch.nn.Module):
        def forward(self, x):
            return x.view(7)

    with pytest.raises(graphcap.TraceError) as info:
        graphcap.export(M(), (torch.randn(3, 4),))
    assert not isinstance(info.value, graphcap.InternalError) and "x.view(7)" in info.value.where


def _meta_lin() -> Lin:
    with torch.device("meta"):
        return Lin()


@pytest.mark.parametrize("strict", [False, True])
def test_a_model_on_meta_traced_with_real_inputs_names_its_weights_and_both_ways_out(strict):
    x = torch.randn(3, 4)
    with pytest.raises(graphcap.GraphcapError) as info:
        graphcap.export(_meta_lin(), (x,), strict=strict)
    err = info.value
    assert isinstance(err, RuntimeError)  # torch's own type (FakeTensorDeviceMismatchError, TorchRuntimeError)
    assert "(lin.weight, lin.bias)" in err.fix and "strict=False" not in err.fix
    # the user's line, not torch's nn.Linear.forward (dynamo's stack goes on into it)
    assert "test_user_mistakes_audit.py" in err.where and "torch/nn/modules" not in err.where
    # either way out, pasted
    model = _meta_lin()
    exec("model.to_empty(device='cpu')\nmodel.load_state_dict(state_dict)",
         {"model": model, "state_dict": Lin().state_dict()})
    torch.testing.assert_close(graphcap.export(model, (x,), strict=strict).module()(x), Lin()(x))
    ep = graphcap.export(_meta_lin(), (x.to("meta"),), strict=strict)
    assert ep.graph_signature.user_inputs == ("x",)


def test_a_tensor_made_on_another_device_in_forward_gets_the_one_device_fix():
    class M(torch.nn.Module):
        def forward(self, x):
            return x + torch.ones(3, device="meta")

    with pytest.raises(graphcap.TraceError) as info:
        graphcap.export(M(), (torch.randn(3),))
    assert "on cpu and on meta" in info.value.fix and "device=x.device" in info.value.fix


# ---- module() --------------------------------------------------------------------------------

def test_a_call_of_another_structure_gets_the_programs_call_in_its_names():
    x, scale = torch.randn(2, 3), torch.tensor(3.0)
    m = graphcap.export(Scaled(), (x,), {"scale": scale}).module()
    for wrong in (lambda: m(x), lambda: m(x, scale)):
        with pytest.raises(graphcap.errors.InputStructureError) as info:
            wrong()
        assert info.value.fix.endswith(": ep.module()(x, scale=scale).")
    out = eval("ep.module()(x, scale=scale)", {"ep": type("P", (), {"module": lambda self: m})(),
                                               "x": x, "scale": scale})
    torch.testing.assert_close(out, x * scale)


# ---- run_decompositions ----------------------------------------------------------------------

def _plus_seven(x, w, b=None):
    return torch.ops.aten.matmul.default(x, torch.ops.aten.t.default(w)) + b + 7


@pytest.mark.parametrize("key", [torch.ops.aten.linear, "aten.linear", "aten::linear", "aten.linear.default"])
def test_a_decomposition_keyed_by_a_packet_or_name_is_refused_with_the_overload(key):
    ep = graphcap.export(Lin(), (torch.randn(3, 4),))
    with pytest.raises(DecompTableError) as info:
        ep.run_decompositions({key: _plus_seven})
    err = info.value
    assert isinstance(err, TypeError) and repr(key) in err.where
    table = eval(_code_after(err.fix, "{"), {"torch": torch, "_plus_seven": _plus_seven})
    assert table == {torch.ops.aten.linear.default: _plus_seven}
    x = torch.randn(3, 4)
    torch.testing.assert_close(ep.run_decompositions(table).module()(x), (Lin().lin(x) + 7).relu())


def test_a_name_of_an_operator_with_many_overloads_lists_where_to_find_them():
    ep = graphcap.export(Lin(), (torch.randn(3, 4),))
    with pytest.raises(DecompTableError) as info:
        ep.run_decompositions({"aten.add": _plus_seven})
    assert "torch.ops.aten.add.<overload>" in info.value.fix and "torch.ops.aten.add.overloads()" in info.value.fix


def test_a_table_that_is_no_mapping_or_maps_to_no_function_is_refused():
    ep = graphcap.export(Lin(), (torch.randn(3, 4),))
    with pytest.raises(DecompTableError, match="got list") as info:
        ep.run_decompositions([torch.ops.aten.linear.default])
    assert isinstance(info.value, TypeError)
    with pytest.raises(DecompTableError, match="not a function") as info:
        ep.run_decompositions({torch.ops.aten.linear.default: 3})
    assert "{torch.ops.aten.linear.default: my_decomposition}" in info.value.fix


def test_tables_torch_builds_are_still_taken():
    from torch._decomp import get_decompositions  # torch's table of a list of packets: expanded to overloads
    ep = graphcap.export(Lin(), (torch.randn(3, 4),))
    for table in (get_decompositions([torch.ops.aten.linear]), torch.export.default_decompositions(),
                  graphcap.default_decompositions(), {}):
        ops = {n.target for n in ep.run_decompositions(table).graph.nodes if n.op == "call_function"}
        assert torch.ops.aten.linear.default not in ops or table == {}


# ---- load ------------------------------------------------------------------------------------

def test_a_torch_save_checkpoint_is_told_apart_with_its_path(tmp_path):
    path = tmp_path / "weights.pt"
    torch.save(Lin().state_dict(), path)
    with pytest.raises(graphcap.SerializationError) as info:
        graphcap.load(path)
    err = info.value
    assert "torch.save checkpoint" in err.what and err.where == f"graphcap.load({str(path)!r})"
    model = torch.nn.Module.__new__(Lin)
    Lin.__init__(model)
    with torch.no_grad():
        model.lin.weight.zero_()
    state = torch.load(path, weights_only=True)  # what the fix says to read it with
    exec(_code_after(err.fix, "model.load_state_dict("), {"model": model, "state": state})
    torch.testing.assert_close(model.lin.weight, Lin().lin.weight)


def test_a_torch_export_file_gets_the_conversion_to_paste(tmp_path):
    path = tmp_path / "torch.pt2"
    torch.export.save(torch.export.export(Lin(), (torch.randn(3, 4),)), path)
    with pytest.raises(graphcap.SerializationError) as info:
        graphcap.load(path)
    code = re.search(r"ep = (graphcap\.from_torch\(.*\))\.?$", info.value.fix).group(1)
    ep = eval(code, {"graphcap": graphcap, "torch": torch})
    x = torch.randn(3, 4)
    torch.testing.assert_close(ep.module()(x), Lin()(x))


def test_a_damaged_file_is_named_in_where(tmp_path):
    path = tmp_path / "m.pt2"
    graphcap.save(graphcap.export(Lin(), (torch.randn(3, 4),)), path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(graphcap.SerializationError) as info:
        graphcap.load(path)
    assert info.value.where == f"graphcap.load({str(path)!r})"


# ---- dynamic_shapes --------------------------------------------------------------------------

@pytest.mark.parametrize("strict", [False, True])
def test_a_spec_keyed_by_other_names_gets_the_renamed_dict_to_paste(strict):
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    batch = graphcap.Dim("batch")
    dynamic_shapes = {"first": {0: batch}, "second": {0: batch}}
    with pytest.raises(graphcap.errors.DynamicSpecError) as info:
        graphcap.export(Pair(), (x, y), dynamic_shapes=dynamic_shapes, strict=strict)
    code = re.search(r"(dynamic_shapes = \{.*\})\.$", info.value.fix).group(1)
    assert code == "dynamic_shapes = {'x': dynamic_shapes['first'], 'y': dynamic_shapes['second']}"
    scope = {"dynamic_shapes": dynamic_shapes}
    exec(code, scope)
    ep = graphcap.export(Pair(), (x, y), dynamic_shapes=scope["dynamic_shapes"], strict=strict)
    z = torch.randn(5, 4)
    torch.testing.assert_close(ep.module()(z, z), 2 * z)


def test_a_spec_with_a_key_too_many_says_which_is_left_out():
    x = torch.randn(3, 4)
    with pytest.raises(graphcap.errors.DynamicSpecError) as info:
        graphcap.export(Lin(), (x,), dynamic_shapes={"inp": {0: graphcap.Dim("b")}, "mask": None})
    assert "dynamic_shapes = {'x': dynamic_shapes['inp']}" in info.value.fix
    assert "'mask' left out" in info.value.fix


def _written_in_place(fix: str) -> str:
    return re.search(r"write (.*?) (?:for dim 0|\()", fix).group(1)


@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("make_dim", [graphcap.Dim, torch.export.Dim])
def test_a_dim_for_a_whole_tensor_gets_the_dict_keyed_by_index(strict, make_dim):
    x = torch.randn(3, 4)
    with pytest.raises(graphcap.errors.DynamicSpecError) as info:
        graphcap.export(Lin(), (x,), dynamic_shapes={"x": make_dim("b", max=9)}, strict=strict)
    spec = eval(_written_in_place(info.value.fix), {"Dim": make_dim})
    assert list(spec) == [0]
    ep = graphcap.export(Lin(), (x,), dynamic_shapes={"x": spec}, strict=strict)
    z = torch.randn(6, 4)
    torch.testing.assert_close(ep.module()(z), Lin()(z))


@pytest.mark.parametrize("given", [1, 3])
def test_a_per_dim_list_of_another_length_is_written_to_the_tensors_rank(given):
    x = torch.randn(3, 4)
    spec = (graphcap.Dim("b"),) + (None,) * (given - 1)
    with pytest.raises(graphcap.errors.DynamicSpecError) as info:
        graphcap.export(Lin(), (x,), dynamic_shapes={"x": spec})
    fixed = eval(_written_in_place(info.value.fix), {"Dim": graphcap.Dim})
    assert len(fixed) == 2 and fixed[1] is None
    ep = graphcap.export(Lin(), (x,), dynamic_shapes={"x": fixed})
    assert ep.module()(torch.randn(6, 4)).shape == (6, 3)


# ---- save ------------------------------------------------------------------------------------

def test_saving_the_model_instead_of_its_program_says_to_export_it(tmp_path):
    path = tmp_path / "m.pt2"
    with pytest.raises(graphcap.errors.NotAProgramError) as info:
        graphcap.save(Lin(), path)
    err = info.value
    assert isinstance(err, TypeError) and isinstance(err, graphcap.SerializationError)  # torch raises TypeError
    assert "the module Lin itself" in err.what and not path.exists()
    code = re.search(r"(graphcap\.save\(.*\), f\))", err.fix).group(1)
    exec(code, {"graphcap": graphcap, "model": Lin(), "args": (torch.randn(3, 4),), "f": path})
    x = torch.randn(3, 4)
    torch.testing.assert_close(graphcap.load(path).module()(x), Lin()(x))
    with pytest.raises(graphcap.errors.NotAProgramError, match="graphcap.to_torch"):
        graphcap.to_torch(Lin())


# ---- the command line ------------------------------------------------------------------------

def _cli(capsys, *args: str) -> tuple[int, str]:
    from graphcap.cli import main
    status = main(list(args))
    return status, capsys.readouterr().err


def test_a_misspelled_factory_file_or_function_gets_the_argument_to_pass(tmp_path, capsys, monkeypatch):
    (tmp_path / "model.py").write_text(
        "import torch\n\n\ndef make():\n    return torch.nn.Linear(2, 2), (torch.randn(1, 2),)\n")
    monkeypatch.chdir(tmp_path)
    status, err = _cli(capsys, "export", "modle.py:make", "-o", "m.pt2")
    assert status == 2 and f"current folder, {tmp_path}" in err and "Pass model.py:make." in err
    status, err = _cli(capsys, "export", "model.py:mkae", "-o", "m.pt2")
    assert status == 2 and "Did you mean make? Pass model.py:make." in err
    assert _cli(capsys, "export", "model.py:make", "-o", "m.pt2")[0] == 0  # the argument, pasted


def test_a_name_where_a_dim_is_meant_gets_the_dim_of_that_name():
    x = torch.randn(3, 4)
    with pytest.raises(graphcap.errors.DynamicSpecError) as info:
        graphcap.export(Lin(), (x,), dynamic_shapes={"x": {0: "batch"}})
    assert "in place of dynamic_shapes['x'][0] write Dim('batch')" in info.value.fix
    ep = graphcap.export(Lin(), (x,), dynamic_shapes={"x": {0: eval("Dim('batch')", {"Dim": graphcap.Dim})}})
    assert ep.module()(torch.randn(6, 4)).shape == (6, 3)


def test_a_forward_with_star_args_gets_them_in_the_call():
    class Stars(torch.nn.Module):
        def forward(self, *xs, flag, scale=2.0):
            return xs[0] * scale if flag else xs[0]

    xs = (torch.randn(3), torch.randn(3))
    with pytest.raises(InputBindingError) as info:
        graphcap.export(Stars(), xs)
    call = _code_after(info.value.fix, "export(")
    assert call == "export(mod, (*xs,), kwargs={'flag': flag})"  # scale has a default: not required
    ep = eval(call, {"export": graphcap.export, "mod": Stars(), "xs": xs, "flag": True})
    torch.testing.assert_close(ep.module()(*xs, flag=True), xs[0] * 2)


def test_a_branch_on_data_in_strict_mode_does_not_send_to_strict_false_alone():
    class Branchy(torch.nn.Module):
        def forward(self, x):
            if x.sum() > 0:
                return x + 1
            return x - 1

    x = torch.randn(3)
    with pytest.raises(graphcap.errors.StrictCaptureError) as info:
        graphcap.export(Branchy(), (x,), strict=True)
    err = info.value
    assert "if x.sum() > 0:" in err.where and "torch.cond(pred, true_fn, false_fn, operands)" in err.fix
    with pytest.raises(graphcap.errors.DataDependentError) as told:  # non-strict cannot take it either...
        graphcap.export(Branchy(), (x,))
    assert "torch._check(" in told.value.fix  # ...and writes the lines the strict fix points at


def test_a_structure_only_file_loaded_without_weights_gets_the_call_with_its_path(tmp_path):
    path = tmp_path / "m.pt2"
    model, x = Lin(), torch.randn(3, 4)
    graphcap.save(graphcap.export(model, (x,)), path, weights=False)
    with pytest.raises(graphcap.SerializationError) as info:
        graphcap.load(path)
    err = info.value
    assert err.where == f"graphcap.load({str(path)!r})"
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    code = _code_after(err.fix, "graphcap.load(").replace("'model.safetensors'", "weights_mapping")
    ep = eval(code, {"graphcap": graphcap, "weights_mapping": weights})
    torch.testing.assert_close(ep.module()(x), model(x))
