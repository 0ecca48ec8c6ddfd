"""The modules an unflattened program is made of.

- :class:`SubmoduleGraph`: a submodule at its original FQN. It holds the
  submodule's own parameters and buffers and its children, and its
  ``forward`` is the part of the program that ran inside its (first) call,
  compiled from an ``fx.Graph`` into Python, as ``GraphModule`` does.
- :class:`CallView`: a later call of a module called more than once,
  when that call ran a different graph (``n@1``). It is an attribute of the
  module that makes the call, not a registered submodule: it holds no state
  of its own and reads the called module's (``self.buf`` is the module's
  buffer), so the module is not duplicated, ``state_dict()`` keeps the
  original keys, and printing shows the original tree. It can still be
  replaced on its own (``set_submodule("n@1", other)``), as torch's
  unflatten allows.
- :class:`UnflattenedModule`: the root; checks the inputs the way
  ``ep.module()`` does before running anything.

The classes print under the original class names (``(n): N(...)``).
"""
from __future__ import annotations

from typing import Any, Callable, Optional

import torch

from .. import auto_flatten
from ..errors import InputStructureError
from ..runtime.input_structure import other_structure
from ..torch_private import unflatten as private
from . import flat_args
from .when_needed import MadeWhenNeeded


class SubmoduleGraph(torch.nn.Module):
    """A submodule rebuilt from the program; see the module docstring."""

    def __init__(self, fqn: str, class_name: str):
        super().__init__()
        self._fqn = fqn
        # ``class_name`` is the eager class as the program records it ("pkg.mod.Block"); the
        # module prints under its last part
        self._ty = class_name or None
        self._class_name = (class_name or "Module").rsplit(".", 1)[-1]
        self._call_graph = None
        self._compiled = None

    def _get_name(self) -> str:
        return self._class_name

    def type_name(self) -> Optional[str]:
        """The eager module's class as the program recorded it (``"pkg.models.Block"``), None
        where the program does not say; the rebuilt module's own class is not the model's."""
        return self._ty

    def __getitem__(self, index: int) -> torch.nn.Module:
        """``layers[2]`` / ``layers[-1]`` as on the original ``ModuleList`` / ``Sequential``."""
        numbered = sorted((int(k), m) for k, m in self._modules.items() if k.isdigit())
        if not isinstance(index, int) or not numbered:
            raise TypeError(f"'{self._class_name}' (unflattened) is indexed by int over numbered children only")
        return dict(numbered)[index] if index >= 0 else numbered[index][1]

    # -- graph ---------------------------------------------------------------
    @property
    def graph(self) -> Optional[torch.fx.Graph]:
        return self._call_graph

    def set_graph(self, graph: torch.fx.Graph, extra_globals: Optional[dict[str, Any]] = None) -> None:
        """Use ``graph`` as this module's forward (compiled to Python now)."""
        self._call_graph = graph
        self._compiled = LazyForward(graph, f"{self._class_name}:{self._fqn or '<root>'}",
                                                 extra_globals or {})

    @property
    def graph_module(self) -> torch.fx.GraphModule:
        """This module's graph as a ``GraphModule`` (made on each access, sharing the state)."""
        return torch.fx.GraphModule(self, self.graph)

    @property
    def code(self) -> str:
        compiled = self._compiled
        return compiled.source if compiled else ""

    def print_readable(self, print_output: bool = True) -> str:
        """The Python of every rebuilt forward in this module's tree, by FQN."""
        parts = []
        for module in self.modules():
            if isinstance(module, SubmoduleGraph) and module.code:
                parts.append(f"# {module._fqn or '<root>'}: {module._class_name}\n{module.code}")
        text = "\n".join(parts)
        if print_output:
            print(text)
        return text

    def _forwards(self) -> list["LazyForward"]:
        return [self._compiled] if self._compiled is not None else []

    def compile(self, *args: Any, **kwargs: Any) -> None:
        """``nn.Module.compile``, with every forward below generated first: torch.compile
        traces the forwards' Python, and does not trace the code generator that writes it."""
        seen: set[int] = set()
        todo: list[torch.nn.Module] = [self]
        while todo:
            module = todo.pop()
            if id(module) in seen:
                continue
            seen.add(id(module))
            if isinstance(module, SubmoduleGraph):
                for forward in module._forwards():
                    forward.source  # noqa: B018 (reading the property generates the code)
            todo.extend(module.children())
            todo.extend(v for v in vars(module).values() if isinstance(v, torch.nn.Module))  # later calls' views
        super().compile(*args, **kwargs)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        compiled = self._compiled
        if compiled is None:
            raise RuntimeError(
                f"Submodule '{self._fqn}' ({self._class_name}) never ran in the exported program, so "
                f"unflatten has no graph for its forward. Replace it with a real module "
                f"(unflattened.set_submodule('{self._fqn}', module)) if you need to call it.")
        return compiled(self, *args, **kwargs)



class CallView(SubmoduleGraph):
    """A later call of a module (``n@1``): its own graph, the called module's state."""

    def __init__(self, owner: torch.nn.Module, fqn: str, index: int, class_name: str):
        super().__init__(fqn, class_name)
        self._ty = getattr(owner, "_ty", self._ty)
        self.__dict__["_owner"] = owner  # not registered: the state stays the owner's
        self._index = index

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.__dict__["_owner"], name)

    def _get_name(self) -> str:
        return f"{self._class_name}@{self._index}"


class UnflattenedModule(SubmoduleGraph):
    """The root of an unflattened program (what ``graphcap.unflatten`` returns).

    It takes the model's own arguments, checks them as ``ep.module()`` does before computing
    anything, runs its graph (which calls the rebuilt submodules) on the flat inputs and
    returns the model's output structure. Inputs of another structure go through its
    ``flat_args_adapter`` (:mod:`graphcap.hierarchy.flat_args`) and are then checked the same way.

    Attributes:
        flat_args_adapter: the adapter given to ``unflatten``, or None.
        adapted: whether a call has gone through the adapter yet.
        check_input_constraints: True; set it to False to skip the checks of the inputs'
            dtypes, sizes and values (their structure is still checked): a wrong input then
            computes unchecked, as with torch's flag of this name.
        graph: the root's ``fx.Graph``; each submodule has its own.
        graph_signature, module_call_graph, range_constraints: the program's.
        meta: the dict an adapter is handed (the program's graph metadata and
            ``"unflattened_module"``).

    Raises:
        RuntimeInputError: (on a call) an input the program does not accept; a
            ``FlatArgsAdaptationError`` for another structure that no adapter maps.

    Example:
        >>> unf = graphcap.unflatten(graphcap.export(model, (x,)))
        >>> isinstance(unf, graphcap.UnflattenedModule), unf.type_name()
        >>> out = unf(x)
    """

    def __init__(self, class_name: str, make_checker: Any, out_spec: Any, adapter_state: flat_args.AdapterState):
        super().__init__("", class_name)
        if not class_name:
            self._class_name = "UnflattenedModule"
        self._make_checker = make_checker
        self._input_checker = MadeWhenNeeded(make_checker)
        self._result_spec = out_spec
        self._adapter_state = adapter_state
        self.adapted = False
        self.check_input_constraints = True

    # -- the program's data, as torch's unflattened module offers it ---------------
    @property
    def graph_signature(self) -> Any:
        return self._make_checker.program.graph_signature

    @property
    def module_call_graph(self) -> Any:
        return self._make_checker.program.module_call_graph

    @property
    def range_constraints(self) -> Any:
        return self._make_checker.program.range_constraints

    @property
    def meta(self) -> dict[str, Any]:
        return self._adapter_state.metadata(self)

    @property
    def input_placeholders(self) -> list[torch.fx.Node]:
        graph = self.graph
        return [n for n in graph.nodes if n.op == "placeholder"] if graph is not None else []

    def process_forward_inputs(self, *args: Any, **kwargs: Any) -> list[Any]:
        """The flat inputs a call passes to the root's graph: adapted if shaped otherwise, checked."""
        return self._flat_inputs(tuple(args), dict(kwargs))

    @property
    def flat_args_adapter(self) -> Any:
        return self._adapter_state.adapter

    @flat_args_adapter.setter
    def flat_args_adapter(self, adapter: Any) -> None:
        flat_args.check_adapter(adapter)
        self._adapter_state.adapter = adapter

    @property
    def _checker(self) -> Any:
        """The program's input checks, prepared on first use (they read the whole graph); when
        dynamo meets the module first, prepared while it traces (:mod:`.when_needed`)."""
        return self._input_checker.get()

    def _flat_inputs(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The program's flat inputs for this call, checked (adapted first if shaped otherwise)."""
        checker = self._checker
        checking = not torch.compiler.is_dynamo_compiling() and self.check_input_constraints
        if self._adapter_state.adapter is not None:
            adapted = flat_args.adapted_inputs(self._adapter_state, self, checker, args, kwargs, check=checking)
            if adapted is not None:
                return adapted
        try:
            leaves = checker(args, kwargs) if checking else checker.flat_inputs(args, kwargs)
        except InputStructureError:
            if self._adapter_state.adapter is None and other_structure(args, kwargs, checker.in_spec) is not None:
                raise flat_args.no_adapter_error(checker, args, kwargs) from None
            raise
        if torch.compiler.is_dynamo_compiling() and self.check_input_constraints \
                and not checker.fits_compiled(tuple(leaves)):
            checker.check_leaves(leaves)  # torch.compile: as ep.module()'s checks (runtime/exported_module.py)
        return leaves

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        leaves = self._flat_inputs(tuple(args), dict(kwargs))
        outputs = super().forward(*leaves)
        if self._result_spec is None:
            return outputs
        return auto_flatten.unflatten(list(outputs), self._result_spec)  # knows classes flattened by attributes


class LazyForward:
    """A graph's forward as Python, generated and compiled on first use (as
    ``GraphModule.recompile`` does, but only for the calls that run: building a large
    tree stays fast). Called with the module first. When dynamo traces the first call
    (``torch.compile``, strict export), the forward is generated while it traces and
    followed as any function (:mod:`.when_needed`)."""

    def __init__(self, graph: torch.fx.Graph, label: str, extra_globals: dict[str, Any],
                 function: Optional[Callable[..., Any]] = None, source: Optional[str] = None):
        self._graph = graph
        self._label = label
        self._extra_globals = extra_globals
        self._source = source
        self._function = MadeWhenNeeded(self._generate, function)

    def _generate(self) -> Callable[..., Any]:
        python_code = self._graph.python_code(root_module="self")
        namespace = dict(python_code.globals)
        namespace.update(self._extra_globals)
        function = private.forward_from_source(python_code.src, namespace)
        self._source = python_code.src
        return function

    @property
    def source(self) -> str:
        self._function.made()
        return self._source or ""

    def __call__(self, module: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
        return self._function.get()(module, *args, **kwargs)

    def __deepcopy__(self, memo):
        import copy
        made = self._function.ready
        return LazyForward(copy.deepcopy(self._graph, memo), self._label, self._extra_globals,
                           self._function.made() if made else None,  # the code takes the module as argument
                           self._source if made else None)
