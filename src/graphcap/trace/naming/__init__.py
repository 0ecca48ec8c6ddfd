"""The names a program's nodes, subgraph inputs and regions get, chosen as torch.export chooses them.

Users read these names (printed programs, ``graph_signature``) and write code
against them, so every rule lives here: the names of a lifted graph's nodes
and the allocator that counts suffixes (:mod:`.node_names`), inputs owed
given names, as lifting, subgraphs and decompositions owe them
(:mod:`.owed_names`), control-flow subgraph inputs named after their operands
(:mod:`.subgraph_names`), grad-mode/autocast regions' submodules and
outputs (:mod:`.region_names`), and runtime asserts with the node their message
names (:mod:`.assert_names`).
"""
