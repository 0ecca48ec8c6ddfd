"""Strict capture: dynamo reads the program's bytecode, graphcap records what it found.

``export(..., strict=True)`` differs from non-strict in its front end only.
dynamo (torch's bytecode analyser, docs/architecture.md's one allowed use of it) runs
the user's Python symbolically and hands back one torch-level fx graph, or
refuses the program: a construct it cannot put in a graph (a graph break) or a
side effect on state outside the program is an error here, as strict users
expect. The graph it returns is then *replayed* by :class:`DynamoGraphReplay`
in place of the user's callable, through the very pipeline non-strict uses
(``graphcap.capture.non_strict``): the recorder, lifting, signature, guards
and the verifier. So a program is the same whichever way it came in:
parameters keep their FQNs (dynamo's graph reaches the module's own tensor
objects, which the replay fetches from the module by FQN), placeholders are
named alike, and the spec is checked by graphcap.

Two things cross from dynamo's trace to graphcap's:

- node metadata: each dynamo node's user stack trace and module stack (turned
  into graphcap's FQNs and call keys) is the current node metadata while it is
  replayed, so the ATen nodes it records carry them;
- shape guards: dynamo specialized or branched on symbolic sizes while reading
  the bytecode, and those decisions are not in its graph. Each guard is
  restated over graphcap's symbols and guarded in graphcap's ShapeEnv, with
  dynamo's source line, so the spec check (and its suggested fixes) sees it.
"""
from __future__ import annotations

import contextlib
import copy
import re
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any, Optional

import torch
import torch.fx
import torch.fx.traceback as fx_traceback

from ..errors import UnsupportedError
from ..torch_private import dispatch as dispatch_private
from ..torch_private import dynamo as dynamo_private
from ..torch_private import fake as fake_private
from ..torch_private import fx as fx_private
from ..torch_private import higher_order as higher_order_private
from ..torch_private import pytree, real_values
from ..torch_private import shapes as shapes_private
from ..torch_private import user_specs as user_specs_private
from ..trace import fakify, module_state, recorder
from ..trace.module_paths import call_key, call_name_of_key, fqn_of_source
from . import call_signatures, non_strict, strict_call_boundaries, strict_refusals, strict_shapes


def export_strict(mod: Any, args: Any, kwargs: Any = None, *, dynamic_shapes: Any = None,
                  preserve_module_call_signature: tuple[str, ...] = (),
                  prefer_deferred_asserts: bool = False):
    """Export ``mod`` with dynamo as the front end; the rest is non-strict's pipeline.

    Preserved submodules' calls are marked in dynamo's graph and reported to the call
    recorder by the replay (``graphcap.capture.strict_call_boundaries``)."""
    root = non_strict.resolve_target(mod).root
    # a graph module exported again (a program's module()) calls no submodule: names left out, a warning
    preserved = call_signatures.preserved_modules(root, preserve_module_call_signature,
                                                  replays_graph=isinstance(root, torch.fx.GraphModule), stacklevel=5)

    replays: list[DynamoGraphReplay] = []

    def front(target: Any, args: tuple, kwargs: dict, user_leaves: list, fake_user: list) -> "DynamoGraphReplay":
        replays.append(_front(target, args, kwargs, user_leaves, fake_user, preserved))
        return replays[-1]

    # A graph module (a program's module(), a make_fx or symbolic_trace graph) is generated code:
    # dynamo has nothing of the user's to read there (no bytecode of theirs, no side effects), and
    # trips over module()'s own input checks; non-strict's front end runs it, replaying a graph
    # that says where each node came from node by node with that metadata.
    front_end = None if isinstance(mod, torch.fx.GraphModule) else front
    ep = non_strict.export_non_strict(mod, args, kwargs, dynamic_shapes=dynamic_shapes,
                                      preserve_module_call_signature=tuple(preserved),
                                      prefer_deferred_asserts=prefer_deferred_asserts, front=front_end,
                                      strict=True)
    _state_placeholders_name_their_first_use(ep)
    if replays and replays[0].marker is not None:
        strict_call_boundaries.warn_unrecorded_calls(ep, strict_call_boundaries.marked_in_branches(
            replays[0].gm, replays[0].marker))
    return ep


def _state_placeholders_name_their_first_use(ep: Any) -> None:
    """Each parameter, buffer and constant placeholder carries the ``source_fn_stack`` of the first
    operator that reads it, as torch.export's strict mode leaves it (dynamo reads module tensors
    where the user's call uses them; tools written for strict programs look there)."""
    state_kinds = {"PARAMETER", "BUFFER", "CONSTANT_TENSOR"}
    specs = ep.graph_signature.input_specs
    placeholders = [n for n in ep.graph_module.graph.nodes if n.op == "placeholder"]
    for spec, node in zip(specs, placeholders):
        if spec.kind.name not in state_kinds:
            continue
        first = next((u for u in node.users if "source_fn_stack" in u.meta), None)
        if first is not None:
            node.meta["source_fn_stack"] = list(first.meta["source_fn_stack"])


@contextlib.contextmanager
def copies_broadcast_by_copy() -> Iterator[None]:
    """While dynamo reads the program, a copy of a value into a slice of symbolic size records
    only eager's broadcast condition, as non-strict's trace does
    (``graphcap.trace.python_overrides``): the copy's fake kernel checks the broadcast alone,
    and c10's shortcut question "do these two symbolic sizes match?" (asked, with
    ``guard_or_false``, only by setitem's and ``expand_inplace``'s skip of an expansion the
    following copy or operator broadcasts itself) answers yes where the engine cannot decide.
    Dynamo runs setitem on its own fake tensors, out of reach of a per-call override (and
    before torch 2.13 setitem asks with a guard, which this answer does not reach)."""
    with fake_private.copies_check_broadcast_only(), shapes_private.undecided_size_equalities_taken_as_equal():
        yield


# Set by draft_export while it captures: called with (condition, user's line or None) for every
# data-dependent question dynamo answers with the example's real values. dynamo then runs with real
# tensors propagated and writes the assert of each answer into its graph, which the replay records.
DRAFT_DECISIONS: ContextVar[Optional[Callable[[Any, Optional[tuple[str, int, str, str]]], None]]] = \
    ContextVar("graphcap_strict_draft_decisions", default=None)


@contextlib.contextmanager
def _real_values_in_dynamo(decided: Optional[Callable[[Any, Optional[tuple[str, int, str, str]]], None]]) \
        -> Iterator[None]:
    if decided is None:
        yield
        return
    with real_values.real_tensor_propagation(), \
            real_values.real_value_decisions_logged(lambda c: decided(c, dynamo_private.traced_user_line())):
        yield


def _front(target: Any, args: tuple, kwargs: dict, user_leaves: list, fake_user: list,
           preserved: dict[str, torch.nn.Module]) -> "DynamoGraphReplay":
    """Run dynamo on the real example inputs (dims graphcap made symbolic marked maybe-dynamic), the
    ``preserved`` submodules' calls marked in its graph."""
    args, kwargs, user_leaves = _repeated_tensors_aliased(args, kwargs, user_leaves)
    marks = []
    for leaf, fake in zip(user_leaves, fake_user):
        if isinstance(leaf, torch.Tensor) and isinstance(fake, torch.Tensor):
            marks.extend((leaf, d) for d, size in enumerate(fake.shape) if isinstance(size, torch.SymInt))
    args, kwargs = _dynamic_ints_left_symbolic(args, kwargs, user_leaves, fake_user)
    owners = _buffer_owners(target.root)
    entry = _entry_for(target.call, args, kwargs, owners)

    decided = DRAFT_DECISIONS.get()

    def capture(sizes_0_1_symbolic: bool) -> tuple:
        # dynamo runs what it captured, grad-mode switches forward leaves behind included
        # (torch.set_grad_enabled(False) never switched back): the process keeps its own grad mode,
        # as non-strict's recording keeps it
        with _grad_mode_kept(), dynamo_private.dims_marked_dynamic(marks), recorder.backend_neutral(), \
                shapes_private.backed_size_oblivious(sizes_0_1_symbolic), \
                copies_broadcast_by_copy(), _real_values_in_dynamo(decided), \
                strict_call_boundaries.marked_calls(preserved) as marker:
            gm, side_effects = dynamo_private.capture_torch_level_graph(entry, args, kwargs,
                                                                        runtime_asserts=decided is not None)
        return gm, side_effects, marker

    # dynamo reads sizes as non-strict's trace does (size questions answered for the general size):
    # a dim the spec makes dynamic whose example is 0 or 1 stays symbolic, so a size-1 example does
    # not give a program that holds only that size, and x[:3] stays Min(3, s) rather than a guard.
    # Where the program cannot be read that way (it really needs the size 1, e.g. broadcasting it
    # against another size), dynamo reads it again with the example's size, and graphcap's spec
    # check reports the specialization as for any other.
    has_0_1 = any(t.shape[d] in (0, 1) for t, d in marks)
    try:
        try:
            gm, side_effects, marker = capture(True)
        except dynamo_private.front_end_error_types():
            if not has_0_1:
                raise
            gm, side_effects, marker = capture(False)
    except dynamo_private.front_end_error_types() as e:
        refused = strict_call_boundaries.refused_at_boundary(e, target, preserved) if preserved else None
        raise (refused or strict_refusals.explain_refusal(e, target)) from e
    outside = [n for n in side_effects if strict_refusals.is_outside_state(n)]
    if outside:
        strict_refusals.warn_side_effects(outside, target)
    # attributes of the module forward changes: told as non-strict tells them (it restores them)
    module_state.warn_assigned(strict_refusals.module_attribute_writes(side_effects, target), strict=True)
    return DynamoGraphReplay(gm, target.root, marker, owners)




@contextlib.contextmanager
def _grad_mode_kept() -> Iterator[None]:
    enabled = torch.is_grad_enabled()
    try:
        yield
    finally:
        torch.set_grad_enabled(enabled)


def _repeated_tensors_aliased(args: tuple, kwargs: dict, user_leaves: list) -> tuple[tuple, dict, list]:
    """``(args, kwargs, leaves)`` with each tensor passed again (``f(x, x)``) replaced by an alias of
    it (``fakify.distinct_leaves``): dynamo makes one graph input of one tensor object, which would
    leave the program reading both inputs from one placeholder, as non-strict's fakes would."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    if len(leaves) != len(user_leaves):
        return args, kwargs, user_leaves  # inputs regrouped (modules among them)
    distinct = fakify.distinct_leaves(leaves)
    if all(a is b for a, b in zip(distinct, leaves)):
        return args, kwargs, user_leaves
    args, kwargs = pytree.tree_unflatten(distinct, spec)
    return args, kwargs, distinct


def _dynamic_ints_left_symbolic(args: tuple, kwargs: dict, user_leaves: list, fake_user: list) -> tuple:
    """``(args, kwargs)`` with each int input the spec made symbolic wrapped so that dynamo keeps it
    symbolic: dynamo bakes Python ints into its graph, and a program holding the example's value
    where its spec promises any value would compute with the wrong number for every other one."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    if len(leaves) != len(user_leaves):
        return args, kwargs  # inputs regrouped (modules among them): the spec check refuses instead
    changed = False
    for i, (leaf, fake) in enumerate(zip(leaves, fake_user)):
        if type(leaf) is int and isinstance(fake, torch.SymInt):
            leaves[i] = user_specs_private.int_marked_dynamic_for_dynamo(leaf)
            changed = True
    return pytree.tree_unflatten(leaves, spec) if changed else (args, kwargs)


def _buffer_owners(root: Optional[torch.nn.Module]) -> list[tuple[torch.nn.Module, str]]:
    """Each buffer of ``root`` as (the module holding it, its name there), once per tensor."""
    if root is None or isinstance(root, torch.fx.GraphModule):
        return []
    owners = []
    for fqn, _ in root.named_buffers():
        prefix, _, name = fqn.rpartition(".")
        owners.append((root.get_submodule(prefix) if prefix else root, name))
    return owners


def _entry_for(call: Any, args: tuple, kwargs: dict, buffer_owners: list[tuple[torch.nn.Module, str]]) -> Any:
    """A fresh function calling ``call``: what dynamo is given to read.

    dynamo's full-graph export drops every compiled entry of the code object it
    starts from, before and after; starting from graphcap's own code object
    rather than the user's ``forward`` keeps the user's own ``torch.compile``
    caches intact. The call goes through ``nn.Module.__call__``, hooks included,
    as in non-strict.

    Its parameters are only the kinds the call passes: ``(*args)`` for a positional call,
    ``(**kwargs)`` for a keyword call. dynamo, when a program does no tensor operation
    (``return x.shape[0] * 2``), builds its graph by pairing the entry's parameter names with the
    flat inputs, one each; ``(*args, **kwargs)`` names two, and a program with one input failed
    with an IndexError inside dynamo (torch's own strict export passes).

    With buffers, it also returns the tensor each holds once the call is done: dynamo leaves a
    store like ``self.buf = self.buf + x`` out of its graph (a side effect on the module), so the
    replay puts the new tensor back in the module and the program updates the buffer, as
    non-strict's does.
    """
    def with_buffers(out: Any) -> Any:
        if not buffer_owners:
            return out
        after = []  # a loop: dynamo refuses to trace a generator expression in some programs
        for owner, name in buffer_owners:
            after.append(getattr(owner, name))
        return out, tuple(after)

    if args and not kwargs:
        def graphcap_strict_entry(*args: Any) -> Any:
            return with_buffers(call(*args))
    elif kwargs and not args:
        def graphcap_strict_entry(**kwargs: Any) -> Any:  # one name, which stack traces drop
            return with_buffers(call(**kwargs))
    else:
        def graphcap_strict_entry(*args: Any, **kwargs: Any) -> Any:
            return with_buffers(call(*args, **kwargs))
    return graphcap_strict_entry


def _without_entry_frame(stack_trace: Optional[str]) -> Optional[str]:
    """A dynamo stack trace without the frame of :func:`_entry_for`'s function, laid out as graphcap's."""
    if not stack_trace:
        return stack_trace
    frames = re.split(r"(?m)^(?=\s*File \")", stack_trace)
    kept = [f for f in frames
            if f.strip() and not (f'in {strict_refusals.ENTRY_NAME}' in f.splitlines()[0] and __file__ in f)]
    # without the caret lines under the code (graphcap's own stack traces have none)
    lines = [line for line in "".join(kept).splitlines() if not re.fullmatch(r"\s*[\^~]+\s*", line)]
    return "\n".join(lines)


# --- metadata ----------------------------------------------------------------------------------

class _ModuleStacks:
    """Turns dynamo's ``nn_module_stack`` entries into graphcap's (``L__self__<fqn>[@n]`` → (fqn, class))."""

    def __init__(self, root: Optional[torch.nn.Module]):
        self.root = root
        self.names_by_id = {}
        if root is not None:
            for name, module in root.named_modules(remove_duplicate=False):
                self.names_by_id.setdefault(id(module), name)
        self.calls: dict[str, int] = {}
        self.last_key: dict[str, str] = {}  # dynamo's key of the latest call of each module

    def _fqn(self, key: str, path: str) -> str:
        fqn = fqn_of_source(path)
        if self.root is not None:
            try:
                self.root.get_submodule(fqn)
                return fqn
            except AttributeError:
                pass
            module_id = key.split("@")[0]
            if module_id.isdigit() and int(module_id) in self.names_by_id:
                return self.names_by_id[int(module_id)]
        return fqn

    def convert(self, stack: Optional[dict]) -> dict:
        out: dict = {}
        if self.root is not None:
            out[call_key("")] = ("", type(self.root))
        for key, (path, cls) in (stack or {}).items():
            fqn = self._fqn(str(key), str(path))
            if not fqn:
                continue
            # dynamo keys each call of a module apart (``<id>``, ``<id>@1``, ...): a new key starts
            # the module's next call; nodes outside the module between two of one call's nodes (a
            # namedtuple built for its output) do not end the call
            if self.last_key.get(fqn) != key:
                self.calls[fqn] = self.calls.get(fqn, -1) + 1
                self.last_key[fqn] = key
            n = self.calls[fqn]
            out[call_key(fqn if n == 0 else f"{fqn}@{n}")] = (fqn, cls)
        return out


def _without_outer_grad_switches(forward: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``forward`` without the grad switch before its first operator and after its last."""
    forward = copy.deepcopy(forward)
    graph = forward.graph
    body = [n for n in graph.nodes if n.op not in ("placeholder", "output")]
    for node in {body[0], body[-1]} if body else ():
        if node.op == "call_function" and node.target is dispatch_private.set_grad_enabled and not node.users:
            graph.erase_node(node)
    forward.recompile()
    return forward


def _prepare_metadata(gm: torch.fx.GraphModule, root: Optional[torch.nn.Module]) -> None:
    """Give dynamo's nodes graphcap's module stacks; drop what graphcap derives itself."""
    stacks = _ModuleStacks(root)
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "output"):
            continue
        node.meta["nn_module_stack"] = stacks.convert(node.meta.get("nn_module_stack"))
        if node.meta.get("stack_trace"):
            node.meta["stack_trace"] = _without_entry_frame(node.meta["stack_trace"])
        node.meta.pop("source_fn_stack", None)  # graphcap writes its own (graphcap.trace.metadata)


# --- the replay --------------------------------------------------------------------------------

class DynamoGraphReplay:
    """The user's callable as dynamo saw it: dynamo's graph, run op by op on graphcap's fake inputs.

    An object rather than a function so that the recorder does not take its
    frames for user code (only dynamo's recorded stack traces name user lines).
    """

    def __init__(self, gm: torch.fx.GraphModule, root: Optional[torch.nn.Module], marker: Any = None,
                 buffer_owners: Optional[list[tuple[torch.nn.Module, str]]] = None):
        self.gm = gm
        self.root = root
        self.buffer_owners = buffer_owners or []  # what _entry_for returns the buffers of, in order
        self.marker = marker  # preserved submodules' call boundaries (strict_call_boundaries)
        self.out_spec = fx_private.pytree_specs_of(gm)[1]
        self.placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.attr_fqns = self._attribute_fqns()
        self.files = {m for n in gm.graph.nodes
                      for m in re.findall(r'File "([^"]+)", line', n.meta.get("stack_trace") or "")}
        _prepare_metadata(gm, root)

    def _attribute_fqns(self) -> dict[str, str]:
        """dynamo's attribute name of each module tensor the graph reads → its FQN in the user's module."""
        if self.root is None:
            return {}
        by_id: dict[int, str] = {}
        for name, t in self.root.named_parameters(remove_duplicate=False):
            by_id.setdefault(id(t), name)
        for name, t in self.root.named_buffers(remove_duplicate=False):
            by_id.setdefault(id(t), name)
        for fqn, module in self.root.named_modules(remove_duplicate=False):
            for attr, value in vars(module).items():
                if isinstance(value, torch.Tensor):
                    by_id.setdefault(id(value), f"{fqn}.{attr}" if fqn else attr)
        out = {}
        for node in self.gm.graph.nodes:
            if node.op == "get_attr":
                try:
                    value = _fetch(self.gm, node.target)
                except AttributeError:
                    continue
                if isinstance(value, torch.Tensor) and id(value) in by_id:
                    out[node.target] = by_id[id(value)]
        return out

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, spec = pytree.tree_flatten((args, kwargs))
        if len(leaves) != len(self.placeholders):
            raise UnsupportedError(
                f"strict capture: dynamo's graph takes {len(self.placeholders)} inputs where the call has "
                f"{len(leaves)} ({spec}).",
                where="export(..., strict=True)",
                fix="Export with strict=False, which runs the program as it is.")
        strict_shapes.transfer_shape_facts(self.placeholders, leaves, self.files)
        with fx_traceback.preserve_node_meta():
            out = _Replayer(self).run(*leaves)
        result = pytree.tree_unflatten(list(out), self.out_spec) if self.out_spec is not None else out
        if not self.buffer_owners:
            return result
        result, buffers_after = result
        for (owner, name), value in zip(self.buffer_owners, buffers_after):
            # a buffer forward gave a new tensor: the module holds it, as after the user's own call
            # (the trace then writes it into the buffer, graphcap.trace.module_state)
            if isinstance(value, torch.Tensor) and value is not getattr(owner, name):
                setattr(owner, name, value)
        return result


def _fetch(module: torch.nn.Module, target: str) -> Any:
    obj: Any = module
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


class _Replayer(torch.fx.Interpreter):
    """Interprets dynamo's graph; module tensors come from the user's module (fake while recording)."""

    def __init__(self, replay: DynamoGraphReplay):
        super().__init__(replay.gm, garbage_collect_values=True)
        self.replay = replay
        self.enter_autocast, self.exit_autocast = fx_private.autocast_markers()
        self.enter_inference, self.exit_inference = fx_private.inference_mode_markers()
        self.checkpoint = higher_order_private.activation_checkpoint_operator()
        self.function_apply = higher_order_private.autograd_function_operator()

    def run_node(self, n):
        self.current = n
        return super().run_node(n)

    def call_function(self, target, args, kwargs):
        if target is self.replay.marker and target is not None:
            self._report_boundary(*args, **kwargs)
            return strict_call_boundaries.passes_through(args[2])
        if target is self.enter_autocast:
            # dynamo's marker of a `with torch.autocast(...)` block: called as such while recording,
            # it is only recorded, and the block's operators would run (and be recorded) in
            # float32; entering the block itself both switches autocast on and records the marker,
            # as the user's `with` does in non-strict
            block = torch.amp.autocast(*args, **kwargs)
            block.__enter__()
            return block
        if target is self.exit_autocast:
            args[0].__exit__(None, None, None)
            return None
        if target is self.enter_inference:
            # dynamo's marker of a `with torch.inference_mode():` block: entered as the user's `with`
            # is in non-strict, so the block's grad switch is recorded (graphcap.trace.python_overrides)
            block = torch.inference_mode(*args, **kwargs)
            block.__enter__()
            return block
        if target is self.exit_inference and isinstance(args[0], torch.inference_mode):
            args[0].__exit__(None, None, None)
            return None
        if target is self.checkpoint and isinstance(args[0], torch.fx.GraphModule):
            # torch.utils.checkpoint(fn, ...): run fn's graph in place, as non-strict records the call
            # (the training IR inlines it; autograd's recomputation is no part of the program).
            # torch's own operator fails here when no context_fn was given (torch 2.10 to 2.15)
            body = args[0]
            _prepare_metadata(body, self.replay.root)
            return higher_order_private.run_graph_preserving_meta(body)(*args[1:])
        if target is self.function_apply and isinstance(args[0], torch.fx.GraphModule):
            # a user's autograd.Function: its forward's operators, recorded as non-strict records
            # them. dynamo's forward graph runs them between a switch of grad off and one back on
            # (eager's Function.apply does so inside autograd's C++ node); recorded, those switches
            # made the outputs of a strict program never require grad, where eager's (and
            # non-strict's) do. Neither program keeps the Function's own backward.
            forward = _without_outer_grad_switches(args[0])
            _prepare_metadata(forward, self.replay.root)
            inputs = list(args[2:])
            if sum(n.op == "placeholder" for n in forward.graph.nodes) == len(inputs) + 1:
                inputs.insert(0, None)  # torch releases whose forward graph takes the Function's ctx first
            outputs, _saved = higher_order_private.run_graph_preserving_meta(forward)(*inputs)
            return outputs
        return super().call_function(target, args, kwargs)

    def _report_boundary(self, fqn: str, entering: bool, tree: Any) -> None:
        """A preserved submodule's call starts or ends here: tell the trace's call recorder, under the
        call name of the innermost module call the marker sits in (``sub@1``)."""
        recorder_now = call_signatures.active_recorder()
        stack = self.current.meta.get("nn_module_stack") or {}
        name = call_name_of_key(next(reversed(stack))) if stack else None
        if recorder_now is not None and name:
            recorder_now.boundary(name, fqn, entering, strict_call_boundaries.as_called(tree))

    def get_attr(self, target, args, kwargs):
        fqn = self.replay.attr_fqns.get(target)
        if fqn is not None:
            return _fetch(self.replay.root, fqn)
        return super().get_attr(target, args, kwargs)

    def run(self, *flat_args):
        # the graph's own code generator would flatten again: feed placeholders in order
        self.args_iter = iter(flat_args)
        env = self.env = {}
        for node in self.graph.nodes:
            env[node] = self.run_node(node)
            if self.garbage_collect_values:
                for to_delete in self.user_to_last_uses.get(node, []):
                    del env[to_delete]
            if node.op == "output":
                return env[node]
        raise AssertionError("dynamo's graph has no output")  # pragma: no cover
