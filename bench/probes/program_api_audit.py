"""ExportedProgram API audit: the program object and its signature as a user's code reads and edits them.

Each probe is a function of the library (``graphcap`` or ``torch.export``) that exports a small,
seeded program (parameters, buffers, a mutated buffer, a non-persistent buffer, a lifted constant,
a written user input, a dynamic batch) and returns what a user's code reading or editing the
program sees: a value, a type, or the exception's class and first line. Values that depend on the
library's own numbering (symbol names, node numbers) are read through the program, not compared.

    name | gc: <what graphcap gives> | te: <what torch.export gives> [| DIFF]

Run: PYTHONPATH=src python bench/probes/program_api_audit.py [name-substring ...] [--strict]
(``--strict``: the probes on the shared model export it with ``strict=True``)
"""
from __future__ import annotations

import copy
import dataclasses
import sys
import warnings
from typing import Any, Callable

import torch
import torch.export as te
import torch.export.exported_program as tep
import torch.export.graph_signature as tsig

import graphcap


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("count", torch.zeros(4))
        self.register_buffer("scratch", torch.ones(4), persistent=False)
        self.c = torch.tensor([1.0, 2.0, 3.0, 4.0])

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        self.count.add_(1)
        y.mul_(2)
        return self.lin(x) + self.count + self.scratch + self.c + y


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)


STRICT = False  # --strict: the shared model exported with strict=True


def _export(lib: Any, model: torch.nn.Module | None = None, args: tuple | None = None, **kw: Any) -> Any:
    kw.setdefault("strict", STRICT)
    b = lib.Dim("b", max=10)
    kw.setdefault("dynamic_shapes", ({0: b}, {0: b}))
    return lib.export(model or Model(), args or _inputs(), **kw)


def _eager(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return model(x, y.clone())


def _run(ep: Any, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return ep.module()(x, y.clone())


def _close(a: torch.Tensor, b: torch.Tensor) -> str:
    return "=" if torch.allclose(a, b, atol=1e-5) else f"WRONG (sum {a.sum().item():.4f} vs {b.sum().item():.4f})"


PROBES: dict[str, Callable[[Any], Any]] = {}


def probe(fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
    PROBES[fn.__name__] = fn
    return fn


# -- the signature --------------------------------------------------------------
@probe
def sig_isinstance(lib):
    sig = _export(lib).graph_signature
    return (isinstance(sig, te.ExportGraphSignature), all(isinstance(s, tsig.InputSpec) for s in sig.input_specs),
            all(isinstance(s, tsig.OutputSpec) for s in sig.output_specs),
            all(isinstance(s.arg, tsig.TensorArgument) for s in sig.input_specs))


@probe
def sig_kinds_equal_torchs(lib):
    sig = _export(lib).graph_signature
    return [(s.kind == tsig.InputKind[s.kind.name], s.arg.name.split("_")[0], s.target, s.persistent)
            for s in sig.input_specs]


@probe
def sig_kind_identity(lib):
    sig = _export(lib).graph_signature
    return (sig.input_specs[0].kind is tsig.InputKind.PARAMETER, isinstance(sig.input_specs[0].kind, tsig.InputKind))


@probe
def sig_views(lib):
    sig = _export(lib).graph_signature
    return {p: getattr(sig, p) for p in ("parameters", "buffers", "user_inputs", "non_persistent_buffers",
                                         "lifted_tensor_constants", "inputs_to_parameters", "inputs_to_buffers",
                                         "inputs_to_lifted_tensor_constants", "buffers_to_mutate",
                                         "user_inputs_to_mutate", "input_tokens", "output_tokens",
                                         "assertion_dep_token", "backward_signature")}


@probe
def sig_views_decomposed(lib):
    sig = _export(lib).run_decompositions().graph_signature
    out = [(s.kind.name, s.target) for s in sig.output_specs]
    return out, list(sig.buffers_to_mutate.values()), list(sig.user_inputs_to_mutate.values()), len(sig.user_outputs)


@probe
def sig_view_types(lib):
    sig = _export(lib).graph_signature
    return [type(getattr(sig, p)).__name__ for p in ("parameters", "user_outputs", "inputs_to_buffers",
                                                     "buffers_to_mutate")]


@probe
def sig_replace_all_uses(lib):
    sig = _export(lib).run_decompositions().graph_signature
    old = next(iter(sig.buffers_to_mutate))
    sig.replace_all_uses(old, "renamed")
    return dict(sig.buffers_to_mutate)


@probe
def sig_replace_all_uses_non_str(lib):
    sig = _export(lib).graph_signature
    sig.replace_all_uses(sig.input_specs[0].arg, "renamed")
    return sig.input_specs[0].arg.name


@probe
def sig_replace_hook_follows_output(lib):
    ep = _export(lib)
    g = ep.graph
    last = g.output_node().args[0][-1]
    with g.inserting_after(last):
        neg = g.call_function(torch.ops.aten.neg.default, (last,))
    neg.meta["val"] = last.meta["val"]
    with ep.graph_module._set_replace_hook(ep.graph_signature.get_replace_hook()):
        last.replace_all_uses_with(neg, delete_user_cb=lambda u: u is not neg)
    x, y = _inputs()
    return ep.graph_signature.user_outputs == (neg.name,), _close(_run(ep, x, y), -_eager(Model(), x, y))


@probe
def sig_deepcopy_eq(lib):
    sig = _export(lib).graph_signature
    return sig == copy.deepcopy(sig), dataclasses.replace(sig.input_specs[0], target="t").target


@probe
def sig_str(lib):
    return str(_export(lib).graph_signature).count("\n")


# -- state ------------------------------------------------------------------
@probe
def state_dict_and_constants(lib):
    ep = _export(lib)
    return (list(ep.state_dict), sorted(ep.constants), ep.tensor_constants is ep.constants,
            type(ep.state_dict["lin.weight"]).__name__)


@probe
def named_state(lib):
    ep = _export(lib)
    return ([n for n, _ in ep.named_parameters()], [n for n, _ in ep.named_buffers()],
            len(list(ep.parameters())), len(list(ep.buffers())))


@probe
def state_edit_reaches_module(lib):
    ep = _export(lib)
    ep.state_dict["lin.weight"].data.fill_(1.0)
    ep.constants["c"].fill_(0.0)
    m = Model()
    m.lin.weight.data.fill_(1.0)
    m.c.fill_(0.0)
    x, y = _inputs()
    return _close(_run(ep, x, y), _eager(m, x, y))


# -- ranges, examples, call structure -------------------------------------------
@probe
def range_constraints(lib):
    ep = _export(lib)
    return [(type(k).__name__, type(v).__name__, int(v.lower), int(v.upper), v.is_int)
            for k, v in ep.range_constraints.items()]


@probe
def range_constraints_decomposed(lib):
    ep = _export(lib).run_decompositions()
    return [(type(k).__name__, type(v).__name__, int(v.lower), int(v.upper)) for k, v in ep.range_constraints.items()]


@probe
def example_inputs(lib):
    ep = _export(lib)
    args, kwargs = ep.example_inputs
    x, y = _inputs()
    ep.example_inputs = ((x, y), {})
    return type(ep.example_inputs).__name__, len(args), kwargs, torch.equal(args[0], x)


@probe
def example_inputs_bad(lib):
    ep = _export(lib)
    ep.example_inputs = ((torch.randn(3, 4),), {})


@probe
def call_spec(lib):
    ep = _export(lib)
    cs = ep.call_spec
    return (type(cs.in_spec).__name__, cs.in_spec == ep.module_call_graph[0].signature.in_spec,
            cs.out_spec.num_leaves, cs[0] is cs.in_spec)


@probe
def module_call_graph(lib):
    ep = _export(lib, preserve_module_call_signature=("lin",))
    return [(isinstance(e, te.ModuleCallEntry), e.fqn, isinstance(e.signature, te.ModuleCallSignature),
             e.signature and [type(a).__name__ for a in e.signature.inputs]) for e in ep.module_call_graph]


@probe
def verifiers_dialect(lib):
    ep = _export(lib)
    d = ep.run_decompositions()
    return ([v.__name__ for v in ep.verifiers], ep.dialect, [v.__name__ for v in d.verifiers], d.dialect)


@probe
def validate(lib):
    _export(lib).validate()
    _export(lib).run_decompositions().validate()
    return "ok"


@probe
def graph_views(lib):
    ep = _export(lib)
    return ep.graph is ep.graph_module.graph, type(ep.graph_module).__name__, \
        len(ep.graph_module.print_readable(print_output=False)) > 0


@probe
def call_directly(lib):
    ep = _export(lib)
    ep(*_inputs())


@probe
def str_program(lib):
    text = str(_export(lib))
    return "ExportedProgram" in text, "Graph signature" in text, "Range constraints" in text


@probe
def deepcopy_program(lib):
    ep = _export(lib)
    c = copy.deepcopy(ep)
    c.state_dict["lin.weight"].data.zero_()
    x, y = _inputs()
    return type(c).__name__, _close(_run(ep, x, y), _eager(Model(), x, y))


# -- module() --------------------------------------------------------------------
@probe
def module_attributes(lib):
    m = _export(lib).module()
    return ([n for n, _ in m.named_buffers()], [n for n, _ in m.named_parameters()], list(m.state_dict()),
            isinstance(m, torch.fx.GraphModule), len(m.print_readable(print_output=False)) > 0,
            hasattr(m, "graph"), m.count.tolist())


@probe
def module_state_after_calls(lib):
    ep = _export(lib)
    m = ep.module()
    x, y = _inputs()
    m(x, y.clone())
    m(x, y.clone())
    return m.count.tolist(), ep.state_dict["count"].tolist()


@probe
def module_writes_user_input(lib):
    ep = _export(lib)
    x, y = _inputs()
    y2 = y.clone()
    ep.module()(x, y2)
    return torch.equal(y2, 2 * y)


@probe
def module_out_of_range(lib):
    _export(lib).module()(torch.randn(11, 4), torch.randn(11, 4))


@probe
def module_graph_edit(lib):
    m = _export(lib).module()
    for n in m.graph.nodes:
        if n.target is torch.ops.aten.linear.default:
            n.target = torch.ops.aten.mul.Tensor
            n.args = (n.args[0], 0.0)
    m.recompile()
    x, y = _inputs()
    ref = Model()
    ref.lin = torch.nn.Identity()
    ref.lin.forward = lambda t: t * 0.0
    return _close(m(x, y.clone()), _eager(ref, x, y))


# -- editing the program's graph --------------------------------------------------
def _zero_linear(ep: Any, recompile: bool = True) -> None:
    for n in ep.graph.nodes:
        if n.op == "call_function" and n.target in (torch.ops.aten.linear.default, torch.ops.aten.addmm.default):
            n.target = torch.ops.aten.mul.Tensor
            n.args = ((n.args[0] if n.target is not torch.ops.aten.addmm.default else n.args[1]), 0.0)
    if recompile:
        ep.graph_module.recompile()


def _zero_linear_model() -> Model:
    ref = Model()
    ref.lin = torch.nn.Identity()
    ref.lin.forward = lambda t: t * 0.0
    return ref


@probe
def edit_target_then_module(lib):
    ep = _export(lib)
    _zero_linear(ep)
    x, y = _inputs()
    return _close(_run(ep, x, y), _eager(_zero_linear_model(), x, y))


@probe
def edit_without_recompile(lib):
    ep = _export(lib)
    _zero_linear(ep, recompile=False)
    x, y = _inputs()
    return _close(_run(ep, x, y), _eager(_zero_linear_model(), x, y))


@probe
def edit_then_decompose(lib):
    ep = _export(lib)
    _zero_linear(ep)
    x, y = _inputs()
    return _close(_run(ep.run_decompositions(), x, y), _eager(_zero_linear_model(), x, y))


@probe
def edit_decomposed_then_module(lib):
    ep = _export(lib).run_decompositions()
    for n in ep.graph.nodes:
        if n.target is torch.ops.aten.addmm.default:
            n.target = torch.ops.aten.mul.Tensor
            n.args = (n.args[1], 0.0)
    ep.graph_module.recompile()
    x, y = _inputs()
    return _close(_run(ep, x, y), _eager(_zero_linear_model(), x, y))


@probe
def edit_copy_leaves_original(lib):
    ep = _export(lib)
    c = copy.deepcopy(ep)
    _zero_linear(c)
    x, y = _inputs()
    return _close(_run(ep, x, y), _eager(Model(), x, y)), _close(_run(c, x, y), _eager(_zero_linear_model(), x, y))


@probe
def update_rebuilds(lib):
    ep = _export(lib)
    _zero_linear(ep)
    new = ep._update(ep.graph_module, ep.graph_signature)
    x, y = _inputs()
    return type(new).__name__, new.dialect, _close(_run(new, x, y), _eager(_zero_linear_model(), x, y))


@probe
def constructor_torch_keywords(lib):
    ep = _export(lib)
    new = type(ep)(root=ep.graph_module, graph=ep.graph, graph_signature=ep.graph_signature,
                   state_dict=ep.state_dict, range_constraints=ep.range_constraints,
                   module_call_graph=ep.module_call_graph, example_inputs=ep.example_inputs,
                   constants=ep.constants, verifiers=ep.verifiers)
    x, y = _inputs()
    return type(new).__name__, new.dialect, _close(_run(new, x, y), _eager(Model(), x, y))


@probe
def constructor_torch_positional(lib):
    ep = _export(lib).run_decompositions()
    new = type(ep)(ep.graph_module, ep.graph, ep.graph_signature, ep.state_dict, ep.range_constraints,
                   ep.module_call_graph, ep.example_inputs, ep.constants)
    x, y = _inputs()
    return type(new).__name__, _close(_run(new, x, y), _eager(Model(), x, y))


@probe
def constructor_new_graph(lib):
    ep = _export(lib)
    g = copy.deepcopy(ep.graph)
    new = type(ep)(root=ep.graph_module, graph=g, graph_signature=copy.deepcopy(ep.graph_signature),
                   state_dict=ep.state_dict, range_constraints=ep.range_constraints,
                   module_call_graph=copy.deepcopy(ep.module_call_graph), constants=ep.constants,
                   verifiers=ep.verifiers)
    return new.graph is g, new.graph_module is not ep.graph_module


@probe
def constructor_root_dict(lib):
    ep = _export(lib).run_decompositions()
    root = {name: getattr(ep.graph_module, name) for name, _ in ep.graph_module.named_children()}
    new = type(ep)(root, ep.graph, ep.graph_signature, ep.state_dict, ep.range_constraints, ep.module_call_graph,
                   None, ep.constants)
    x, y = _inputs()
    return _close(_run(new, x, y), _eager(Model(), x, y))


@probe
def torch_constructor_with_programs_parts(lib):
    ep = _export(lib)
    new = tep.ExportedProgram(root=ep.graph_module, graph=ep.graph, graph_signature=ep.graph_signature,
                              state_dict=ep.state_dict, range_constraints=ep.range_constraints,
                              module_call_graph=ep.module_call_graph, example_inputs=ep.example_inputs,
                              constants=ep.constants, verifiers=ep.verifiers)
    x, y = _inputs()
    return _close(new.module()(x, y.clone()), _eager(Model(), x, y))


@probe
def save_load_signature(lib):
    import io
    buf = io.BytesIO()
    lib.save(_export(lib), buf)
    buf.seek(0)
    ep = lib.load(buf)
    sig = ep.graph_signature
    return (isinstance(sig, te.ExportGraphSignature), [(s.kind.name, s.target, s.persistent) for s in sig.input_specs],
            sorted(ep.constants))


# -- other programs ----------------------------------------------------------------
class Printing(torch.nn.Module):
    def forward(self, x):
        torch.ops.aten._print("hello")
        return x + 1


@probe
def effect_op_signature(lib):
    ep = lib.export(Printing(), (torch.randn(2),))
    sig = ep.graph_signature
    d = ep.run_decompositions()
    return ([s.kind.name for s in sig.input_specs], [s.kind.name for s in sig.output_specs], sig.input_tokens,
            [s.kind.name for s in d.graph_signature.input_specs], d.graph_signature.output_tokens,
            _close(d.module()(torch.ones(2)), torch.full((2,), 2.0)))


class IntsAndConstants(torch.nn.Module):
    def forward(self, x, n: int, scale: float = 2.0, mode: str = "a"):
        return x * n * scale, None, 3, mode


@probe
def int_input_and_constant_outputs(lib):
    ep = lib.export(IntsAndConstants(), (torch.randn(2), 4), {"scale": 2.0, "mode": "a"},
                    dynamic_shapes=({0: lib.Dim("b")}, lib.Dim.DYNAMIC, None, None))
    sig = ep.graph_signature
    return ([(s.kind.name, type(s.arg).__name__) for s in sig.input_specs], sig.user_inputs,
            [(type(s.arg).__name__, getattr(s.arg, "value", "-")) for s in sig.output_specs],
            len(ep.range_constraints), ep.module_call_graph[0].signature.forward_arg_names)


class Unbacked(torch.nn.Module):
    def forward(self, x, n):
        k = n.item()
        torch._check(k >= 1)
        torch._check(k <= 4)
        return x[:k] * 2, x.nonzero()


@probe
def range_constraints_unbacked_and_derived(lib):
    d = lib.Dim("d", min=2, max=8)
    ep = lib.export(Unbacked(), (torch.randn(6, 3), torch.tensor(2)), dynamic_shapes=({0: 2 * d}, None))
    return sorted((str(v), v.is_int) for v in ep.range_constraints.values())


class Tied(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(3, 3)
        self.b = torch.nn.Linear(3, 3)
        self.b.weight = self.a.weight
        self.register_buffer("buf", torch.ones(3))
        self.register_buffer("alias", self.buf)

    def forward(self, x):
        self.buf.add_(1)
        return self.b(self.a(x)) + self.alias


@probe
def tied_and_aliased_state(lib):
    ep = lib.export(Tied(), (torch.randn(2, 3),))
    m = ep.module()
    return ([s.target for s in ep.graph_signature.input_specs if s.kind.name != "USER_INPUT"],
            list(ep.state_dict), [n for n, _ in ep.named_parameters()], [n for n, _ in ep.named_buffers()],
            [n for n, _ in m.named_parameters()], [n for n, _ in m.named_buffers()],
            m.a.weight is m.b.weight)


@probe
def graph_module_flat_call(lib):
    ep = _export(lib).run_decompositions()
    x, y = _inputs()
    flat = ep._graph_module_flat_inputs((x, y), {})
    out = ep.graph_module(*flat)
    return len(flat), type(out).__name__, len(out)


@probe
def pickle_program(lib):
    import pickle
    ep = _export(lib)
    back = pickle.loads(pickle.dumps(ep))
    x, y = _inputs()
    return type(back).__name__, _close(_run(back, x, y), _eager(Model(), x, y))


@probe
def copy_copy_program(lib):
    ep = _export(lib)
    c = copy.copy(ep)
    return c.graph_module is ep.graph_module, c.state_dict is ep.state_dict


@probe
def deepcopy_module(lib):
    m = copy.deepcopy(_export(lib).module())
    x, y = _inputs()
    return _close(m(x, y.clone()), _eager(Model(), x, y))


@probe
def example_inputs_none(lib):
    ep = _export(lib)
    ep.example_inputs = None
    return ep.example_inputs


@probe
def program_isinstance(lib):
    ep = _export(lib)
    return isinstance(ep, te.ExportedProgram), isinstance(ep.run_decompositions(), te.ExportedProgram)


@probe
def module_meta_and_code(lib):
    m = _export(lib).module()
    return "def forward" in m.code, isinstance(m.meta, dict), hasattr(m, "range_constraints")


@probe
def kwargs_user_inputs(lib):
    class K(torch.nn.Module):
        def forward(self, x, *, bias=None, extra=None):
            return x + bias
    ep = lib.export(K(), (torch.randn(2),), {"bias": torch.randn(2)})
    sig = ep.graph_signature
    return sig.user_inputs, ep.module_call_graph[0].signature.forward_arg_names, ep.call_spec.in_spec.num_leaves


# -- passes a user writes over the program -----------------------------------------
@probe
def pass_removes_an_unused_parameter(lib):
    class Unused(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.used = torch.nn.Parameter(torch.ones(3))
            self.unused = torch.nn.Parameter(torch.ones(3))

        def forward(self, x):
            return x * self.used

    ep = lib.export(Unused(), (torch.randn(3),))
    sig = ep.graph_signature
    for node, spec in list(zip([n for n in ep.graph.nodes if n.op == "placeholder"], list(sig.input_specs))):
        if spec.kind == tsig.InputKind.PARAMETER and not node.users:
            ep.graph.erase_node(node)
            sig.input_specs.remove(spec)
            del ep.state_dict[spec.target]
    ep.graph_module.recompile()
    ep.validate()
    x = torch.randn(3)
    m = ep.module()
    return sig.parameters, [n for n, _ in m.named_parameters()], _close(m(x), x)


@probe
def pass_adds_a_buffer(lib):
    ep = lib.export(torch.nn.ReLU(), (torch.randn(3),))
    g = ep.graph
    first = next(iter(g.nodes))
    with g.inserting_before(first):
        ph = g.placeholder("b_offset")
    ph.meta["val"] = first.meta["val"].new_empty(3) if hasattr(first.meta["val"], "new_empty") else None
    user_out = g.output_node().args[0][0]
    with g.inserting_before(g.output_node()):
        add = g.call_function(torch.ops.aten.add.Tensor, (user_out, ph))
    add.meta["val"] = user_out.meta["val"]
    g.output_node().args = ((add,),)
    ep.graph_signature.input_specs.insert(0, type(ep.graph_signature.input_specs[0])(
        tsig.InputKind.BUFFER, tsig.TensorArgument("b_offset"), "offset", True))
    ep.graph_signature.output_specs[0].arg.name = add.name
    ep.state_dict["offset"] = torch.full((3,), 5.0)
    ep.graph_module.recompile()
    x = torch.randn(3)
    m = ep.module()
    return [n for n, _ in m.named_buffers()], _close(m(x), torch.relu(x) + 5)


@probe
def range_constraints_narrowed_by_user(lib):
    ep = _export(lib)
    from torch.utils._sympy.value_ranges import ValueRanges
    for k in list(ep.range_constraints):
        ep.range_constraints[k] = ValueRanges(0, 5)
    m = ep.module()
    m(torch.randn(6, 4), torch.randn(6, 4))
    return "accepted 6"


@probe
def pass_turns_parameters_into_constants(lib):
    ep = _export(lib)
    for spec in ep.graph_signature.input_specs:
        if spec.kind == tsig.InputKind.PARAMETER:
            spec.kind = tsig.InputKind.CONSTANT_TENSOR  # torch's member, as a pass written for torch sets it
            ep.constants[spec.target] = ep.state_dict.pop(spec.target).detach()
    sig = ep.graph_signature
    x, y = _inputs()
    m = ep.module()
    return (sig.parameters, sig.lifted_tensor_constants, sig.inputs_to_lifted_tensor_constants,
            [n for n, _ in m.named_parameters()], _close(m(x, y.clone()), _eager(Model(), x, y)))


@probe
def pass_sets_output_kind(lib):
    ep = _export(lib).run_decompositions()
    spec = ep.graph_signature.output_specs[0]
    spec.kind = tsig.OutputKind.BUFFER_MUTATION
    x, y = _inputs()
    return dict(ep.graph_signature.buffers_to_mutate).values().__len__(), _close(_run(ep, x, y), _eager(Model(), x, y))


@probe
def example_inputs_carried(lib):
    import io
    ep = _export(lib)
    buf = io.BytesIO()
    lib.save(ep, buf)
    buf.seek(0)
    loaded = lib.load(buf)
    x, _ = _inputs()

    def same(e):
        return e.example_inputs is not None and torch.equal(e.example_inputs[0][0], x)
    return same(ep.run_decompositions()), same(copy.deepcopy(ep)), same(loaded), \
        same(ep._update(ep.graph_module, ep.graph_signature))


@probe
def saved_program_fields(lib):
    import io
    ep = _export(lib, preserve_module_call_signature=("lin",))
    buf = io.BytesIO()
    lib.save(ep, buf)
    buf.seek(0)
    back = lib.load(buf)
    return ([type(v).__name__ for v in back.range_constraints.values()], back.dialect,
            [e.fqn for e in back.module_call_graph], type(back.state_dict["lin.weight"]).__name__,
            sorted(back.constants), back.graph_signature == ep.graph_signature)


@probe
def decomposed_call_graph(lib):
    ep = _export(lib, preserve_module_call_signature=("lin",)).run_decompositions()
    return [(e.fqn, e.signature and [a.name.split("_")[0] for a in e.signature.inputs]) for e in ep.module_call_graph]


@probe
def deepcopy_builtin_named_input(lib):
    ep = lib.export(torch.nn.Linear(2, 3), (torch.randn(1, 2),))
    c = copy.deepcopy(ep)
    c.validate()
    return [n.name for n in c.graph.find_nodes(op="placeholder")], c.graph_signature.user_inputs


@probe
def move_to_device_keeps_dialect(lib):
    from torch.export.passes import move_to_device_pass as te_move
    move = graphcap.move_to_device_pass if lib is graphcap else te_move
    ep = lib.export(torch.nn.Linear(2, 3), (torch.randn(1, 2),)).run_decompositions()
    moved = move(ep, "cpu")
    return moved.dialect, moved.graph_signature.user_inputs


@probe
def frozen_parameters_then_decompose_and_save(lib):
    import io
    ep = _export(lib)
    for spec in ep.graph_signature.input_specs:
        if spec.kind == tsig.InputKind.PARAMETER:
            spec.kind = tsig.InputKind.CONSTANT_TENSOR
            ep.constants[spec.target] = ep.state_dict.pop(spec.target).detach()
    d = ep.run_decompositions()
    buf = io.BytesIO()
    lib.save(d, buf)
    buf.seek(0)
    back = lib.load(buf)
    x, y = _inputs()
    return (d.graph_signature.lifted_tensor_constants, _close(_run(d, x, y), _eager(Model(), x, y)),
            _close(_run(back, x, y), _eager(Model(), x, y)))


@probe
def dead_code_elimination_then_module(lib):
    class Dead(torch.nn.Module):
        def forward(self, x):
            _ = x.cos()
            return x.sin()
    ep = lib.export(Dead(), (torch.randn(3),))
    ep.graph.eliminate_dead_code()
    ep.graph_module.recompile()
    ep.validate()
    x = torch.randn(3)
    return [n.name for n in ep.graph.nodes], _close(ep.module()(x), x.sin())


@probe
def module_load_state_dict(lib):
    ep = _export(lib)
    m = ep.module()
    trained = Model()
    with torch.no_grad():
        trained.lin.weight.mul_(3)
        trained.count.fill_(7)
    result = m.load_state_dict(trained.state_dict())
    x, y = _inputs()
    return (list(result.missing_keys), list(result.unexpected_keys),
            _close(m(x, y.clone()), trained(x, y.clone())))


@probe
def module_named_modules_and_to(lib):
    m = _export(lib).module()
    names = [n for n, _ in m.named_modules()]
    m.to(torch.float64)
    return names, m.lin.weight.dtype, m.count.dtype


@probe
def constructor_from_torchs_program_parts(lib):
    tp = _export(te)  # torch.export's program, whatever lib is
    new = lib.ExportedProgram(root=tp.graph_module, graph=tp.graph, graph_signature=tp.graph_signature,
                              state_dict=tp.state_dict, range_constraints=tp.range_constraints,
                              module_call_graph=tp.module_call_graph, example_inputs=tp.example_inputs,
                              constants=tp.constants, verifiers=tp.verifiers)
    x, y = _inputs()
    d = new.run_decompositions()
    return (type(new).__module__.split(".")[0], new.dialect, _close(_run(new, x, y), _eager(Model(), x, y)),
            _close(_run(d, x, y), _eager(Model(), x, y)))


def _describe(fn: Callable[[Any], Any], lib: Any) -> str:
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return repr(fn(lib))
    except Exception as e:  # a probe reports what the user sees
        return f"raises {type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"


def main(argv: list[str]) -> None:
    global STRICT
    STRICT = "--strict" in argv
    wanted = [a for a in argv if not a.startswith("-")]
    for name, fn in PROBES.items():
        if wanted and not any(w in name for w in wanted):
            continue
        gc, tx = _describe(fn, graphcap), _describe(fn, te)
        mark = "" if gc == tx else " | DIFF"
        print(f"{name} | gc: {gc} | te: {tx}{mark}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
