"""graphcap's error types.

Every message answers three questions: what went wrong, where (an input path
such as ``*args[0].shape[1]``, a user source line, a graph node), and how to
fix it. Errors are built with :func:`GraphcapError.__init__`'s keyword parts so
that the three answers are always present and always laid out the same way.
"""
from __future__ import annotations

from typing import Any, Optional

from torch.fx.experimental.symbolic_shapes import GuardOnDataDependentSymNode

from .torch_private.export_program import torch_spec_violation_error

# graphcap's errors that are also torch's ``UserError`` (torch._dynamo.exc), so that ``except``
# clauses written for torch.export catch them: made on first use (module ``__getattr__`` below),
# so that importing graphcap.errors does not import torch._dynamo.
_ALSO_TORCH_USER_ERRORS = ("ExportArgsError", "ConstraintViolationError", "DynamicSpecError")

_TorchSpecViolationError = torch_spec_violation_error()


def _compose(what: str, where: Optional[str], fix: Optional[str]) -> str:
    parts = [what]
    if where:
        parts.append(f"Where: {where}")
    if fix:
        parts.append(f"How to fix: {fix}")
    return "\n".join(parts)


class GraphcapError(Exception):
    """Base class of every error graphcap raises on purpose.

    The message has three parts: what went wrong, where, and how to fix it.

    Attributes:
        what: what went wrong.
        where: where (the input path, node, file entry or JSON path), or None.
        fix: how to fix it, or None.

    Raised by:
        everything in graphcap; catch it to handle any of graphcap's errors.

    Example:
        >>> try:
        ...     ep = graphcap.export(model, args)
        ... except graphcap.GraphcapError as e:
        ...     print(e.what, e.where, e.fix)
    """

    def __init__(self, what: str, *, where: Optional[str] = None, fix: Optional[str] = None):
        self.what = what
        self.where = where
        self.fix = fix
        super().__init__(_compose(what, where, fix))


class ExportInputError(GraphcapError, ValueError):
    """The arguments given to ``export`` (module, example inputs, spec) are wrong.

    Also a ``ValueError``.

    Attributes:
        what: what went wrong.
        where: where (the input path, node, file entry or JSON path), or None.
        fix: how to fix it, or None.

    Raised by:
        ``export`` and the dynamic-shape helpers (``Dim``, ``ShapesCollection``, ...).

    Example:
        >>> with pytest.raises(graphcap.ExportInputError):
        ...     graphcap.export(model, torch.randn(2))  # args must be a tuple (a list is taken too)
    """


class DimArithmeticError(ExportInputError, TypeError, NotImplementedError):
    """Arithmetic on a ``Dim`` that no derived dim can express (``d // 2``, ``d % 3``, ``d / 2``,
    ``d * 0``, ``3 - d``, ``d + other_dim``).

    Also a ``TypeError`` and a ``NotImplementedError``, the types torch.export's ``Dim`` raises for
    these (the first for ``//``, ``/``, ``%``, the second for the others), so code written against
    torch's catches it; the message says how to write the relation as ``a*dim + b``.
    """


class DimDefinitionError(ExportInputError, AssertionError):
    """A ``Dim`` defined with bounds or a name it cannot have (``min > max``, ``min == max``, a
    negative ``min``, a name that is not an identifier).

    Also an ``AssertionError``, the type torch.export's ``Dim`` raises for these.
    """


class InputBindingError(ExportInputError, TypeError):
    """The example inputs given to ``export`` do not bind to forward's parameters (one missing, one
    too many, a keyword-only parameter given by position, an unknown keyword).

    Also a ``TypeError``, the type torch.export raises for it (Python's own, from binding the
    call); the fix writes the export call in forward's parameter names.
    """


class DecompTableError(GraphcapError, TypeError):
    """A decomposition table given to ``run_decompositions`` that is not one: not a mapping, a key
    that is an operator packet (``torch.ops.aten.linear``) or a name where an overload is meant
    (``torch.ops.aten.linear.default``), a value that is not a function.

    Also a ``TypeError``, the type torch.export raises for a table that is not a mapping (torch
    ignores a packet or a name as a key, and the decomposition it holds is silently not run).
    """


class SignatureEditError(GraphcapError, TypeError, AssertionError):
    """A graph signature edited with something other than node names
    (``sig.replace_all_uses(node, new_node)`` where the names are meant).

    Also a ``TypeError`` and an ``AssertionError``, the type torch's signature raises for it.
    """


class UnsupportedError(GraphcapError):
    """The program uses a construct graphcap cannot capture.

    Attributes:
        what: what went wrong.
        where: where (the input path, node, file entry or JSON path), or None.
        fix: how to fix it, or None.

    Raised by:
        ``export`` (and ``run_decompositions``, ``unflatten``) on a construct outside what graphcap captures.

    Example:
        >>> try:
        ...     ep = graphcap.export(model, args, strict=True)
        ... except graphcap.UnsupportedError as e:
        ...     print(e.fix)
    """


class DataDependentError(UnsupportedError, GuardOnDataDependentSymNode):
    """Tracing needed to decide a condition on a value read from tensor data.

    Also torch's ``GuardOnDataDependentSymNode`` (a ``RuntimeError``), which
    torch.export raises in the same situation, so ``except`` clauses written
    for torch keep working; ``cond`` is the undecidable condition.
    """

    def __init__(self, what: str, *, where: Optional[str] = None, fix: Optional[str] = None,
                 cond: object = None):
        super().__init__(what, where=where, fix=fix)
        # GuardOnDataDependentSymNode.__init__ takes the condition first and drops the message
        self.args = (_compose(what, where, fix),)
        self.cond = cond


class SubclassDecompositionError(UnsupportedError, ValueError):
    """run_decompositions met a tensor subclass it cannot split into inner tensors.

    Subclass parameters, buffers and constants are split; a subclass user input or
    output, or one crossing a preserved submodule call, is refused.

    Also a ``ValueError``, the type torch.export raises where it refuses such a program.
    """


class ConstantMutationError(UnsupportedError, RuntimeError):
    """The program writes in place to a lifted constant (torch raises a RuntimeError here too)."""


class FakeConstantError(UnsupportedError, RuntimeError):
    """A fake tensor of the trace would become a constant of the program (torch raises a RuntimeError)."""


class _LikeOriginal(GraphcapError):
    """Mixin: an error built from another exception that stays an instance of its type."""

    @classmethod
    def like(cls, original: BaseException, what: str, *, where: Optional[str] = None,
             fix: Optional[str] = None) -> "GraphcapError":
        """An error of this class that is also an instance of ``original``'s type.

        torch.export lets the exception a traced program raises reach the
        caller as it is, so callers catch it by its own type (``RuntimeError``,
        torch's ``MetadataMismatchError``); graphcap adds what/where/fix and
        keeps the type. The original's attributes are copied over; its
        ``__init__`` is not run again (its arguments are not known).
        """
        base = type(original)
        if not isinstance(original, Exception) or issubclass(base, GraphcapError):
            return cls(what, where=where, fix=fix)
        try:
            hybrid = _hybrid_trace_error(cls, base)
        except TypeError:  # a builtin type whose layout cannot be combined
            return cls(what, where=where, fix=fix)
        err = hybrid.__new__(hybrid)
        err.__dict__.update(getattr(original, "__dict__", {}))
        plain = cls(what, where=where, fix=fix)
        err.__dict__.update(plain.__dict__)
        err.args = plain.args
        return err


class TraceError(_LikeOriginal):
    """The user's program raised while it was being traced on fake tensors.

    Stays an instance of the original exception's type and chains it.

    Attributes:
        what: what went wrong.
        where: where (the input path, node, file entry or JSON path), or None.
        fix: how to fix it, or None.

    Raised by:
        ``export`` when the module's own code raises during the trace.

    Example:
        >>> try:
        ...     ep = graphcap.export(model, args)
        ... except graphcap.TraceError as e:
        ...     print(e.where)  # the user's line that raised
    """


class StrictCaptureError(_LikeOriginal, UnsupportedError):
    """strict=True: dynamo, the bytecode front end, refused the program (a graph break, a side
    effect on outside state). Also an instance of the exception dynamo raised (``Unsupported``
    for a graph break), as torch.export's strict mode lets that reach the caller."""


class InternalError(_LikeOriginal):
    """graphcap (or torch's tracing machinery under it) failed: a bug to report, not the user's.

    Told apart from a :class:`TraceError` by where the exception was raised
    (:func:`graphcap.user_frames.raised_internally`). Like a TraceError it stays an instance of the
    original exception's type and chains it.

    Attributes:
        what: what went wrong.
        where: where (the input path, node, file entry or JSON path), or None.
        fix: how to fix it, or None.

    Raised by:
        ``export`` and ``run_decompositions`` when the failure is inside graphcap or torch.

    Example:
        >>> try:
        ...     ep = graphcap.export(model, args)
        ... except graphcap.InternalError as e:
        ...     report_bug(e.__cause__)
    """


_HYBRIDS: dict[tuple[type, type], type] = {}


def _hybrid_trace_error(cls: type, base: type) -> type:
    key = (cls, base)
    if key not in _HYBRIDS:
        hybrid = type(cls.__name__, (cls, base), {
            "__module__": cls.__module__, "__qualname__": f"{cls.__qualname__}[{base.__name__}]",
            "__str__": BaseException.__str__})  # graphcap's message as it is (KeyError would quote it)
        _HYBRIDS[key] = hybrid
    return _HYBRIDS[key]


class RuntimeInputError(GraphcapError, RuntimeError):
    """An input given to ``ep.module()`` does not match the exported signature.

    Also a ``RuntimeError`` so that code written for torch.export's checks keeps
    catching it. Raised before anything is computed.

    Attributes:
        what: what went wrong.
        where: where (the input path, node, file entry or JSON path), or None.
        fix: how to fix it, or None.

    Raised by:
        calling ``ep.module()`` (and ``AdditionalInputs.verify``) with inputs the program does not accept.

    Example:
        >>> m = graphcap.export(torch.nn.Linear(4, 2), (torch.randn(3, 4),)).module()
        >>> with pytest.raises(graphcap.RuntimeInputError):
        ...     m(torch.randn(5, 4))  # the batch size was exported static
    """

    def __init__(self, what: str, *, where: Optional[str] = None, fix: Optional[str] = None):
        super().__init__(what, where=where, fix=fix)


class InputGuardError(RuntimeInputError, AssertionError):
    """An input value or size breaks what the program was specialized on.

    Also an ``AssertionError``, the type torch.export's ``module()`` raises for a failed
    input guard, and the message carries torch's ``Guard failed: <condition>`` line.
    """


class InputStructureError(RuntimeInputError, ValueError):
    """The inputs given to ``ep.module()`` have another structure (count, containers, keys).

    Also a ``ValueError``, as torch.export's ``module()`` raises in that case.
    """


class FlatArgsAdaptationError(InputStructureError, TypeError):
    """An unflattened module was called with inputs of another structure than the program's,
    and no ``flat_args_adapter`` maps them, or the adapter's result does not fit the program.

    Also a ``TypeError``, the type torch.export's unflattened module raises in these cases
    (and an ``InputStructureError``, as ``ep.module()`` raises for another structure).
    """


class VerificationError(GraphcapError, _TorchSpecViolationError):
    """An ExportedProgram breaks an IR invariant (see ``graphcap.ir_checks``).

    The message names the rule and the node that breaks it. Also torch's
    ``SpecViolationError``, which torch.export's ``ep.validate()`` raises, so code
    written against torch catches it unchanged.

    Attributes:
        what: what went wrong.
        where: where (the input path, node, file entry or JSON path), or None.
        fix: how to fix it, or None.

    Raised by:
        ``ExportedProgram(...)``, ``ep.validate()`` and every pass that builds a program.

    Example:
        >>> try:
        ...     ep.validate()
        ... except graphcap.VerificationError as e:
        ...     print(e.where)
    """


class MissingFakeKernelError(UnsupportedError):
    """A custom operator has no fake (meta) kernel, so its output shapes are unknown while tracing.

    ``op_name`` names the operator.

    Attributes:
        what: what went wrong.
        where: where (the input path, node, file entry or JSON path), or None.
        fix: how to fix it, or None.

    Raised by:
        ``export`` when the program calls a custom operator without ``register_fake``.

    Example:
        >>> try:
        ...     ep = graphcap.export(model, args)
        ... except graphcap.MissingFakeKernelError as e:
        ...     print(e.op_name)  # add torch.library.register_fake for it
    """

    def __init__(self, what: str, *, where: Optional[str] = None, fix: Optional[str] = None,
                 op_name: str = ""):
        self.op_name = op_name
        super().__init__(what, where=where, fix=fix)


class SerializationError(GraphcapError):
    """A program cannot be saved, or a file cannot be loaded.

    Loading refuses a file that is corrupt, crafted, from a newer format, whose
    program.json does not follow the declared schema (the JSON path is named),
    or that names an operator or class this process lacks.

    Attributes:
        what: what went wrong.
        where: where (the input path, node, file entry or JSON path), or None.
        fix: how to fix it, or None.

    Raised by:
        ``save``, ``load``, ``to_torch`` and ``from_torch``.

    Example:
        >>> try:
        ...     ep = graphcap.load("model.pt2")
        ... except graphcap.SerializationError as e:
        ...     print(e.where, e.fix)
    """


class NotAProgramError(SerializationError, TypeError):
    """``save`` or ``to_torch`` given something that is not an exported program (the model itself,
    for one).

    Also a ``TypeError``, the type torch.export's ``save`` raises for it.
    """

    @classmethod
    def of(cls, value: Any, where: str, call: str) -> "NotAProgramError":
        """The refusal of ``value`` where a program is meant; ``call`` is the call, ``{}`` for it."""
        import torch
        if isinstance(value, torch.nn.Module):
            return cls(f"Expected an exported program, got the module {type(value).__name__} itself.",
                       where=where,
                       fix=f"Export it first and pass the program: {call.format('graphcap.export(model, args)')}.")
        return cls(f"Expected a graphcap ExportedProgram, got {type(value).__name__}.", where=where,
                   fix="Pass the program graphcap.export or graphcap.load returned (a torch.export program "
                       "is taken too).")


class NotPicklableError(SerializationError, TypeError):
    """``pickle`` / ``torch.save`` given an exported program or ``ep.module()``.

    Their graphs carry fake values and their modules input checks that pickle cannot keep (fx's
    pickling writes a file whose load fails far from the save); the message names graphcap's own
    format instead. Also a ``TypeError``, the type raised for an object that cannot be serialized that way.
    """

    @classmethod
    def of(cls, value: Any) -> "NotPicklableError":
        """The refusal to pickle ``value`` (a program or its module)."""
        program = hasattr(value, "graph_signature")
        kind = "an exported program" if program else "ep.module()"
        lost = ("its graph's fake values and symbolic sizes" if program
                else "its input checks, and the graph's own code and metadata")
        return cls(f"{type(value).__name__} ({kind}) cannot be pickled (pickle, torch.save, "
                   f"multiprocessing): {lost} would not come back from the file.", where=f"pickling {kind}",
                   fix="Save the program in graphcap's format and take its module after loading: "
                       "graphcap.save(ep, 'model.pt2'); module = graphcap.load('model.pt2').module(). "
                       "For the weights alone: torch.save(module.state_dict(), 'weights.pt'). In one "
                       "process, copy.deepcopy(module) copies it.")


def _make_also_torch_user_errors() -> dict[str, type]:
    """Make the errors that are also torch's ``UserError`` (see ``_ALSO_TORCH_USER_ERRORS``).

    Their torch bases live in ``torch._dynamo.exc`` (seconds to import) and torch's shape engine;
    they are imported here, on first use, not when graphcap.errors is.
    """
    from torch.fx.experimental.symbolic_shapes import ConstraintViolationError as _TorchConstraintViolation

    from .torch_private.dynamo import UserError as _TorchUserError
    from .torch_private.dynamo import UserErrorType as _TorchUserErrorType

    class _AlsoTorchUserError(GraphcapError):
        """Mixin: the error is also torch's ``UserError`` (and so its ``RuntimeError``).

        torch.export raises ``torch._dynamo.exc.UserError`` (or its shape engine's
        ``ConstraintViolationError``) for a dynamic_shapes spec the program does
        not satisfy; code written against torch catches those. The torch base
        initializer wants an error kind, so the message is set here directly.
        """

        _user_error_type = _TorchUserErrorType.CONSTRAINT_VIOLATION

        def __init__(self, what: str, *, where: Optional[str] = None, fix: Optional[str] = None):
            self.what, self.where, self.fix = what, where, fix
            message = _compose(what, where, fix)
            Exception.__init__(self, message)
            self.error_type = self._user_error_type
            self.msg = self.message = message
            self.real_stack = None
            self.skip_frame = False
            self.logged = False
            self._torch_dynamo_tracer_output = None  # what torch's exception base sets
            self.frame_exec_strategy = None

    class ExportArgsError(_AlsoTorchUserError, ExportInputError, _TorchUserError):
        """``args`` / ``kwargs`` given to ``export`` have the wrong container type. Also
        torch's ``UserError`` (``INVALID_INPUT``), which torch.export raises for it."""

        _user_error_type = _TorchUserErrorType.INVALID_INPUT

    class ConstraintViolationError(_AlsoTorchUserError, _TorchConstraintViolation, _TorchUserError):
        """The traced program needs more of a dynamic dim than the spec declares.

        The message lists each violation and ends with ``Suggested fixes:`` lines
        that ``graphcap.refine_dynamic_shapes_from_suggested_fixes`` applies. Also
        torch's ``ConstraintViolationError`` and ``UserError``, which torch.export
        raises in the same situation.

        Attributes:
            what: what went wrong.
            where: where (the input path, node, file entry or JSON path), or None.
            fix: how to fix it, or None.

        Raised by:
            ``export`` with ``dynamic_shapes`` the program does not honour.

        Example:
            >>> try:
            ...     ep = graphcap.export(model, args, dynamic_shapes=spec)
            ... except graphcap.ConstraintViolationError as e:
            ...     spec = graphcap.refine_dynamic_shapes_from_suggested_fixes(e, spec)
        """


    class DynamicSpecError(_AlsoTorchUserError, ExportInputError, _TorchConstraintViolation, _TorchUserError):
        """A dynamic_shapes spec that does not fit the example inputs or itself.

        An ``ExportInputError`` (a ``ValueError``), and also torch's
        ``ConstraintViolationError`` / ``UserError``: torch.export raises one of
        those for the same mistakes (an example size outside its Dim's range, one
        name for two different Dims, a hint range the trace contradicts).
        """

        _user_error_type = _TorchUserErrorType.INVALID_INPUT

    made: dict[str, type] = {"ExportArgsError": ExportArgsError, "ConstraintViolationError": ConstraintViolationError,
                             "DynamicSpecError": DynamicSpecError}
    for name, cls in made.items():
        cls.__qualname__ = name  # printed and pickled as graphcap.errors.<name>
    _AlsoTorchUserError.__qualname__ = "_AlsoTorchUserError"
    return made


def __getattr__(name: str) -> Any:
    if name in _ALSO_TORCH_USER_ERRORS:
        globals().update(_make_also_torch_user_errors())
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
