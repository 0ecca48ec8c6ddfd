"""Control-flow capture: ``torch.cond``, ``map``, ``while_loop``, ``scan`` and grad/autocast regions.

graphcap captures each control-flow call itself (:mod:`.hop_capture`, with the
branch rules of :mod:`.branch_checks`, :mod:`.branch_scope`, :mod:`.closures`
and :mod:`.nested_cond_operands`; :mod:`.control_flow_errors` explains a
refusal), answers questions about the recorded nodes (:mod:`.hops`), and
prepares their subgraphs and the program's regions before lifting
(:mod:`.before_lifting`: :mod:`.subgraph_constants`, :mod:`.regions`,
:mod:`.subgraph_metadata`). The names these subgraphs and regions get are
:mod:`graphcap.trace.naming`'s job.
"""
