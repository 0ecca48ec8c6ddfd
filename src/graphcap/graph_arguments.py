"""The kinds and argument classes a graph signature is made of, interoperable with torch.export's.

``InputKind`` / ``OutputKind`` say what a placeholder or output is;
``TensorArgument``, ``SymIntArgument``, ``ConstantArgument``, ... name the
graph value (or hold the baked-in value) a spec refers to. They are re-exported
by :mod:`graphcap.signature`, where users import them.

Interoperability with code written for torch.export (torch's own utilities
such as torch's ``unflatten`` read graphcap's programs too):

- the argument classes are subclasses of torch.export.graph_signature's plain
  dataclasses (imported as data types only), so ``isinstance(arg,
  ConstantArgument)`` with torch's class holds, and they compare equal to
  torch's argument of the same kind and fields;
- ``InputKind`` / ``OutputKind`` are graphcap's documented names whose
  members are torch's enum members themselves, so ``spec.kind is
  torch.export.graph_signature.InputKind.USER_INPUT`` holds (ExecuTorch's
  passes compare so), and ``InputKind(member)`` converts;
- :func:`as_argument` turns torch's argument into graphcap's.
"""
from __future__ import annotations

import dataclasses
import enum
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, Union

import torch.export.graph_signature as _torch_sig  # plain dataclasses and enums, used as data types


class _KindNames(type):
    """The class of graphcap's ``InputKind`` / ``OutputKind``: a documented name for torch's enum
    whose members are torch's members themselves, so that code written either way (``spec.kind is
    InputKind.USER_INPUT`` with graphcap's name or with torch's, ``isinstance``, ``==``, dict keys)
    reads a graphcap program's kinds; ExecuTorch's write-back pass asks ``kind is
    torch...InputKind.USER_INPUT``."""

    _torch_enum: Any

    def __new__(mcs, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> "_KindNames":
        """The class with torch's enum's members as its attributes (``InputKind.USER_INPUT``): the
        members this torch line has, none written out again."""
        return super().__new__(mcs, name, bases, {**namespace, **namespace["_torch_enum"].__members__})

    def __call__(cls, value: Any) -> Any:
        """The member for a member of any enum of the same class name, or for torch's value."""
        members = cls._torch_enum.__members__
        if isinstance(value, enum.Enum) and type(value).__name__ == cls.__name__ and value.name in members:
            return members[value.name]
        return cls._torch_enum(value)  # ValueError when no member has that value

    def __getitem__(cls, name: str) -> Any:
        return cls._torch_enum[name]

    def __iter__(cls) -> Iterator[Any]:
        return iter(cls._torch_enum)

    def __len__(cls) -> int:
        return len(cls._torch_enum)

    def __contains__(cls, value: object) -> bool:
        return isinstance(value, cls._torch_enum)

    def __instancecheck__(cls, value: object) -> bool:
        return isinstance(value, cls._torch_enum)

    @property
    def __members__(cls) -> Mapping[str, Any]:
        return cls._torch_enum.__members__


if TYPE_CHECKING:  # to a type checker, torch's enums: the members are theirs
    InputKind = _torch_sig.InputKind
    OutputKind = _torch_sig.OutputKind
else:
    class InputKind(metaclass=_KindNames):
        """What a placeholder of the graph is: a user input, a parameter, a buffer, a lifted constant, ...

        Its members are torch.export's ``InputKind`` members themselves (``is`` holds with either name);
        ``InputKind(member)`` converts a member of any enum named ``InputKind``, or torch's value.

        Args:
            value: a member's value, or a member of the same name (converted).

        Raises:
            ValueError: no member has that value or name.

        Example:
            >>> [s.target for s in ep.graph_signature.input_specs if s.kind is graphcap.InputKind.PARAMETER]
        """

        _torch_enum = _torch_sig.InputKind  # the members are its members (_KindNames.__new__)


    class OutputKind(metaclass=_KindNames):
        """What an output of the graph is: a user output, a buffer or input mutation, a loss, ...

        Its members are torch.export's ``OutputKind`` members themselves (``is`` holds with either name);
        ``OutputKind(member)`` converts a member of any enum named ``OutputKind``, or torch's value.

        Args:
            value: a member's value, or a member of the same name (converted).

        Raises:
            ValueError: no member has that value or name.

        Example:
            >>> [s.arg.name for s in ep.graph_signature.output_specs if s.kind is graphcap.OutputKind.USER_OUTPUT]
        """

        _torch_enum = _torch_sig.OutputKind  # the members are its members (_KindNames.__new__)


class _ArgumentInterop:
    """Equality with torch's argument of the same kind: same torch base class, same fields.

    Arguments are mutable, as torch's are: torch's passes rename nodes through
    ``replace_all_uses``, which assigns ``arg.name``.
    """

    _torch_cls: type

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, self._torch_cls):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in dataclasses.fields(self._torch_cls))

    __hash__ = None  # mutable, as torch's are


@dataclasses.dataclass(eq=False)
class TensorArgument(_ArgumentInterop, _torch_sig.TensorArgument):
    """A tensor input or output of the graph, by its node's name.

    Args:
        name: the name of the placeholder or output node.

    Raises:
        Nothing.

    Example:
        >>> graphcap.TensorArgument(name="x") == torch.export.graph_signature.TensorArgument(name="x")
        True
    """

    _torch_cls = _torch_sig.TensorArgument


@dataclasses.dataclass(eq=False)
class SymIntArgument(_ArgumentInterop, _torch_sig.SymIntArgument):
    """A symbolic-int input or output of the graph (an int input of a dynamic program), by node name.

    Args:
        name: the name of the placeholder or output node.

    Raises:
        Nothing.

    Example:
        >>> graphcap.SymIntArgument(name="n")
    """

    _torch_cls = _torch_sig.SymIntArgument


@dataclasses.dataclass(eq=False)
class SymFloatArgument(_ArgumentInterop, _torch_sig.SymFloatArgument):
    _torch_cls = _torch_sig.SymFloatArgument


@dataclasses.dataclass(eq=False)
class SymBoolArgument(_ArgumentInterop, _torch_sig.SymBoolArgument):
    _torch_cls = _torch_sig.SymBoolArgument


@dataclasses.dataclass(eq=False)
class ConstantArgument(_ArgumentInterop, _torch_sig.ConstantArgument):
    """A Python value baked into the program (an int input, a string output).

    Args:
        name: the input's name (empty for an output).
        value: the value (int, float, bool, str or None).

    Raises:
        Nothing.

    Example:
        >>> graphcap.ConstantArgument(name="mode", value="fast")
    """

    _torch_cls = _torch_sig.ConstantArgument


@dataclasses.dataclass(eq=False)
class CustomObjArgument(_ArgumentInterop, _torch_sig.CustomObjArgument):
    """An opaque (script or custom-class) object; graphcap does not capture these yet."""

    _torch_cls = _torch_sig.CustomObjArgument


@dataclasses.dataclass(eq=False)
class TokenArgument(_ArgumentInterop, _torch_sig.TokenArgument):
    """An effect token; graphcap orders effects without tokens, so it never writes one."""

    _torch_cls = _torch_sig.TokenArgument


ArgumentSpec = Union[TensorArgument, SymIntArgument, SymFloatArgument, SymBoolArgument, ConstantArgument,
                     CustomObjArgument, TokenArgument]

_ARGUMENT_CLASSES = (TensorArgument, SymIntArgument, SymFloatArgument, SymBoolArgument, ConstantArgument,
                     CustomObjArgument, TokenArgument)
# Most derived first: graphcap's classes are subclasses of torch's.
_OURS_FOR_TORCH = {cls._torch_cls: cls for cls in _ARGUMENT_CLASSES}


def as_argument(arg: Any) -> Any:
    """graphcap's argument for one of torch's (same fields); graphcap's and other values pass through."""
    if isinstance(arg, _ARGUMENT_CLASSES):
        return arg
    ours = _OURS_FOR_TORCH.get(type(arg))
    if ours is None:
        return arg
    return ours(**{f.name: getattr(arg, f.name) for f in dataclasses.fields(type(arg))})
