"""The ExportedProgram object and its signature as code written for torch.export reads and edits them
(docs/torch-suite.md, "ExportedProgram API audit"; probe: bench/probes/program_api_audit.py)."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.export as te
import torch.export.graph_signature as tsig

import graphcap
from graphcap.signature import (
    ExportGraphSignature,
    InputKind,
    InputSpec,
    ModuleCallEntry,
    ModuleCallSignature,
    OutputKind,
    OutputSpec,
    TensorArgument,
)


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("count", torch.zeros(4))
        self.register_buffer("scratch", torch.ones(4), persistent=False)
        self.c = torch.tensor([1.0, 2.0, 3.0, 4.0])

    def forward(self, x, y):
        self.count.add_(1)
        y.mul_(2)
        return self.lin(x) + self.count + self.scratch + self.c + y


def _export(**kw):
    b = graphcap.Dim("b", max=10)
    return graphcap.export(Model(), (torch.randn(3, 4), torch.randn(3, 4)), dynamic_shapes=({0: b}, {0: b}), **kw)


def _check_runs_as_eager(ep, calls=2):
    model, module = Model(), ep.module()
    for _ in range(calls):
        x, y = torch.randn(5, 4), torch.randn(5, 4)
        torch.testing.assert_close(module(x, y.clone()), model(x, y.clone()))


# -- the signature's classes are torch's -------------------------------------------
def test_signature_and_specs_are_instances_of_torchs_classes():
    for ep in (_export(), _export().run_decompositions()):
        sig = ep.graph_signature
        assert isinstance(sig, te.ExportGraphSignature)
        assert all(isinstance(s, tsig.InputSpec) for s in sig.input_specs)
        assert all(isinstance(s, tsig.OutputSpec) for s in sig.output_specs)
        assert all(isinstance(e, te.ModuleCallEntry) for e in ep.module_call_graph)
        assert isinstance(ep.module_call_graph[0].signature, te.ModuleCallSignature)


def test_graphcaps_classes_built_directly_are_torchs_too():
    spec = InputSpec(InputKind.BUFFER, TensorArgument("b_x"), "x", True)
    assert isinstance(spec, tsig.InputSpec) and str(spec) == "b_x: BUFFER target='x' persistent=True"
    out = OutputSpec(OutputKind.USER_OUTPUT, TensorArgument("y"))
    sig = ExportGraphSignature([spec], [out])
    assert isinstance(sig, tsig.ExportGraphSignature) and sig.buffers == ("x",)
    entry = ModuleCallEntry("", ModuleCallSignature([], [], None, None))
    assert isinstance(entry, te.ModuleCallEntry) and isinstance(entry.signature, te.ModuleCallSignature)


def test_a_preserved_submodule_entry_is_torchs_and_unflattens():
    ep = _export(preserve_module_call_signature=("lin",))
    entry = ep.module_call_graph[1]
    assert entry.fqn == "lin" and isinstance(entry.signature, te.ModuleCallSignature)
    assert all(isinstance(a, tsig.TensorArgument) for a in entry.signature.inputs + entry.signature.outputs)
    x = torch.randn(2, 4)
    torch.testing.assert_close(graphcap.unflatten(ep).lin(x), Model().lin(x))


def test_loaded_program_signature_is_torchs(tmp_path):
    graphcap.save(_export(), tmp_path / "m.pt2")
    ep = graphcap.load(tmp_path / "m.pt2")
    assert isinstance(ep.graph_signature, te.ExportGraphSignature)
    assert [(s.kind, s.target, s.persistent) for s in ep.graph_signature.input_specs[2:5]] == [
        (InputKind.BUFFER, "count", True), (InputKind.BUFFER, "scratch", False),
        (InputKind.CONSTANT_TENSOR, "c", None)]


# -- replace_all_uses takes names --------------------------------------------------
@pytest.mark.parametrize("which", ["old", "new"])
def test_replace_all_uses_refuses_a_node_for_a_name(which):
    ep = _export()
    sig = ep.graph_signature
    node = next(iter(ep.graph.nodes))
    args = (node, "renamed") if which == "old" else (node.name, node)
    with pytest.raises(graphcap.errors.SignatureEditError) as info:
        sig.replace_all_uses(*args)
    assert isinstance(info.value, TypeError) and isinstance(info.value, AssertionError)
    assert f"{which} is a Node" in str(info.value) and f"{which}.name" in str(info.value)
    assert sig.input_specs[0].arg.name == "p_lin_weight"  # nothing renamed


def test_replace_hook_keeps_the_signature_on_a_replaced_output():
    ep = _export().run_decompositions()
    g = ep.graph
    user_out = g.output_node().args[0][-1]
    with g.inserting_after(user_out):
        neg = g.call_function(torch.ops.aten.neg.default, (user_out,))
    neg.meta["val"] = user_out.meta["val"]
    with ep.graph_module._set_replace_hook(ep.graph_signature.get_replace_hook()):
        user_out.replace_all_uses_with(neg, delete_user_cb=lambda u: u is not neg)
    assert ep.graph_signature.user_outputs == (neg.name,)
    ep.validate()
    x, y = torch.randn(2, 4), torch.randn(2, 4)
    torch.testing.assert_close(ep.module()(x, y.clone()), -Model()(x, y.clone()))


# -- the constructor in torch's layout -------------------------------------------
def test_constructor_takes_torchs_keywords():
    ep = _export()
    new = type(ep)(root=ep.graph_module, graph=ep.graph, graph_signature=ep.graph_signature,
                   state_dict=ep.state_dict, range_constraints=ep.range_constraints,
                   module_call_graph=ep.module_call_graph, example_inputs=ep.example_inputs,
                   constants=ep.constants, verifiers=ep.verifiers)
    assert type(new) is graphcap.ExportedProgram and new.dialect == "TRAINING"
    assert new.graph is ep.graph and new.graph_module is not ep.graph_module
    _check_runs_as_eager(new)


def test_constructor_takes_torchs_positional_layout_and_a_dict_root():
    ep = _export().run_decompositions()
    fresh_state = copy.deepcopy(ep.state_dict)  # module() holds the program's tensors: runs update them
    new = graphcap.ExportedProgram(ep.graph_module, ep.graph, ep.graph_signature, ep.state_dict,
                                   ep.range_constraints, ep.module_call_graph, ep.example_inputs, ep.constants,
                                   verifiers=ep.verifiers)
    _check_runs_as_eager(new)
    assert new.example_inputs is ep.example_inputs
    root = dict(ep.graph_module.named_children())  # torch's root may be a dict of attributes
    new = graphcap.ExportedProgram(root, copy.deepcopy(ep.graph), copy.deepcopy(ep.graph_signature), fresh_state,
                                   ep.range_constraints, copy.deepcopy(ep.module_call_graph), None, ep.constants,
                                   verifiers=ep.verifiers)
    assert new.example_inputs is None and new.dialect == "ATEN"
    _check_runs_as_eager(new)


def test_constructor_in_torchs_layout_with_an_edited_graph_is_verified():
    ep = _export()
    g = copy.deepcopy(ep.graph)
    g.output_node().args = ((),)  # the signature still names one output
    with pytest.raises(graphcap.errors.VerificationError, match="outputs-match-signature"):
        type(ep)(root=ep.graph_module, graph=g, graph_signature=ep.graph_signature, state_dict=ep.state_dict,
                 range_constraints=ep.range_constraints, module_call_graph=ep.module_call_graph,
                 constants=ep.constants, verifiers=ep.verifiers)


def test_constructor_keeps_graphcaps_layout():
    ep = _export()
    new = graphcap.ExportedProgram(ep.graph_module, ep.graph_signature, ep.state_dict, ep.range_constraints,
                                   ep.module_call_graph, ep.example_inputs, ep.constants)
    assert new.graph_module is ep.graph_module
    new = graphcap.ExportedProgram(graph_module=ep.graph_module, graph_signature=ep.graph_signature,
                                   state_dict=ep.state_dict, range_constraints=ep.range_constraints,
                                   module_call_graph=ep.module_call_graph, verify=False)
    assert new.example_inputs is None and new.constants == {}
    with pytest.raises(TypeError):
        graphcap.ExportedProgram(ep.graph_module, ep.graph_signature)


# -- one tensor under two names -------------------------------------------------
class Aliased(torch.nn.Module):
    def __init__(self, update_first: bool, persistent: bool = True):
        super().__init__()
        self.register_buffer("buf", torch.ones(3), persistent=persistent)
        self.register_buffer("alias", self.buf, persistent=persistent)
        self.w = torch.nn.Parameter(torch.ones(3))
        self.tied = self.w
        self.update_first = update_first

    def forward(self, x):
        (self.buf if self.update_first else self.alias).add_(1)
        with torch.no_grad():
            self.tied.mul_(2)
        return x * self.alias + self.w


@pytest.mark.parametrize("update_first", [True, False])
@pytest.mark.parametrize("persistent", [True, False])
@pytest.mark.parametrize("decompose", [False, True])
def test_module_keeps_one_tensor_under_both_names(update_first, persistent, decompose):
    ep = graphcap.export(Aliased(update_first, persistent), (torch.randn(3),))
    if decompose:
        ep = ep.run_decompositions()
    model, module = Aliased(update_first, persistent), ep.module()
    for _ in range(3):
        x = torch.randn(3)
        torch.testing.assert_close(module(x), model(x))
    assert module.buf is module.alias and module.w is module.tied
    torch.testing.assert_close(module.buf, model.buf)
    torch.testing.assert_close(module.w, model.w)
    assert ep.state_dict.get("buf", ep.constants.get("buf")) is module.buf  # the program's own tensor


def test_deepcopy_then_edit_leaves_the_original():
    ep = _export()
    c = copy.deepcopy(ep)
    for n in c.graph.nodes:
        if n.target is torch.ops.aten.linear.default:
            n.target, n.args = torch.ops.aten.mul.Tensor, (n.args[0], 0.0)
    c.graph_module.recompile()
    _check_runs_as_eager(ep)
    assert isinstance(c.graph_signature, te.ExportGraphSignature)


# -- specs edited with torch's classes, as a pass written for torch edits them ------------
def test_a_kind_set_to_torchs_member_is_seen_by_every_view():
    ep = _export()
    for spec in ep.graph_signature.input_specs:
        if spec.kind == tsig.InputKind.PARAMETER:
            spec.kind = tsig.InputKind.CONSTANT_TENSOR  # freezing: parameters become constants
            ep.constants[spec.target] = ep.state_dict.pop(spec.target).detach()
    sig = ep.graph_signature
    assert sig.input_specs[0].kind is InputKind.CONSTANT_TENSOR
    assert sig.parameters == () and sig.lifted_tensor_constants == ("lin.weight", "lin.bias", "c")
    assert dict(sig.inputs_to_lifted_tensor_constants) == {
        "p_lin_weight": "lin.weight", "p_lin_bias": "lin.bias", "c_c": "c"}
    ep.validate()
    module = ep.module()
    assert list(module.named_parameters()) == []
    _check_runs_as_eager(ep)


def test_an_output_kind_and_argument_set_with_torchs_classes_are_converted():
    ep = _export().run_decompositions()
    spec = ep.graph_signature.output_specs[-1]
    spec.arg = tsig.TensorArgument(spec.arg.name)
    spec.kind = tsig.OutputKind.USER_OUTPUT
    assert type(spec.arg) is TensorArgument and spec.kind is OutputKind.USER_OUTPUT
    with pytest.raises(ValueError):
        spec.kind = 99


def test_a_spec_of_torchs_class_put_into_the_lists_becomes_graphcaps():
    ep = graphcap.export(torch.nn.ReLU(), (torch.randn(3),))
    g, sig = ep.graph, ep.graph_signature
    with g.inserting_before(next(iter(g.nodes))):
        offset = g.placeholder("b_offset")
    offset.meta["val"] = g.output_node().args[0][0].meta["val"]
    relu = g.output_node().args[0][0]
    with g.inserting_before(g.output_node()):
        add = g.call_function(torch.ops.aten.add.Tensor, (relu, offset))
    add.meta["val"] = relu.meta["val"]
    g.output_node().args = ((add,),)
    sig.input_specs.insert(0, tsig.InputSpec(tsig.InputKind.BUFFER, tsig.TensorArgument("b_offset"), "offset", True))
    sig.output_specs[0] = tsig.OutputSpec(tsig.OutputKind.USER_OUTPUT, tsig.TensorArgument(add.name), None)
    ep.state_dict["offset"] = torch.full((3,), 5.0)
    ep.graph_module.recompile()
    assert all(type(s) is InputSpec for s in sig.input_specs) and type(sig.output_specs[0]) is OutputSpec
    assert sig.buffers == ("offset",) and sig.user_outputs == (add.name,)
    ep.validate()
    x = torch.randn(3)
    torch.testing.assert_close(ep.module()(x), torch.relu(x) + 5)
    sig.input_specs.extend([tsig.InputSpec(tsig.InputKind.USER_INPUT, tsig.TensorArgument("z"), None)])
    sig.input_specs += [tsig.InputSpec(tsig.InputKind.USER_INPUT, tsig.TensorArgument("w"), None)]
    sig.input_specs[-2:] = [tsig.InputSpec(tsig.InputKind.USER_INPUT, tsig.TensorArgument("v"), None)]
    assert sig.user_inputs == ("input", "v") and all(type(s) is InputSpec for s in sig.input_specs)
    sig.input_specs = [tsig.InputSpec(tsig.InputKind.USER_INPUT, tsig.TensorArgument("u"), None)]
    assert type(sig.input_specs[0]) is InputSpec and sig.user_inputs == ("u",)


def test_edited_spec_lists_still_copy_and_turn_into_dicts():
    import dataclasses
    sig = _export().graph_signature
    copied = copy.deepcopy(sig)
    assert copied == sig and type(copied.input_specs[0]) is InputSpec
    copied.input_specs.append(tsig.InputSpec(tsig.InputKind.USER_INPUT, tsig.TensorArgument("z"), None))
    assert copied.user_inputs == ("x", "y", "z") and sig.user_inputs == ("x", "y")
    as_dict = dataclasses.asdict(sig)
    assert as_dict["input_specs"][0]["target"] == "lin.weight"
    assert dataclasses.replace(sig, output_specs=[]).output_specs == []


# -- copies of a program whose input is named like a builtin (nn.Linear's ``input``) ------------
@pytest.mark.parametrize("decompose", [False, True])
def test_deepcopy_keeps_an_input_named_like_a_builtin(decompose):
    ep = graphcap.export(torch.nn.Conv1d(2, 3, 1), (torch.randn(1, 2, 4),))
    if decompose:
        ep = ep.run_decompositions()
    assert ep.graph_signature.user_inputs == ("input",)
    copied = copy.deepcopy(ep)
    assert [n.name for n in copied.graph.find_nodes(op="placeholder")][-1] == "input"
    copied.validate()
    x = torch.randn(1, 2, 4)
    torch.testing.assert_close(copied.module()(x), ep.module()(x))
    torch.testing.assert_close(copied.module()(input=x), ep.module()(x))


@pytest.mark.parametrize("decompose", [False, True])
def test_move_to_device_keeps_the_input_names_and_the_ir_level(decompose):
    ep = graphcap.export(torch.nn.Linear(2, 3), (torch.randn(1, 2),))
    if decompose:
        ep = ep.run_decompositions()
    moved = graphcap.move_to_device_pass(ep, "cpu")
    assert moved.graph_signature.user_inputs == ("input",)
    assert moved.dialect == ep.dialect == ("ATEN" if decompose else "TRAINING")
    moved.validate()
    x = torch.randn(1, 2)
    torch.testing.assert_close(moved.module()(x), ep.module()(x))


def test_a_program_built_without_verifiers_takes_its_graphs_ir_level():
    ep = _export()
    core = ep.run_decompositions()
    for layout in ("graphcap", "torch"):
        for program, dialect in ((ep, "TRAINING"), (core, "ATEN")):
            if layout == "graphcap":
                new = graphcap.ExportedProgram(program.graph_module, program.graph_signature, program.state_dict,
                                               program.range_constraints, program.module_call_graph,
                                               constants=program.constants)
            else:
                new = graphcap.ExportedProgram(root=program.graph_module, graph=program.graph,
                                               graph_signature=program.graph_signature,
                                               state_dict=program.state_dict,
                                               range_constraints=program.range_constraints,
                                               module_call_graph=program.module_call_graph,
                                               constants=program.constants)
            assert new.dialect == dialect, (layout, dialect)
            assert new.verifiers == program.verifiers


@pytest.mark.parametrize("decompose", [False, True])
def test_a_graph_module_copied_by_a_pass_rebuilds_with_its_input_names(decompose):
    ep = graphcap.export(torch.nn.Linear(2, 3), (torch.randn(1, 2),))
    if decompose:
        ep = ep.run_decompositions()
    copied = copy.deepcopy(ep.graph_module)  # fx's copy calls the input input_1
    new = ep._update(copied, ep.graph_signature)
    assert [n.name for n in new.graph.find_nodes(op="placeholder")] == ["p_weight", "p_bias", "input"]
    x = torch.randn(1, 2)
    torch.testing.assert_close(new.module()(x), ep.module()(x))
    copied = copy.deepcopy(ep.graph_module)
    new = type(ep)(root=copied, graph=copied.graph, graph_signature=ep.graph_signature, state_dict=ep.state_dict,
                   range_constraints=ep.range_constraints, module_call_graph=ep.module_call_graph,
                   verifiers=ep.verifiers)
    assert [n.name for n in new.graph.find_nodes(op="placeholder")][-1] == "input"
    torch.testing.assert_close(new.module()(x), ep.module()(x))


def test_a_placeholder_renamed_on_purpose_is_not_renamed_back():
    ep = graphcap.export(torch.nn.Linear(2, 3), (torch.randn(1, 2),))
    gm = copy.deepcopy(ep.graph_module)
    gm.graph.find_nodes(op="placeholder")[-1].name = "renamed"
    with pytest.raises(graphcap.errors.VerificationError, match="inputs-match-signature"):
        ep._update(gm, ep.graph_signature)


def test_a_constant_folding_pass_assigning_torchs_specs_is_seen():
    """As ExecuTorch's constant_prop_pass does: fold state into a new constant placeholder, then
    assign a new list of torch's InputSpec to the signature."""
    class Folded(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.ones(3))
            self.register_buffer("b", torch.full((3,), 2.0))

        def forward(self, x):
            return x + (self.w * 2 + self.b)

    ep = graphcap.export(Folded(), (torch.randn(3),)).run_decompositions()
    g = ep.graph
    placeholders = g.find_nodes(op="placeholder")
    user_add = g.output_node().args[0][0]
    folded_value = user_add.args[1]
    with g.inserting_before(placeholders[0]):
        const = g.placeholder("c_folded")
    const.meta["val"] = folded_value.meta["val"]
    folded_value.replace_all_uses_with(const)
    g.eliminate_dead_code()
    for node in placeholders[:2]:
        g.erase_node(node)
    ep.graph_module.recompile()
    ep.graph_signature.input_specs = [
        tsig.InputSpec(tsig.InputKind.CONSTANT_TENSOR, tsig.TensorArgument("c_folded"), "folded"),
        tsig.InputSpec(tsig.InputKind.USER_INPUT, tsig.TensorArgument("x"), None)]
    ep.constants["folded"] = torch.full((3,), 4.0)
    ep.state_dict.clear()
    sig = ep.graph_signature
    assert sig.lifted_tensor_constants == ("folded",) and sig.parameters == () and sig.buffers == ()
    assert dict(sig.inputs_to_lifted_tensor_constants) == {"c_folded": "folded"}
    ep.validate()
    x = torch.randn(3)
    torch.testing.assert_close(ep.module()(x), Folded()(x))


def test_a_torch_signature_assigned_to_the_programs_field_is_kept_as_graphcaps():
    """As ExecuTorch's pass manager and torch's passes replace ``ep._graph_signature`` in place."""
    ep = _export()
    tsg = tsig.ExportGraphSignature(
        input_specs=[tsig.InputSpec(tsig.InputKind[s.kind.name], tsig.TensorArgument(s.arg.name), s.target,
                                    s.persistent) for s in ep.graph_signature.input_specs],
        output_specs=[tsig.OutputSpec(tsig.OutputKind[s.kind.name], tsig.TensorArgument(s.arg.name), s.target)
                      for s in ep.graph_signature.output_specs])
    ep._graph_signature = tsg
    assert type(ep.graph_signature) is ExportGraphSignature and ep.graph_signature == _export().graph_signature
    assert ep.graph_signature.parameters == ("lin.weight", "lin.bias")
    ep.validate()
    _check_runs_as_eager(ep)
    copied = copy.deepcopy(ep)
    assert copied.graph_signature == ep.graph_signature and copied.graph_signature is not ep.graph_signature
