"""Reading, validating and comparing notebooks, and the names and GPU rule of their cells.

Shared by the student tools (``course check``, ``course submit``) and the grader (``autograde``),
which imports it from here: a kit has no ``autograde``.
"""

from __future__ import annotations

import glob
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat


# Lab folders are named like "lab01-text-to-tensors"; student ids come from folder names.
LAB_NAME = re.compile(r"^lab\d\d[a-z0-9-]*$")
SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@+-]{0,99}$")


# Where a GPU driver shows itself: NVIDIA's driver and device files, ROCm's kernel driver, WSL2's GPU.
_GPU_DRIVER_FILES = ("/proc/driver/nvidia", "/dev/nvidia[0-9]*", "/dev/kfd", "/dev/dxg")


def gpu_available() -> bool:
    """Whether torch can use a CUDA (or ROCm) GPU here.

    Importing torch takes seconds, and the grader, its workers and ``course check`` ask this in
    processes that otherwise never import it; on a machine without any GPU driver the answer is
    no without asking torch (which would say the same)."""
    if "torch" not in sys.modules and not any(glob.glob(pattern) for pattern in _GPU_DRIVER_FILES):
        return False
    try:
        import torch

        return bool(torch.cuda.is_available())
    except Exception:  # a broken torch install must not stop grading; Triton then runs interpreted
        return False


def needs_gpu(source_cell) -> bool:
    """A test cell is GPU-only when the *source* notebook's metadata says so; on a CPU it is skipped
    for everyone. Never decided from what a submission's code raised or what its metadata claims."""
    return bool(source_cell.get("metadata", {}).get("course", {}).get("needs_gpu"))


class MalformedNotebook(ValueError):
    """A file that is not a readable nbformat-4 notebook; the message says what is wrong."""


def read_notebook(path: Path):
    """Read and validate a v4 notebook, raising MalformedNotebook with a plain-words reason."""
    try:
        raw = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise MalformedNotebook("the file is not UTF-8 text (is it really a .ipynb notebook?)") from None
    except OSError as error:
        raise MalformedNotebook(f"the file could not be read: {error.strerror}") from None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as error:
        raise MalformedNotebook(f"not valid JSON (line {error.lineno}, column {error.colno}: {error.msg})") from None
    if not isinstance(data, dict) or "nbformat" not in data:
        raise MalformedNotebook("valid JSON but not a notebook (no 'nbformat' field)")
    major = data.get("nbformat")
    if major != 4:
        raise MalformedNotebook(f"wrong notebook format: nbformat {major!r}, expected 4 (save it with JupyterLab)")
    try:
        notebook = nbformat.reads(raw, as_version=4)
        nbformat.validate(notebook)
    except Exception as error:  # nbformat raises several types; all mean "broken notebook"
        first_line = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise MalformedNotebook(f"not a valid nbformat-4 notebook ({first_line})") from None
    return notebook


def nbgrader_meta(cell) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {}) or {}


def grade_cells(notebook) -> list:
    """Cells nbgrader grades (test cells and written answers), in order."""
    return [cell for cell in notebook.cells if nbgrader_meta(cell).get("grade")]


# A written answer (a "knowledge check") is nbgrader's *manually graded answer* cell: a Markdown cell
# with ``solution`` and ``grade`` set and its points. The release holds nbgrader's text stub in it;
# a TA grades what the student wrote (``course mark``). An answer left as released, or emptied, is
# blank: it scores 0 with no TA work.
WRITTEN_STUB = "YOUR ANSWER HERE"


def is_written_answer(cell) -> bool:
    """Whether ``cell`` (a dict or nbformat cell) is a written answer cell a TA grades: graded and a
    solution, and not code. Decided from the *source* or release notebook's cell, never a submission's
    metadata alone (a student cannot make a test cell manually graded: nbgrader restores its metadata)."""
    meta = nbgrader_meta(cell)
    return bool(meta.get("grade") and meta.get("solution")) and cell.get("cell_type") != "code"


def is_blank_answer(text: str) -> bool:
    """A written answer with nothing of the student's in it: empty, or the release's stub."""
    return text.strip() in ("", WRITTEN_STUB)


def autograded_cells(notebook) -> list:
    """The graded code cells (what the autograder decides), in order."""
    return [cell for cell in grade_cells(notebook) if not is_written_answer(cell)]


def written_cells(notebook) -> list:
    """The written answer cells (what a TA decides), in order."""
    return [cell for cell in grade_cells(notebook) if is_written_answer(cell)]


def first_line(source: str, width: int = 60) -> str:
    """The first line of a cell that is not blank, cut to ``width`` characters."""
    line = next((line.strip() for line in source.splitlines() if line.strip()), "")
    return line if len(line) <= width else line[:width - 3] + "..."


def cell_label(cell, index: int | None = None) -> str:
    """How a message names a cell: its nbgrader id if it has one, and its first line.

    A reader finds a cell by what it says, not by its position (a count that includes markdown cells
    matches nothing JupyterLab shows): ``cell 'test_pack_kv' (`from course_lib.checks import ...`)``
    or ``cell `prefill = start_worker(pack_kv)```. ``index`` is accepted for old callers and unused.
    """
    grade_id = nbgrader_meta(cell).get("grade_id")
    first = first_line(cell.get("source", "") if isinstance(cell, dict) else cell.source)
    shown = f"`{first}`" if first else "(empty)"
    return f"cell '{grade_id}' ({shown})" if grade_id else f"cell {shown}"


# Metadata that changes from run to run or machine to machine and says nothing about content.
VOLATILE_NOTEBOOK_METADATA = {"language_info", "widgets", "toc", "varInspector", "celltoolbar"}
VOLATILE_CELL_METADATA = {"execution", "collapsed", "scrolled", "jupyter", "tags", "trusted"}


@dataclass(frozen=True)
class ComparableCell:
    cell_type: str
    source: str
    nbgrader: tuple


def comparable_cells(notebook) -> list[ComparableCell]:
    """What must match between a committed release and a fresh one: cell types, sources, nbgrader metadata."""
    cells = []
    for cell in notebook.cells:
        meta = nbgrader_meta(cell)
        cells.append(ComparableCell(cell.cell_type, cell.source, tuple(sorted((k, str(v)) for k, v in meta.items()))))
    return cells


def normalize_release(notebook):
    """Strip what varies between runs (outputs, counts, volatile metadata) so releases are reproducible."""
    for key in VOLATILE_NOTEBOOK_METADATA:
        notebook.metadata.pop(key, None)
    for cell in notebook.cells:
        for key in VOLATILE_CELL_METADATA:
            cell.metadata.pop(key, None)
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    return notebook
