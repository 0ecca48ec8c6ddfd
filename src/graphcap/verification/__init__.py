"""``graphcap.verify``: the program against the eager model, across its dynamic range.

An export is a claim: for every input the signature accepts, the program
computes what the model computes, and every other input is refused before
anything runs. :func:`verify` tests the claim on inputs generated from the
program itself (:mod:`.generate`: range ends, 0 and 1, random sizes honouring
derived dims and equal dims; random values per dtype) and on wrong inputs
(:mod:`.refusals`), and returns a :class:`VerificationResult`.

State: both the model and the program start every input set from the state
they had when ``verify`` was called: buffers (and parameters, up to 512 MiB of
them) are copied once and written back after each call, so ``verify`` leaves
tensors as it found them. Python attributes a forward changes (a counter in
``self``) are not restored: they are what a program baked in at export cannot
follow, and the first input set that shows it is reported.
"""
from __future__ import annotations

import inspect
from typing import Any, Callable, Optional

import torch

from .. import auto_flatten
from ..capture.progress import StepProgress
from ..errors import RuntimeInputError
from ..torch_private.messages import is_runtime_assert_failure
from .compare import OutputCheck, compare_outputs, compare_tensors
from .generate import DEFAULT_MAX_ELEMENTS, element_count, make_inputs, size_plans
from .refusals import refusal_cases
from .result import InputSetResult, RefusalResult, VerificationResult
from .signature_inputs import ProgramInputs, TensorInput

__all__ = ["verify", "VerificationResult", "InputSetResult", "RefusalResult", "OutputCheck", "ProgramInputs"]


def verify(ep, model: Callable, *, samples: int = 5, rtol: Optional[float] = None, atol: Optional[float] = None,
           seed: int = 0, example_inputs: Optional[tuple] = None, check_refusals: bool = True,
           max_elements: int = DEFAULT_MAX_ELEMENTS, method: Optional[str] = None) -> VerificationResult:
    """Run ``ep.module()`` and ``model`` on the same generated inputs and compare.

    ``samples`` random input sets are tried after the edge ones (the example's
    sizes, every range's ends, 0 and 1 where allowed). ``rtol`` / ``atol``
    override the per-dtype tolerances of floating outputs (integer and bool
    outputs must match exactly). ``example_inputs`` ((args, kwargs), default
    ``ep.example_inputs``) guide values: integer inputs are drawn from their
    example's values, floats from their example's span. Input sets of more
    than ``max_elements`` elements are skipped and listed in ``skipped``.
    With ``check_refusals``, wrong inputs (sizes just outside the ranges,
    another dtype, rank, baked-in value or structure) must be refused by the
    program's input checks.

    Args:
        ep: the :class:`graphcap.ExportedProgram` to check.
        model: the eager model (or any callable) ``ep`` was exported from.
        samples: how many random input sets to try after the edge ones.
        rtol: relative tolerance for floating outputs, or None for the per-dtype default.
        atol: absolute tolerance for floating outputs, or None for the per-dtype default.
        seed: seeds the generated sizes and values (and eager's and the program's
            random generator alike, so dropout draws the same masks).
        example_inputs: ``(args, kwargs)`` guiding the generated values
            (default ``ep.example_inputs``).
        check_refusals: also check that wrong inputs are refused before computing.
        max_elements: input sets with more elements than this are skipped.
        method: for a multi-method program (``graphcap.export_methods``), the method to check;
            ``model`` is then the model (its method of that name is called) or the bound
            method itself. A method's program is also checked as ``verify(progs[name],
            model.name)``: the buffers of the method's module are compared and restored.

    Returns:
        A :class:`VerificationResult`; ``passed`` is the verdict. An exception of
        eager or of the program on an input set is recorded there, not raised.
        Buffers and parameters of ``model`` and the program are left as found.

    Raises:
        ValueError: ``ep`` has no input structure (an empty ``module_call_graph``).

    Example:
        >>> result = graphcap.verify(ep, model, samples=10)
        >>> print(result)
        >>> assert result.passed, result.summary()
    """
    from ..multi_method import method_program
    ep = method_program(ep, method, "graphcap.verify")
    if method is not None and isinstance(model, torch.nn.Module) and method != "forward":
        model = getattr(model, method)  # `forward` stays the model: its hooks are part of the program
    owner = _state_owner(model)
    inputs = ProgramInputs(ep, example_inputs)
    runnable = ep.module()
    state = _StateGuard(owner, runnable)
    result = VerificationResult([], [], samples=samples, seed=seed)
    result.notes.extend(_state_differences(ep, owner))
    plans = size_plans(inputs, samples, seed)
    cases = refusal_cases(inputs, plans[0].bindings) if check_refusals and plans else []
    bar = StepProgress("graphcap.verify", len(plans) + len(cases))  # on a terminal, once it runs 2 s
    try:
        for k, plan in enumerate(plans):
            bar.step(f"inputs: {plan.label}")
            if element_count(inputs, plan.bindings) > max_elements:
                result.skipped.append(f"{plan.label}: more than {max_elements} input elements")
                continue
            result.input_sets.append(_check_set(inputs, plan, model, owner, runnable, state, seed * 10007 + k,
                                                rtol, atol))
        for case in cases:
            bar.step(f"refusal: {case.label}")
            try:
                args, kwargs = case.build()
            except Exception as e:  # the wrong input cannot even be built (a negative size)
                result.skipped.append(f"refusal check {case.label}: {type(e).__name__}: {e}")
                continue
            result.refusals.append(_check_refused(case.label, runnable, args, kwargs, case.by_runtime_assert))
            state.restore()
    finally:
        bar.close()
        state.restore()
    return result


def _state_owner(model: Any) -> Any:
    """The module whose buffers ``model``'s calls write: the model, or the module of a bound method
    (``model.decode`` of a multi-method program's model)."""
    owner = getattr(model, "__self__", None)
    if inspect.ismethod(model) and isinstance(owner, torch.nn.Module):
        return owner
    return model


def _check_set(inputs: ProgramInputs, plan, model, owner, runnable, state: "_StateGuard", seed: int,
               rtol, atol) -> InputSetResult:
    shapes = {leaf.name: shape for leaf, shape in zip(inputs.leaves, inputs.shapes(plan.bindings))
              if isinstance(leaf, TensorInput)}
    out = InputSetResult(plan.label, {str(s): v for s, v in plan.bindings.items()}, shapes)
    eager_in = make_inputs(inputs, plan.bindings, seed, plan.values)
    program_in = make_inputs(inputs, plan.bindings, seed, plan.values)
    expected, eager_error = _call(model, eager_in, seed)
    eager_state = state.changed_in(owner)
    state.restore()
    got, program_error = _call(runnable, program_in, seed)
    program_state = state.changed_in(runnable)
    state.restore()
    if eager_error and program_error:
        out.outputs.append(OutputCheck("(both raised)", None, None, None, None, True,
                                       f"eager and the program both raised {type(eager_error).__name__}"))
        return out
    if eager_error or program_error:
        who, err = ("eager", eager_error) if eager_error else ("the program", program_error)
        out.error = f"{who} raised {type(err).__name__}: {_first_line(err)}"
        return out
    out.outputs.extend(compare_outputs(expected, got, rtol, atol))
    out.outputs.extend(_compare_written(eager_in, program_in, eager_state, program_state, inputs, rtol, atol))
    return out


def _call(fn: Callable, call: tuple, seed: int) -> tuple[Any, Optional[BaseException]]:
    """``fn(*args, **kwargs)`` with the random generator seeded alike for eager and program
    (dropout draws the same masks) and the caller's generator state left as it was."""
    args, kwargs = call
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        try:
            result = fn(*args, **kwargs)
        except Exception as e:  # reported in the table, never raised
            return None, e
    leaves, spec = auto_flatten.flatten(result)
    return auto_flatten.unflatten([x.detach().clone() if isinstance(x, torch.Tensor) else x for x in leaves],
                                  spec), None


def _compare_written(eager_in, program_in, eager_state, program_state, inputs, rtol, atol) -> list[OutputCheck]:
    """Inputs and buffers the call wrote: eager's and the program's writes must agree."""
    checks = []
    e_leaves = auto_flatten.flatten(eager_in)[0]
    p_leaves = auto_flatten.flatten(program_in)[0]
    for leaf, e, p in zip(inputs.leaves, e_leaves, p_leaves):
        if isinstance(e, torch.Tensor) and isinstance(p, torch.Tensor) and e.shape == p.shape \
                and not torch.equal(e, p):
            checks.append(compare_tensors(f"input {leaf.name} (written)", e, p, rtol, atol))
    for name in sorted(set(eager_state) | set(program_state)):
        if name in eager_state and name in program_state:
            checks.append(compare_tensors(f"buffer {name} (written)", eager_state[name], program_state[name],
                                          rtol, atol))
        else:
            who = "eager" if name in eager_state else "the program"
            checks.append(OutputCheck(f"buffer {name} (written)", None, None, None, None, False,
                                      f"only {who} wrote it"))
    return checks


def _check_refused(label: str, runnable, args: tuple, kwargs: dict, by_runtime_assert: bool = False) -> RefusalResult:
    try:
        runnable(*args, **kwargs)
    except RuntimeInputError as e:
        return RefusalResult(label, True, _first_line(e))
    except RuntimeError as e:
        if by_runtime_assert and is_runtime_assert_failure(e):
            return RefusalResult(label, True, _first_line(e))
        return RefusalResult(label, False, f"not refused by the input checks: computing raised "
                                           f"{type(e).__name__}: {_first_line(e)}")
    except Exception as e:
        return RefusalResult(label, False, f"not refused by the input checks: computing raised "
                                           f"{type(e).__name__}: {_first_line(e)}")
    return RefusalResult(label, False, "accepted: the program computed a result for it")


def _state_differences(ep, model: Any) -> list[str]:
    """A note when the model's parameters or buffers hold other values than the program's: then
    every input set differs for a reason that is not the program (a factory that builds a model
    with fresh random weights, a checkpoint not loaded)."""
    if not isinstance(model, torch.nn.Module):
        return []
    mine = model.state_dict(keep_vars=True)
    theirs = {**ep.constants, **ep.state_dict}
    differing = [name for name, t in theirs.items()
                 if isinstance(t, torch.Tensor) and isinstance(mine.get(name), torch.Tensor)
                 and t.device.type != "meta" and mine[name].shape == t.shape and mine[name].dtype == t.dtype
                 and not torch.equal(mine[name].detach().cpu(), t.detach().cpu())]
    if not differing:
        return []
    shown = ", ".join(differing[:3]) + (f" and {len(differing) - 3} more" if len(differing) > 3 else "")
    return [f"The model's weights differ from the program's ({shown}): eager and the program compute with "
            f"different values. If the model comes from a factory, seed it (torch.manual_seed) or load the "
            f"same checkpoint."]


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__


PARAMETER_COPY_LIMIT = 512 * 2**20
"""Parameters are copied (to undo a forward that writes them in place) only up to this many bytes
in all: a large model's weights are not doubled in memory for a write almost no forward makes."""


class _StateGuard:
    """The buffers (and, up to ``PARAMETER_COPY_LIMIT``, parameters) of the model and of the
    program's module, copied once; ``restore`` writes the copies back (in place, so aliases stay
    aliases)."""

    def __init__(self, *owners: Any):
        self._owners = [o for o in owners if isinstance(o, torch.nn.Module)]
        self._saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._names: dict[int, dict[str, torch.Tensor]] = {}
        params = {id(p): p for owner in self._owners for p in owner.parameters()}
        copy_params = sum(p.numel() * p.element_size() for p in params.values()) <= PARAMETER_COPY_LIMIT
        for owner in self._owners:
            named = dict(owner.named_buffers(remove_duplicate=False))
            self._names[id(owner)] = named
            for t in [*named.values(), *(owner.parameters() if copy_params else ())]:
                if id(t) not in self._saved:
                    self._saved[id(t)] = (t, t.detach().clone())

    def changed_in(self, owner: Any) -> dict[str, torch.Tensor]:
        """The buffers of ``owner`` whose values differ from the copies (what a call wrote)."""
        out = {}
        for name, t in self._names.get(id(owner), {}).items():
            saved = self._saved.get(id(t))
            if saved is not None and (saved[1].shape != t.shape or not torch.equal(saved[1], t.detach())):
                out[name] = t.detach().clone()
        return out

    def restore(self) -> None:
        with torch.no_grad():
            for t, copy in self._saved.values():
                if t.shape == copy.shape and not torch.equal(t, copy):
                    t.copy_(copy)
