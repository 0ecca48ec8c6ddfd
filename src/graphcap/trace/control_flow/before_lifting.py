"""The capture step between recording and lifting: what control-flow subgraphs and regions need first.

Dead tracer artifacts go, tensor constants leave the subgraphs as operands
(:mod:`.subgraph_constants`), grad/autocast regions are wrapped
(:mod:`.regions`), and node metadata is made to read as the user's program
(:mod:`.subgraph_metadata`).
"""
from __future__ import annotations

import torch
import torch.fx

from .. import tracer_artifacts
from . import regions
from .subgraph_constants import hoist_constants
from .subgraph_metadata import clean_metadata


def hoist_constants_and_wrap_regions(gm: torch.fx.GraphModule, fake_mode, grad_enabled: bool) -> torch.fx.GraphModule:
    """Drop dead tracer artifacts, hoist subgraph constants into operands, wrap grad/autocast
    regions and clean node metadata: everything the recorded graph needs before lifting."""
    tracer_artifacts.drop_dead(gm)
    hoist_constants(gm, fake_mode)
    regions.wrap_regions(gm, grad_enabled)
    clean_metadata(gm)
    return gm  # subgraph code is generated once, by name_subgraph_inputs after lifting
