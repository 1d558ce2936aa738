"""Which definitions of the library answer an exercise: the ``@exercise`` markers, read from the source.

Read by the edition builder (``edition``: it stubs them) and by the answer-helper finder
(``answer_helpers``: it starts from them). Nothing here imports the library it reads.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass

from course_lib.exercises import Exercise

__all__ = ["MarkedDefinition", "StubError", "is_docstring", "marked_definitions"]


class StubError(ValueError):
    """A marked definition the kit builder cannot stub (the message names file and line)."""


@dataclass(frozen=True)
class MarkedDefinition:
    """A function or class marked with ``@exercise``: where it is and which exercise it answers."""

    qualname: str
    exercise: Exercise
    node: ast.AST  # ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef

    @property
    def first_line(self) -> int:
        return min([self.node.lineno, *(d.lineno for d in self.node.decorator_list)])


def _string_constants(tree: ast.Module) -> dict[str, str]:
    """Module-level ``NAME = "text"`` assignments (a marker may say ``@exercise(LAB, ...)``)."""
    constants = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    constants[target.id] = node.value.value
    return constants


def _exercise_of_decorator(decorator: ast.expr, constants: dict[str, str]) -> Exercise | None:
    if not isinstance(decorator, ast.Call):
        return None
    func = decorator.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None
    if name != "exercise":
        return None

    def value(node: ast.expr):
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name) and node.id in constants:
            return constants[node.id]
        return None

    values = [value(arg) for arg in decorator.args]
    keywords = {kw.arg: value(kw.value) for kw in decorator.keywords}
    fields = dict(zip(("lab", "notebook", "answer"), values)) | keywords
    if set(fields) != {"lab", "notebook", "answer"} or not all(isinstance(v, str) for v in fields.values()):
        raise StubError(f"line {decorator.lineno}: @exercise needs three strings (lab, notebook, answer), as literals "
                        "or module-level string constants")
    return Exercise(fields["lab"], fields["notebook"], fields["answer"])


def marked_definitions(tree: ast.Module) -> list[MarkedDefinition]:
    """Every ``@exercise``-marked function or class of a module, at any nesting depth."""
    found: list[MarkedDefinition] = []
    constants = _string_constants(tree)

    def visit(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qualname = f"{prefix}{node.name}"
                markers = [m for m in (_exercise_of_decorator(d, constants) for d in node.decorator_list)
                           if m is not None]
                if markers:
                    found.append(MarkedDefinition(qualname, markers[0], node))
                visit(node.body, f"{qualname}.")

    visit(tree.body, "")
    return found


def is_docstring(statement: ast.stmt) -> bool:
    """Whether ``statement`` is a docstring (a string on its own, first in a body)."""
    return isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant) \
        and isinstance(statement.value.value, str)
