"""Running the solution notebooks (nbgrader source) top to bottom: the course never rots.

Each notebook runs in a fresh kernel inside a scratch copy of its lab folder, so nothing is
written back into solutions/. Test cells marked GPU-only are skipped on a machine without a GPU. Every cell that raises is reported by position, nbgrader id and
error, and the run fails if there is any. A cell that writes to stderr fails too: a warning in the
reference run would show up in every student's notebook, and the course promises a clean run.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellTimeoutError, DeadKernelError

from autograde.layout import gpu_available, kernel_environment
from autograde.results import needs_gpu
from course_lib.handin.notebooks import cell_label, nbgrader_meta


@dataclass
class CellFailure:
    notebook: str
    cell: str
    is_test: bool
    error: str

    def __str__(self) -> str:
        kind = "test cell" if self.is_test else "cell"
        return f"{self.notebook}: {kind} {self.cell}: {self.error}"


@dataclass
class SolveResult:
    notebook: str
    seconds: float
    failures: list[CellFailure] = field(default_factory=list)


def _error_summary(output) -> str:
    evalue = str(output.get("evalue", "")).strip()
    first = evalue.splitlines()[0] if evalue else ""
    return f"{output.get('ename', 'Error')}: {first}".rstrip(": ")


def _cell_problem(outputs) -> str | None:
    """The error a cell raised, else what it wrote to stderr, else None."""
    for output in outputs:
        if output.get("output_type") == "error":
            return _error_summary(output)
    for output in outputs:
        if output.get("output_type") == "stream" and output.get("name") == "stderr":
            first_line = next((line for line in output.get("text", "").splitlines() if line.strip()), "")
            return f"wrote to stderr: {first_line[:160]}"
    return None


def solve_notebook(path: Path, *, timeout: int = 600, on_cell: Callable[[int, int], None] | None = None) -> SolveResult:
    """Execute one solution notebook in a scratch copy of its folder; collect the failing cells."""
    notebook = nbformat.read(path, as_version=4)
    name = f"{path.parent.name}/{path.name}"
    started = time.perf_counter()
    failures: list[CellFailure] = []
    with tempfile.TemporaryDirectory(prefix="course-solve-") as scratch:
        workdir = Path(scratch) / path.parent.name
        # The other chapters' notebooks come along: a later chapter imports an earlier one's answers
        # from its saved notebook (course_lib.chapters.answers_from), as it does in the kit and when graded.
        shutil.copytree(path.parent, workdir, ignore=shutil.ignore_patterns(".ipynb_checkpoints"))
        client = NotebookClient(notebook, timeout=timeout, kernel_name="python3", allow_errors=True,
                                interrupt_on_timeout=True, resources={"metadata": {"path": str(workdir)}})
        saved_environment = dict(os.environ)
        os.environ.update(kernel_environment())
        skip_gpu_cells = not gpu_available()
        try:
            with client.setup_kernel():
                for index, cell in enumerate(notebook.cells):
                    if on_cell:
                        on_cell(index, len(notebook.cells))
                    if cell.cell_type != "code":
                        continue
                    is_test = bool(nbgrader_meta(cell).get("grade"))
                    if is_test and skip_gpu_cells and needs_gpu(cell):
                        continue  # as the grader does: a GPU-only check is skipped on a CPU, not failed
                    try:
                        client.execute_cell(cell, index)
                    except CellTimeoutError:
                        failures.append(CellFailure(name, cell_label(cell, index), is_test, f"timed out after {timeout} s"))
                        continue
                    except DeadKernelError:
                        failures.append(CellFailure(name, cell_label(cell, index), is_test, "the kernel died"))
                        break
                    problem = _cell_problem(cell.outputs)
                    if problem:
                        failures.append(CellFailure(name, cell_label(cell, index), is_test, problem))
        finally:
            os.environ.clear()
            os.environ.update(saved_environment)
    return SolveResult(name, time.perf_counter() - started, failures)
