"""Non-strict capture: run the user's Python as it is, on fake tensors.

This is the pipeline of docs/architecture.md from bound inputs to a verified
ExportedProgram; each step is a call into the module that owns it.
"""
from __future__ import annotations

import inspect
import sys
import weakref
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Iterator, Optional, Sequence

import torch

from .. import auto_flatten, module_inputs, young_heap
from .. import pytree as gp_pytree
from ..dynamic import assumptions as dyn_assumptions
from ..dynamic import constraints as dyn_constraints
from ..dynamic import negative_sizes as dyn_negative_sizes
from ..dynamic import size_one_checks as dyn_size_one
from ..dynamic import spec_objects as dyn_spec_objects
from ..dynamic import symbols as dyn_symbols
from ..dynamic.symbol_names import name_symbols_in_error, names_of_roots, recorded_dim_names
from ..errors import ExportArgsError, ExportInputError
from ..program import ExportedProgram
from ..signature import ModuleCallEntry, ModuleCallSignature
from ..stage_clock import StageClock
from ..torch_private import fx as fx_private
from ..torch_private import pytree
from ..torch_private.modules import non_persistent_buffer_names
from ..trace import (
    constant_writes,
    default_dtype,
    fakify,
    graph_module_replay,
    leaks,
    lifting,
    metadata,
    python_overrides,
    recorder,
)
from ..trace.control_flow import before_lifting, branch_checks
from ..trace.conversion_asserts import insert_conversion_asserts
from ..trace.naming import subgraph_names
from . import call_signatures


@dataclass
class Target:
    """What is being exported: the callable, and the module that owns its state."""

    call: Callable[..., Any]
    root: Optional[torch.nn.Module]
    forward: Callable[..., Any]  # what the inputs are bound against
    name: str


def _required_init_args(cls: type) -> str:
    """The constructor arguments ``cls`` needs, as names to fill in (empty when it needs none)."""
    try:
        sig = inspect.signature(cls)
    except (TypeError, ValueError):
        return "..."
    return ", ".join(p.name for p in sig.parameters.values()
                     if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD))


def resolve_target(mod: Any) -> Target:
    if isinstance(mod, torch.jit.ScriptModule):
        # its forward is TorchScript: there is no Python to run on fake tensors
        raise ExportInputError(
            f"Exporting a ScriptModule is not supported: {type(mod).__name__} runs TorchScript, "
            "which export cannot trace.",
            where="export(mod, ...)",
            fix="Export the original nn.Module (before torch.jit.script), or convert the ScriptModule "
                "with TS2EPConverter, torch's TorchScript-to-ExportedProgram converter.")
    if isinstance(mod, torch.nn.Module):
        return Target(mod, mod, mod.forward, type(mod).__name__)
    if isinstance(mod, type) and issubclass(mod, torch.nn.Module):
        # the class itself: calling it would build a module, not run one
        raise ExportInputError(
            f"export was given the class {mod.__name__}, not a module: build the model first.",
            where="export(mod, ...)",
            fix=f"Pass an instance: export({mod.__name__}({_required_init_args(mod)}), args).")
    if inspect.ismethod(mod) and isinstance(mod.__self__, torch.nn.Module):
        return Target(mod, mod.__self__, mod, mod.__qualname__)
    if callable(mod):
        return Target(mod, None, mod, getattr(mod, "__qualname__", repr(mod)))
    raise ExportInputError(
        f"export expects an nn.Module, a function or a bound method, got {type(mod).__name__}.",
        where="export(mod, ...)",
        fix="Pass the model itself (an nn.Module) or the function to export.")


def normalize_example_inputs(args: Any, kwargs: Any) -> tuple[tuple, dict]:
    if isinstance(args, list):
        args = tuple(args)
    if not isinstance(args, tuple):
        raise ExportArgsError(
            f"Expecting `args` to be a tuple of example positional inputs, got {type(args).__name__}.",
            where="export(mod, args)",
            fix="Wrap a single input in a tuple: export(mod, (x,)).")
    if kwargs is None:
        kwargs = {}
    if not isinstance(kwargs, dict):
        raise ExportArgsError(
            f"Expecting `kwargs` to be a dict of example keyword inputs, got {type(kwargs).__name__}.",
            where="export(mod, args, kwargs)",
            fix="Pass keyword inputs as a dict: export(mod, (), {'x': x}).")
    return args, kwargs


def _arrays_in(value: Any, path: str, name: str) -> Iterator[tuple[str, str]]:
    """``(input path, expression in the user's names)`` of each numpy array in ``value``."""
    numpy = sys.modules.get("numpy")  # no array exists where numpy was never imported
    if numpy is None:
        return
    if isinstance(value, numpy.ndarray):
        yield path, name
    elif isinstance(value, (tuple, list)):
        for i, item in enumerate(value):
            yield from _arrays_in(item, f"{path}[{i}]", f"{name}[{i}]")
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _arrays_in(item, f"{path}[{key!r}]", f"{name}[{key!r}]")


def refuse_array_inputs(args: tuple, kwargs: dict, arg_names: Sequence[str]) -> None:
    """Refuse a numpy array among the example inputs: export takes tensors (an array would be
    baked into the program as a constant that ``module()`` cannot compare), as torch.export does."""
    found = [*(hit for i, a in enumerate(args)
               for hit in _arrays_in(a, f"*args[{i}]", arg_names[i] if i < len(arg_names) else f"args[{i}]")),
             *(hit for k, v in kwargs.items() for hit in _arrays_in(v, f"**kwargs[{k!r}]", k))]
    if not found:
        return
    path, name = found[0]
    raise ExportArgsError(  # a ValueError, as non-strict torch.export raises; a UserError, as strict's
        f"The example input at {path} is a numpy array; export takes tensors (and Python numbers, "
        f"strings, containers of them).",
        where=path,
        fix=f"Convert it to a tensor before exporting, and call the program with tensors too: "
            f"torch.from_numpy({name})" + (f" (and the same for {', '.join(p for p, _ in found[1:])})"
                                            if len(found) > 1 else "") + ".")


@dataclass
class RootState:
    """The state of the module being exported, named every way the module tree reaches it."""

    params: dict[str, torch.Tensor]  # FQN -> parameter; a shared one under each of its FQNs
    buffers: dict[str, torch.Tensor]  # FQN -> buffer, the same way
    non_persistent: set[str]  # the buffers' FQNs that stay out of the state_dict
    constant_attrs: dict[int, list[str]]  # id of a plain tensor attribute -> every FQN reaching it
    constant_tensors: list[torch.Tensor]  # those attributes' tensors, in the order first reached


@dataclass
class _Run:
    """One run of forward under the recorder, and what it ran on."""

    fake_mode: Any
    root_state: RootState
    dyn_inputs: Any  # the spec's symbols (graphcap.dynamic.symbols.SymbolicInputs), or None
    flat_inputs: list  # fake state, then fake user inputs
    recording: Any
    dtypes: set  # the default dtypes forward ran under
    call_recorder: Any


def _at_example_sizes(trace: Callable[[bool], _Run]) -> Optional[_Run]:
    """The run at the example's sizes (size-0/1 questions answered from them), or None if it fails too."""
    try:
        return trace(False)
    except Exception:
        return None


def _has_0_1_example(dynamic_shapes: Any, user_leaves: list) -> bool:
    """Whether a spec is given and some tensor input has a dim of size 0 or 1 (a size the trace
    may read as a general size)."""
    return dynamic_shapes is not None and any(
        isinstance(t, torch.Tensor) and any(n in (0, 1) for n in t.shape) for t in user_leaves)


def _root_state(root: Optional[torch.nn.Module]) -> RootState:
    """Parameters, buffers, non-persistent buffer names, tensor attributes of ``root`` (id → FQNs)
    and those attributes' tensors.

    Tensor attributes that are neither parameters nor buffers become lifted
    constants; each is listed under every FQN that reaches it (a parent may
    hold its child's tensor too), modules visited depth first, a module's own
    attributes before its children's, so the first FQN is the shortest path
    through the earliest-defined attributes. Non-persistent buffers are named
    under every FQN too, as ``named_buffers(remove_duplicate=False)`` names them.
    """
    if root is None:
        return RootState({}, {}, set(), {}, [])
    params = dict(root.named_parameters(remove_duplicate=False))
    buffers = dict(root.named_buffers(remove_duplicate=False))
    non_persistent = set()
    constant_attrs: dict[int, list[str]] = {}
    constant_tensors: list[torch.Tensor] = []
    state_ids = {id(t) for t in (*params.values(), *buffers.values())}

    for fqn, module in call_signatures.module_tree(root):
        prefix = f"{fqn}." if fqn else ""
        for name in non_persistent_buffer_names(module):
            non_persistent.add(prefix + name)
        for attr, value in vars(module).items():
            if isinstance(value, torch.Tensor) and id(value) not in state_ids:
                if id(value) not in constant_attrs:
                    constant_tensors.append(value)
                constant_attrs.setdefault(id(value), []).append(prefix + attr)
    return RootState(params, buffers, non_persistent, constant_attrs, constant_tensors)


def _generator_attrs(root: Optional[torch.nn.Module]) -> dict[str, torch.Generator]:
    """Every ``torch.Generator`` a module of ``root`` holds as an attribute, by FQN."""
    found: dict[str, torch.Generator] = {}
    for fqn, module in call_signatures.module_tree(root) if root is not None else ():
        for attr, value in vars(module).items():
            if isinstance(value, torch.Generator):
                found.setdefault(f"{fqn}.{attr}" if fqn else attr, value)
    return found


@dataclass
class _Traced:
    """What one non-strict trace leaves behind: the program, and the probe that finds fake tensors
    user code kept once the exporting frames are gone (None when the recorder tracked none)."""

    program: ExportedProgram
    leak_probe: Optional[leaks.LeakProbe]


def _unique(names: Sequence[str], taken: Iterable[str] = ()) -> list[str]:
    """The user inputs' placeholder names, each once, none equal to a name in ``taken``."""
    seen: dict[str, int] = {n: 0 for n in taken}
    out = []
    for n in names:
        base = n
        while n in seen:
            seen[base] += 1
            n = f"{base}_{seen[base]}"
        seen.setdefault(n, 0)
        out.append(n)
    return out


def export_non_strict(mod: Any, args: Any, kwargs: Any = None, *, dynamic_shapes: Any = None,
                      preserve_module_call_signature: tuple[str, ...] = (),
                      prefer_deferred_asserts: bool = False, front: Optional[Callable[..., Any]] = None,
                      strict: bool = False) -> ExportedProgram:
    """Export ``mod``; then warn about fake tensors user code kept (``graphcap.trace.leaks``).

    Classes graphcap flattens by their attributes are torch pytree nodes only
    while the trace runs (``graphcap.auto_flatten``): the process keeps its
    pytree registry as it was, whichever way the export ends.

    The check runs here, once the exporting frame and its fake inputs are gone
    and the heap is no longer frozen (``graphcap.young_heap``): the check asks
    the garbage collector about every object, old ones included.

    ``front`` replaces the user's callable by another one to record (strict
    mode's replay of dynamo's graph, ``graphcap.capture.strict``): called as
    ``front(target, args, kwargs, user_leaves, fake_user)`` once the inputs are
    bound and fake, it returns what the recorder runs in place of
    ``target.call``; every other step is the same. ``strict`` says the program is strict
    mode's: its symbols are numbered as torch's strict mode numbers them.
    """
    # classes flattened by attributes are torch's only meanwhile; the garbage collector skips the old heap
    with auto_flatten.registered_while_tracing(), young_heap.trace_allocations_only():
        traced = _export_non_strict(mod, args, kwargs, dynamic_shapes=dynamic_shapes,
                                    preserve_module_call_signature=preserve_module_call_signature,
                                    prefer_deferred_asserts=prefer_deferred_asserts, front=front,
                                    strict=strict)
    leaks.warn_if_leaked(traced.leak_probe)
    return traced.program


def _export_non_strict(mod: Any, args: Any, kwargs: Any, *, dynamic_shapes: Any,
                       preserve_module_call_signature: tuple[str, ...],
                       prefer_deferred_asserts: bool,
                       front: Optional[Callable[..., Any]] = None, strict: bool = False) -> _Traced:
    clock = StageClock()  # seconds per stage, kept on the program for the report
    entry_default_dtype = torch.get_default_dtype()  # what a forward switching it switches from
    target = resolve_target(mod)
    args, kwargs = normalize_example_inputs(args, kwargs)
    gp_pytree.auto_register((args, kwargs), "inputs")  # classes flattened by attributes, for this trace
    # a ShapesCollection / AdditionalInputs builds its spec from the inputs
    dynamic_shapes, args, kwargs, verify_examples = dyn_spec_objects.resolve(mod, args, kwargs, dynamic_shapes)
    args, kwargs, arg_names = gp_pytree.bind_inputs(target.forward, args, kwargs)
    refuse_array_inputs(args, kwargs, arg_names)
    gp_pytree.auto_register((args, kwargs), "inputs")
    # modules among the inputs: their tensors become user inputs (graphcap.module_inputs)
    tree_args, tree_kwargs = module_inputs.wrap((args, kwargs))

    # a class registered without flatten_with_keys_fn gets index keys (torch.export refuses it)
    flat_with_paths, in_spec = auto_flatten.flatten_with_path((tree_args, tree_kwargs))
    paths = [p for p, _ in flat_with_paths]
    user_leaves = [v for _, v in flat_with_paths]
    clock.lap("inputs")

    def trace(general_sizes: bool) -> _Run:
        fake_mode = fakify.new_fake_mode(prefer_deferred_asserts)
        root_state = _root_state(target.root)
        params, buffers = root_state.params, root_state.buffers
        state_tensors = [*params.values(), *buffers.values()]
        # tensor attributes and inputs count for storage sharing: a view of a weight keeps aliasing it
        others = [*user_leaves, *root_state.constant_tensors]
        fakes = fakify.fake_state(fake_mode, state_tensors, others)
        state_names = [*params, *buffers]
        fake_state = [fakes[id(t)] for t in state_tensors]
        # f(x, x): each input its own fake tensor, so each is its own placeholder with its own sizes
        distinct_leaves = fakify.distinct_leaves(user_leaves)
        if dynamic_shapes is not None:  # symbols for the dims the spec marks dynamic
            dyn_inputs = dyn_symbols.prepare(target.forward, tree_args, tree_kwargs, dynamic_shapes, fake_mode,
                                             distinct_leaves,
                                             [gp_pytree.input_path_str(p) for p in paths], strict=strict)
            fake_user = dyn_inputs.fakes
        else:
            dyn_inputs = None
            fake_user = [fakify.fakify_leaf(fake_mode, leaf) for leaf in distinct_leaves]
        flat_inputs = fake_state + fake_user
        clock.lap("fakify")

        # forward runs (dynamo's capture, then the recording): a default dtype it switches and leaves
        # switched, or a switch a failure cuts short, stays out of the caller's process
        with default_dtype.kept():
            call = target.call if front is None else front(target, args, kwargs, user_leaves, fake_user)
            replay = graph_module_replay.replaying_call(target.root) \
                if front is None and target.call is target.root else None
            call = replay or call  # a graph module keeps its nodes' metadata
            call_recorder = call_signatures.CallRecorder(target.root, preserve_module_call_signature,
                                                         replays_graph=replay is not None)
            try:
                with call_recorder, dyn_symbols.tracing(dyn_inputs, general_sizes), \
                        python_overrides.default_dtypes_seen() as dtypes:
                    recording = recorder.record(call, target.root, state_names, flat_inputs, in_spec,
                                                fake_mode, target.name, buffer_names=list(buffers))
            except Exception as e:  # torch's text quotes symbols (s77): the user's Dim names instead
                name_symbols_in_error(e, names_of_roots(dyn_inputs.roots if dyn_inputs is not None else ()))
                raise
        return _Run(fake_mode, root_state, dyn_inputs, flat_inputs, recording, dtypes, call_recorder)

    # Size-0/1 questions are answered for the general size, so a dynamic dim whose example is 0 or 1
    # stays symbolic. Where the program needs that size (a size-1 example broadcast against another
    # input), the general answer contradicts the example: the trace fails, or, with deferred asserts,
    # asserts what the example breaks. The program is traced again at the example's sizes, and the
    # spec check reports the specialization as for any other (strict's front end does the same).
    retry = front is None and _has_0_1_example(dynamic_shapes, user_leaves)
    try:
        run = trace(True)
    except Exception:
        at_example = _at_example_sizes(trace) if retry else None
        if at_example is None:
            raise  # the first error (the general reading) is the one to show
        run = at_example
    else:
        if retry and dyn_symbols.example_breaks_engine_facts(run.fake_mode.shape_env):
            run = trace(False)
    fake_mode, root_state, dyn_inputs, recording = run.fake_mode, run.root_state, run.dyn_inputs, run.recording
    dtypes, call_recorder, flat_inputs = run.dtypes, run.call_recorder, run.flat_inputs
    params, buffers, non_persistent = root_state.params, root_state.buffers, root_state.non_persistent
    gm = recording.graph_module
    # tensors made while forward had switched the default dtype keep their traced dtype
    if dtypes != {entry_default_dtype}:
        default_dtype.pin_default_dtypes(gm, entry_default_dtype, target.name)
    # dead artifacts dropped, subgraph constants hoisted, grad/autocast regions wrapped, metadata cleaned
    gm = before_lifting.prepare_for_lifting(gm, fake_mode, torch.is_grad_enabled())
    clock.lap("capture")

    layout = lifting.StateLayout(list(params), list(buffers), non_persistent, root_state.constant_attrs,
                                 tensors={**params, **buffers}, generator_attrs=_generator_attrs(target.root))
    # A user input is never named like a parameter or buffer FQN (a method `set_state(self, h)` over a
    # buffer `h`): ExecuTorch's write-back pass finds buffers and user inputs by those names in one
    # table, and with the two equal it wrote the buffer's new value into the input instead.
    names = _unique([gp_pytree.placeholder_name(p, arg_names) for p in paths], taken=[*params, *buffers])
    lifted = lifting.lift(gm, layout, names, user_leaves, fake_mode,
                          reassigned_buffers=recording.reassigned_buffers)
    gm = lifted.graph_module
    constant_writes.refuse_written_constants(gm, lifted.signature, lifted.constants, target.root)
    branch_checks.refuse_operand_writes(gm, lifted.signature.input_specs)
    subgraph_names.name_subgraph_inputs(gm)
    clock.lap("lift")
    # guards against the spec (ConstraintViolationError), ranges, runtime asserts
    range_constraints = dyn_constraints.run_guards_step(gm, fake_mode, dyn_inputs, target.name,
                                               prefer_deferred_asserts=prefer_deferred_asserts)
    assumptions = dyn_assumptions.record(fake_mode, dyn_inputs)  # what export assumed, for the report
    clock.lap("guards")
    lifting.sync_output_specs(gm, lifted.signature)
    insert_conversion_asserts(gm)  # x.to(...) keeps the meaning it was traced with
    metadata.attribute_size_reads(gm)
    metadata.finalize(gm)
    graph_module_replay.carry_graph_meta(target.root, gm, lifted.signature.input_specs)
    clock.lap("metadata")

    state_dict = {**params, **{k: v for k, v in buffers.items() if k not in non_persistent}}
    constants = {**{k: v for k, v in buffers.items() if k in non_persistent}, **lifted.constants}

    sig = lifted.signature
    # The root entry names no graph values, as torch.export's: the graph signature already
    # lists the user inputs and outputs, and consumers' passes (ExecuTorch's) rename graph
    # nodes without following a second list (they check it against the renamed graph).
    root_call = ModuleCallSignature(
        inputs=[], outputs=[], in_spec=in_spec, out_spec=recording.out_spec, forward_arg_names=arg_names + list(kwargs))
    call_graph = [ModuleCallEntry("", root_call), *call_recorder.entries(gm.graph)]

    fx_private.generate_code(gm)  # the graph is final: its code, generated once (lifting deferred it)
    ep = ExportedProgram(gm, sig, state_dict, range_constraints=range_constraints, module_call_graph=call_graph,
                         example_inputs=(args, kwargs), constants=constants)
    clock.lap("verify")
    ep.export_timings, ep.export_assumptions = clock.seconds, assumptions
    ep.export_dim_names = recorded_dim_names(dyn_inputs.roots if dyn_inputs is not None else ())
    if verify_examples is not None:
        verify_examples(ep)
    dyn_negative_sizes.check(ep, dyn_inputs)  # a size below 0 at 0/1 (x[1:1 + n] at x.shape[0] == 0)
    if dyn_inputs is not None and dyn_inputs.pending_size_checks:  # Ne(batch, 1): checked on the program
        dyn_size_one.confirm(ep, mod, lambda leaves: module_inputs.unwrap(pytree.tree_unflatten(leaves, in_spec)),
                             user_leaves, dyn_inputs)
    probe = None
    if recording.tracked is not None:
        kept = frozenset(id(t) for t in flat_inputs) if dyn_inputs is not None else frozenset()
        probe = leaks.LeakProbe(recording.tracked, fake_mode, weakref.ref(ep.graph_module), kept)
    return _Traced(ep, probe)
