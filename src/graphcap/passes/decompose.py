"""Retrace a program into the inference IR: functional core ATen.

The training-IR graph is replayed node by node on the program's own fake
inputs (the placeholders' ``meta['val']``, so the fake mode and its ShapeEnv —
and every symbol — are the program's) under three engines at once:

* ``make_fx`` records what runs, breaking operators down with the table's
  Python decompositions;
* ``FunctionalTensorMode`` turns every in-place operator, including writes
  through views (``x[:, 0].add_(1)`` becomes a ``*_scatter`` of the base),
  into its functional form, and keeps for every input its latest value;
* the Python dispatcher, with the table's composite decisions installed
  (:mod:`graphcap.composite_kernels`).

Every replayed node is the "current node" of ``torch.fx.traceback`` while it
runs, so the nodes it becomes inherit its ``stack_trace``, ``nn_module_stack``
and ``source_fn_stack``.

After the replay, inputs whose value changed become mutation outputs
(``BUFFER_MUTATION`` / ``USER_INPUT_MUTATION`` / ``PARAMETER_MUTATION``)
pointing at the node that computes their new value, listed before the user
outputs. The training IR declares none (its writes are in-place operators in
the graph, found here by functionalization); a program saved by graphcap
before that convention lists them, and its declarations are honoured; outputs that are
still an input or a view of one get their own copy (:mod:`.unalias_outputs`).
"""
from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping, Optional

import torch
import torch.fx
import torch.fx.traceback as fx_traceback
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import rebind_unbacked, resolve_unbacked_bindings

from ..composite_kernels import steer_composites
from ..decomp_table import TableView, as_table, can_keep_composite
from ..dynamic.symbol_names import dim_names, with_dim_names
from ..errors import ConstantMutationError, GraphcapError, TraceError, UnsupportedError
from ..node_facts import hidden_write
from ..shape_env_copies import ValueMover, fake_mode_of_graph, general_hints, own_fake_mode
from ..signature import (
    MUTATION_OUTPUT_KINDS,
    ExportGraphSignature,
    InputKind,
    OutputKind,
    OutputSpec,
    TensorArgument,
    call_graph_of,
    mutation_key,
)
from ..torch_private import functional, pytree
from ..torch_private.dispatch import backend_kernels_off_for_a_retrace, enable_python_dispatcher, set_grad_enabled
from ..torch_private.fake import (
    FakeTensorMode,
    copies_check_broadcast_only,
    item_rule_present,
    one_argument_where_decomposed,
    slice_ends_clamped_symbolically,
)
from ..torch_private.functional import FunctionalTensor, FunctionalTensorMode
from ..torch_private.fx import code_generated_on_first_use, interpreting_node, plain_graph_module
from ..torch_private.ops import OpOverload, schema_of
from ..torch_private.shapes import (
    backed_size_oblivious,
    example_values,
    guards,
    keep_only_facts,
    questions_answered,
    symbol_ranges,
)
from ..torch_private.symbolic import ValueRanges
from ..trace import metadata
from ..trace.lifting import argument_for
from ..trace.naming import assert_names, subgraph_names
from ..trace.naming.owed_names import apply_owed_names
from . import decomposition_checks, simple_inplace
from .call_graph_carry import CallGraphCarry
from .dce import eliminate_dead_code
from .decomposition_memo import DecompositionMemo, memo_for_retrace
from .input_copies import drop_input_copies
from .subclass_flatten import flatten_subclass_state
from .unalias_outputs import unalias_outputs_pass

if TYPE_CHECKING:
    from ..program import ExportedProgram

IR_META_KEY = "graphcap_ir"


class _Replay(torch.fx.Interpreter):
    """Runs the old graph; remembers the node it was at, for error messages.

    Nodes in ``out_of_place`` (see :mod:`.simple_inplace`) run their
    out-of-place operator instead, and every name of the tensor they wrote
    then stands for the result; nodes in ``identity`` stand for their first
    argument.
    """

    current: Optional[torch.fx.Node] = None

    def __init__(self, gm: torch.fx.GraphModule, out_of_place: Optional[dict] = None,
                 carry: Optional[CallGraphCarry] = None, memo: Optional[DecompositionMemo] = None,
                 identity: Optional[set] = None, shape_env: Any = None, questions: Optional[list] = None):
        super().__init__(gm)
        self.shape_env = shape_env
        self.questions = questions  # every size question the ShapeEnv answered, with its answer
        self.out_of_place = out_of_place or {}
        self.identity = identity or set()
        self.carry = carry
        self.memo = memo
        self.guarded_by: list[tuple[Any, torch.fx.Node]] = []  # (guard, the node whose replay raised it)
        # ((question, answer), the node whose replay asked it): a question a guard of an earlier
        # node answered raises no guard of its own
        self.asked: list[tuple[Any, torch.fx.Node]] = []

    def run_node(self, n: torch.fx.Node) -> Any:
        guards_before = len(guards(self.shape_env)) if self.shape_env is not None else 0
        asked_before = len(self.questions) if self.questions is not None else 0
        value = self._run_node(n)
        if self.shape_env is not None:
            self.guarded_by += [(g.expr, n) for g in guards(self.shape_env)[guards_before:]]
        if self.questions is not None:
            self.asked += [(q, n) for q in dict.fromkeys(self.questions[asked_before:])]
        if n.meta.get("unbacked_bindings") and self.shape_env is not None:
            # a replayed .item() / nonzero() makes a fresh symbol (u2 for the program's u0): it is
            # told the program's own, so the result keeps the names its asserts, ranges and
            # messages use (as torch.export's retrace does)
            rebind_unbacked(self.shape_env, n, value)
        if self.carry is not None:
            self.carry.record(n, value)
        return value

    def _run_node(self, n: torch.fx.Node) -> Any:
        self.current = n
        if n.op == "call_function" and n.target is torch.ops.aten.detach_.default:
            # only autograd sees an in-place detach (it returns its input, cut from the graph of
            # gradients): the inference IR has no autograd, and torch's functionalization drops it
            return self.env[n.args[0]]
        if n in self.identity:  # an in-place operator that writes nothing here (simple_inplace)
            return self.env[n.args[0]]
        variant = self.out_of_place.get(n)
        if variant is None:
            return super().run_node(n)
        with interpreting_node(self, n):
            args, kwargs = self.fetch_args_kwargs_from_env(n)
            out = variant(*args, **kwargs)
            if out.dtype != args[0].dtype:  # in place keeps the written tensor's dtype
                out = torch.ops.aten._to_copy.default(out, dtype=args[0].dtype)
            alias = n.args[0]
            while True:
                self.env[alias] = out
                if alias not in self.out_of_place:
                    break
                alias = alias.args[0]
            return out

    def call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        if self.memo is None:
            return self._call_function(target, args, kwargs)
        return self.memo.call(target, args, kwargs, lambda: self._call_function(target, args, kwargs))

    def _call_function(self, target: Any, args: tuple, kwargs: dict) -> Any:
        if target is torch.ops.aten.lift_fresh_copy.default:
            # functionalization copies a lifted tensor literal with clone, whatever the table
            # says; torch.export's inference IR shows that clone, so graphcap's does too
            return super().call_function(torch.ops.aten.clone.default, args, kwargs)
        if target is not torch.ops.aten.view.default:
            return super().call_function(target, args, kwargs)
        try:
            return target(*args, **kwargs)
        except (RuntimeError, ValueError):
            # The training IR recorded a view that eager strides allowed; a decomposition upstream
            # (the CPU flash-attention kernel's fake strides, for one) can lay its result out
            # differently. reshape computes the same values whatever the layout.
            return torch.ops.aten.reshape.default(*args, **kwargs)


def _unwrap(value: Any) -> Any:
    if isinstance(value, FunctionalTensor):
        return value.from_functional()
    return value


def _unwrap_as(interpreter: _Replay, node: Any, value: Any) -> Any:
    """``value`` taken out of functionalization as the output ``node`` of the old graph. An output that
    views a tensor the program wrote (``self.buf[1:]`` after ``self.buf.add_(..)``) is made again
    from the written value only now, outside any replayed node: its nodes are ``node``'s, so
    they carry its source line and module stack."""
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return _unwrap(value)
    with interpreting_node(interpreter, node):
        return _unwrap(value)


def _plain_replay_fn(gm: torch.fx.GraphModule, inplace: simple_inplace.InplacePlan, box: dict,
                     carry: CallGraphCarry, memo: Optional[DecompositionMemo], shape_env: Any = None,
                     questions: Optional[list] = None):
    """The function make_fx traces when the program writes nowhere that matters: no functionalization.
    Calls identical to an earlier one are copied from its recording (:mod:`.decomposition_memo`)."""

    def replay(*args: Any) -> tuple:
        carry.reset()
        interpreter = _Replay(gm, inplace.replace, carry, memo, inplace.identity, shape_env, questions)
        box["interpreter"] = interpreter
        outs = interpreter.run(*args, enable_io_processing=False)
        box["mutated"] = []
        return (*(outs if isinstance(outs, (tuple, list)) else (outs,)), *carry.extra_outputs())

    return replay


def _replay_fn(gm: torch.fx.GraphModule, old_mutations: dict[int, int], n_old_mutations: int, box: dict,
               carry: CallGraphCarry, shape_env: Any = None, questions: Optional[list] = None):
    """The function make_fx traces: replay ``gm`` functionally; return mutations then user outputs.

    ``old_mutations`` maps a placeholder index to the position of the output
    that the program already declares as its new value. In the training IR
    that output is the placeholder itself (written in place); in an inference
    IR program it is a computed value, and there is no in-place write to see.
    """

    output_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    returned = output_node.args[0]
    old_outputs = list(returned) if isinstance(returned, (tuple, list)) else [returned]

    def replay(*args: Any) -> tuple:
        with FunctionalTensorMode():
            f_args = [FunctionalTensor.to_functional(a) if isinstance(a, torch.Tensor) else a for a in args]
            carry.reset()
            interpreter = _Replay(gm, carry=carry, shape_env=shape_env, questions=questions)
            box["interpreter"] = interpreter
            outs = interpreter.run(*f_args, enable_io_processing=False)
            outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
            mutated: list[int] = []
            new_values = []
            for i, f in enumerate(f_args):
                if not isinstance(f, FunctionalTensor):
                    continue
                functional.sync(f)
                if functional.has_metadata_mutation(f.elem):
                    box["metadata_mutation"] = i
                declared = old_mutations.get(i)
                if declared is not None and outs[declared] is not f:
                    mutated.append(i)
                    new_values.append(_unwrap(outs[declared]))
                elif functional.has_data_mutation(f.elem) or declared is not None:
                    mutated.append(i)
                    new_values.append(_unwrap(f))
            box["mutated"] = mutated
            user = [_unwrap_as(interpreter, node, o)
                    for node, o in zip(old_outputs[n_old_mutations:], outs[n_old_mutations:])]
        return tuple(new_values + user + carry.extra_outputs())

    return replay


def _size_read(node: torch.fx.Node) -> Optional[tuple[torch.fx.Node, int]]:
    """``(input, dim)`` when ``node`` reads the size of one of the graph's inputs."""
    if node.op != "call_function" or node.target is not torch.ops.aten.sym_size.int:
        return None
    src, dim = node.args[0], node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if isinstance(src, torch.fx.Node) and src.op == "placeholder" and isinstance(dim, int):
        return src, dim
    return None


def _size_reads_first(gm: torch.fx.GraphModule) -> None:
    """Reads of the inputs' sizes right after the placeholders, by input and dim, where the
    exported program has them (the retrace records each where it is first used)."""
    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    if not placeholders:
        return
    position = {p: i for i, p in enumerate(placeholders)}
    reads = [(node, _size_read(node)) for node in gm.graph.nodes]
    ordered = sorted(((position[r[0]], r[1], i), node) for i, (node, r) in enumerate(reads) if r is not None)
    anchor = placeholders[-1]
    for _, node in ordered:
        anchor.append(node)
        anchor = node


def _size_read_names(gm: torch.fx.GraphModule) -> dict[tuple[str, int], str]:
    """``(input name, dim) -> name`` of the node of ``gm`` that reads that size (the first)."""
    names: dict[tuple[str, int], str] = {}
    for node in gm.graph.nodes:
        read = _size_read(node)
        if read is not None:
            names.setdefault((read[0].name, read[1]), node.name)
    return names


def _rename_placeholders(gm: torch.fx.GraphModule, names: list[str],
                         size_reads: Optional[dict[tuple[str, int], str]] = None) -> None:
    """The old program's input names, and the names its reads of an input's size had (a size read
    is no operator to decompose: the program keeps it, so a user who named it before decomposing,
    e.g. ``sym_size_int_1``, finds it under that name after); other nodes move aside as
    torch.export moves them."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    old_name = dict(zip(placeholders, names))
    owed = list(zip(placeholders, names))
    for node in gm.graph.nodes:
        read = _size_read(node)
        if read is not None and read[0] in old_name:
            name = (size_reads or {}).get((old_name[read[0]], read[1]))
            if name is not None:
                owed.append((node, name))
    apply_owed_names(gm.graph, owed)


def _keep_placeholder_values(gm: torch.fx.GraphModule, old_placeholders: list[torch.fx.Node],
                             old_values: list[Any], fake_mode: Any, grad_inputs: set[str]) -> None:
    """Inputs the retrace did not see as values (a ``None`` input) keep the ``val`` they had, and
    every tensor input says whether it requires grad as it did (the retrace runs under
    ``no_grad``, which leaves its inputs' values without the flag): a parameter or an input given
    with ``requires_grad=True`` still says so in the inference IR, as in torch.export's. Only those
    (``grad_inputs``): a buffer is state a program may write in place, which a leaf requiring grad
    refuses (ExecuTorch runs the graph on real tensors)."""
    new = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, old, old_value in zip(new, old_placeholders, old_values):
        if "val" not in node.meta and "val" in old.meta:
            node.meta["val"] = old_value
        if "source_fn_stack" in old.meta and "source_fn_stack" not in node.meta:
            node.meta["source_fn_stack"] = list(old.meta["source_fn_stack"])  # a state input's first reader
        val, was = node.meta.get("val"), old_value
        if old.name in grad_inputs and isinstance(val, torch.Tensor) and isinstance(was, torch.Tensor) \
                and val is not was \
                and was.requires_grad and not val.requires_grad and val.is_leaf \
                and (val.is_floating_point() or val.is_complex()):
            with fake_mode:
                val.requires_grad_(True)


def _keep_input_and_output_annotations(new_gm: torch.fx.GraphModule, old_gm: torch.fx.GraphModule) -> None:
    """The user's ``custom`` annotations on the inputs and the output stay where they were (the
    replay carries those of operator nodes; inputs and the output are made by the tracer)."""
    def ends(gm: torch.fx.GraphModule) -> list[torch.fx.Node]:
        return [n for n in gm.graph.nodes if n.op in ("placeholder", "output")]
    for new, old in zip(ends(new_gm), ends(old_gm)):
        if new.op == old.op and old.meta.get("custom") and "custom" not in new.meta:
            new.meta["custom"] = dict(old.meta["custom"])


def decompose(ep: ExportedProgram, decomp_table: Optional[Mapping] = None, *,
              decompose_custom_triton_ops: bool = False) -> ExportedProgram:
    """``ep`` retraced into the inference IR with ``decomp_table`` (default: to core ATen).

    An operator defined with ``torch.library.triton_op`` is kept (torch.export keeps it: the program
    stays free of backend kernels) unless ``decompose_custom_triton_ops``: then it becomes its
    implementation. Its rule for that runs under functionalization and reads one torch flag, which
    the retrace sets either way; a program holding such an operator to decompose is functionalized."""
    table: TableView = as_table(decomp_table)
    ep = flatten_subclass_state(ep)  # subclass parameters/buffers become their inner tensors
    gm = ep.graph_module
    sig = ep.graph_signature
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    # the retrace runs in a copy of the program's ShapeEnv, on its inputs moved there: what the
    # retrace, and later any consumer of the result, learns about the symbols stays with the
    # result (docs/consumers.md, "Programs derived from one another")
    # sizes exported at 0 or 1 are retraced with an example of 2: a kernel's size question (a
    # reshape's view-or-copy) then takes the general path, valid at every size of the range; the
    # retrace answers size questions for the general size and slices and copies by the export's
    # rules, as the export did (x[:3] stays Min(3, n) rows, not a guard n >= 3 from the example)
    asserted = _asserted(gm)  # the program's runtime asserts: what the new examples must keep true

    fake_mode = own_fake_mode(fake_mode_of_graph(gm))
    _forget_unheld_guards(fake_mode.shape_env, ep.range_constraints, asserted)
    move = ValueMover(fake_mode, general_hints(fake_mode.shape_env, ep.range_constraints, asserted))
    fake_args = [move(p.meta.get("val")) for p in placeholders]

    # every graph the retrace replays: the top one and those of its regions and branches
    # (a composite called only under ``with torch.no_grad():`` or in a cond branch is kept too)
    used_ops = {n.target for sub in gm.modules() if isinstance(sub, torch.fx.GraphModule)
                for n in sub.graph.nodes if n.op == "call_function"}
    triton_ops_to_split = decompose_custom_triton_ops and any(functional.is_triton_op(op) for op in used_ops)
    keep = {op for op in used_ops | table.deleted if table.keeps_composite(op)}
    if table.calls_user_functions:
        # torch.export keeps whole every composite a plain table does not list, also when
        # one of the table's functions calls it (linear -> matmul stays matmul)
        keep |= table.composites_kept()
    # a composite whose schema hides a write (instance_norm updating its running statistics in
    # training mode) cannot stay whole in a functional program: broken down, its write becomes a
    # BUFFER_MUTATION output as every other write does (torch.export keeps it, writing in place)
    keep -= _composites_that_write(gm)
    replace = {op: fn for op, fn in table.entries.items() if can_keep_composite(op)}
    python_table = {op: fn for op, fn in table.entries.items() if op not in replace}

    old_mutations = _declared_mutations(sig)
    n_old_mutations = sum(1 for s in sig.output_specs if s.kind in MUTATION_OUTPUT_KINDS)
    box: dict[str, Any] = {}
    inplace = simple_inplace.plan(gm, has_declared_mutations=bool(old_mutations),
                                  has_symbols=bool(ep.range_constraints))
    carry = CallGraphCarry(gm, call_graph_of(ep))  # the signatures' values, found again in the new graph

    @contextlib.contextmanager
    def retrace_rules() -> Iterator[None]:
        """How the retrace runs: on the program's fake mode, with the table's composites kept or
        replaced, without grad, and with the export's own rules for sizes, slices and copies."""
        grad = torch.is_grad_enabled()
        try:
            with fake_mode, enable_python_dispatcher(), fx_traceback.preserve_node_meta(), \
                    metadata.no_user_frame_marked(gm), steer_composites(keep, replace), torch.no_grad(), \
                    one_argument_where_decomposed(), item_rule_present(), code_generated_on_first_use(), \
                    functional.triton_ops_decomposed(decompose_custom_triton_ops), \
                    backend_kernels_off_for_a_retrace(), slice_ends_clamped_symbolically(), \
                    copies_check_broadcast_only(), backed_size_oblivious():
                yield
        finally:
            set_grad_enabled(grad)

    def trace(functionalize: bool) -> torch.fx.GraphModule:
        box.clear()
        env = fake_mode.shape_env
        questions: list = []
        replay = (_replay_fn(gm, old_mutations, n_old_mutations, box, carry, env, questions) if functionalize
                  else _plain_replay_fn(gm, inplace, box, carry,
                                        memo_for_retrace(fake_mode, fake_args, bool(ep.range_constraints),
                                                         python_table), env, questions))
        try:
            with retrace_rules(), (questions_answered(env, lambda q, a: questions.append((q, a)))
                                   if env is not None else contextlib.nullcontext()):
                traced = make_fx(replay, decomposition_table=python_table)(*fake_args)
            metadata.unmark_no_user_frame(traced)
            return traced
        except GraphcapError:
            raise
        except Exception as e:
            raise _explain(e, box) from e

    def trace_one(call: Callable[..., Any], values: list) -> torch.fx.GraphModule:
        """``call`` (one operator of the program, on ``values``: its tensor and size arguments,
        given in the program's fake mode) decomposed as the retrace decomposes it."""
        with retrace_rules():
            return make_fx(call, decomposition_table=python_table)(*[move(v) for v in values])

    # Functionalization is the costly engine; a program that writes only to tensors it just
    # computed does not need it, unless a decomposition brought a write in.
    # The traced module generates its code on first use: its graph changes below, and the code is
    # generated once, when the graph is final.
    functionalize = inplace.needs_functionalization or triton_ops_to_split
    known_before = _what_env_knows(ep, fake_mode)
    new_gm = trace(functionalize=functionalize)
    if not functionalize and simple_inplace.has_mutation(new_gm):
        new_gm = trace(functionalize=True)
    _check_no_range_narrowed(ep, fake_mode, known_before, asserted)
    interpreter = box.get("interpreter")
    decomposition_checks.decompositions_hold_where_guards_fail(
        ep, fake_mode.shape_env, interpreter.guarded_by if interpreter is not None else [],
        interpreter.asked if interpreter is not None else [], asserted, trace_one)

    if "metadata_mutation" in box:
        p = placeholders[box["metadata_mutation"]]
        raise UnsupportedError(
            f"The program changes the shape or strides of its input {p.name!r} in place (e.g. "
            f"x.t_(), x.resize_()); the inference IR cannot express that as an output.",
            where=f"graph input {p.name}",
            fix="Use the out-of-place form (x = x.t()) in the model.")

    _bindings_renamed(new_gm, fake_mode.shape_env)
    drop_input_copies(new_gm)
    _rename_placeholders(new_gm, [p.name for p in placeholders], _size_read_names(gm))
    _size_reads_first(new_gm)
    subgraph_names.name_subgraph_inputs(new_gm)
    assert_names.name_runtime_asserts(new_gm)
    grad_inputs = {spec.arg.name for spec in sig.input_specs
                   if spec.kind in (InputKind.PARAMETER, InputKind.USER_INPUT) and hasattr(spec.arg, "name")}
    _keep_placeholder_values(new_gm, placeholders, fake_args, fake_mode, grad_inputs)
    _keep_input_and_output_annotations(new_gm, gm)
    carry.take(new_gm)
    new_gm.graph.lint()
    for sub in new_gm.modules():
        if isinstance(sub, torch.fx.GraphModule):
            metadata.attribute_size_reads(sub)
            metadata.propagate_missing_vals(sub, fake_mode)
    metadata.finalize(new_gm)
    eliminate_dead_code(new_gm, generate_code=False)  # what the retrace left unused goes before the code is made
    # make_fx names the class after the traced function; the program's class is GraphModule, as
    # export's is (each GraphModule has a class of its own, which fx's constructor names alike)
    new_gm = plain_graph_module(new_gm, "GraphModule")

    new_sig = _signature(new_gm, sig, placeholders, box["mutated"])
    user_outputs = [s.arg for s in new_sig.output_specs if s.kind is OutputKind.USER_OUTPUT]
    new_gm.meta[IR_META_KEY] = {"level": "inference", "kept": _kept_ops(new_gm, table)}
    if gm.meta.get("custom"):  # the user's annotations of the whole program stay with it
        new_gm.meta["custom"] = dict(gm.meta["custom"])
    # The new program gets its own state and constant tables (the same tensors): a consumer that
    # edits the result's tables in place (ExecuTorch drops unused parameters, lifts constants)
    # leaves the program it came from as it was.
    new_ep = ep._new_program(new_gm, new_sig, dict(ep.state_dict), _ranges_with_new_symbols(new_gm, ep, fake_mode),
                             carry.call_graph(call_graph_of(ep), user_outputs), ep.example_inputs,
                             dict(ep.constants), verify=False)
    return unalias_outputs_pass(new_ep)


def _implied(sym: Any, value: Any, asserted: list) -> bool:
    """Whether ``sym == value`` is one of the program's own runtime asserts (``Eq(x, y - 4)`` read
    as ``y = x + 4``): the retrace replaying the assert learns it, which narrows nothing."""
    import sympy
    for cond in asserted:
        if sym not in cond.free_symbols:
            continue
        replaced = cond.xreplace({sym: value})
        sizes = {s: sympy.Symbol(s.name, integer=True, nonnegative=True) for s in replaced.free_symbols}
        # torch's own Min/Max do not simplify: sympy's do, with sizes >= 0 (Min(4, s + 4) is 4)
        plain = replaced.xreplace(sizes).replace(
            lambda e: type(e).__name__ in ("Min", "Max") and type(e).__module__.startswith("torch"),
            lambda e: (sympy.Min if type(e).__name__ == "Min" else sympy.Max)(*e.args))
        if sympy.simplify(plain) is sympy.true:
            return True
    return False


def _asserted(gm: torch.fx.GraphModule) -> list:
    """The conditions the program asserts at run time (``_assert_scalar`` nodes), as expressions."""
    out = []
    for sub in gm.modules():
        if isinstance(sub, torch.fx.GraphModule):
            for node in sub.graph.find_nodes(op="call_function", target=torch.ops.aten._assert_scalar.default):
                cond = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
                if isinstance(cond, torch.SymBool):
                    out.append(cond.node.expr)
    return out


def _bindings_renamed(new_gm: torch.fx.GraphModule, env: Any) -> None:
    """Each node's ``unbacked_bindings`` in the names the replay gave its fresh symbols back
    (:meth:`_Replay.run_node`): ``{u2: ()}`` becomes the program's ``{u0: ()}``."""
    if env is None:
        return
    for gm in new_gm.modules():
        if isinstance(gm, torch.fx.GraphModule):
            for node in gm.graph.nodes:
                bindings = node.meta.get("unbacked_bindings")
                if bindings:
                    node.meta["unbacked_bindings"] = resolve_unbacked_bindings(env, bindings)


def _ranges_with_new_symbols(new_gm: torch.fx.GraphModule, ep: ExportedProgram,
                             fake_mode: FakeTensorMode) -> dict:
    """The program's ranges, plus one for every symbol the retrace made.

    Replaying a data-dependent operator (``.item()``, ``nonzero()``) makes a
    fresh unbacked symbol (``u1`` for the old ``u0``); the replayed
    ``torch._check`` asserts have already narrowed its range in the ShapeEnv,
    which is where its entry comes from.
    """
    ranges = dict(ep.range_constraints)
    env = fake_mode.shape_env
    if env is None:
        return ranges
    known = {str(k) for k in ranges}
    for gm in new_gm.modules():
        if not isinstance(gm, torch.fx.GraphModule):
            continue
        for node in gm.graph.nodes:
            for value in pytree.tree_leaves(node.meta.get("val")):
                sizes = list(value.shape) if isinstance(value, torch.Tensor) else [value]
                for size in sizes:
                    if not isinstance(size, (torch.SymInt, torch.SymFloat, torch.SymBool)):
                        continue
                    for sym in env.replace(size.node.expr).free_symbols:
                        if str(sym) not in known:
                            known.add(str(sym))
                            ranges[sym] = symbol_ranges(env).get(sym, ValueRanges.unknown())
    return ranges


def _forget_unheld_guards(env: Any, ranges: dict, asserted: list) -> None:
    """The retrace knows of the input sizes only what the program holds: their ranges, relations
    and runtime asserts. A guard the export recorded inside the fake kernel of an operator it kept
    whole (bicubic's ``out_size > 1``) holds for no input of the program; left in the ShapeEnv, it
    would answer that operator's decomposition's question for every size, silently. A user's own
    size question the program was found not to depend on (``if x.shape[0] > 1: ...`` with the same
    result at 1) narrowed the ShapeEnv's range below the program's: each range is the program's."""
    if env is None:
        return
    sizes = {sym for sym in ranges if getattr(sym, "is_Symbol", False)}
    known = symbol_ranges(env)
    for sym in sizes & example_values(env).keys():  # input sizes (a value read from data keeps its range)
        known[sym] = ranges[sym]
    held = set(asserted)
    keep_only_facts(env, lambda expr: expr in held or not expr.free_symbols <= sizes)


def _what_env_knows(ep: ExportedProgram, fake_mode: FakeTensorMode) -> tuple[int, dict]:
    """How many guards the retrace's ShapeEnv holds, and what it replaces each symbol of the
    program's ranges by, before the retrace."""
    env = fake_mode.shape_env
    if env is None:
        return 0, {}
    return len(guards(env)), {sym: env.replace(sym) for sym in ep.range_constraints
                                     if getattr(sym, "is_Symbol", False)}


def _check_no_range_narrowed(ep: ExportedProgram, fake_mode: FakeTensorMode, known_before: tuple[int, dict],
                             asserted: list) -> None:
    """Refuse a retrace that fixed a size the program leaves open.

    The retrace asks its questions on the program's symbols; one that settles a symbol (to the
    example's size, or to another symbol) would make the result's inputs hold that size:
    ``module()`` would refuse sizes the program takes although its range constraints list them.
    Better an error naming the decision than a narrower program; a settlement the program's own
    runtime asserts state (``Eq(x, y - 4)``) is none. (A guard that only bounds or
    excludes a size, ``Ne(s, 1)`` or ``s >= 2``, is left: the decomposed code is the same on both
    sides of it in torch's decompositions, as a view of an expanded tensor is.)"""
    env = fake_mode.shape_env
    guards_before, before = known_before
    if env is None or not before:
        return
    narrowed = [f"{sym} = {env.replace(sym)}" for sym, replaced in before.items()
                if env.replace(sym) != replaced and not _implied(sym, env.replace(sym), asserted)]
    if not narrowed:
        return
    names = dim_names(ep)
    decided = [with_dim_names(g.expr, names) for g in guards(env)[guards_before:]]
    declared_ranges = ", ".join(f"{with_dim_names(sym, names)} in [{vr.lower}, {vr.upper}]"
                                for sym, vr in ep.range_constraints.items() if sym in before)
    raise UnsupportedError(
        f"run_decompositions would narrow the sizes the program accepts: the retrace decided "
        f"{with_dim_names('; '.join(narrowed), names)}" + (f" (from {', '.join(decided)})" if decided else "")
        + f", where the program holds for {declared_ranges}.",
        where="ExportedProgram.run_decompositions",
        fix="Export with a Dim whose range leaves out the size the decomposition singles out (for a "
            "special case of size 1: Dim('name', min=2)), or keep the operator whole: delete it from "
            "the decomposition table (del table[op]).")


def _composites_that_write(gm: torch.fx.GraphModule) -> set:
    """Operators of ``gm`` (and its subgraphs) called so that they write an argument their schema
    does not mark as written."""
    return {n.target for sub in gm.modules() if isinstance(sub, torch.fx.GraphModule)
            for n in sub.graph.nodes if n.op == "call_function" and hidden_write(n)}


def _declared_mutations(sig: ExportGraphSignature) -> dict[int, int]:
    """Placeholder index → output position, for every mutation the signature declares."""
    written = sig.written_input_positions()
    declared = {}
    for k, spec in enumerate(sig.output_specs):
        position = written.get((spec.kind, spec.target))
        if position is not None:
            declared[position] = k
    return declared


def _kept_ops(gm: torch.fx.GraphModule, table: TableView) -> frozenset:
    """Non-core operators left in the graph that the table does not break down."""
    kept = set()
    nodes = [n for m in gm.modules() if isinstance(m, torch.fx.GraphModule) for n in m.graph.nodes]
    for node in nodes:
        op = node.target
        if node.op == "call_function" and isinstance(op, OpOverload) \
                and torch.Tag.core not in op.tags and not table.decomposes(op):
            kept.add(op.name())
    return frozenset(kept)


def _signature(gm: torch.fx.GraphModule, old: ExportGraphSignature, placeholders: list[torch.fx.Node],
               mutated: list[int]) -> ExportGraphSignature:
    output_node = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    values = list(output_node.args[0])
    input_specs = [type(s)(s.kind, s.arg, s.target, s.persistent) for s in old.input_specs]
    output_specs: list[OutputSpec] = []
    for i, value in zip(mutated, values):
        spec = old.input_specs[i]
        key = mutation_key(spec)  # a parameter's is an update under no_grad (torch keeps the same kind)
        if key is not None:
            output_specs.append(OutputSpec(key[0], TensorArgument(value.name), key[1]))
        else:
            raise ConstantMutationError(
                f"Constant {spec.target} is written in place by the program, but a lifted constant "
                f"is an input that may not change.",
                where=f"graph input {placeholders[i].name}",
                fix="Register the tensor as a buffer (self.register_buffer(name, tensor)) if forward "
                    "updates it.")
    old_user = [s for s in old.output_specs if s.kind is OutputKind.USER_OUTPUT]
    for spec, value in zip(old_user, values[len(mutated):]):
        arg = argument_for(value, spec.arg.name) if isinstance(value, torch.fx.Node) else spec.arg
        output_specs.append(OutputSpec(OutputKind.USER_OUTPUT, arg))
    return ExportGraphSignature(input_specs, output_specs)


def _explain(e: Exception, box: dict) -> GraphcapError:
    interpreter = box.get("interpreter")
    node = getattr(interpreter, "current", None)
    where = None
    if node is not None:
        where = f"node {node.name} ({node.target})"
        trace = node.meta.get("stack_trace")
        if trace:
            where += "\n" + trace.rstrip()
    text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
    written_return = _custom_op_returning_its_written_argument(node)
    if written_return is not None:
        schema, name, writes = written_return
        returned = "the argument it writes" if writes else "a view of an argument"
        return TraceError.like(
            e, f"run_decompositions cannot make the custom operator {name} functional: its schema "
               f"`{schema}` returns {returned} (an alias of an input), and torch's functionalization "
               f"takes custom operators only when no output aliases an input (torch.export fails here too).",
            where=where,
            fix=f"Define {name} to return nothing (`-> ()`) and use the written argument after the call "
                f"(torch.library.custom_op with mutates_args=(...) and a None return), or to return a new "
                f"tensor (`-> Tensor`, its kernel returning a clone). The training IR `export` returns runs "
                f"it as it is.")
    return TraceError(
        f"run_decompositions failed while retracing the program: {type(e).__name__}: {text}",
        where=where,
        fix="If a custom decomposition in the table raised, fix or remove that entry; to keep the "
            "operator whole, delete it from the table (del table[op]). Otherwise this is a graphcap bug.")


def _custom_op_returning_its_written_argument(node: Any) -> Optional[tuple[str, str, bool]]:
    """(schema, name, whether the alias is written) when ``node`` calls an operator outside ATen an
    output of which aliases an argument (``Tensor(a!) x -> Tensor(a!)``, or a view ``Tensor(a)``),
    which functionalization cannot take; else None."""
    target = getattr(node, "target", None)
    if not isinstance(target, OpOverload) or target.namespace in ("aten", "prims"):
        return None
    schema = schema_of(target)
    aliased = [r.alias_info for r in schema.returns if r.alias_info is not None] if schema is not None else []
    if not aliased:
        return None
    return (str(schema), f"torch.ops.{target.namespace}.{schema.name.split('::')[-1]}",
            any(a.is_write for a in aliased))
