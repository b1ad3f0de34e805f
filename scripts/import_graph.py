#!/usr/bin/env python3
"""Checks the datakit package's import graph for cycles and layer breaks, and its code for private reads.

Why: ``loader/`` and ``stores/`` are meant to be layers. An import cycle
(even one that only exists under ``if TYPE_CHECKING:`` or inside a function)
means two modules cannot be understood, tested or moved apart; a read of
``other._name`` means a module depends on another's internals, which no type
checker will flag when they change. Both are cheap to see statically.

What it does (standard library only, ``ast``-based):

* Builds the graph of the package's modules: every ``import`` and
  ``from ... import`` statement anywhere in a file (module level, under
  ``if TYPE_CHECKING:``, inside functions) is an edge. Relative imports are
  resolved; ``from pkg import name`` is an edge to ``pkg.name`` when that is a
  submodule, else to ``pkg``. Importing a submodule is not counted as an edge
  to its parent packages' ``__init__`` (Python runs them, but every module
  would then be in a cycle with a package that re-exports it).
* Prints every cycle (one per strongly connected component, with the line of
  each edge and whether it is type-only or inside a function).
* Checks the layers (:data:`LAYERS`): ``loader/`` imports nothing else from
  the package but ``procs/`` (the engine knows no stores), and its rooms
  stack as ``sampling/`` < ``resume/`` < ``workers/`` < ``transport/`` < the
  front door; ``procs/`` (process plumbing shared by the loader and
  conversion) imports nothing else from it at all; ``format/`` (the record
  vocabulary) and ``stores/`` never import the stages above them. Every
  import statement counts, as for cycles.
* Reports private names used across objects: ``x._name`` where ``x`` is not
  ``self``, ``cls``, ``super()``, ``type(self)`` or the enclosing class (reads
  and writes), ``from m import _name``, and imports of private modules
  (``m._sub``). Dunder names and the namedtuple API (``_fields``, ``_replace``,
  ``_asdict``, ``_make``, ``_field_defaults``) are public and not reported.
  Reads on a name bound to another datakit module are labelled so.

Allow-list: a deliberate use (a third-party internal such as
``torch.utils.data._utils``, with a fallback) is accepted by a comment
``# import-graph: allow-private`` (optionally followed by a reason) on any line
of the statement, or alone on the line just above it.

Usage::

    python scripts/import_graph.py [PACKAGE_DIR] [--cycles-only]

``PACKAGE_DIR`` defaults to ``datakit`` next to this script's parent folder.
Exits 1 when it finds a cycle, a layer break or (without ``--cycles-only``)
a private use, else 0.
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ALLOW_MARK = "import-graph: allow-private"
PUBLIC_UNDERSCORE_NAMES = frozenset({"_fields", "_replace", "_asdict", "_make", "_field_defaults"})
OWN_NAMES = frozenset({"self", "cls", "mcs", "metacls"})
# Room -> the rooms its modules may import from the package (itself included). A module belongs to the
# longest room its dotted path starts with, so ``loader.sampling`` is held to its own rule and the rest of
# ``loader`` (the front door: dataloader, iterators, plan) to ``loader``'s.
LAYERS = {
    "procs": ("procs",),
    "loader": ("loader", "procs"),
    "loader.sampling": ("loader.sampling",),
    "loader.resume": ("loader.resume", "loader.sampling"),
    "loader.workers": ("loader.workers", "loader.resume", "loader.sampling", "procs"),
    "loader.transport": ("loader.transport", "loader.workers", "loader.resume", "loader.sampling", "procs"),
    "format": ("format", "errors", "version"),
    "stores": ("stores", "format", "errors", "version"),
}


@dataclass(frozen=True)
class Edge:
    """One import statement from a package module to another."""

    source: str
    target: str
    line: int
    type_only: bool
    in_function: bool

    def describe(self) -> str:
        where = []
        if self.type_only:
            where.append("TYPE_CHECKING")
        if self.in_function:
            where.append("in a function")
        suffix = f" ({', '.join(where)})" if where else ""
        return f"{self.source}:{self.line} -> {self.target}{suffix}"


@dataclass(frozen=True)
class PrivateUse:
    """One use of another object's or module's private name."""

    path: str
    line: int
    text: str
    kind: str

    def describe(self) -> str:
        return f"{self.path}:{self.line}: {self.kind}: {self.text}"


@dataclass
class ModuleInfo:
    name: str
    path: Path
    is_package: bool
    tree: ast.Module
    allowed_lines: set[int] = field(default_factory=set)


def module_name(package_dir: Path, path: Path) -> tuple[str, bool]:
    relative = path.relative_to(package_dir.parent).with_suffix("")
    parts = list(relative.parts)
    is_package = parts[-1] == "__init__"
    if is_package:
        parts.pop()
    return ".".join(parts), is_package


def allowed_lines(source: str) -> set[int]:
    """Lines a statement on which is allowed: the comment's own line, and the next one for a lone comment."""
    allowed: set[int] = set()
    lines = source.splitlines()
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    except (tokenize.TokenError, SyntaxError):
        return allowed
    for token in tokens:
        if token.type == tokenize.COMMENT and ALLOW_MARK in token.string:
            row = token.start[0]
            allowed.add(row)
            if lines[row - 1].strip().startswith("#"):
                allowed.add(row + 1)
    return allowed


def load_modules(package_dir: Path) -> dict[str, ModuleInfo]:
    """Every module of the package: its ``.py`` files, and the ``.pyi`` stubs of its compiled extensions."""
    modules: dict[str, ModuleInfo] = {}
    stubs = [path for path in package_dir.rglob("*.pyi") if not path.with_suffix(".py").exists()]
    for path in sorted([*package_dir.rglob("*.py"), *stubs]):
        name, is_package = module_name(package_dir, path)
        source = path.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(path))
        modules[name] = ModuleInfo(name, path, is_package, tree, allowed_lines(source))
    return modules


def resolve_from(module: ModuleInfo, level: int, target: str | None) -> str:
    """The absolute module named by ``from <level dots><target> import ...`` inside ``module``."""
    if level == 0:
        return target or ""
    package = module.name if module.is_package else module.name.rpartition(".")[0]
    parts = package.split(".")
    if level > 1:
        parts = parts[: len(parts) - (level - 1)]
    base = ".".join(parts)
    return f"{base}.{target}" if target else base


def is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def private_module_part(dotted: str) -> bool:
    return any(is_private(part) for part in dotted.split("."))


class ModuleVisitor(ast.NodeVisitor):
    """Collects one module's import edges, private uses and names bound to package modules."""

    def __init__(self, module: ModuleInfo, known: set[str], root: str) -> None:
        self.module = module
        self.known = known
        self.root = root
        self.edges: list[Edge] = []
        self.private: list[PrivateUse] = []
        self.module_aliases: dict[str, str] = {}  # local name -> package module it is bound to
        self._type_only = 0
        self._functions = 0
        self._classes: list[str] = []

    # context -------------------------------------------------------------
    def visit_If(self, node: ast.If) -> None:
        test = node.test
        type_checking = (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
            isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
        )
        self.visit(node.test)
        self._type_only += type_checking
        for child in node.body:
            self.visit(child)
        self._type_only -= type_checking
        for child in node.orelse:
            self.visit(child)

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda) -> None:
        self._functions += 1
        self.generic_visit(node)
        self._functions -= 1

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function
    visit_Lambda = _visit_function

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._classes.append(node.name)
        self.generic_visit(node)
        self._classes.pop()

    # imports -------------------------------------------------------------
    def _edge(self, target: str, line: int) -> None:
        if target != self.module.name:
            self.edges.append(
                Edge(self.module.name, target, line, bool(self._type_only), bool(self._functions))
            )

    def _known_prefix(self, dotted: str) -> str | None:
        parts = dotted.split(".")
        for end in range(len(parts), 0, -1):
            candidate = ".".join(parts[:end])
            if candidate in self.known:
                return candidate
        return None

    def _report(self, node: ast.AST, text: str, kind: str) -> None:
        first = getattr(node, "lineno", 0)
        last = getattr(node, "end_lineno", first) or first
        if any(line in self.module.allowed_lines for line in range(first, last + 1)):
            return
        self.private.append(PrivateUse(str(self.module.path), first, text, kind))

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            target = self._known_prefix(alias.name) if alias.name.split(".")[0] == self.root else None
            if target is not None:
                self._edge(target, node.lineno)
                if alias.asname:
                    self.module_aliases[alias.asname] = target
            if private_module_part(alias.name):
                self._report(node, f"import {alias.name}", "imports a private module")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        base = resolve_from(self.module, node.level, node.module)
        inside = base.split(".")[0] == self.root
        if private_module_part(base) and not inside:
            self._report(node, f"from {base} import ...", "imports from a private module")
        for alias in node.names:
            if inside:
                submodule = f"{base}.{alias.name}"
                if submodule in self.known:
                    self._edge(submodule, node.lineno)
                    self.module_aliases[alias.asname or alias.name] = submodule
                elif base in self.known:
                    self._edge(base, node.lineno)
            if is_private(alias.name) and base != self.module.name:
                self._report(node, f"from {base} import {alias.name}", "imports a private name")

    # private attributes ----------------------------------------------------
    def _is_own(self, value: ast.expr) -> bool:
        if isinstance(value, ast.Name):
            return value.id in OWN_NAMES or value.id in self._classes
        if isinstance(value, ast.Call) and isinstance(value.func, ast.Name):
            if value.func.id == "super":
                return True
            if value.func.id == "type" and len(value.args) == 1:
                return self._is_own(value.args[0])
        return False

    def visit_Attribute(self, node: ast.Attribute) -> None:
        public = not is_private(node.attr) or node.attr in PUBLIC_UNDERSCORE_NAMES
        if not public and not self._is_own(node.value):
            access = "write" if isinstance(node.ctx, (ast.Store, ast.Del)) else "read"
            bound = ""
            if isinstance(node.value, ast.Name) and node.value.id in self.module_aliases:
                bound = f" of module {self.module_aliases[node.value.id]}"
            self._report(node, ast.unparse(node), f"private attribute {access}{bound}")
        self.generic_visit(node)


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """Tarjan's components with more than one module (or a module importing itself)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def connect(start: str) -> None:
        nonlocal counter
        work: list[tuple[str, Iterator[str]]] = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1 or node in graph[node]:
                    components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return components


def one_cycle(graph: dict[str, set[str]], component: list[str]) -> list[str]:
    """A shortest cycle through the component's first module, staying inside the component."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for child in sorted(graph[node] & members):
                if child == start:
                    path = [node]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [*reversed(path), start]
                if child not in previous:
                    previous[child] = node
                    following.append(child)
        frontier = following
    return [start]


def _within(parts: list[str], room: str) -> bool:
    """Whether the module path ``parts`` (without the package's name) lies in ``room`` (dotted)."""
    prefix = room.split(".")
    return parts[:len(prefix)] == prefix


def room_of(module: str) -> str | None:
    """The room of :data:`LAYERS` that holds ``module`` (the longest that matches), if any."""
    parts = module.split(".")[1:]
    rooms = [room for room in LAYERS if _within(parts, room)]
    return max(rooms, key=len) if rooms else None


def layer_breaks(edges: list[Edge]) -> list[Edge]:
    """The import statements that leave their room's layer (:data:`LAYERS`)."""
    broken = []
    for edge in edges:
        room = room_of(edge.source)
        if room is None:
            continue
        target = edge.target.split(".")[1:]
        if not any(_within(target, allowed) for allowed in LAYERS[room]):
            broken.append(edge)
    return broken


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default = Path(__file__).resolve().parent.parent / "datakit"
    parser.add_argument("package_dir", nargs="?", type=Path, default=default)
    parser.add_argument("--cycles-only", action="store_true", help="do not report private uses")
    args = parser.parse_args(argv)
    package_dir: Path = args.package_dir.resolve()
    modules = load_modules(package_dir)
    known = set(modules)
    edges: list[Edge] = []
    private: list[PrivateUse] = []
    for module in modules.values():
        visitor = ModuleVisitor(module, known, package_dir.name)
        visitor.visit(module.tree)
        edges += visitor.edges
        private += visitor.private

    graph: dict[str, set[str]] = {name: set() for name in modules}
    for edge in edges:
        graph[edge.source].add(edge.target)
    type_only = sum(edge.type_only for edge in edges)
    in_functions = sum(edge.in_function for edge in edges)
    print(
        f"import graph of {package_dir.name}: {len(modules)} modules, {len(edges)} import statements "
        f"({type_only} under TYPE_CHECKING, {in_functions} inside functions)"
    )
    components = strongly_connected(graph)
    print(f"cycles: {len(components)}")
    for component in components:
        cycle = one_cycle(graph, component)
        print(f"  {' -> '.join(cycle)}")
        if len(component) > len(cycle) - 1:
            print(f"    (component of {len(component)}: {', '.join(component)})")
        for source, target in zip(cycle, cycle[1:], strict=False):
            shown = {edge.describe() for edge in edges if edge.source == source and edge.target == target}
            for line in sorted(shown):
                print(f"    {line}")
    broken = layer_breaks(edges)
    rules = "; ".join(f"{name}/ imports only {', '.join(f'{allowed}/' for allowed in layers)}"
                      for name, layers in LAYERS.items())
    print(f"layer breaks ({rules}): {len(broken)}")
    for edge in sorted(broken, key=lambda edge: (edge.source, edge.line)):
        print(f"  {edge.describe()}")
    if not args.cycles_only:
        print(f"private names used across objects or modules: {len(private)}")
        root = package_dir.parent
        for use in sorted(private, key=lambda use: (use.path, use.line)):
            relative = Path(use.path).relative_to(root)
            print(f"  {PrivateUse(str(relative), use.line, use.text, use.kind).describe()}")
    failed = bool(components) or bool(broken) or (bool(private) and not args.cycles_only)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
