"""The modules of ``graphcap`` import one way: no import cycle, function-level imports included.

The pipeline's order (inputs -> fakify -> capture -> lift -> guards -> verify
-> program; then passes, serialize, runtime) is the import order, and facts
several stages need sit below them all (``graphcap.node_facts``). A cycle
means two modules each need the other; moving a function-level import does
not fix that, it only hides it, so this test reads every import statement of
every module with ``ast``: at module level, inside functions and inside
classes. Imports under ``if TYPE_CHECKING:`` never run and do not count.

Importing ``graphcap.a.b`` also runs ``graphcap/a/__init__.py``, so an import
of a submodule is an edge to each package on its way too (except the
packages the importing module is itself inside: those are already running).

When the test fails it prints each cycle as a chain ``a -> b -> a`` with the
file and line of every import in it: move or remove one of those imports
(usually by moving the shared name down to a module both can import).
"""
from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import graphcap

PACKAGE_DIR = Path(graphcap.__file__).resolve().parent


@dataclass(frozen=True)
class ImportSite:
    file: str  # relative to the directory holding the package
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


def module_files(package_dir: Path) -> dict[str, Path]:
    """Every module of the package by dotted name (a package by its own name, not ``.__init__``)."""
    found = {}
    for path in sorted(package_dir.rglob("*.py")):
        parts = list(path.relative_to(package_dir.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _type_checking_only(tree: ast.AST) -> set[int]:
    """ids of the nodes inside ``if TYPE_CHECKING:`` bodies (the ``else`` branch does run)."""
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for statement in node.body:
                skipped.update(id(inner) for inner in ast.walk(statement))
    return skipped


def _ancestors(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _imported_names(module: str, is_package: bool, node: ast.Import | ast.ImportFrom,
                    modules: dict[str, Path]) -> Iterator[str]:
    """The modules of the package an import statement runs (targets not in the package are left out)."""
    if isinstance(node, ast.Import):
        candidates = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[:len(base) - (node.level - 1)]
            source = ".".join(base + ([node.module] if node.module else []))
        else:
            source = node.module or ""
        # ``from m import n`` runs m, and m.n too when n is a submodule
        candidates = [source] + [f"{source}.{alias.name}" for alias in node.names]
    for name in candidates:
        if name in modules:
            yield name
            yield from (a for a in _ancestors(name) if a in modules)


@functools.cache
def import_edges(package_dir: Path = PACKAGE_DIR) -> dict[str, dict[str, ImportSite]]:
    """module -> {module it imports -> the first statement that does}; edges into the module's own
    enclosing packages are left out (they run before the module does)."""
    modules = module_files(package_dir)
    edges: dict[str, dict[str, ImportSite]] = {m: {} for m in modules}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        skipped = _type_checking_only(tree)
        own_packages = set(_ancestors(module))
        imports = [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom)) and id(n) not in skipped]
        for node in sorted(imports, key=lambda n: n.lineno):
            for target in _imported_names(module, path.name == "__init__.py", node, modules):
                if target != module and target not in own_packages:
                    edges[module].setdefault(target, ImportSite(str(path.relative_to(package_dir.parent)), node.lineno))
    return edges


def strongly_connected(edges: dict[str, dict[str, ImportSite]]) -> list[set[str]]:
    """The groups of modules that reach each other through imports (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(edges[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for nxt in successors:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(edges[nxt])))
                    advanced = True
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(group)
    return groups


def shortest_cycle(start: str, group: set[str], edges: dict[str, dict[str, ImportSite]]) -> list[str]:
    """A shortest chain of imports from ``start`` back to ``start`` inside ``group``."""
    came_from: dict[str, Optional[str]] = {start: None}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(edges[node]):
            if nxt == start:
                chain = [node]
                while came_from[chain[-1]] is not None:
                    chain.append(came_from[chain[-1]])
                return [*reversed(chain), start]
            if nxt in group and nxt not in came_from:
                came_from[nxt] = node
                queue.append(nxt)
    raise AssertionError(f"{start} is in no cycle of {sorted(group)}")


def describe(group: set[str], edges: dict[str, dict[str, ImportSite]]) -> str:
    chain = shortest_cycle(sorted(group)[0], group, edges)
    lines = [f"{len(group)} modules import each other: {', '.join(sorted(group))}",
             "  one cycle: " + " -> ".join(chain)]
    for a, b in zip(chain, chain[1:]):
        lines.append(f"    {a} -> {b}   ({edges[a][b]})")
    return "\n".join(lines)


def _write_package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root / "pkg"


def test_the_reader_sees_every_import_that_runs(tmp_path):
    """Function-level and relative imports count, implied package imports count, TYPE_CHECKING ones do not."""
    package = _write_package(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .high import High\n",
        "pkg/high.py": "import os\n\ndef run():\n    from .low import thing\n    from pkg.sub.leaf import x\n",
        "pkg/sub/__init__.py": "from . import leaf\n",
        "pkg/sub/leaf.py": "class K:\n    def m(self):\n        from .. import high\n",
    })
    edges = import_edges(package)
    assert set(edges["pkg.low"]) == set()
    assert set(edges["pkg.high"]) == {"pkg.low", "pkg.sub", "pkg.sub.leaf"}
    assert edges["pkg.high"]["pkg.low"] == ImportSite("pkg/high.py", 4)
    assert set(edges["pkg.sub"]) == {"pkg.sub.leaf"}  # a package importing its own module
    assert set(edges["pkg.sub.leaf"]) == {"pkg.high"}  # not pkg.sub, which runs before it
    groups = strongly_connected(edges)
    assert groups == [{"pkg.high", "pkg.sub", "pkg.sub.leaf"}]
    text = describe(groups[0], edges)
    assert "one cycle: pkg.high -> pkg.sub.leaf -> pkg.high\n" in text
    assert "(pkg/sub/leaf.py:3)" in text


def test_no_import_cycle_in_graphcap():
    edges = import_edges()
    groups = strongly_connected(edges)
    assert not groups, ("Import cycles in graphcap (move one import of each chain; a name both sides need "
                        "belongs in a module below them):\n" + "\n".join(describe(g, edges) for g in groups))


def test_node_facts_sit_below_the_stages():
    """The shared node facts import nothing of graphcap but the torch adapter: every stage may use them."""
    edges = import_edges()
    assert set(edges["graphcap.node_facts"]) <= {"graphcap.torch_private", "graphcap.torch_private.ops"}, \
        sorted(edges["graphcap.node_facts"])


def reachable(edges: dict[str, dict[str, ImportSite]], start: str) -> dict[str, list[str]]:
    """Every module ``start`` imports, directly or not, with one chain of imports that gets there."""
    chains = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(edges[node]):
            if nxt not in chains:
                chains[nxt] = [*chains[node], nxt]
                queue.append(nxt)
    del chains[start]
    return chains


def _inside(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_the_verifier_reaches_no_stage_it_checks():
    """A check that imports what it checks can agree with a bug in it: the verifier takes its node
    facts from graphcap.node_facts, never from the tracer, the capture, the passes or the serializer."""
    stages = ("graphcap.api", "graphcap.capture", "graphcap.trace", "graphcap.dynamic", "graphcap.program",
              "graphcap.passes", "graphcap.serialize", "graphcap.runtime")
    reached = reachable(import_edges(), "graphcap.ir_checks")
    wrong = {m: " -> ".join(chain) for m, chain in reached.items() if _inside(m, stages)}
    assert not wrong, wrong


def test_the_program_reaches_no_stage_that_builds_programs():
    """ExportedProgram's methods reach the passes, the runtime and the printer (one way, inside
    the methods); never the capture, the serializer or the public entry points, which build programs."""
    builders = ("graphcap.api", "graphcap.capture", "graphcap.serialize", "graphcap.interop", "graphcap.hierarchy")
    reached = reachable(import_edges(), "graphcap.program")
    wrong = {m: " -> ".join(chain) for m, chain in reached.items() if _inside(m, builders)}
    assert not wrong, wrong


def test_the_naming_rules_reach_no_stage_that_uses_them():
    """``graphcap.trace.naming`` is read by lifting, the decompositions, the serializer, interop and
    the runtime: it takes nothing from them, nor from the recorder or the capture, so any of them
    can name nodes by torch.export's rules without pulling in another."""
    users = ("graphcap.api", "graphcap.capture", "graphcap.trace.recorder", "graphcap.trace.lifting",
             "graphcap.dynamic", "graphcap.program", "graphcap.passes", "graphcap.serialize", "graphcap.runtime",
             "graphcap.interop", "graphcap.hierarchy")
    edges = import_edges()
    naming = [m for m in edges if _inside(m, ("graphcap.trace.naming",))]
    assert len(naming) > 1, naming
    wrong = {f"{start} reaches {m}": " -> ".join(chain) for start in naming
             for m, chain in reachable(edges, start).items() if _inside(m, users)}
    assert not wrong, wrong
