"""nbgrader plug-ins that make grades trustworthy.

- ``DemoteStderr``: nbgrader gives a test cell zero points when *anything* reached stderr, so a
  passing check that triggers a PyTorch or Triton warning would lose its points. Stderr streams
  become stdout streams (the text stays visible); only real errors cost points.
- ``ScrubHiddenTests``: autograded notebooks contain the hidden tests (nbgrader puts them back to
  run them). Before feedback is rendered, hidden regions are cut from the source and the
  tracebacks of cells that held them are reduced to the exception's name and message, so no
  hidden test code reaches a student.
"""

from __future__ import annotations

import re

from nbgrader.preprocessors import NbGraderPreprocessor, OverwriteCells
from nbgrader.utils import is_grade

HIDDEN_BEGIN = "### BEGIN HIDDEN TESTS"
HIDDEN_END = "### END HIDDEN TESTS"
HIDDEN_REGION = re.compile(
    r"^[ \t]*### BEGIN HIDDEN TESTS.*?^[ \t]*### END HIDDEN TESTS[^\n]*\n?", re.MULTILINE | re.DOTALL
)
HIDDEN_PLACEHOLDER = "# (hidden tests ran here)\n"


def forget_if_foreign(cell) -> None:
    """Drop nbgrader metadata that names no cell (no ``grade_id``): the cell becomes the student's own."""
    meta = cell.metadata.get("nbgrader")
    if meta is not None and not (isinstance(meta, dict) and meta.get("grade_id")):
        del cell.metadata["nbgrader"]


class ForgetForeignCells(NbGraderPreprocessor):
    """Make a cell whose nbgrader metadata names no cell of the lab an ordinary cell of the student's.

    A student who copies a test or answer cell in Jupyter copies its metadata. nbgrader's
    ``DeduplicateIds`` then empties the copy's metadata and ``OverwriteCells`` takes an unknown
    ``grade_id`` away, but both leave an ``nbgrader`` entry behind, on which nbgrader itself fails
    (``DeduplicateIds`` on a graded cell with no id, ``OverwriteCells.add_missing_task_cells`` on any
    entry without one): the whole lab was "grading failed". Run before and after ``DeduplicateIds``.
    """

    def preprocess_cell(self, cell, resources, index):
        forget_if_foreign(cell)
        return cell, resources


class OverwriteCellsKeepingCopies(OverwriteCells):
    """nbgrader's ``OverwriteCells``, with a cell whose unknown ``grade_id`` it removed made ordinary at once."""

    def preprocess_cell(self, cell, resources, index):
        cell, resources = super().preprocess_cell(cell, resources, index)
        forget_if_foreign(cell)
        return cell, resources


class DemoteStderr(NbGraderPreprocessor):
    """Turn stderr stream outputs into stdout so warnings never cost points."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type == "code":
            for output in cell.get("outputs", []):
                if output.get("output_type") == "stream" and output.get("name") == "stderr":
                    output["name"] = "stdout"
        return cell, resources


def strip_hidden_tests(source: str) -> tuple[str, bool]:
    """``source`` with every hidden-test region replaced by a placeholder, and whether one was found."""
    stripped, count = HIDDEN_REGION.subn(HIDDEN_PLACEHOLDER, source)
    if HIDDEN_BEGIN in stripped:  # an unterminated region: drop everything from its start
        stripped = stripped[: stripped.index(HIDDEN_BEGIN)] + HIDDEN_PLACEHOLDER
        count += 1
    return stripped, count > 0


class ScrubHiddenTests(NbGraderPreprocessor):
    """Remove hidden tests (code and tracebacks) from notebooks before feedback is rendered."""

    def preprocess_cell(self, cell, resources, index):
        if cell.cell_type != "code":
            return cell, resources
        source, had_hidden = strip_hidden_tests(cell.source)
        if had_hidden or is_grade(cell):
            cell.source = source
        if had_hidden:
            for output in cell.get("outputs", []):
                if output.get("output_type") == "error":
                    output["traceback"] = [f"{output.get('ename', 'Error')}: {output.get('evalue', '')}"]
        return cell, resources
