"""Where loaded tensors are placed: ``graphcap.load(f, map_location=...)``.

A program saved on a GPU names ``cuda:0`` for its weights, constants and
example inputs. On a machine without that device, reading them as saved fails
before the user can move the program anywhere. While a load runs under
:func:`mapping`, every tensor read from the file or a checkpoint is placed on
the mapped device directly, so the saved device is never touched, and each
decoded graph's device arguments and fake values move the same way (what
``move_to_device_pass`` does to a program) before the program is built.

The mapping is a context variable, so two threads loading at once each see
their own.
"""
from __future__ import annotations

import contextlib
from contextvars import ContextVar
from typing import Any, Callable, Iterator, Mapping, Optional

import torch
import torch.fx

from ..errors import SerializationError

_MAPPER: ContextVar[Optional[Callable[[torch.device], torch.device]]] = ContextVar("graphcap_load_placement",
                                                                                   default=None)


def mapper(map_location: Any) -> Callable[[torch.device], torch.device]:
    """``map_location`` as a function from the saved device to the device to load on.

    Accepts what ``move_to_device_pass`` accepts: a device for everything, or a
    mapping from saved devices (``"cuda:0"``, or a type like ``"cuda"``) to new ones. The meta
    device stays where it is unless the mapping names it: it holds no saved data (the stand-ins
    of ``weights=False``), so it is never a place a file was saved on."""
    from ..passes.move_to_device import device_mapper
    try:
        move = device_mapper(map_location)
    except Exception as e:  # a malformed device string, a wrong type
        raise SerializationError(
            f"map_location must be a device or a mapping of devices, got {map_location!r} ({e}).",
            where="graphcap.load(f, map_location=...)",
            fix="Pass map_location='cpu', torch.device('cuda:0') or {'cuda:0': 'cpu'}.") from None
    if isinstance(map_location, Mapping) and any(torch.device(k).type == "meta" for k in map_location):
        return move
    return lambda device: device if device.type == "meta" else move(device)


@contextlib.contextmanager
def mapping(map_location: Any) -> Iterator[None]:
    """Place every tensor the load reads by ``map_location`` (``None``: as saved)."""
    token = _MAPPER.set(None if map_location is None else mapper(map_location))
    try:
        yield
    finally:
        _MAPPER.reset(token)


def placed_device(saved: torch.device) -> torch.device:
    """The device a tensor saved on ``saved`` is loaded onto."""
    move = _MAPPER.get()
    return saved if move is None else move(saved)


def place_graph(gm: torch.fx.GraphModule) -> None:
    """Move a decoded graph's device arguments and fake values as the tensors were placed."""
    move = _MAPPER.get()
    if move is not None:
        from ..passes.move_to_device import move_graph
        move_graph(gm, move)
