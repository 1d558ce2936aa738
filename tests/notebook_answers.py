"""The reference answers of a solution notebook, for tests that run them or swap one for a bug, and the
cases its hidden tests write (the kit does not ship them), for tests that check the checks on them."""

from __future__ import annotations

import ast
import textwrap
from pathlib import Path
from types import ModuleType
from typing import Any

import nbformat

from autograde.demos import solution_answer
from course_lib.handin.notebooks import nbgrader_meta


def answer_sources(solution_notebook: Path) -> dict[str, str]:
    """{answer grade_id: reference answer source, SOLUTION markers removed} in notebook order: the code
    answers (a written question's Markdown answer is a TA's, not code to run)."""
    notebook = nbformat.read(solution_notebook, as_version=4)
    return {nbgrader_meta(cell)["grade_id"]: solution_answer(cell.source)
            for cell in notebook.cells if nbgrader_meta(cell).get("solution") and cell.cell_type == "code"}


def hidden_region(solution_notebook: Path, grade_id: str) -> str:
    """The hidden region of a test cell (the lines between its hidden-test markers), dedented."""
    notebook = nbformat.read(solution_notebook, as_version=4)
    source = next(cell.source for cell in notebook.cells if nbgrader_meta(cell).get("grade_id") == grade_id)
    begin, end = source.index("### BEGIN HIDDEN TESTS"), source.index("### END HIDDEN TESTS")
    return textwrap.dedent(source[source.index("\n", begin) + 1:source.rindex("\n", 0, end) + 1])


def hidden_cases(solution_notebook: Path, grade_id: str, name: str, checks: ModuleType) -> Any:
    """The value a test cell's hidden region gives ``name``: the region's top-level imports, function
    definitions and assignments run (its checks do not), with ``checks`` the module its test cell
    imports as ``checks``."""
    tree = ast.parse(hidden_region(solution_notebook, grade_id))
    tree.body = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom, ast.FunctionDef,
                                                                 ast.Assign, ast.AugAssign))]
    namespace: dict[str, Any] = {"checks": checks}
    exec(compile(tree, f"<hidden region of {grade_id}>", "exec"), namespace)
    return namespace[name]
