"""Export a model with repeated-block reuse on and off and compare everything the programs hold."""
from __future__ import annotations

from typing import Any

import torch

import graphcap
from graphcap.trace import block_reuse


def _val_fingerprint(val: Any) -> Any:
    if isinstance(val, torch.Tensor):
        return ("tensor", tuple(str(s) for s in val.shape), tuple(str(s) for s in val.stride()), val.dtype,
                str(val.device), val.requires_grad, str(val.storage_offset()))
    if isinstance(val, (list, tuple)):
        return (type(val).__name__, tuple(_val_fingerprint(v) for v in val))
    if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return ("sym", str(val))
    return ("other", repr(val))


def _meta(node: torch.fx.Node) -> dict:
    out = {}
    for key, value in node.meta.items():
        if key == "val":
            out[key] = _val_fingerprint(value)
        elif key == "tensor_meta":
            out[key] = repr(value)
        elif key in ("nn_module_stack", "stack_trace", "torch_fn", "source_fn_stack", "custom"):
            out[key] = repr(value)
        else:
            out[key] = repr(type(value))
    return out


def program_facts(ep: Any) -> dict:
    """What must be identical between two exports of one model."""
    graphs = {}
    for name, sub in ep.graph_module.named_modules():
        if isinstance(sub, torch.fx.GraphModule):
            graphs[name] = [(n.name, n.op, str(n.target), repr(n.args), repr(n.kwargs), _meta(n))
                            for n in sub.graph.nodes]
    return {
        "printed": str(ep),
        "code": ep.graph_module.code,
        "graphs": graphs,
        "signature": str(ep.graph_signature),
        "range_constraints": {str(k): str(v) for k, v in ep.range_constraints.items()},
        "module_call_graph": repr(ep.module_call_graph),
    }


def export_both(model: Any, args: tuple, kwargs: Any = None, **options: Any) -> tuple[Any, Any, Any]:
    """(program with reuse, program without, how many calls the first replayed)."""
    with block_reuse.reuse_repeated_blocks(True):
        block_reuse.LAST_STATS.clear()
        with_reuse = graphcap.export(model, args, kwargs, **options)
        stats = dict(block_reuse.LAST_STATS)
    with block_reuse.reuse_repeated_blocks(False):
        without = graphcap.export(model, args, kwargs, **options)
    return with_reuse, without, stats


def assert_same_program(a: Any, b: Any) -> None:
    fa, fb = program_facts(a), program_facts(b)
    for key in fa:
        if key == "graphs":
            for g in fa[key]:
                la, lb = fa[key][g], fb[key].get(g)
                assert lb is not None, f"subgraph {g} missing"
                assert len(la) == len(lb), f"{g}: {len(la)} nodes with reuse, {len(lb)} without"
                for x, y in zip(la, lb):
                    assert x == y, f"node differs:\n  with reuse: {x}\n  without:    {y}"
        assert fa[key] == fb[key], f"{key} differs"
