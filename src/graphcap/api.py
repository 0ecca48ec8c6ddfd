"""The public entry points. Thin: each checks its arguments and delegates."""
from __future__ import annotations

from typing import Any, Optional, Sequence, cast

from .program import ExportedProgram, module_of_program
from .serialize import context_text as _context_text  # noqa: F401 (torch's pytree writes handed-over contexts)
from .tracing_lock import TRACING_LOCK as TRACING_LOCK  # public here too (docs/threads.md)
from .young_heap import young_objects_only


def export(
    mod: Any,
    args: Optional[tuple[Any, ...]] = None,
    kwargs: Optional[dict[str, Any]] = None,
    *,
    dynamic_shapes: Any = None,
    strict: bool = False,
    preserve_module_call_signature: tuple[str, ...] = (),
    prefer_deferred_runtime_asserts_over_guards: bool = False,
    samples: Optional[list[Any]] = None,
) -> ExportedProgram:
    """Capture ``mod`` called on ``args``/``kwargs`` into an ExportedProgram.

    The same signature as torch.export's ``export``. ``mod`` may be an
    ``nn.Module``, a function or a bound method. The user's Python runs as it
    is on fake tensors (non-strict capture) and every ATen operator it reaches
    is recorded at the training-IR level.

    Args:
        mod: the ``nn.Module`` (or function, or bound method) to capture; an exported program
            (graphcap's or torch.export's) is captured as its ``module()``.
        args: the positional example inputs, a tuple.
        kwargs: the keyword example inputs, or None.
        dynamic_shapes: which input dimensions may vary: a spec in the shape of the
            inputs holding ``Dim`` objects, ``Dim.AUTO``/``Dim.DYNAMIC``/``Dim.STATIC``
            or None (static), as for torch.export; or a :class:`ShapesCollection` /
            :class:`AdditionalInputs` turned into one.
        strict: True to read the bytecode with dynamo's full-graph capture (a graph break is
            a :class:`graphcap.errors.StrictCaptureError` naming the line); the program then goes through the
            same pipeline as the default non-strict capture.
        preserve_module_call_signature: fully-qualified names of submodules whose
            call signature is kept, so :func:`unflatten` can swap them.
        prefer_deferred_runtime_asserts_over_guards: keep the program general where
            a shape guard would otherwise narrow or contradict a declared dynamic
            dim: the condition becomes a runtime assert in the graph (checked by
            ``module()`` before computing) instead of a constraint violation.
        samples: with ``dynamic_shapes="infer"``, sample inputs (each a tuple of args or
            ``(args, kwargs)``) the spec is inferred from (see :func:`infer_dynamic_shapes`);
            ``args`` may then be omitted. The spec is ``ep.inferred_shapes``.

    Returns:
        A verified :class:`ExportedProgram` whose ``module()`` gives eager's result
        for every input its signature accepts and refuses the others.

    Raises:
        ExportInputError: the module, inputs or spec given are malformed.
        ConstraintViolationError: the program needs more of a dynamic dim than the
            spec declares (the message ends with ``Suggested fixes:``).
        UnsupportedError: the program uses a construct graphcap cannot capture.
        TraceError: the user's code raised while it ran on fake tensors.

    Example:
        >>> model = torch.nn.Linear(4, 2)
        >>> ep = graphcap.export(model, (torch.randn(3, 4),),
        ...                      dynamic_shapes=({0: graphcap.Dim("batch")},))
        >>> ep.module()(torch.randn(5, 4)).shape
        torch.Size([5, 2])
    """
    from .dynamic.shape_var_specs import with_attached_spec
    mod = module_of_program(mod)  # a program is exported as its module()
    dynamic_shapes = with_attached_spec(mod, dynamic_shapes)  # torch's @dynamic_spec(...) on forward
    if samples is not None or (isinstance(dynamic_shapes, str) and dynamic_shapes == "infer"):
        from .capture.inferred_shapes import export_with_inferred_shapes
        ep = export_with_inferred_shapes(mod, args, kwargs, dynamic_shapes=dynamic_shapes, samples=samples,
                                         strict=strict, preserve_module_call_signature=preserve_module_call_signature)
    else:
        from .capture.front_ends import run_front_end
        ep = run_front_end(mod, args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict,
                           preserve_module_call_signature=preserve_module_call_signature,
                           prefer_deferred_runtime_asserts_over_guards=prefer_deferred_runtime_asserts_over_guards)
    import torch
    if any(t.device.type == "meta" for t in getattr(ep, "constants", {}).values() if isinstance(t, torch.Tensor)):
        # built on the meta device: the buffers a module computes at construction get their real values
        from .serialize.meta_buffers import materialise
        materialise(mod, ep)
    return ep


def export_for_training(mod: Any, args: tuple[Any, ...], kwargs: Optional[dict[str, Any]] = None,
                        **options: Any) -> ExportedProgram:
    """torch 2.10's name for :func:`export`, kept so code written for torch 2.10 runs unchanged.

    torch 2.10 deprecated it (removed in 2.11): :func:`export` gives the same program, with
    training-time operators kept.

    Args:
        mod, args, kwargs: as for :func:`export`.
        options: :func:`export`'s keyword arguments (``dynamic_shapes``, ``strict``, ...).

    Returns:
        The :class:`ExportedProgram` :func:`export` returns for the same arguments.

    Raises:
        The errors of :func:`export`; warns ``FutureWarning`` first, as torch 2.10 does.

    Example:
        >>> ep = graphcap.export_for_training(torch.nn.Linear(4, 2), (torch.randn(3, 4),))  # doctest: +SKIP
    """
    import warnings
    warnings.warn("export_for_training is torch 2.10's deprecated name for export, which gives the same "
                  "program: call graphcap.export.", FutureWarning, stacklevel=2)
    return export(mod, args, kwargs, **options)


def draft_export(
    mod: Any,
    args: tuple[Any, ...],
    kwargs: Optional[dict[str, Any]] = None,
    *,
    dynamic_shapes: Any = None,
    strict: bool = False,
    preserve_module_call_signature: tuple[str, ...] = (),
    prefer_deferred_runtime_asserts_over_guards: bool = False,
) -> ExportedProgram:
    """Export ``mod`` whenever it runs eagerly on the example, and report what had to be worked around.

    Data-dependent questions are answered with the example's real values (and
    asserted at runtime), a violated dynamic_shapes spec is refined from its
    suggested fixes, custom operators without fake kernels get their output
    metadata from a real call. ``ep.report`` (a
    :class:`graphcap.DraftReport`) lists each problem with the user's line and
    the fix. See :mod:`graphcap.capture.draft`.

    Args:
        mod: the ``nn.Module`` (or function, or bound method, or exported program: its
            ``module()``) to capture; it must
            run eagerly on the example.
        args: the positional example inputs, a tuple.
        kwargs: the keyword example inputs, or None.
        dynamic_shapes: as for :func:`export`; when the program violates it, it is
            refined (up to four times) and the refined spec is
            ``ep.report.refined_dynamic_shapes``.
        strict: passed to :func:`export` on every attempt.
        preserve_module_call_signature: as for :func:`export`.
        prefer_deferred_runtime_asserts_over_guards: as for :func:`export`.

    Returns:
        An :class:`ExportedProgram` with ``report`` set to a :class:`DraftReport`.
        It is sound for every input its signature accepts: data that would take
        another path than the example's is refused at runtime by an assert that
        names the user's line. ``ep.report.successful()`` tells whether it is
        what :func:`export` would have given.

    Raises:
        ConstraintViolationError: the spec is still violated after the refinements.
        ExportInputError: the module, inputs or spec given are malformed.
        UnsupportedError: a construct graphcap cannot capture even with the
            example's values.
        TraceError: the user's code raised while it ran on fake tensors.

    Example:
        >>> ep = graphcap.draft_export(model, (torch.tensor([3]),))
        >>> print(ep.report)
        >>> fixes = [p.fix for p in ep.report.problems]
    """
    from .capture.draft import draft_export as _draft_export
    return _draft_export(module_of_program(mod), args, kwargs, dynamic_shapes=dynamic_shapes, strict=strict,
                         preserve_module_call_signature=tuple(preserve_module_call_signature),
                         prefer_deferred_runtime_asserts_over_guards=prefer_deferred_runtime_asserts_over_guards)


def export_methods(model: Any, inputs: Any, dynamic_shapes: Any = None, strict: bool = False) -> Any:
    """Export several methods of one module (prefill + decode, encode + decode) over one shared state.

    Each method is exported as :func:`export` exports a bound method: its
    program lifts the model's parameters and buffers under the model's FQNs,
    and every program holds the same tensor object for each FQN (tied weights
    stay tied). See ``docs/multi-method.md``.

    Args:
        model: the ``nn.Module`` whose methods to export.
        inputs: method name -> that method's example arguments: a tuple, or
            ``(args_tuple, kwargs_dict)``.
        dynamic_shapes: method name -> that method's spec (as for :func:`export`);
            a method left out is static.
        strict: as for :func:`export`, for every method.

    Returns:
        A :class:`graphcap.multi_method.MultiMethodProgram`: ``progs["decode"]`` is
        an ordinary ExportedProgram; ``progs.module()`` is one ``nn.Module`` whose
        methods run over one state (a KV cache prefill fills is what decode reads).

    Raises:
        ExportInputError: an unknown method name, an attribute that is not a bound
            method of ``model``, no inputs, a spec for a method without inputs, or
            methods that disagree about a state tensor's shape or dtype; the
            message names the method and the state FQN.
        GraphcapError: whatever :func:`export` raises for one method (a note names
            the method).

    Example:
        >>> progs = graphcap.export_methods(model, {"prefill": (ids,), "decode": (tok,)})
        >>> m = progs.module()
        >>> logits = m.prefill(ids)
        >>> logits = m.decode(tok)
    """
    from .capture.methods import export_methods as _export_methods
    return _export_methods(model, inputs, dynamic_shapes=dynamic_shapes, strict=strict)


@young_objects_only  # cost linear in the program's size (young_heap.py)
def save(ep: ExportedProgram, f: Any, *, extra_files: Optional[dict[str, Any]] = None,
         opset_version: Optional[dict[str, int]] = None, pickle_protocol: int = 2,
         weights: bool = True) -> None:
    """Write ``ep`` to ``f`` in graphcap's pickle-free .pt2 format.

    The archive holds program.json (declared in ``graphcap.serialize.schema``),
    the weights and constants in safetensors, and ``extra_files``. Writing to a
    path is atomic: a failure leaves the old file (or none).

    Args:
        ep: the :class:`ExportedProgram` to write (from ``export``, ``load`` or
            ``from_torch``); a ``torch.export.ExportedProgram`` is converted with
            ``from_torch`` first (``load`` then gives the graphcap program).
        f: a path (str or ``os.PathLike``) or a binary file object open for writing.
        extra_files: optional name -> str/bytes stored beside the program.
        opset_version: optional operator namespace -> operator-set version the file
            records beside ``aten`` (always this process's ATen operator version, unless
            given here); a program loaded from a file keeps that file's namespaces.
            ``load(f, expected_opset_version=...)`` compares with them (docs/files.md).
        pickle_protocol: accepted as torch's own save takes it, with no effect,
            since the file holds no pickled data; a value torch's pickler refuses (not
            an int, or above Python's highest protocol, 5) is refused.
        weights: ``False`` writes the structure alone (graph, signature, and the
            dtype, shape, strides and requires_grad of every weight), also for a
            program exported on the meta device; the weights are attached when
            loading (``load(f, weights=checkpoint)``).

    Returns:
        None.

    Raises:
        SerializationError: ``ep`` holds something the format cannot write (a
            callable that is no operator, an unsupported dtype, meta weights
            without ``weights=False``), or ``f`` is not a path or binary file;
            ``opset_version`` is not a mapping of namespace names to ints >= 0, or
            ``pickle_protocol`` is one torch would refuse.

    Example:
        >>> graphcap.save(ep, "model.pt2", extra_files={"notes.txt": "v1"})
    """
    from .multi_method import MultiMethodProgram
    if isinstance(ep, MultiMethodProgram):  # several methods, each state tensor stored once
        from .errors import SerializationError
        from .serialize.multi_method import save as _save_methods
        if not isinstance(weights, bool):
            raise SerializationError(f"graphcap.save's weights= is True or False, got {type(weights).__name__}.",
                                     where="graphcap.save(progs, f, weights=...)",
                                     fix="weights=False writes the structure alone; weights are attached at load.")
        from .serialize.opsets import check_pickle_protocol
        check_pickle_protocol(pickle_protocol, call="graphcap.save")
        _save_methods(ep, f, extra_files=extra_files, weights=weights, opset_version=opset_version)
        return
    from .interop import from_torch, is_torch_program
    from .serialize import save as _save
    if is_torch_program(ep):
        ep = from_torch(ep)  # a torch.export program is saved as the graphcap program it converts to
    _save(ep, f, extra_files=extra_files, weights=weights, opset_version=opset_version,
          pickle_protocol=pickle_protocol)


@young_objects_only
def load(f: Any, *, extra_files: Optional[dict[str, Any]] = None,
         expected_opset_version: Optional[dict[str, int]] = None, mmap: bool = False,
         weights: Any = True, import_modules: Sequence[str] = (), stand_ins: bool = False,
         map_location: Any = None) -> ExportedProgram:
    """Read a program saved by :func:`save`; never unpickles, and imports only what the user chose.

    Classes the program's structure names (a transformers output or cache) are
    found among the pytree nodes of this process, then by their names below
    packages this process already imported (``import transformers`` before
    loading) or below ``import_modules``; the file itself never makes the load
    import a package. Every tensor read from the file is checked against the
    checksum saved with it (memory-mapped ones too) before the program is
    returned.

    Args:
        f: a path or a binary file object open for reading.
        extra_files: optional dict whose keys name extra files to read; it is
            filled in place with their contents (str when the bytes are UTF-8).
        expected_opset_version: optional operator namespace -> the operator-set
            version the caller's code was written for (``aten``, unless named, is
            this process's ATen version). A file recording a newer version of one
            of these namespaces is refused; an older or equal one,
            a namespace the file does not record, and files written before format 5
            (which record none) load (docs/files.md, "Operator-set versions").
        mmap: leave the weights in the file (memory-mapped) until used; needs a path.
        weights: where the weights come from. ``True`` (default): the file
            itself. ``False``: nowhere, the structure only (printable, not
            runnable). A path: a ``.safetensors`` file, or a checkpoint folder as
            transformers' ``save_pretrained`` writes it (sharded with
            ``model.safetensors.index.json``, or one ``model.safetensors``),
            memory-mapped. A mapping ``{fqn: tensor}``. Checkpoint tensors are
            matched by the program's state FQNs (the keys of ``ep.state_dict``,
            plus constants the file lacks); tied weights resolve from either
            name. A program exported on the meta device runs where the attached
            weights are.
        import_modules: modules to import before reading the structure (e.g.
            ``["transformers"]``): the user's choice, the same as importing them first.
        stand_ins: a class that cannot be found is replaced by a generic record
            of the same name holding the same fields (it prints, runs and saves
            again like the original, without the class's methods); without it
            such a file is refused with the fix.
        map_location: where the program runs, as ``move_to_device_pass`` takes
            it: a device (``"cpu"``) or a mapping (``{"cuda:0": "cpu"}``). Tensors
            are read straight onto it, so a program saved on a GPU loads on a
            machine without one; the graph's devices and expected inputs move
            with them. ``None`` (default): where it was saved.

    Returns:
        A verified :class:`ExportedProgram` (a ``StructureOnlyProgram`` when
        ``weights=False``).

    Raises:
        SerializationError: the file is damaged, crafted, of a newer format
            version, or names an operator or class this process does not have;
            a checkpoint tensor is missing, extra, or of the wrong shape or
            dtype; the file records a newer operator-set version than
            ``expected_opset_version``. The message names the entry, JSON path or tensor at fault and
            the fix.

    Example:
        >>> ep = graphcap.load("model.pt2")
        >>> out = ep.module()(torch.randn(5, 4))
        >>> big = graphcap.load("structure.pt2", weights="checkpoint_dir/")
        >>> on_cpu = graphcap.load("saved_on_gpu.pt2", map_location="cpu")
    """
    from .serialize import placement
    with placement.mapping(map_location):
        return _read_program(f, extra_files=extra_files, mmap=mmap, weights=weights,
                               import_modules=import_modules, stand_ins=stand_ins,
                               expected_opset_version=expected_opset_version)


def _read_program(f: Any, **options: Any) -> ExportedProgram:
    """The program (or multi-method program) in ``f``, as the file's layout says."""
    from .serialize import multi_method as _methods_file
    from .serialize.archive import ArchiveReader, is_path
    if not is_path(f) and hasattr(f, "read"):  # read once: the layout is known only from the entries
        import io
        f = io.BytesIO(f.read())
    reader = ArchiveReader(f)
    try:
        if _methods_file.is_multi_method_archive(reader):  # written from a MultiMethodProgram
            # a MultiMethodProgram: torch's signature says ExportedProgram, so the cast keeps its contract
            return cast(ExportedProgram, _methods_file.load(reader, **options))
    finally:
        reader.release()
    if not is_path(f):
        f.seek(0)
    from .serialize import load as _load
    return _load(f, **options)
