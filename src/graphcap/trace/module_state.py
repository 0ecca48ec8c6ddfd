"""The user's modules while their forward is traced: what it changes, and undoing it.

A forward runs on fake tensors during export. What it stores on the module
must not outlive the trace (a fake tensor left in a model breaks its next
eager call), and what it means must not be lost:

* a registered buffer given a new tensor (``self.buf = self.buf + 1``) is a
  buffer update, like ``self.buf.add_(1)``: :func:`reassigned_buffers` finds
  them so that the program writes the new value into the buffer (an in-graph
  ``copy_``, as torch's training IR records it);
* a plain tensor attribute assigned (``self.cache = x * 2``, an entry of a
  dict or list attribute, a buffer registered inside forward) is not state
  an exported program can carry: the program computes with it, the module
  is restored, and a ``UserWarning`` names each such attribute so the user
  can register it as a buffer (torch warns the same way);
* a Python number attribute changed (``self.n += 1``) is baked into the
  program as the value forward used: the module is restored and a warning
  names the attribute with its values (torch's non-strict export says nothing).
"""
from __future__ import annotations

import contextlib
import functools
import threading
import warnings
from typing import Any, Iterator, Optional, Sequence

import torch

from ..errors import UnsupportedError
from ..pytree import holds_tensor
from ..torch_private.fake import FakeTensor
from ..torch_private.modules import (
    BUFFER_REGISTRY,
    HOOK_FIELD_PREFIXES,
    REGISTRY_FIELDS,
    buffers_of,
    children_of,
    non_persistent_buffer_names,
    registry_view,
)
from ..user_frames import user_stacklevel

# nn.Module's registries, restored entry by entry rather than as attributes
_REGISTRIES = REGISTRY_FIELDS


def _container_copy(value: Any) -> Any:
    return dict(value) if type(value) is dict else list(value) if type(value) is list else None


_NUMBER = (bool, int, float)


def _assigned_paths(path: str, old: Any, new: Any, out: list[str],
                    numbers: Optional[list[str]] = None) -> None:
    """Append the paths under ``path`` where a tensor was put in place of ``old``; to ``numbers``,
    those where a Python number changed (with its values, ``self.n (0 -> 1)``).

    An RNN's ``_flat_weights`` list is named too (the export's own swap of the weights, which the
    RNN mirrors there): torch.export warns of it in the same words, and its own suite holds that."""
    if old is new:
        return
    if isinstance(new, torch.Tensor):
        out.append(path)
    elif isinstance(old, dict) and isinstance(new, dict):
        for key in list(old) + [k for k in new if k not in old]:
            _assigned_paths(f"{path}[{key!r}]", old.get(key), new.get(key), out, numbers)
    elif isinstance(old, list) and isinstance(new, list):
        for i in range(max(len(old), len(new))):
            _assigned_paths(f"{path}[{i}]", old[i] if i < len(old) else None,
                            new[i] if i < len(new) else None, out, numbers)
    elif numbers is not None and isinstance(old, _NUMBER) and isinstance(new, _NUMBER) and old != new:
        numbers.append(f"{path} ({old!r} -> {new!r})")


def warn_assigned(paths: list[str], numbers: Sequence[str] = (), *, strict: bool = False) -> None:
    """Tell the user that forward's writes to module attributes are not in the program.

    ``paths``: tensor attributes assigned (non-strict), or any attributes (``strict``: dynamo
    reports which objects changed, not what they hold); ``numbers``: Python numbers changed."""
    keep = ("If forward has to update a tensor across calls, register it as a buffer "
            "(self.register_buffer(name, tensor)); buffer updates become outputs of the program.")
    if paths and strict:
        warnings.warn(
            f"strict=True: forward changed {', '.join(paths)} during export. The exported program "
            f"used the new values while tracing (a Python number as a constant), but it cannot keep "
            f"them as state: it leaves the change out, and the module is as it was. {keep}",
            UserWarning, stacklevel=user_stacklevel())
    elif paths:
        noun, verb = ("tensor attributes", "were") if len(paths) > 1 else ("tensor attribute", "was")
        warnings.warn(
            f"The {noun} {', '.join(paths)} {verb} assigned during export. The exported "
            f"program used the new value while tracing, but it cannot keep it as state: the module "
            f"was restored. {keep}", UserWarning, stacklevel=user_stacklevel())
    if numbers:
        noun, verb = ("attributes", "were") if len(numbers) > 1 else ("attribute", "was")
        warnings.warn(
            f"The number {noun} {', '.join(numbers)} {verb} changed during export. The exported "
            f"program computed with the value forward used while tracing and keeps it as a "
            f"constant: calling the program does not change the attribute again, and the module "
            f"was restored. To carry a count across calls, keep it in a buffer "
            f"(self.register_buffer('n', torch.zeros((), dtype=torch.long))) updated in place "
            f"(self.n.add_(1)).", UserWarning, stacklevel=user_stacklevel())


def _random_operators(gm: torch.fx.GraphModule) -> list[str]:
    """Names of the random operators (``aten.rand``, ``aten.bernoulli``...) the program calls."""
    names = []
    for sub in gm.modules():
        if isinstance(sub, torch.fx.GraphModule):
            for node in sub.graph.nodes:
                tags = getattr(node.target, "tags", ()) if node.op == "call_function" else ()
                if torch.Tag.nondeterministic_seeded in tags:
                    names.append(str(node.target.overloadpacket))
    return list(dict.fromkeys(names))


# torch's public calls that set the default generator's state, watched while a forward is traced:
# module -> attribute names (torch.manual_seed is torch.random.manual_seed; torch.random.fork_rng
# restores the state it saved through torch.set_rng_state)
_RNG_SETTERS = {torch: ("manual_seed", "set_rng_state"), torch.random: ("manual_seed", "set_rng_state")}
_rng_watch = threading.local()
_rng_install_lock = threading.Lock()
_rng_install_count = 0
_rng_originals: dict[tuple[Any, str], Any] = {}


def _watching(name: str, original: Any) -> Any:
    @functools.wraps(original)
    def watched(*args: Any, **kwargs: Any) -> Any:
        calls = getattr(_rng_watch, "calls", None)
        if calls is not None:  # only the thread whose forward is traced
            calls.append(name)
        return original(*args, **kwargs)
    watched.__graphcap_watched__ = original  # type: ignore[attr-defined]
    return watched


@contextlib.contextmanager
def _rng_setters_watched() -> Iterator[list[str]]:
    """The names of torch's RNG-setting functions forward calls (``manual_seed``, ``set_rng_state``,
    the latter also on leaving ``torch.random.fork_rng``), on this thread, while the block runs.
    The functions are torch's own again when the last export leaves."""
    global _rng_install_count
    with _rng_install_lock:
        if _rng_install_count == 0:
            for module, names in _RNG_SETTERS.items():
                for name in names:
                    original = getattr(module, name)
                    _rng_originals[(module, name)] = original
                    setattr(module, name, _watching(name, original))
        _rng_install_count += 1
    outer = getattr(_rng_watch, "calls", None)
    calls: list[str] = []
    _rng_watch.calls = calls
    try:
        yield calls
    finally:
        _rng_watch.calls = outer
        if outer is not None:
            outer.extend(calls)
        with _rng_install_lock:
            _rng_install_count -= 1
            if _rng_install_count == 0:
                for (module, name), original in _rng_originals.items():
                    setattr(module, name, original)
                _rng_originals.clear()


@contextlib.contextmanager
def seeding_told(name: str) -> Iterator[list]:
    """Warn when the traced forward sets the state of torch's default generator (``torch.manual_seed``,
    ``torch.set_rng_state``, ``torch.random.fork_rng``) and the program calls random operators:
    the program does not set it when it runs, so its random values are not eager's (a seeded draw
    is not seeded; a draw replayed from a saved state is drawn afresh). The caller appends the
    recorded graph module to the yielded list. The generator is left as forward set it, as
    running forward would."""
    seed = torch.initial_seed()
    recorded: list = []
    with _rng_setters_watched() as calls:
        yield recorded
    if not recorded or (torch.initial_seed() == seed and not calls):
        return
    random_ops = _random_operators(recorded[0])
    if not random_ops:
        return
    did = []
    if "manual_seed" in calls or torch.initial_seed() != seed:
        did.append(f"torch.manual_seed({torch.initial_seed()})" if torch.initial_seed() != seed
                   else "torch.manual_seed")
    if "set_rng_state" in calls:
        did.append("torch.set_rng_state (torch.random.fork_rng calls it too)")
    warnings.warn(
        f"{name}'s forward set the state of torch's random number generator while it was traced "
        f"({', '.join(did)}), but the exported program does not: its random operators "
        f"({', '.join(random_ops)}) draw from the default generator as it is each time the program "
        f"runs, so they do not give the values eager computes (seeded or replayed draws are drawn "
        f"afresh). Seed before calling the program (torch.manual_seed(...); ep.module()(...)), or "
        f"make the random tensor outside forward and pass it in or register it as a buffer.",
        UserWarning, stacklevel=user_stacklevel())


@contextlib.contextmanager
def preserved_module_attributes(root: Optional[torch.nn.Module]) -> Iterator[None]:
    """Undo attribute writes the traced forward makes on the user's modules.

    Some models cache tensors on themselves during forward (timm's
    EfficientFormer keeps an ``attention_bias_cache`` dict). During export
    those would be fake tensors left behind in the user's model, so plain
    attributes, the contents of dict/list attributes and buffers registered
    during forward are put back as they were, and the tensor ones are named
    in a warning (see the module docstring).
    """
    if root is None:
        yield
        return
    saved = []
    for prefix, mod in root.named_modules(remove_duplicate=True):
        state = {}
        for k, v in mod.__dict__.items():
            if k in _REGISTRIES:
                v = registry_view(v)  # a ScriptModule's registry is no dict
                state[k] = (v, dict(v))  # entries swapped by reparametrization come back by themselves
            elif k.startswith(HOOK_FIELD_PREFIXES):
                state[k] = None  # hooks: the user's business
            else:
                state[k] = (v, _container_copy(v))
        saved.append((prefix, mod, state))
    try:
        yield
    finally:
        assigned: list[str] = []
        numbers: list[str] = []
        for prefix, mod, state in saved:
            where = f"self.{prefix}." if prefix else "self."
            for k in [k for k in mod.__dict__ if k not in state]:
                if holds_tensor(mod.__dict__[k]):
                    _assigned_paths(where + k, None, mod.__dict__[k], assigned)
                    del mod.__dict__[k]
            for k, entry in state.items():
                if entry is None:
                    continue
                v, copy = entry
                if k in _REGISTRIES:
                    for name in [n for n in v if n not in copy]:  # registered during forward
                        if isinstance(v[name], torch.Tensor):
                            assigned.append(where + name)
                        del v[name]
                        if k == BUFFER_REGISTRY:
                            non_persistent_buffer_names(mod).discard(name)
                    continue
                _assigned_paths(where + k, copy if copy is not None else v, mod.__dict__.get(k), assigned,
                                numbers)
                mod.__dict__[k] = v
                if copy is not None:
                    v.clear()
                    if isinstance(v, dict):
                        v.update(copy)
                    else:
                        v.extend(copy)
        warn_assigned(assigned, numbers)


def reassigned_buffers(root: torch.nn.Module, passed: dict[str, torch.Tensor],
                       buffer_names: list[str], program_name: str = "") -> dict[str, torch.Tensor]:
    """Buffers that now hold another tensor than the one passed in for the trace.

    Call it inside the reparametrization, right after forward returned. ``program_name``: what was
    traced (``Model`` for a module's forward, ``Model.decode`` for a method), for the error.
    """
    who = (program_name if "." in program_name else f"{program_name}.forward") if program_name else "forward"
    found: dict[str, torch.Tensor] = {}
    for fqn in buffer_names:
        *path, leaf = fqn.split(".")
        mod = root
        for part in path:
            mod = children_of(mod).get(part) if mod is not None else None
        current = buffers_of(mod).get(leaf) if mod is not None else None  # views: ScriptModules too
        original = passed[fqn]
        if current is original or not isinstance(current, torch.Tensor):
            continue
        if current.shape != original.shape or current.dtype != original.dtype:
            raise UnsupportedError(
                f"{who} gives buffer {fqn!r} a new tensor of dtype {current.dtype} and shape "
                f"{list(current.shape)}; the buffer is {original.dtype} {list(original.shape)}.",
                where=f"{who}, buffer {fqn}",
                fix="An exported program updates a buffer in place, so the new value needs the "
                    "buffer's shape and dtype. Register the buffer with the shape it will have (a "
                    "cache of the maximum length, written with self.<buffer>[:, :n] = value), or keep "
                    f"the changing value in a plain variable returned from {who.rsplit('.', 1)[-1]}.")
        if not isinstance(current, FakeTensor):  # a real tensor from outside: a constant of the graph
            current = current.clone()
        found[fqn] = current
    return found
