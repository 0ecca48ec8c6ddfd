"""``move_to_device_pass(ep, location)``: the same program, on another device.

``location`` is a device (``"cuda"``, ``torch.device("cuda:0")``) for
everything, or a mapping from the devices the program uses now to new ones
(``{"cpu": "cuda:0"}``), as torch's pass takes it. Parameters, buffers and
constants move; every device argument in the graph (``empty(device=...)``,
``_to_copy(device=...)``) is rewritten; every node's fake value moves too, so
the input checks of ``module()`` expect inputs on the new device.
"""
from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Callable, Mapping, Union

import torch
import torch.fx

from ..errors import ExportInputError
from ..shape_env_copies import give_graph_own_shape_env
from ..signature import ModuleCallEntry, call_graph_of
from ..torch_private import pytree
from ..torch_private.fake import FakeTensor
from ..torch_private.shapes import backed_size_oblivious
from ..trace.naming.node_names import copy_placeholder_names
from .manager import Pass, run_passes

if TYPE_CHECKING:
    from ..program import ExportedProgram

Location = Union[str, torch.device, Mapping[Union[str, torch.device], Union[str, torch.device]]]


def device_mapper(location: Location) -> Callable[[torch.device], torch.device]:
    """``location`` as a function from a device the program uses to the device it moves to."""
    if isinstance(location, Mapping):
        table = {str(torch.device(k)): torch.device(v) for k, v in location.items()}

        def move(device: torch.device) -> torch.device:
            return table.get(str(device), table.get(device.type, device))
        return move
    if isinstance(location, (str, torch.device)):
        target = torch.device(location)
        return lambda device: target
    raise ExportInputError(
        f"move_to_device_pass expects a device or a mapping of devices, got {type(location).__name__}.",
        where="move_to_device_pass(ep, location)",
        fix="Pass 'cuda', torch.device('cuda:0') or {'cpu': 'cuda:0'}.")


def _move_value(value: Any, move) -> Any:
    if isinstance(value, torch.device):
        return move(value)
    if isinstance(value, FakeTensor):
        new = move(value.device)
        if new == value.device:
            return value
        with value.fake_mode:
            return value.to(new)
    return value


def move_graph(gm: torch.fx.GraphModule, move: Callable[[torch.device], torch.device]) -> None:
    """Rewrite, in place, the device arguments and fake values of ``gm`` and its subgraphs."""
    for module in gm.modules():
        if not isinstance(module, torch.fx.GraphModule):
            continue
        for node in module.graph.nodes:
            node.args = pytree.tree_map_only(torch.device, move, node.args)
            node.kwargs = pytree.tree_map_only(torch.device, move, node.kwargs)
            if "val" in node.meta:
                node.meta["val"] = pytree.tree_map(lambda v: _move_value(v, move), node.meta["val"])
        module.recompile()


def _move_tensor(t: torch.Tensor, move) -> torch.Tensor:
    moved = t.to(move(t.device))
    if isinstance(t, torch.nn.Parameter) and not isinstance(moved, torch.nn.Parameter):
        moved = torch.nn.Parameter(moved, requires_grad=t.requires_grad)
    return moved


def _move(ep: ExportedProgram, move) -> ExportedProgram:
    gm = copy.deepcopy(ep.graph_module)
    copy_placeholder_names(gm, ep.graph_module)  # fx's copy suffixes an input named like a builtin
    # the moved values are made by the copy's own ShapeEnv, and a move asks size questions (which
    # memory format does a size-1 dim keep?) answered for the general size: the original program
    # learns nothing, and a dim exported at size 1 stays symbolic in the moved one
    give_graph_own_shape_env(gm)
    with backed_size_oblivious():
        move_graph(gm, move)
    state = {k: _move_tensor(v, move) for k, v in ep.state_dict.items()}
    constants = {k: _move_tensor(v, move) if isinstance(v, torch.Tensor) else v for k, v in ep.constants.items()}
    return ep._new_program(gm, ep.graph_signature, state, dict(ep.range_constraints),
                           [ModuleCallEntry(e.fqn, e.signature) for e in call_graph_of(ep)],
                           ep.example_inputs, constants, verify=False)


def move_to_device_pass(ep: ExportedProgram, location: Location) -> ExportedProgram:
    """A copy of ``ep`` whose state, graph and expected inputs are on ``location``.

    Args:
        ep: the :class:`ExportedProgram` to move.
        location: a device (``"cuda:0"``, ``torch.device``) or a mapping from
            source device to target device (like the map_location of torch's loader).

    Returns:
        A new, verified ExportedProgram; ``ep`` is unchanged.

    Raises:
        ExportInputError: ``location`` is not a device or device mapping.

    Example:
        >>> ep_gpu = graphcap.move_to_device_pass(ep, "cuda")
    """
    move = device_mapper(location)
    return run_passes(ep, [Pass("move_to_device", lambda p: _move(p, move))])
