"""The student edition of ``course_lib``: the same source, with the references of locked labs stubbed.

``build_edition(target, locked)`` copies the package and, in every module, replaces the body of each
function marked ``@exercise(lab, ...)`` with ``lab`` in ``locked`` (and the body of every method of
such a class) by ``raise NotImplementedError(<where the student writes it>)``. Signatures,
decorators and docstrings stay, so a student reading the library sees what each piece promises.
Triton kernels (``@triton.jit``) get an empty body instead: the launcher that calls them raises.

The *answer helpers* of the locked labs are stubbed the same way: platform code that computes
part of an answer without being marked (``free_holes``, ``causal_mask``, the checks' own
``sdpa_reference``), found from what the references and the checks call
(``answer_helpers.answer_helpers``). The edition of a grading kernel (``grading=True``) also
stubs the checks' helpers that only the kit's visible tests need.

The edit works on source lines located with ``ast``, so everything else in a file (comments, layout)
is kept byte for byte. ``course_lib/_edition.json`` records the locked labs
(``course_lib.exercises.locked_labs`` reads it).
"""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path
from typing import Iterable

import course_lib
from autograde.marks import MarkedDefinition, StubError, is_docstring, marked_definitions
from course_lib.exercises import EDITION_FILE, Exercise, stub_message

__all__ = ["MarkedDefinition", "StubError", "build_edition", "is_docstring", "marked_definitions", "stub_source"]

_IGNORED = shutil.ignore_patterns("__pycache__", "*.pyc", "*.pyo", EDITION_FILE.name, ".ipynb_checkpoints")


def _is_triton_kernel(node: ast.AST) -> bool:
    return any("jit" in ast.unparse(decorator) for decorator in getattr(node, "decorator_list", []))


def _function_regions(node: ast.AST, message: str, lines: list[str]) -> list[tuple[int, int, str]]:
    """(first line, last line, replacement) for the body of one function, docstring kept.

    Comments between the docstring (or the signature) and the first statement go with the body.
    """
    body = node.body
    has_docstring = bool(body) and is_docstring(body[0])
    statements = body[1:] if has_docstring else body
    if not statements:
        return []
    first = statements[0]
    if first.lineno == node.lineno:
        raise StubError(f"line {node.lineno}: {node.name} has its body on the def line; put it on lines of its own")
    boundary = body[0].end_lineno if has_docstring else node.lineno
    start = first.lineno
    while start - 1 > boundary and lines[start - 2].strip().startswith("#") or (
            start - 1 > boundary and not lines[start - 2].strip()):
        start -= 1
    indent = " " * first.col_offset
    if _is_triton_kernel(node):
        replacement = f"{indent}pass  # the Triton kernel is an exercise: {message}\n"
    else:
        replacement = f"{indent}raise NotImplementedError({message!r})\n"
    return [(start, node.end_lineno, replacement)]


def _helper_message(qualname: str, labs: Iterable[str]) -> str:
    from course_lib.exercises import lab_title

    shown = " and ".join(lab_title(lab) for lab in sorted(labs))
    return (f"{qualname} computes part of an answer of {shown}: it is not in the student edition until "
            f"{'that lab unlocks' if len(set(labs)) == 1 else 'those labs unlock'} (write the exercise yourself)")


def _message(definition: MarkedDefinition, qualname: str) -> str:
    if definition.exercise.answer == _HELPER:
        return _helper_message(qualname, definition.exercise.notebook.split(","))
    return stub_message(qualname, definition.exercise)


def _regions(definition: MarkedDefinition, module_name: str, lines: list[str]) -> list[tuple[int, int, str]]:
    node = definition.node
    if isinstance(node, ast.ClassDef):
        regions = []
        for child in ast.walk(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qualname = f"{module_name}.{definition.qualname}.{child.name}"
                regions += _function_regions(child, _message(definition, qualname), lines)
        return regions
    return _function_regions(node, _message(definition, f"{module_name}.{definition.qualname}"), lines)


_HELPER = "<answer helper>"


def _helper_definitions(tree: ast.Module, helpers: dict[str, Iterable[str]]) -> list[MarkedDefinition]:
    """The definitions of ``tree`` named in ``helpers`` (qualname -> labs), as stub targets."""
    found = []

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualname = f"{prefix}{node.name}"
                if qualname in helpers:
                    labs = sorted(helpers[qualname])
                    found.append(MarkedDefinition(qualname, Exercise(labs[0], ",".join(labs), _HELPER), node))
                visit(node.body, f"{qualname}.")

    visit(tree.body, "")
    return found


def stub_source(source: str, locked: Iterable[str], module_name: str,
                helpers: dict[str, Iterable[str]] | None = None) -> tuple[str, list[MarkedDefinition]]:
    """``source`` with the bodies of the definitions marked for a locked lab (and of the answer
    ``helpers``, qualname -> labs) replaced by stubs.

    Returns the new source and the definitions that were stubbed.
    """
    locked = set(locked)
    tree = ast.parse(source)
    definitions = [d for d in marked_definitions(tree) if d.exercise.lab in locked]
    definitions += _helper_definitions(tree, helpers or {})
    lines = source.splitlines(keepends=True)
    regions: list[tuple[int, int, str]] = []
    for definition in definitions:
        regions += _regions(definition, module_name, lines)
    # Keep only the outermost of nested regions (a stubbed function inside a stubbed class's method).
    regions.sort(key=lambda region: (region[0], -region[1]))
    kept: list[tuple[int, int, str]] = []
    for region in regions:
        if kept and region[0] <= kept[-1][1]:
            continue
        kept.append(region)
    for start, end, replacement in reversed(kept):
        lines[start - 1:end] = [replacement]
    stubbed = "".join(lines)
    ast.parse(stubbed)  # a stub that breaks the module's syntax is a bug here, not in the kit
    return stubbed, definitions


def build_edition(target: Path, locked: Iterable[str], *, package_dir: Path | None = None,
                  grading: bool = False) -> list[MarkedDefinition]:
    """Write the student edition of ``course_lib`` to ``target/course_lib``; returns what was stubbed.

    ``target`` is the folder that goes on PYTHONPATH. An existing ``target/course_lib`` is replaced.
    ``grading``: the edition of a grading kernel (see the module docstring).
    """
    from autograde.answer_helpers import answer_helpers, library_index

    package_dir = Path(package_dir or Path(course_lib.__file__).parent)
    locked = sorted(set(locked))
    destination = Path(target) / "course_lib"
    if destination.exists():
        shutil.rmtree(destination)
    shutil.copytree(package_dir, destination, ignore=_IGNORED)
    helpers: dict[str, dict[str, Iterable[str]]] = {}
    if locked:
        for helper in answer_helpers(library_index(package_dir), set(locked), grading=grading):
            helpers.setdefault(helper.module, {})[helper.qualname] = helper.labs
    stubbed: list[MarkedDefinition] = []
    for path in sorted(destination.rglob("*.py")):
        source = path.read_text(encoding="utf-8")
        module_name = ".".join(("course_lib", *path.relative_to(destination).with_suffix("").parts))
        module_name = module_name.removesuffix(".__init__")
        if "exercise(" not in source and module_name not in helpers:
            continue
        try:
            new_source, definitions = stub_source(source, locked, module_name, helpers.get(module_name))
        except StubError as error:
            raise StubError(f"{path.relative_to(destination.parent)}: {error}") from None
        if definitions:
            path.write_text(new_source, encoding="utf-8")
            stubbed += definitions
    (destination / EDITION_FILE.name).write_text(json.dumps({"locked": locked}, indent=1) + "\n", encoding="utf-8")
    return stubbed
