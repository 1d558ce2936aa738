"""Which modules of a package import which, read from the source (nothing is imported), and its cycles.

Every ``import`` and ``from ... import`` statement counts, at the top of a module or inside a
function (a lazy import is still a dependency), ``if TYPE_CHECKING:`` ones included. An edge goes
to the most specific module the statement names: ``from course_lib.checks import paging`` is an
edge to ``course_lib.checks.paging``, ``from course_lib.checks import make`` one to
``course_lib.checks``. The parent packages that Python imports on the way are not edges (a
package whose ``__init__`` re-exports a submodule would otherwise be a cycle of its own).

    python tests/import_graph.py course_lib       # the cycles, or "no import cycles"
    python tests/import_graph.py course_lib --edges course_lib.model   # what a module imports, with lines
    python tests/import_graph.py course_lib --imports autograde   # every import of another package
"""

from __future__ import annotations

import argparse
import ast
import sys
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Import", "cycles", "foreign_imports", "import_edges", "module_files"]


@dataclass(frozen=True)
class Import:
    """One import statement of ``module``: the module it names, and where."""

    module: str
    target: str
    line: int
    lazy: bool   # inside a function


def module_files(root: Path, package: str) -> dict[str, Path]:
    """{dotted module name: file} for every ``.py`` file of ``package`` under ``root``."""
    files = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        files[".".join(parts)] = path
    return files


def imported_names(path: Path, module: str) -> list[tuple[str, int, bool]]:
    """(dotted name, line, lazy) of everything ``path`` imports; ``from a import b`` gives ``a.b``
    and ``a`` (whichever is a module decides); relative imports are made absolute."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    found: list[tuple[str, int, bool]] = []

    def visit(node: ast.AST, lazy: bool) -> None:
        for child in ast.iter_child_nodes(node):
            inside = lazy or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            if isinstance(child, ast.Import):
                found.extend((alias.name, child.lineno, inside) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                if child.level:
                    base = module.split(".") if is_package else module.split(".")[:-1]
                    base = base[:len(base) - (child.level - 1)]
                    source = ".".join(base + ([child.module] if child.module else []))
                else:
                    source = child.module or ""
                found.extend((f"{source}.{alias.name}|{source}", child.lineno, inside) for alias in child.names)
            visit(child, inside)

    visit(tree, False)
    return found


def import_edges(root: Path, package: str) -> list[Import]:
    """Every import between two modules of ``package`` (a module importing itself left out)."""
    files = module_files(root, package)

    def resolve(name: str) -> str | None:
        while name and name not in files:
            name = name.rpartition(".")[0]
        return name or None

    edges = []
    for module, path in files.items():
        for name, line, lazy in imported_names(path, module):
            if "|" in name:   # from source import alias: the submodule if there is one, else the source
                submodule, source = name.split("|")
                target = submodule if submodule in files else resolve(source)
            else:
                target = resolve(name)
            if target is not None and target != module:
                edges.append(Import(module, target, line, lazy))
    return list(dict.fromkeys(edges))   # `from a import b, c` names a twice


def foreign_imports(root: Path, package: str, other: str) -> list[Import]:
    """Every import by a module of ``package`` of the package ``other`` or one of its modules (the
    target is the name the statement gives: ``from other.a import b`` gives ``other.a.b``)."""
    edges = []
    for module, path in module_files(root, package).items():
        for name, line, lazy in imported_names(path, module):
            target = name.split("|")[0]
            if target == other or target.startswith(other + "."):
                edges.append(Import(module, target, line, lazy))
    return list(dict.fromkeys(edges))


def cycles(edges: list[Import]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted: every
    module of one can reach every other by imports, so each holds at least one cycle."""
    graph: dict[str, set[str]] = {}
    for edge in edges:
        graph.setdefault(edge.module, set()).add(edge.target)
        graph.setdefault(edge.target, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10 * len(graph) + 100))
    try:
        for node in sorted(graph):
            if node not in index:
                connect(node)
    finally:
        sys.setrecursionlimit(limit)
    return sorted(found)


def describe_cycle(component: list[str], edges: list[Import]) -> str:
    """The imports inside one component, one per line: ``a:12 -> b (lazy)``."""
    members = set(component)
    lines = [f"  {edge.module}:{edge.line} -> {edge.target}{' (lazy)' if edge.lazy else ''}"
             for edge in edges if edge.module in members and edge.target in members]
    return "\n".join([" <-> ".join(component), *lines])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Import cycles of a package, read from its source.")
    parser.add_argument("package", help="a package folder under --root, e.g. course_lib")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--edges", metavar="MODULE", help="print what MODULE imports instead")
    parser.add_argument("--imports", metavar="PACKAGE", help="print every import of PACKAGE instead (exit 1 if any)")
    args = parser.parse_args(argv)
    if args.imports:
        found_imports = foreign_imports(args.root, args.package, args.imports)
        for edge in found_imports:
            print(f"{edge.module}:{edge.line} -> {edge.target}{' (lazy)' if edge.lazy else ''}")
        print(f"{len(found_imports)} import(s) of {args.imports} in {args.package}")
        return 1 if found_imports else 0
    edges = import_edges(args.root, args.package)
    if args.edges:
        for edge in edges:
            if edge.module == args.edges:
                print(f"{edge.line:5}  {edge.target}{' (lazy)' if edge.lazy else ''}")
        return 0
    found = cycles(edges)
    for component in found:
        print(describe_cycle(component, edges))
    print(f"{len(found)} import cycle(s) in {args.package}" if found else f"no import cycles in {args.package}")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
