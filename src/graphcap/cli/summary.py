"""What ``graphcap inspect`` shows and ``graphcap diff`` compares: a program's facts as data.

One :class:`ProgramFacts` per program: its signature (inputs and outputs with
kind, target and type), range constraints, operator histogram (subgraphs of
control-flow operators included), weights (name -> shape, dtype, bytes) and
format version. ``inspect`` renders them as tables; ``diff`` compares two.
"""
from __future__ import annotations

import collections
import re
from dataclasses import dataclass, field
from typing import Any, Optional

import torch

from ..signature import InputKind
from ..torch_private.ops import OpOverload, is_higher_order_operator


@dataclass
class Weight:
    kind: str  # parameter / buffer / constant
    shape: list[int]
    dtype: str
    nbytes: int
    tensor: Optional[torch.Tensor] = None


@dataclass
class ProgramFacts:
    inputs: list[tuple[str, str, str, str]]  # (name, kind, target, type)
    outputs: list[tuple[str, str, str, str]]
    ranges: dict[str, str]  # symbol or expression -> "[lower, upper]"
    operators: collections.Counter
    weights: dict[str, Weight] = field(default_factory=dict)
    format_version: Optional[int] = None
    dialect: str = ""
    symbol_labels: dict[str, str] = field(default_factory=dict)  # s52 -> tokens.shape[0]

    def by_labels(self, text: str) -> str:
        """``text`` with every symbol written as the input dimension it is (for ``diff``: two
        exports name the same dimension with different symbols)."""
        if not self.symbol_labels:
            return text
        pattern = re.compile(r"\b(" + "|".join(map(re.escape, self.symbol_labels)) + r")\b")
        return pattern.sub(lambda m: self.symbol_labels[m.group(1)], text)


def _type_of(node: Optional[torch.fx.Node]) -> str:
    val = node.meta.get("val") if node is not None else None
    if isinstance(val, torch.Tensor):
        dtype = str(val.dtype).replace("torch.", "")
        return f"{dtype}[{', '.join(str(d) for d in val.shape)}]"
    if isinstance(val, torch.SymInt):
        return f"SymInt({val})"
    return type(val).__name__ if val is not None else "-"


def operator_name(target: Any) -> str:
    if isinstance(target, OpOverload):
        return str(target)
    if is_higher_order_operator(target):
        return f"higher_order.{target.name()}"
    return getattr(target, "__qualname__", None) or getattr(target, "__name__", None) or str(target)


def operator_histogram(gm: torch.fx.GraphModule) -> collections.Counter:
    counts: collections.Counter = collections.Counter()
    for mod in gm.modules():
        if isinstance(mod, torch.fx.GraphModule):
            for node in mod.graph.nodes:
                if node.op == "call_function":
                    counts[operator_name(node.target)] += 1
    return counts


def program_facts(ep, format_version: Optional[int] = None) -> ProgramFacts:
    nodes = {n.name: n for n in ep.graph.nodes}
    inputs = []
    for spec in ep.graph_signature.input_specs:
        name = getattr(spec.arg, "name", str(getattr(spec.arg, "value", spec.arg)))
        inputs.append((name, spec.kind.name, spec.target or "", _type_of(nodes.get(name))))
    outputs = []
    for spec in ep.graph_signature.output_specs:
        name = getattr(spec.arg, "name", None)
        outputs.append((name or repr(getattr(spec.arg, "value", spec.arg)), spec.kind.name, spec.target or "",
                        _type_of(nodes.get(name)) if name else "constant"))
    ranges = {str(k): f"[{v.lower}, {v.upper}]" for k, v in ep.range_constraints.items()}
    weights: dict[str, Weight] = {}
    for spec in ep.graph_signature.input_specs:
        if spec.kind not in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            continue
        store = ep.state_dict if spec.target in ep.state_dict else ep.constants
        t = store.get(spec.target)
        if isinstance(t, torch.Tensor):
            kind = {InputKind.PARAMETER: "parameter", InputKind.BUFFER: "buffer"}.get(spec.kind, "constant")
            weights[spec.target] = Weight(kind, list(t.shape), str(t.dtype).replace("torch.", ""),
                                          t.numel() * t.element_size(), t)
    return ProgramFacts(inputs, outputs, ranges, operator_histogram(ep.graph_module), weights, format_version,
                        getattr(ep, "dialect", ""), _symbol_labels(ep))


def _symbol_labels(ep) -> dict[str, str]:
    """Symbol text -> the name the user knows it by: the spec's Dim name, else the input
    dimension it is (graphcap.dynamic.symbol_names.dim_names)."""
    from ..dynamic.symbol_names import dim_names
    try:
        names = dim_names(ep)
    except Exception:  # no input structure: symbols keep their names
        return {}
    return {str(k): v for k, v in names.items() if str(k) != v}


def human_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"


def format_version_of(path: str) -> Optional[int]:
    """The format version written in a .pt2 file (None when it cannot be read)."""
    from ..serialize.archive import ArchiveReader
    try:
        reader = ArchiveReader(path)
    except Exception:
        return None
    try:
        return int(reader.version)
    finally:
        reader.release()


# -- diff -----------------------------------------------------------------------

@dataclass
class Change:
    section: str  # signature / ranges / operators / weights
    item: str
    before: str
    after: str


def diff_facts(a: ProgramFacts, b: ProgramFacts) -> list[Change]:
    changes: list[Change] = []
    changes += _keyed("inputs", _inputs_but_weights(a), _inputs_but_weights(b))
    changes += _keyed("outputs", {f"#{i} {k}": a.by_labels(f"{n} {ty}") for i, (n, k, _, ty) in enumerate(a.outputs)},
                      {f"#{i} {k}": b.by_labels(f"{n} {ty}") for i, (n, k, _, ty) in enumerate(b.outputs)})
    changes += _keyed("ranges", {a.by_labels(k): v for k, v in a.ranges.items()},
                      {b.by_labels(k): v for k, v in b.ranges.items()})
    changes += _keyed("operators", {k: str(v) for k, v in a.operators.items()},
                      {k: str(v) for k, v in b.operators.items()}, absent="0")
    changes += _keyed("weights", {k: f"{w.dtype}{w.shape}" for k, w in a.weights.items()},
                      {k: f"{w.dtype}{w.shape}" for k, w in b.weights.items()})
    for name in sorted(set(a.weights) & set(b.weights)):
        wa, wb = a.weights[name], b.weights[name]
        if wa.shape == wb.shape and wa.dtype == wb.dtype and wa.tensor is not None and wb.tensor is not None \
                and wa.tensor.device.type != "meta" and wb.tensor.device.type != "meta" \
                and not torch.equal(wa.tensor, wb.tensor):
            worst = (wa.tensor.detach().double() - wb.tensor.detach().double()).abs().max().item() \
                if wa.tensor.is_floating_point() else float("nan")
            changes.append(Change("weights", name, "values", f"values differ (max abs {worst:.3g})"))
    return changes


def _inputs_but_weights(facts: ProgramFacts) -> dict[str, str]:
    """The inputs that are not weights (those are compared under "weights"), by name and kind."""
    return {f"{n} ({k} {t})".replace(" )", ")"): facts.by_labels(ty) for n, k, t, ty in facts.inputs
            if t not in facts.weights}


def _keyed(section: str, a: dict[str, str], b: dict[str, str], absent: str = "-") -> list[Change]:
    out = []
    for key in list(a) + [k for k in b if k not in a]:
        before, after = a.get(key, absent), b.get(key, absent)
        if before != after:
            out.append(Change(section, key, before, after))
    return out


# -- as JSON data (``--json``) ------------------------------------------------------

def _bound(value: Any) -> Optional[int]:
    """A range end as a JSON number, None when unbounded (strict JSON has no infinity)."""
    try:
        number = int(value)
    except (TypeError, ValueError, OverflowError, AttributeError):  # int(int_oo) raises AttributeError in sympy 1.14
        return None
    return number if abs(number) < 2 ** 62 else None


def facts_as_data(facts: ProgramFacts, ep: Any) -> dict[str, Any]:
    """The facts ``inspect`` shows, as plain data: every list keyed by field name."""
    from ..dynamic.symbol_names import input_dimension_names
    by_input = {str(sym): name for sym, name in input_dimension_names(ep).items()}
    return {
        "format_version": facts.format_version,
        "dialect": facts.dialect or "TRAINING",
        "inputs": [dict(name=n, kind=k, target=t, type=ty) for n, k, t, ty in facts.inputs],
        "outputs": [dict(name=n, kind=k, target=t, type=ty) for n, k, t, ty in facts.outputs],
        "ranges": [dict(symbol=str(sym), dim=facts.by_labels(str(sym)), input_dimension=by_input.get(str(sym)),
                        lower=_bound(rng.lower), upper=_bound(rng.upper))
                   for sym, rng in ep.range_constraints.items()],
        "operators": dict(facts.operators.most_common()),
        "operator_calls": sum(facts.operators.values()),
        "weights": [dict(name=name, kind=w.kind, dtype=w.dtype, shape=w.shape, bytes=w.nbytes)
                    for name, w in facts.weights.items()],
        "weight_bytes": sum(w.nbytes for w in facts.weights.values()),
        "assumptions": assumption_rows(ep),
    }


def assumption_rows(ep: Any) -> list[dict[str, Any]]:
    """What export assumed about the sizes (``ep.export_assumptions``), each with its user line and
    what would keep the dim dynamic; empty for a static export or a program that carries none."""
    from ..dynamic.assumptions import how_to_keep_dynamic
    rows = []
    for a in getattr(ep, "export_assumptions", None) or []:
        data = a if isinstance(a, dict) else a.to_dict()
        rows.append({**data, "keep_dynamic": how_to_keep_dynamic(data)})
    return rows
