"""The capture step between recording and lifting: what control-flow subgraphs and regions need first.

:func:`prepare_for_lifting` runs five jobs, each in the module that owns it:
dead tracer artifacts go (:mod:`..tracer_artifacts`), symbolic sizes passed to a
subgraph that reads none of them go (:mod:`.closures`), tensor constants leave
the subgraphs as operands (:mod:`.subgraph_constants`), grad/autocast regions
are wrapped (:mod:`.regions`), and node metadata is made to read as the
user's program (:mod:`.subgraph_metadata`).
"""
from __future__ import annotations

import torch
import torch.fx

from .. import tracer_artifacts
from . import regions
from .closures import drop_unread_symbols
from .subgraph_constants import hoist_constants
from .subgraph_metadata import clean_metadata


def prepare_for_lifting(gm: torch.fx.GraphModule, fake_mode, grad_enabled: bool) -> torch.fx.GraphModule:
    """The recorded graph made ready for lifting, in place, one job per call.

    The order matters: dead artifacts go first, before regions move nodes
    into submodules (``drop_dead`` reads the top-level graph only); constants are hoisted
    before regions are wrapped, because a region's body takes no extra operands
    (``hops.EXTRA_OPERANDS_AT``): a constant must already be a ``get_attr`` of
    the enclosing graph, which the region then passes in; metadata is cleaned
    last, over every subgraph the other jobs left, region bodies included."""
    tracer_artifacts.drop_dead(gm)
    drop_unread_symbols(gm)
    hoist_constants(gm, fake_mode)
    regions.wrap_regions(gm, grad_enabled)
    clean_metadata(gm)
    return gm  # subgraph code is generated once, by name_subgraph_inputs after lifting
