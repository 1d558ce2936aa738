"""The reference answers of a solution notebook, for tests that run them or swap one for a bug."""

from __future__ import annotations

from pathlib import Path

import nbformat

from autograde.demos import solution_answer
from course_lib.handin.notebooks import nbgrader_meta


def answer_sources(solution_notebook: Path) -> dict[str, str]:
    """{answer grade_id: reference answer source, SOLUTION markers removed} in notebook order."""
    notebook = nbformat.read(solution_notebook, as_version=4)
    return {nbgrader_meta(cell)["grade_id"]: solution_answer(cell.source)
            for cell in notebook.cells if nbgrader_meta(cell).get("solution")}
