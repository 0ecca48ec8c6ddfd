"""``graphcap run --input NAME=SHAPE[:DTYPE]`` and ``--inputs FILE.safetensors``: inputs the user gives.

Inputs are named as ``graphcap inspect`` names them (the forward's own names:
``x``, ``ys[0]``, ``z['k']``). A shape is ``2x3x224x224`` (or ``2,3,224,224``,
``scalar`` for a 0-d tensor), optionally with a dtype (``:float16``); an int
input takes its value (``n=5``). A tensor file is safetensors (no pickle):
its tensors are used as they are. Inputs not given get sizes that agree with
those given (a dimension that is one of the program's symbols takes the
size given for it elsewhere) and random data, as ``graphcap run`` generates
it. Inputs outside the program's ranges are not corrected: the program refuses
them with its own message.
"""
from __future__ import annotations

import dataclasses
import os
from typing import Any, NamedTuple, Optional

import sympy
import torch

from ..verification.generate import _tensor, as_call, size_plans
from ..verification.signature_inputs import ConstantInput, IntInput, ProgramInputs, TensorInput, evaluate
from .errors import UsageError


class GivenCall(NamedTuple):
    label: str
    args: tuple
    kwargs: dict
    shapes: dict[str, Any]  # tensor input -> its shape, int input -> its value


def _describe(leaf: Any) -> str:
    if isinstance(leaf, TensorInput):
        dims = ", ".join(str(d) for d in leaf.dims)
        return f"{leaf.name} ({str(leaf.dtype).replace('torch.', '')}[{dims}])"
    if isinstance(leaf, IntInput):
        return f"{leaf.name} (int {leaf.expr})"
    return f"{leaf.name} (constant {leaf.value!r})"


def _leaf_named(inputs: ProgramInputs, name: str, where: str) -> Any:
    for leaf in inputs.leaves:
        if leaf.name == name:
            return leaf
    raise UsageError(f"The program has no input named {name!r}.", where=where,
                     fix="Its inputs are: " + "; ".join(_describe(leaf) for leaf in inputs.leaves) + ".")


def parse_dtype(text: str, where: str) -> torch.dtype:
    name = text.strip().removeprefix("torch.")
    value = getattr(torch, name, None) if name.isidentifier() else None
    if not isinstance(value, torch.dtype):
        raise UsageError(f"{text!r} is not a torch dtype.", where=where,
                         fix="Write a dtype name such as float32, float16, bfloat16, int64, bool.")
    return value


def parse_shape(text: str, where: str) -> list[int]:
    text = text.strip()
    if text in ("scalar", "()", "[]"):
        return []
    parts = text.replace(",", "x").split("x")
    if not all(p.strip().isdigit() for p in parts):
        raise UsageError(f"{text!r} is not a shape.", where=where,
                         fix="Write the sizes joined by 'x', e.g. 2x3x224x224 (or 'scalar' for a 0-d tensor), "
                             "optionally with a dtype: 2x3x224x224:float16")
    return [int(p) for p in parts]


def given_inputs(inputs: ProgramInputs, specs: list[str], tensor_file: Optional[str], seed: int) -> GivenCall:
    """One call of the program with the shapes and tensors the user gave (the rest generated to agree)."""
    given: dict[str, Any] = {}  # name -> tensor, (shape, dtype) or int
    if tensor_file:
        given.update(_read_tensor_file(inputs, tensor_file))
    for spec in specs:
        name, sep, value = spec.partition("=")
        where = f"--input {spec}"
        if not sep or not name.strip():
            raise UsageError(f"--input {spec!r} is not NAME=SHAPE.", where=where,
                             fix="e.g. --input x=2x3x224x224 or --input x=2x3x224x224:float16 (names as "
                                 "'graphcap inspect' shows them)")
        leaf = _leaf_named(inputs, name.strip(), where)
        if isinstance(leaf, TensorInput):
            shape_text, _, dtype_text = value.partition(":")
            dtype = parse_dtype(dtype_text, where) if dtype_text else leaf.dtype
            given[leaf.name] = (parse_shape(shape_text, where), dtype)
        else:
            try:
                given[leaf.name] = int(value)
            except ValueError:
                raise UsageError(f"{leaf.name} is an int input; {value!r} is not an int.", where=where,
                                 fix=f"e.g. --input {leaf.name}=5") from None
    bindings = dict(size_plans(inputs, 0, seed)[0].bindings)  # the example's sizes, then the given ones
    for leaf in inputs.leaves:
        value = given.get(leaf.name)
        if value is None:
            continue
        if isinstance(leaf, TensorInput):
            shape = list(value.shape) if isinstance(value, torch.Tensor) else value[0]
            if len(shape) == len(leaf.dims):
                for dim, size in zip(leaf.dims, shape):
                    if isinstance(dim, sympy.Symbol):
                        bindings[dim] = size
        elif isinstance(leaf, IntInput) and isinstance(leaf.expr, sympy.Symbol):
            bindings[leaf.expr] = value
    generator = torch.Generator().manual_seed(seed)
    subs = {s: sympy.Integer(v) for s, v in bindings.items()}
    leaves, shapes = [], {}
    for leaf, shape in zip(inputs.leaves, inputs.shapes(bindings)):
        value = given.get(leaf.name)
        if isinstance(leaf, TensorInput):
            if isinstance(value, torch.Tensor):
                tensor = value
            elif value is not None:
                tensor = _tensor(dataclasses.replace(leaf, dtype=value[1]), value[0], subs, generator)
            else:
                tensor = _tensor(leaf, shape, subs, generator)
            leaves.append(tensor)
            shapes[leaf.name] = list(tensor.shape)
        elif isinstance(leaf, IntInput):
            leaves.append(value if value is not None else evaluate(leaf.expr, subs))
            shapes[leaf.name] = leaves[-1]
        else:
            assert isinstance(leaf, ConstantInput)
            leaves.append(value if value is not None else leaf.value)
    label = "from " + os.path.basename(tensor_file) if tensor_file else "given sizes"
    if tensor_file and specs:
        label += " and given sizes"
    args, kwargs = as_call(inputs, leaves)
    return GivenCall(label, args, kwargs, shapes)


def _read_tensor_file(inputs: ProgramInputs, path: str) -> dict[str, Any]:
    where = f"--inputs {path}"
    if not os.path.isfile(path):
        raise UsageError(f"No such file: {path}", where=where, fix="Give the path of a .safetensors file.")
    from safetensors import SafetensorError
    from safetensors.torch import load_file
    try:
        tensors = load_file(path)
    except (SafetensorError, OSError, ValueError) as e:
        raise UsageError(f"{path} is not a safetensors file ({e}).", where=where,
                         fix="Write it with safetensors.torch.save_file({'x': tensor, ...}, path), "
                             "one tensor per input name.") from None
    names = {leaf.name: leaf for leaf in inputs.leaves}
    unknown = [k for k in tensors if k not in names]
    if unknown:
        raise UsageError(f"{path} holds tensors for no input of the program: {', '.join(unknown)}.", where=where,
                         fix="Key the tensors by input name; the program's inputs are: "
                             + "; ".join(_describe(leaf) for leaf in inputs.leaves) + ".")
    out: dict[str, Any] = {}
    for name, tensor in tensors.items():
        leaf = names[name]
        if isinstance(leaf, TensorInput):
            out[name] = tensor
        elif tensor.numel() == 1 and not tensor.is_floating_point():
            out[name] = int(tensor.item())  # an int input stored as a 0-d tensor
        else:
            raise UsageError(f"{name} is an int input; {path} holds a tensor of shape {list(tensor.shape)} for it.",
                             where=where, fix=f"Store {name} as a 0-d integer tensor, or give it with "
                                              f"--input {name}=VALUE.")
    return out
