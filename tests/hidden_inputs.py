"""Hidden tests whose inputs a student could read in the kit, found in the source (nothing is run).

A hidden test's inputs must be written inside its hidden region (between ``### BEGIN HIDDEN TESTS``
and ``### END HIDDEN TESTS``), which ``course release`` strips from the student's notebook. The kit
ships ``course_lib`` whole, the checks included, so whatever a function of it returns, a student
can compute too. Two patterns put hidden inputs in the kit, and this module finds both:

- **a call that carries nothing of the hidden region's own.** Every outermost call a hidden region
  makes into ``course_lib`` (a shipped call inside another's arguments is judged with it) must carry
  something written in the region: a number, a literal (list, tuple, dict, a string inside one), a
  string argument the called module does not spell (one it spells, such as a scenario's name, is a
  key into data it ships), a value of another module (``torch.float16``), a function the region
  defines, or a name the region binds, every time, from something that carries (a loop over
  ``range(3)`` does, one over ``checks.more_streams()`` does not). Or, when it uses no name of the
  region's own, it must appear word for word in code the student's notebooks show: it then repeats a
  visible input or a public fixture (``checks.smollm2_config()``). ``checks.more_streams()`` fails:
  every stream it returns is in the kit. ``checks.random_kv_router_events(202, 3)`` passes: without
  the seed the generator's code says nothing of the script.
- **a visible test that takes a slice of what a shipped check module returns**
  (``checks.admission_cases()[:checks.VISIBLE_ADMISSION_CASES]``): the function returns more cases
  than the visible test runs, and the rest are in the kit for the hidden test to use.

It reads code, so it cannot see a call whose only own argument is a description string, a number
that only indexes a shipped list (``checks.cases()[12]``), or a seed a student could guess
(``seed=1``): those are left to review.

    python tests/hidden_inputs.py            # every finding, or "no hidden inputs in the kit"
    python tests/hidden_inputs.py lab05-serving
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

__all__ = ["Finding", "findings", "lab_findings"]

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "course_lib"
CHECKS = "course_lib.checks."
_REGION = r"^([ \t]*)### BEGIN {what}[^\n]*\n.*?^[ \t]*### END {what}[^\n]*$"
HIDDEN = re.compile(_REGION.format(what="HIDDEN TESTS"), re.MULTILINE | re.DOTALL)
SOLUTION = re.compile(_REGION.format(what="SOLUTION"), re.MULTILINE | re.DOTALL)


@dataclass(frozen=True)
class Finding:
    notebook: str   # solutions/<lab>/<name>.ipynb
    cell: int
    code: str       # the call or the slice, as ast.unparse writes it
    why: str

    def __str__(self) -> str:
        return f"{self.notebook}, cell {self.cell}: {self.code}\n    {self.why}"


def _code_cells(notebook: Path) -> list[tuple[int, str]]:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return [(index, "".join(cell["source"])) for index, cell in enumerate(cells) if cell["cell_type"] == "code"]


def _parseable(source: str) -> str:
    """IPython magics and shell lines become ``pass`` (same line numbers), so ``ast`` reads the cell."""
    return "\n".join(re.sub(r"^(\s*)[%!].*$", r"\1pass", line) for line in source.split("\n"))


def _without(region: re.Pattern, source: str) -> str:
    """``source`` with every region of the kind replaced by ``pass`` at the marker's indentation."""
    return region.sub(lambda match: f"{match.group(1)}pass", source)


def _hidden_lines(source: str) -> set[int]:
    """1-based numbers of the lines inside the hidden regions of ``source`` (markers included)."""
    lines: set[int] = set()
    for match in HIDDEN.finditer(source):
        first = source.count("\n", 0, match.start()) + 1
        lines.update(range(first, first + match.group(0).count("\n") + 1))
    return lines


def _module_file(dotted: str) -> Path | None:
    path = ROOT.joinpath(*dotted.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _imported_names(sources: list[str]) -> tuple[dict[str, str], set[str]]:
    """From a notebook's imports: {name: the ``course_lib`` module it is, or that holds it}, and the
    names of every other module it imports (``torch``, ``math``: ``torch.float16`` is a value the
    cell chooses, not data the kit ships)."""
    shipped: dict[str, str] = {}
    others: set[str] = set()
    for source in sources:
        try:
            tree = ast.parse(_parseable(source))
        except SyntaxError:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    bound = alias.asname or alias.name.split(".")[0]
                    if alias.name.split(".")[0] == PACKAGE:
                        shipped[bound] = alias.name if alias.asname else PACKAGE
                    else:
                        others.add(bound)
            elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == PACKAGE:
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    shipped[alias.asname or alias.name] = target if _module_file(target) else node.module
    return shipped, others


@lru_cache(maxsize=None)
def _strings_of(module: str) -> frozenset[str]:
    """Every string constant the module's source spells (its scenario names, keys, messages)."""
    path = _module_file(module)
    if path is None:
        return frozenset()
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return frozenset(node.value for node in ast.walk(tree) if isinstance(node, ast.Constant)
                     and isinstance(node.value, str))


def _binding_sources(tree: ast.AST, lines: set[int]) -> dict[str, list[ast.AST | None]]:
    """{name: the expressions each of its bindings on ``lines`` takes its value from}; None for a
    binding that is itself code of those lines (a ``def``, a parameter, an import of another module)."""
    sources: dict[str, list[ast.AST | None]] = {}

    def bind(target: ast.AST, value: ast.AST | None) -> None:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                sources.setdefault(node.id, []).append(value)

    for node in ast.walk(tree):
        if getattr(node, "lineno", None) not in lines:
            continue
        if isinstance(node, ast.Assign):
            for target in node.targets:
                bind(target, node.value)
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)) and node.value is not None:
            bind(node.target, node.value)
        elif isinstance(node, (ast.For, ast.AsyncFor)):
            bind(node.target, node.iter)
        elif isinstance(node, ast.comprehension):
            bind(node.target, node.iter)
        elif isinstance(node, ast.withitem) and node.optional_vars is not None:
            bind(node.optional_vars, node.context_expr)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            sources.setdefault(node.name, []).append(None)
        elif isinstance(node, ast.arg):
            sources.setdefault(node.arg, []).append(None)
    if isinstance(tree, ast.Module):   # comprehensions and withitems have no line of their own before 3.8's
        for node in ast.walk(tree):
            if isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)) and node.lineno in lines:
                for generator in node.generators:
                    bind(generator.target, generator.iter)
    return sources


class _Cell:
    """One cell's hidden regions, read against the names the notebook imports."""

    def __init__(self, source: str, shipped: dict[str, str], others: set[str]):
        self.tree = ast.parse(_parseable(source))
        self.hidden = _hidden_lines(source)
        self.shipped = shipped
        self.others = others
        self.sources = _binding_sources(self.tree, self.hidden)
        self._judging: set[tuple[str, str | None]] = set()

    def shipped_module(self, call: ast.Call) -> str | None:
        """The ``course_lib`` module whose function ``call`` calls, or None for anything else."""
        func = call.func
        if isinstance(func, ast.Name):
            return self.shipped.get(func.id)
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name):
            target = self.shipped.get(func.value.id)
            return target if target and _module_file(target) else None
        return None

    def name_carries(self, name: str, module: str | None) -> bool:
        """A name the hidden region binds, every time from something that carries (a loop over
        ``range(6)`` does; one over ``checks.more_streams()`` does not)."""
        if name not in self.sources or (name, module) in self._judging:
            return False
        self._judging.add((name, module))
        try:
            return all(value is None or self.carries(value, module) for value in self.sources[name])
        finally:
            self._judging.discard((name, module))

    def carries(self, node: ast.AST, module: str | None) -> bool:
        """Whether the expression holds something written in the hidden region (see the module doc)."""
        if isinstance(node, ast.Constant):
            if isinstance(node.value, str):
                return module is None or node.value not in _strings_of(module)
            return node.value is not Ellipsis
        if isinstance(node, ast.Name):
            return self.name_carries(node.id, module)
        if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
            return not node.elts or any(self.carries(element, module) for element in node.elts)
        if isinstance(node, ast.Dict):
            return not node.keys or any(self.carries(child, module) for child in [*node.keys, *node.values] if child)
        if isinstance(node, ast.Call):
            inner = self.shipped_module(node)
            if inner is not None:
                return self.call_carries(node, inner)
            return any(self.carries(child, module) for child in
                       [node.func, *node.args, *(keyword.value for keyword in node.keywords)])
        if isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id in self.shipped:
                return False        # a constant the kit ships (checks.LLAMA2_7B)
            if isinstance(node.value, ast.Name) and node.value.id in self.others:
                return True         # a value of another module the cell picks (torch.float16)
            return self.carries(node.value, module)
        return any(self.carries(child, module) for child in ast.iter_child_nodes(node))

    def call_carries(self, call: ast.Call, module: str) -> bool:
        """Whether an argument of the call carries; a string argument itself must be one the module
        does not spell (inside a literal list or dict, a string is data the region writes)."""
        return any(self.carries(argument, module if isinstance(argument, (ast.Constant, ast.Name)) else None)
                   for argument in [*call.args, *(keyword.value for keyword in call.keywords)])

    def hidden_calls(self) -> list[tuple[ast.Call, str]]:
        """(call, its module) for every outermost call into ``course_lib`` written in a hidden region.

        A shipped call inside the arguments of another (``check(f, checks.small_config(), True)``)
        is judged as part of the outer one: a shipped fixture the region combines with its own
        values is a hidden input only in that combination.
        """
        found = []

        def visit(node: ast.AST) -> None:
            if isinstance(node, ast.Call) and node.lineno in self.hidden:
                module = self.shipped_module(node)
                if module is not None:
                    found.append((node, module))
                    return
            for child in ast.iter_child_nodes(node):
                visit(child)

        visit(self.tree)
        return found


def _visible_trees(notebooks: list[Path]) -> list[tuple[Path, int, bool, ast.Module]]:
    """What the student's notebooks show: (notebook, cell, is a test cell, code) for every code cell,
    without its solution and hidden regions."""
    trees = []
    for notebook in notebooks:
        for index, source in _code_cells(notebook):
            shown = _without(HIDDEN, _without(SOLUTION, source))
            try:
                trees.append((notebook, index, index in _test_cells(notebook), ast.parse(_parseable(shown))))
            except SyntaxError:
                continue
    return trees


@lru_cache(maxsize=None)
def _test_cells(notebook: Path) -> frozenset[int]:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return frozenset(index for index, cell in enumerate(cells)
                     if cell.get("metadata", {}).get("nbgrader", {}).get("grade"))


def lab_findings(lab_dir: Path) -> list[Finding]:
    """Every hidden input of one lab's notebooks that its kit lets a student compute."""
    notebooks = sorted(lab_dir.glob("*.ipynb"))
    sources = {notebook: _code_cells(notebook) for notebook in notebooks}
    visible = _visible_trees(notebooks)
    visible_calls = {ast.unparse(node) for _, _, _, tree in visible for node in ast.walk(tree)
                     if isinstance(node, ast.Call)}
    out: list[Finding] = []
    for notebook in notebooks:
        name = str(notebook.relative_to(ROOT)) if notebook.is_relative_to(ROOT) else str(notebook)
        shipped, others = _imported_names([source for _, source in sources[notebook]])
        for index, source in sources[notebook]:
            if not HIDDEN.search(source):
                continue
            cell = _Cell(source, shipped, others)
            for call, module in cell.hidden_calls():
                code = ast.unparse(call)
                if cell.call_carries(call, module):
                    continue
                # The same words as a visible call repeat a visible input, unless a name in them is the
                # hidden region's own (a loop variable over a shipped list reads like the visible loop's).
                own_names = any(isinstance(node, ast.Name) and node.id in cell.sources for node in ast.walk(call))
                if own_names or code not in visible_calls:
                    out.append(Finding(name, index, code, f"a hidden region calls {module} with nothing written "
                                       "in the region (no number, literal, or name it binds), and no visible code "
                                       "makes this call: what it returns is a hidden input the kit ships."))
        for tree_notebook, index, is_test, tree in visible:
            if tree_notebook != notebook or not is_test:
                continue
            cell = _Cell("", shipped, others)
            for node in ast.walk(tree):
                if (isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Slice)
                        and isinstance(node.value, ast.Call)
                        and (cell.shipped_module(node.value) or "").startswith(CHECKS)):
                    out.append(Finding(name, index, ast.unparse(node), "a visible test takes a slice of what a "
                                       "shipped function returns: the rest of it is in the kit, where a hidden test "
                                       "would find its inputs. Return only the visible cases."))
    return out


def findings(solutions: Path = ROOT / "solutions", labs: list[str] | None = None) -> list[Finding]:
    """``lab_findings`` of every lab under ``solutions`` (or of the ones named)."""
    lab_dirs = sorted(path for path in solutions.iterdir() if path.is_dir() and (not labs or path.name in labs))
    return [finding for lab_dir in lab_dirs for finding in lab_findings(lab_dir)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("labs", nargs="*", help="lab folders under solutions/ (default: all)")
    args = parser.parse_args(argv)
    found = findings(labs=args.labs or None)
    for finding in found:
        print(finding)
    print(f"{len(found)} hidden input(s) in the kit" if found else "no hidden inputs in the kit")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
