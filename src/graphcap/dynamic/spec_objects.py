"""Spec builders passed as ``dynamic_shapes``: ShapesCollection, AdditionalInputs.

A user may pass, instead of a spec tree, an object that *builds* one from the
inputs: graphcap's own ``ShapesCollection`` / ``AdditionalInputs`` or
torch.export's. They are read through their public ``dynamic_shapes(m, args,
kwargs)`` method (the user's object says what it declares; graphcap's code
then checks and traces it as any other spec). ``AdditionalInputs`` also holds
more example inputs; after export every one of them must pass the program's
input checks, so the spec inferred from them is known to cover them.

torch's ``ShapesCollection`` identifies int inputs by wrapping them
(``_IntWrapper(5)``, a dataclass with a ``val`` field); the wrappers are only
keys of the collection, so once the spec is read the inputs are unwrapped.
"""
from __future__ import annotations

from typing import Any, Callable, Optional

from ..errors import DynamicSpecError
from ..torch_private import pytree
from ..torch_private.user_specs import additional_inputs_examples, is_torch_int_wrapper


def is_spec_builder(spec: Any) -> bool:
    """Whether ``spec`` is an object that builds a spec (rather than a spec tree)."""
    return not isinstance(spec, (dict, list, tuple)) and callable(getattr(spec, "dynamic_shapes", None))


def _is_int_wrapper(leaf: Any) -> bool:
    value = getattr(leaf, "val", None)
    return is_torch_int_wrapper(leaf) and isinstance(value, int) and not isinstance(value, bool)


def unwrap_int_wrappers(args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The inputs with every int wrapper replaced by the int it carries."""
    leaves, spec = pytree.tree_flatten((args, kwargs))
    if not any(_is_int_wrapper(v) for v in leaves):
        return args, kwargs
    args, kwargs = pytree.tree_unflatten([v.val if _is_int_wrapper(v) else v for v in leaves], spec)
    return tuple(args), dict(kwargs)


def resolve(mod: Any, args: tuple, kwargs: dict, dynamic_shapes: Any
            ) -> tuple[Any, tuple, dict, Optional[Callable[[Any], None]]]:
    """The spec tree a builder declares, the unwrapped inputs, and a check to run on the program.

    The check (``None`` when there is nothing to check) makes sure every
    additional example input is accepted by the exported program.
    """
    verify = None
    if is_spec_builder(dynamic_shapes):
        builder = dynamic_shapes
        try:
            dynamic_shapes = builder.dynamic_shapes(mod, args, kwargs)
        except (AssertionError, TypeError) as e:
            raise DynamicSpecError(
                f"{type(builder).__name__}.dynamic_shapes() could not build a spec for these inputs: {e}",
                where="export(..., dynamic_shapes=...)",
                fix="Build the collection from the very objects passed to export, with the same "
                    "structure in every example.") from e
        examples = additional_inputs_examples(builder)
        if isinstance(examples, list) and examples:
            verify = _verifier(examples)
    args, kwargs = unwrap_int_wrappers(args, kwargs)
    return dynamic_shapes, args, kwargs, verify


def _verifier(examples: list) -> Callable[[Any], None]:
    def verify(ep: Any) -> None:
        runnable = ep.module()
        for i, (ex_args, ex_kwargs) in enumerate(examples):
            ex_args, ex_kwargs = unwrap_int_wrappers(tuple(ex_args), dict(ex_kwargs or {}))
            try:
                runnable._checker(ex_args, ex_kwargs)
            except Exception as e:  # re-raised with which example failed
                raise DynamicSpecError(
                    f"Additional example input set {i} is not accepted by the exported program: {e}",
                    where="AdditionalInputs",
                    fix="The program specialized on something these inputs do not share; mark that "
                        "dimension dynamic in the code's view (or drop this example).") from e
    return verify
