"""What grading found, cell by cell, and why each point was lost."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from course_lib.handin.notebooks import (grade_cells, is_written_answer, nbgrader_meta,  # shared with course check
                                         needs_gpu)

PASSED = "passed"
FAILED = "failed"          # a check said the answer is wrong
ERROR = "error"            # the code raised something other than a failed check
TIMEOUT = "timeout"
KERNEL_DIED = "kernel died"
NOT_RUN = "not run"
NEEDS_GPU = "skipped: needs a GPU"
MISSING = "missing"        # the notebook was not submitted, or could not be read
PARTIAL = "partial"
# A written answer (a Markdown cell a TA grades with a rubric, ``course mark``) is never decided by the
# autograder: it awaits a TA, or it is blank (as released, or emptied) and scores 0 with no TA work.
AWAITING_TA = "awaiting a TA"
NOT_ATTEMPTED = "not attempted"
AWAITING_TA_REASON = "a written answer: graded by a TA with the question's rubric"
BLANK_REASON = "not attempted: the written answer is as released (YOUR ANSWER HERE) or empty"

FAILED_CHECK_NAMES = {"CheckFailed", "AssertionError"}
# The error names ``classify_cell`` reads as the grader's verdicts. The grader writes them itself; an
# error the student's code raised under one of them is shown as ``student_error_name`` says, so a class
# the student names KernelDied or CheckFailed reads as what it is (see docs/trust-model.md).
GRADER_OUT_OF_MEMORY = "GraderOutOfMemory"   # a check passed the grading process's memory limit (grader_limits)
VERDICT_NAMES = ("CellTimeoutError", "KernelDied", "NotRun", "NeedsGPU", GRADER_OUT_OF_MEMORY,
                 *sorted(FAILED_CHECK_NAMES))


def student_error_name(name: str) -> str:
    """The name an error of the student's code is shown under: its own, unless a verdict of the grader's uses it."""
    return f"{name} (raised by your code)" if name in VERDICT_NAMES else name
REASON_BYTES = 4096     # a lost point's reason as results, result files and report.json keep it
PROBLEM_BYTES = 2048    # one problem line of a submission
MAX_PROBLEMS = 50


def _clipped(text: str | None, limit: int = REASON_BYTES) -> str | None:
    from course_lib.runner.bounded import clip

    return None if text is None else clip(text, limit, "reason")


@dataclass
class CellResult:
    grade_id: str
    points: float
    max_points: float
    status: str
    reason: str | None = None
    written: bool = False    # a written answer (graded by a TA), not a test cell


@dataclass
class NotebookResult:
    name: str
    status: str                      # "graded", "missing", "malformed", "grading failed"
    message: str | None = None
    cells: list[CellResult] = field(default_factory=list)
    feedback: str | None = None      # path of the feedback HTML, relative to the output folder
    handed_in_as: str | None = None  # the file graded as this notebook, when the student renamed it

    @property
    def score(self) -> float:
        return sum(cell.points for cell in self.cells)

    @property
    def max_score(self) -> float:
        """Points available on this machine: GPU-only checks skipped on a CPU do not count."""
        return sum(cell.max_points for cell in self.cells if cell.status != NEEDS_GPU)

    @property
    def skipped_points(self) -> float:
        return sum(cell.max_points for cell in self.cells if cell.status == NEEDS_GPU)

    @property
    def awaiting_ta(self) -> float:
        """Points of written answers that a TA has yet to grade (the autograder gives them 0 meanwhile)."""
        return sum(cell.max_points for cell in self.cells if cell.status == AWAITING_TA)


@dataclass
class LabResult:
    student: str
    lab: str
    notebooks: list[NotebookResult] = field(default_factory=list)
    timestamp: str = ""
    problems: list[str] = field(default_factory=list)

    @property
    def score(self) -> float:
        return sum(nb.score for nb in self.notebooks)

    @property
    def max_score(self) -> float:
        return sum(nb.max_score for nb in self.notebooks)

    @property
    def skipped_points(self) -> float:
        return sum(nb.skipped_points for nb in self.notebooks)

    @property
    def awaiting_ta(self) -> float:
        return sum(nb.awaiting_ta for nb in self.notebooks)

    @property
    def percent(self) -> float:
        return 100.0 * self.score / self.max_score if self.max_score else 0.0

    def lost_points(self) -> list[dict]:
        """Every lost point with its reason (what report.json lists first)."""
        lost = []
        for notebook in self.notebooks:
            for cell in notebook.cells:
                if cell.points < cell.max_points and cell.status not in (NEEDS_GPU, AWAITING_TA):
                    lost.append({
                        "notebook": notebook.name, "cell": cell.grade_id,
                        "points_lost": round(cell.max_points - cell.points, 4),
                        "status": cell.status, "reason": cell.reason or notebook.message,
                    })
        return lost

    def as_dict(self) -> dict:
        return {
            "student": self.student, "lab": self.lab, "score": self.score, "max_score": self.max_score,
            "skipped_points": self.skipped_points, "awaiting_ta": self.awaiting_ta,
            "percent": round(self.percent, 1),
            "timestamp": self.timestamp or None, "problems": bounded_problems(self.problems),
            "lost_points": self.lost_points(),
            "notebooks": [
                {**{k: v for k, v in asdict(nb).items() if k != "cells"}, "score": nb.score,
                 "max_score": nb.max_score, "awaiting_ta": nb.awaiting_ta, "cells": [asdict(cell) for cell in nb.cells]}
                for nb in self.notebooks
            ],
        }


    @classmethod
    def from_dict(cls, data: dict) -> "LabResult":
        """The inverse of ``as_dict`` (derived fields such as score are recomputed, not read; texts clipped)."""
        notebooks = [
            NotebookResult(name=nb["name"], status=nb["status"], message=_clipped(nb.get("message")),
                           feedback=nb.get("feedback"), handed_in_as=_clipped(nb.get("handed_in_as"), 200),
                           cells=[CellResult(c["grade_id"], float(c["points"]), float(c["max_points"]), c["status"],
                                             _clipped(c.get("reason")), bool(c.get("written", False)))
                                  for c in nb.get("cells", [])])
            for nb in data.get("notebooks", [])
        ]
        return cls(student=data["student"], lab=data["lab"], notebooks=notebooks,
                   timestamp=_clipped(data.get("timestamp") or "", 200) or "",
                   problems=bounded_problems(data.get("problems", [])))


def bounded_problems(problems) -> list[str]:
    """At most MAX_PROBLEMS problem lines, each clipped."""
    items = [_clipped(str(problem), PROBLEM_BYTES) for problem in list(problems or [])[:MAX_PROBLEMS + 1]]
    if len(items) > MAX_PROBLEMS:
        items = items[:MAX_PROBLEMS] + ["[more problems not listed]"]
    return items


def _first_lines(text: str, limit: int = 12) -> str:
    from course_lib.runner.bounded import clip

    text = clip(str(text), 4 * REASON_BYTES)
    lines = [line.rstrip() for line in text.strip().splitlines()]
    return _clipped("\n".join(lines[:limit]) + ("\n..." if len(lines) > limit else ""))


def classify_cell(cell, points: float, max_points: float, timeout: int) -> CellResult:
    """Status and reason of one graded cell from its outputs and the points nbgrader gave it."""
    grade_id = nbgrader_meta(cell).get("grade_id", "?")
    errors = [output for output in cell.get("outputs", []) if output.get("output_type") == "error"]
    names = [error.get("ename", "") for error in errors]
    if "CellTimeoutError" in names:
        return CellResult(grade_id, points, max_points, TIMEOUT,
                          f"the cell ran longer than the {timeout} s limit and was interrupted "
                          "(an infinite loop, or code far slower than the reference)")
    if "KernelDied" in names:
        return CellResult(grade_id, points, max_points, KERNEL_DIED, _first_lines(errors[-1].get("evalue", "")))
    if "NotRun" in names:
        return CellResult(grade_id, points, max_points, NOT_RUN, _first_lines(errors[-1].get("evalue", "")))
    if errors:
        error = errors[-1]
        ename, evalue = error.get("ename", "Error"), error.get("evalue", "")
        status = FAILED if ename in FAILED_CHECK_NAMES else ERROR
        if not evalue:
            reason = f"{ename} (raised without a message)"
        else:
            reason = _first_lines(evalue) if status == FAILED else _first_lines(f"{ename}: {evalue}")
        if ename == "NotImplementedError" and not evalue:
            reason = "NotImplementedError: the answer cell still holds the stub (raise NotImplementedError())"
        return CellResult(grade_id, points, max_points, status, reason)
    if points >= max_points:
        return CellResult(grade_id, points, max_points, PASSED)
    return CellResult(grade_id, points, max_points, PARTIAL, f"partial credit: {points:g} of {max_points:g}")


def written_cell(grade_id: str, max_points: float, submitted_cell) -> CellResult:
    """A written answer as the autograder leaves it: awaiting a TA, blank (0, no TA work) or missing
    (the student deleted the cell: 0). ``submitted_cell``: the cell of the graded notebook, or None."""
    from course_lib.handin.notebooks import is_blank_answer

    if submitted_cell is None:
        return CellResult(grade_id, 0.0, max_points, MISSING, "the written answer cell is not in the notebook handed in",
                          written=True)
    source = submitted_cell.get("source", "")
    text = "".join(source) if isinstance(source, list) else str(source)
    if is_blank_answer(text):
        return CellResult(grade_id, 0.0, max_points, NOT_ATTEMPTED, BLANK_REASON, written=True)
    return CellResult(grade_id, 0.0, max_points, AWAITING_TA, AWAITING_TA_REASON, written=True)


def missing_notebook(name: str, source_notebook, status: str, message: str) -> NotebookResult:
    """A notebook that could not be graded: every test cell scores zero for the same reason."""
    from autograde.layout import gpu_available

    skip_gpu_cells = not gpu_available()
    cells = []
    for cell in grade_cells(source_notebook):
        grade_id, max_points = nbgrader_meta(cell).get("grade_id", "?"), float(nbgrader_meta(cell).get("points", 0))
        if skip_gpu_cells and needs_gpu(cell):
            cells.append(CellResult(grade_id, 0.0, max_points, NEEDS_GPU, "skipped: needs a GPU"))
        else:
            cells.append(CellResult(grade_id, 0.0, max_points, MISSING, _clipped(message),
                                    written=is_written_answer(cell)))
    return NotebookResult(name=name, status=status, message=_clipped(message), cells=cells)
