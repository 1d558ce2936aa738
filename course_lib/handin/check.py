"""``course check``: run a notebook's visible tests in a fresh kernel and say whether it is ready to hand in.

What nbgrader's "Validate" does, in the course's words, and no more than the visible tests can
know. Two parts:

- **the file** (``inspect_file``, no kernel needed): valid notebook JSON; a name and a folder the
  grader expects (``<lab>/<notebook>.ipynb`` as released); every test cell present and as released
  (the checksums of the release manifest, ``manifest``); no cell copied with its nbgrader id (two
  cells with one id stop nbgrader);
- **the visible tests** (``run_visible_tests``): every code cell runs, top to bottom, in a fresh
  kernel on this edition of ``course_lib`` (what JupyterLab's "Restart and run all" does), the
  test cells as released. Each exercise (an answer cell and the test cells under it) is then
  *passed*, *failed* with the check's message (expected, got, hint), *not attempted* (its tests
  stop at ``NotImplementedError``: the cell is still the release's stub), *skipped: needs a GPU*,
  or *graded later with hidden inputs* when its test cells check nothing visibly (a released
  hidden-only cell is imports and a comment: running it proves nothing, so it is never "passed").
  A written answer (a Markdown cell answered in words) is *graded by your TA*, or *not attempted*
  while it is as released or empty: no check can judge it. The total says so: "visible: X of Y
  points; Z more points are graded only with hidden inputs; N points are graded by your TA".

Any other cell that raises is blamed on the answer it came from where the traceback or the
message shows one (``blame``): "your `pack_kv` (answer cell 'pack_kv') raised NameError, in cell
`prefill = ...`" fails that exercise even though its visible tests passed, since the grader runs
the same cell. Cells are named by their first line (``grading.notebooks.cell_label``).

A chapter that runs an earlier chapter's answers (``answers_from``) is checked with them: a note at
the top says when that notebook is not beside this one (a copy checked outside ``labs/<lab>/``) or
still has answers as released, and the cells that fail for that reason, test cells included,
*could not run*: they are blamed on no answer of this chapter. An error that follows from a cell
that failed first (a name it should have defined) is a knock-on and names that cell.

``check_notebook(path)`` does both and prints the report; it is also what a notebook cell calls
(``from course_lib.handin import check_notebook; check_notebook("04_paging.ipynb")``). Visible
tests pass or fail exactly as in JupyterLab; the grader also runs hidden tests with other inputs.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

from course_lib.handin.blame import (
    ANSWER,
    EARLIER,
    EXAMPLE,
    KNOCK_ON,
    LOCKED,
    NOT_WRITTEN,
    AnswerCells,
    CellError,
    FailedCells,
    blame,
    defined_names,
)
from course_lib.handin.manifest import NotebookCell, load_manifest

__all__ = ["CheckReport", "ExerciseResult", "FileCheck", "TestCellResult", "Totals", "check_notebook",
           "has_visible_checks", "inspect_file", "run_visible_tests"]

# Set in the kernel that `course check` runs, so a notebook cell that calls check_notebook does not
# start a check of its own (which would run the notebook again, and again...).
INSIDE_CHECK = "COURSE_CHECK_RUNNING"

PASSED, FAILED, NOT_ATTEMPTED, SKIPPED_GPU, NOT_RUN, NO_TESTS, HIDDEN_ONLY, BLOCKED, BY_TA = (
    "passed", "failed", "not attempted", "skipped: needs a GPU", "not run", "no test cell of its own",
    "graded later with hidden inputs", "could not run", "graded by your TA")


@dataclass(frozen=True)
class FileCheck:
    """One thing that makes a file the one to hand in (or not)."""

    ok: bool
    what: str
    detail: str


@dataclass
class TestCellResult:
    grade_id: str
    points: float
    status: str
    message: str = ""
    visible: bool = True   # the released cell checks something here; else only hidden tests do, when graded
    ename: str = ""        # the exception that failed it, if one did


@dataclass
class ExerciseResult:
    """An answer cell, the test cells under it, and the other cells that failed because of it."""

    grade_id: str
    tests: list[TestCellResult]
    status: str
    message: str = ""
    unchanged: bool = False   # the answer cell is exactly as released
    example_errors: list[CellError] = field(default_factory=list)
    ta_points: float = 0.0    # a written answer's points (graded by a TA, not by any test); 0 for code

    def _counted(self, visible: bool) -> list[TestCellResult]:
        return [test for test in self.tests if test.status != SKIPPED_GPU and test.visible == visible]

    @property
    def points(self) -> float:
        """Points the visible tests decide here (GPU-only cells count only on a GPU)."""
        return sum(test.points for test in self._counted(visible=True))

    @property
    def hidden_points(self) -> float:
        """Points of test cells with no visible check: decided only by the hidden tests, when graded."""
        return sum(test.points for test in self._counted(visible=False))

    @property
    def points_passed(self) -> float:
        return sum(test.points for test in self._counted(visible=True) if test.status == PASSED)


@dataclass
class Totals:
    """Points over one notebook or several: what the visible tests say, and what they cannot."""

    passed: float = 0.0
    visible: float = 0.0
    hidden_only: float = 0.0
    needs_gpu: float = 0.0
    by_ta: float = 0.0        # written answers' points: a TA grades them with a rubric

    def __add__(self, other: Totals) -> Totals:
        return Totals(self.passed + other.passed, self.visible + other.visible, self.hidden_only + other.hidden_only,
                      self.needs_gpu + other.needs_gpu, self.by_ta + other.by_ta)

    def text(self) -> str:
        line = f"visible: {_points(self.passed)} of {_points(self.visible)} points"
        if self.hidden_only:
            one = self.hidden_only == 1
            line += f"; {_points(self.hidden_only)} more point{'' if one else 's'} {'is' if one else 'are'} graded " \
                    "only with hidden inputs"
        if self.needs_gpu:
            one = self.needs_gpu == 1
            line += f"; {_points(self.needs_gpu)} more point{'' if one else 's'} need{'s' if one else ''} a GPU"
        if self.by_ta:
            one = self.by_ta == 1
            line += f"; {_points(self.by_ta)} point{'' if one else 's'} {'is' if one else 'are'} graded by your TA"
        return line


@dataclass(repr=False)
class CheckReport:
    path: Path
    lab: str | None = None
    notebook: str | None = None
    file_checks: list[FileCheck] = field(default_factory=list)
    exercises: list[ExerciseResult] = field(default_factory=list)
    other_errors: list[CellError] = field(default_factory=list)   # cells that are no test cell and raised
    seconds: float = 0.0
    ran: bool = False
    note: str = ""
    notes: list[str] = field(default_factory=list)   # one line each: why some cells could not run
    cells_run: int = 0
    cells_raised: int = 0

    @property
    def ready(self) -> bool:
        """The file is the one to hand in: right name and folder, valid, test cells as released."""
        return bool(self.file_checks) and all(check.ok for check in self.file_checks)

    @property
    def all_passed(self) -> bool:
        """Every visible test passes, and no other cell failed in an answer or while running one."""
        return self.ran and all(ex.status in (PASSED, SKIPPED_GPU, NO_TESTS, HIDDEN_ONLY) for ex in self.exercises
                                if not ex.ta_points) \
            and not any(error.kind == ANSWER or (error.kind == EXAMPLE and error.uses) for error in self.other_errors)

    @property
    def totals(self) -> Totals:
        gpu = sum(t.points for ex in self.exercises for t in ex.tests if t.status == SKIPPED_GPU)
        return Totals(sum(ex.points_passed for ex in self.exercises), sum(ex.points for ex in self.exercises),
                      sum(ex.hidden_points for ex in self.exercises), gpu, sum(ex.ta_points for ex in self.exercises))

    def text(self) -> str:
        return format_report(self)

    def to_dict(self) -> dict:
        """The report as plain data (``course check --json``)."""
        totals = self.totals
        return {
            "path": str(self.path), "lab": self.lab, "notebook": self.notebook, "ran": self.ran,
            "ready": self.ready, "all_passed": self.all_passed, "seconds": round(self.seconds, 2), "note": self.note,
            "notes": list(self.notes), "cells_run": self.cells_run, "cells_raised": self.cells_raised,
            "totals": {"passed": totals.passed, "visible": totals.visible, "hidden_only": totals.hidden_only,
                       "needs_gpu": totals.needs_gpu, "by_ta": totals.by_ta},
            "file_checks": [{"ok": c.ok, "what": c.what, "detail": c.detail} for c in self.file_checks],
            "exercises": [{"grade_id": ex.grade_id, "status": ex.status, "message": ex.message,
                           "unchanged": ex.unchanged, "points": ex.points, "hidden_points": ex.hidden_points,
                           "points_passed": ex.points_passed, "ta_points": ex.ta_points,
                           "tests": [{"grade_id": t.grade_id, "points": t.points, "status": t.status,
                                      "message": t.message, "visible": t.visible, "ename": t.ename}
                                     for t in ex.tests],
                           "example_errors": [error.to_dict() for error in ex.example_errors]}
                          for ex in self.exercises],
            "other_errors": [error.to_dict() for error in self.other_errors],
        }

    def __repr__(self) -> str:   # what a notebook cell shows after the printed report: one line
        return f"CheckReport({self.path.name}: {self.totals.text()}; ready to hand in: {'yes' if self.ready else 'no'})"


# --------------------------------------------------------------------------------------------
# The file
# --------------------------------------------------------------------------------------------


def _locate(path: Path, notebook, manifest: dict) -> tuple[str | None, str | None, list[FileCheck]]:
    """(lab, release notebook) this file is, and the name and folder checks."""
    stem, folder = path.stem, path.resolve().parent.name
    named = [lab for lab, notebooks in manifest.items() if stem in notebooks]
    if named:
        lab = folder if folder in named else named[0]
        checks = [FileCheck(True, "name", f"{path.name} is a chapter of {lab}")]
    else:
        from course_lib.handin.notebooks import nbgrader_meta

        ids = {nbgrader_meta(cell).get("grade_id") for cell in notebook.cells} - {None} if notebook else set()
        overlap = {(lab, name): len(ids & {cell["grade_id"] for cell in cells})
                   for lab, notebooks in manifest.items() for name, cells in notebooks.items()}
        best = max(overlap, key=overlap.get, default=None)
        if best is None or overlap[best] == 0:
            known = ", ".join(f"{lab}/{name}.ipynb" for lab, notebooks in manifest.items() for name in notebooks)
            return None, None, [FileCheck(False, "name", f"{path.name} is no notebook of this kit (the grader "
                                                         f"looks for: {known or 'none'})")]
        lab, stem = best
        checks = [FileCheck(False, "name", f"{path.name} is chapter {stem} of {lab} renamed: rename it back to "
                                           f"{stem}.ipynb (the grader looks for that name only)")]
    if folder == lab:
        checks.append(FileCheck(True, "folder", f"it is in a folder named {lab}"))
    else:
        checks.append(FileCheck(False, "folder", f"it is in a folder named {folder!r}; the grader expects "
                                                 f"<student id>/{lab}/{stem}.ipynb"))
    return lab, stem, checks


def _cell_checks(notebook, release: list[NotebookCell]) -> list[FileCheck]:
    from nbgrader.utils import compute_checksum

    from course_lib.handin.notebooks import nbgrader_meta

    seen: dict[str, int] = {}
    by_id = {}
    for cell in notebook.cells:
        grade_id = nbgrader_meta(cell).get("grade_id")
        if grade_id:
            seen[grade_id] = seen.get(grade_id, 0) + 1
            by_id.setdefault(grade_id, cell)
    checks = []
    copied = sorted(grade_id for grade_id, count in seen.items() if count > 1)
    if copied:
        checks.append(FileCheck(False, "copied cells", f"{', '.join(copied)} appear more than once (a copied cell "
                                                       "keeps its grading id, and nbgrader refuses the notebook): "
                                                       "delete the copies"))
    tests = [cell for cell in release if cell["kind"] == "test"]
    deleted = [cell["grade_id"] for cell in tests if cell["grade_id"] not in by_id]
    edited = [cell["grade_id"] for cell in tests
              if cell["grade_id"] in by_id and cell["checksum"] and compute_checksum(by_id[cell["grade_id"]]) != cell["checksum"]]
    if deleted or edited:
        parts = ([f"edited: {', '.join(edited)}"] if edited else []) + ([f"deleted: {', '.join(deleted)}"] if deleted else [])
        checks.append(FileCheck(False, "test cells", "; ".join(parts) + ". The grader puts the released test "
                                "cells back, so edits change nothing there; take the cells back from the release "
                                "(JupyterLab: Edit > Undo, or copy them from a fresh kit) so this file matches"))
    else:
        checks.append(FileCheck(True, "test cells", f"all {len(tests)} as released"))
    missing_answers = [cell["grade_id"] for cell in release
                       if cell["kind"] in ("answer", "written") and cell["grade_id"] not in by_id]
    if missing_answers:
        checks.append(FileCheck(False, "answer cells", f"deleted: {', '.join(missing_answers)} (write your answer in "
                                                       "the released cell: a new cell is not graded)"))
    return checks


def inspect_file(path: Path, manifest: dict | None = None):
    """(notebook or None, lab, release notebook name, checks) for the file at ``path``; runs nothing."""
    from course_lib.handin.notebooks import MalformedNotebook, read_notebook

    manifest = load_manifest() if manifest is None else manifest
    path = Path(path)
    try:
        notebook = read_notebook(path)
        json_check = FileCheck(True, "JSON", "a valid notebook (nbformat 4)")
    except MalformedNotebook as error:
        notebook, json_check = None, FileCheck(False, "JSON", f"{error}; the grader scores it zero. Open it in "
                                                              "JupyterLab and save it again, or start again from the kit")
    lab, name, checks = _locate(path, notebook, manifest)
    if notebook is not None and lab is not None:
        checks += _cell_checks(notebook, manifest[lab][name])
    return notebook, lab, name, [*checks, json_check]


# --------------------------------------------------------------------------------------------
# The visible tests
# --------------------------------------------------------------------------------------------


def _error_outputs(outputs: list[dict]) -> list[dict]:
    return [output for output in outputs if output.get("output_type") == "error"]


def has_visible_checks(source: str) -> bool:
    """Whether a released test cell checks anything itself (a hidden-only cell is imports and a comment)."""
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return True
    return any(not isinstance(node, (ast.Import, ast.ImportFrom, ast.Pass))
               and not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)) for node in tree.body)


@dataclass
class _Outcome:
    status: str
    message: str = ""
    ename: str = ""


def _test_outcome(outputs: list[dict], visible: bool, cell_name: str, source: str, answers: AnswerCells,
                  failed: FailedCells | None = None) -> _Outcome:
    errors = _error_outputs(outputs)
    if not errors:
        return _Outcome(PASSED if visible else HIDDEN_ONLY)
    error = errors[-1]
    ename, evalue = error.get("ename", "Error"), str(error.get("evalue", "")).strip()
    if ename == "NeedsGPU":
        return _Outcome(SKIPPED_GPU, evalue, ename)
    blamed = None if ename in ("CheckFailed", "AssertionError", "OffTheRecord") else \
        blame(error, cell_name, source, answers, failed)
    if blamed is not None and blamed.kind in (EARLIER, KNOCK_ON):   # not this chapter's answers: it could not run
        return _Outcome(BLOCKED, blamed.text(), ename)
    if ename == "NotImplementedError":
        return _Outcome(NOT_ATTEMPTED, f"NotImplementedError{': ' + evalue if evalue else ''}", ename)
    message = f"{ename}: {evalue}" if evalue else ename
    if blamed is not None and blamed.kind == ANSWER and blamed.evidence == "traceback":   # a crash: whose code
        message += f"\n(raised in your `{blamed.function}`, answer cell '{blamed.answer}')"
    return _Outcome(FAILED, message, ename)


def _workdir(path: Path, lab: str | None, scratch: Path, chapters: tuple[str, ...] = ()) -> Path:
    """A scratch copy of the notebook's lab folder: its files and the lab's other saved notebooks.

    The other notebooks come along because a later chapter imports an earlier chapter's answers from
    its saved file (``course_lib.chapters.answers_from``), as it does in JupyterLab and when graded.
    A notebook in a folder of another name gets the lab's chapters found beside it (``chapters``:
    their stems), and nothing else of that folder.
    """
    workdir = scratch / (lab or "notebook")
    folder = path.resolve().parent
    if lab is not None and folder.name == lab:
        shutil.copytree(folder, workdir, symlinks=False,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", ".*"))
    else:
        workdir.mkdir()
        for chapter in chapters:
            sibling = folder / f"{chapter}.ipynb"
            if sibling.is_file() and sibling.resolve() != path.resolve():
                shutil.copyfile(sibling, workdir / sibling.name)
    return workdir


ANSWERS_FROM = re.compile(r"""answers_from\(\s*["'](?P<chapter>[^"']+?)(?:\.ipynb)?["']""")


def earlier_chapter_notes(path: Path, notebook, lab: str | None, manifest: dict) -> list[str]:
    """One line for each earlier chapter this notebook reads with ``answers_from`` that cannot give it what
    it needs: not beside it, or with answers still as released there."""
    from nbgrader.utils import compute_checksum

    from course_lib.handin.notebooks import MalformedNotebook, nbgrader_meta, read_notebook

    wanted = dict.fromkeys(match["chapter"] for cell in notebook.cells if cell.cell_type == "code"
                           for match in ANSWERS_FROM.finditer(cell.source))
    release = manifest.get(lab, {}) if lab else {}
    notes = []
    for chapter in wanted:
        beside = path.resolve().parent / f"{chapter}.ipynb"
        if not beside.is_file():
            where = f"labs/{lab}/" if lab else "the lab's folder"
            notes.append(f"this notebook runs your answers of {chapter}.ipynb (answers_from), which is not in its "
                         f"folder ({path.resolve().parent}): check it in {where}, beside its earlier chapters. Cells "
                         "that need those answers could not run here, and no answer of this chapter is blamed for "
                         "them.")
            continue
        released = {cell["grade_id"]: cell.get("checksum") for cell in release.get(chapter, []) if cell["kind"] == "answer"}
        try:
            earlier = read_notebook(beside)
        except MalformedNotebook:
            notes.append(f"this notebook runs your answers of {chapter}.ipynb (answers_from), which is not a readable "
                         "notebook: open it in JupyterLab and save it again.")
            continue
        unwritten = [cell for cell in earlier.cells if nbgrader_meta(cell).get("solution")
                     and not nbgrader_meta(cell).get("grade")
                     and released.get(nbgrader_meta(cell).get("grade_id")) == compute_checksum(cell)]
        names = [name for cell in unwritten for name in defined_names(cell.source)]
        used = [name for name in names if any(re.search(rf"\b{re.escape(name)}\b", cell.source)
                                              for cell in notebook.cells if cell.cell_type == "code")]
        names = used or names
        if names:
            shown = ", ".join(f"`{name}`" for name in names[:4]) + (" ..." if len(names) > 4 else "")
            notes.append(f"this notebook runs your {shown} of {chapter}.ipynb (answers_from), still as released there: "
                         f"write {chapter} first. Cells that need it could not run here, and no answer of this chapter "
                         "is blamed for them.")
    return notes


@dataclass
class VisibleRun:
    """What running a notebook's cells found: test outcomes by grade_id, the other cells that raised."""

    results: dict[str, _Outcome]
    other_errors: list[CellError]
    seconds: float
    cells_run: int = 0
    cells_raised: int = 0


def run_visible_tests(path: Path, notebook, release: list[NotebookCell] | None, *, lab: str | None = None,
                      timeout: float = 300, gpu: bool | None = None,
                      on_cell: Callable[[int, int], None] | None = None) -> VisibleRun:
    """Run every code cell of ``notebook`` in a fresh kernel, top to bottom (module docstring).

    Test cells run as released (``release``'s sources) where the manifest knows them; GPU-only test
    cells are skipped on a machine without a GPU, as the grader does. An error of any other cell is
    blamed on the answer it came from, where the traceback or the message shows one (``blame``).
    """
    import course_lib
    from nbgrader.utils import compute_checksum

    from course_lib.handin.notebooks import cell_label, gpu_available, nbgrader_meta
    from course_lib.runner.sandbox import NONE, Isolation
    from course_lib.runner.student import KernelDied, StudentKernel

    gpu = gpu_available() if gpu is None else gpu
    released = {cell["grade_id"]: cell for cell in release or [] if cell["kind"] == "test"}
    released_answers = {cell["grade_id"]: cell.get("checksum") for cell in release or [] if cell["kind"] == "answer"}
    edition = Path(course_lib.__file__).resolve().parent.parent
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    results: dict[str, _Outcome] = {}
    other_errors: list[CellError] = []
    answers = AnswerCells()
    failed = FailedCells()
    raised = 0
    started = time.perf_counter()
    chapters = tuple(sorted({match["chapter"] for cell in code_cells for match in ANSWERS_FROM.finditer(cell.source)}))
    with tempfile.TemporaryDirectory(prefix="course-check-") as scratch:
        workdir = _workdir(Path(path), lab, Path(scratch), chapters)
        kernel = StudentKernel(edition=edition, workdir=workdir, gpu=gpu, isolation=Isolation(NONE, "course check"),
                               environment={INSIDE_CHECK: "1"})
        with kernel:
            died = None
            for done, cell in enumerate(code_cells):
                meta = nbgrader_meta(cell)
                grade_id = meta.get("grade_id") if meta.get("grade") else None
                if died is not None:
                    if grade_id:
                        results[grade_id] = _Outcome(NOT_RUN, f"not run: the kernel died in {died}")
                    continue
                source = released[grade_id]["source"] if grade_id in released else cell.source
                if grade_id and released.get(grade_id, {}).get("needs_gpu") and not gpu:
                    results[grade_id] = _Outcome(SKIPPED_GPU, "this machine has no GPU (the grader skips it there too)")
                    continue
                try:
                    reply = kernel.run_cell(source, timeout)
                except KernelDied as error:
                    died = cell_label(cell)
                    reply = {"outputs": [{"output_type": "error", "ename": "KernelDied", "evalue": str(error)}]}
                outputs = reply["outputs"]
                errors = _error_outputs(outputs)
                raised += bool(errors)
                if meta.get("solution") and not grade_id:
                    checksum = released_answers.get(meta.get("grade_id"))
                    answers.ran(meta.get("grade_id"), source, reply.get("execution_count"),
                                unchanged=bool(checksum) and compute_checksum(cell) == checksum)
                if grade_id:
                    results[grade_id] = _test_outcome(outputs, has_visible_checks(source), cell_label(cell), source,
                                                      answers, failed)
                elif errors:
                    blamed = [blame(error, cell_label(cell), source, answers, failed) for error in errors]
                    other_errors += blamed
                    failed.add(cell_label(cell), source, blamed[-1])
                else:
                    failed.ran(source)
                if on_cell:
                    on_cell(done + 1, len(code_cells))
    return VisibleRun(results, other_errors, time.perf_counter() - started, len(code_cells), raised)


def _exercises(notebook, release: list[NotebookCell] | None, run: VisibleRun) -> list[ExerciseResult]:
    """Group test results under the answer cell above them (the release's order, else the file's)."""
    from nbgrader.utils import compute_checksum

    from course_lib.handin.notebooks import is_written_answer, nbgrader_meta

    if release is None:
        release = []
        for cell in notebook.cells:
            meta = nbgrader_meta(cell)
            if meta.get("solution") or meta.get("grade"):
                kind = "written" if is_written_answer(cell) else "test" if meta.get("grade") else "answer"
                entry = {"grade_id": meta["grade_id"], "kind": kind, "points": float(meta.get("points") or 0),
                         "checksum": ""}
                if meta.get("grade"):
                    entry["source"] = cell.source
                release.append(entry)
    student_cells = {nbgrader_meta(cell).get("grade_id"): cell for cell in notebook.cells}
    exercises: list[ExerciseResult] = []
    for cell in release:
        if cell["kind"] == "written":
            exercises.append(_written_answer(cell, student_cells.get(cell["grade_id"])))
            continue
        if cell["kind"] == "answer":
            answer = student_cells.get(cell["grade_id"])
            unchanged = bool(answer is not None and cell["checksum"] and compute_checksum(answer) == cell["checksum"])
            exercises.append(ExerciseResult(cell["grade_id"], [], NO_TESTS, unchanged=unchanged))
            continue
        code_answers = [exercise for exercise in exercises if not exercise.ta_points]
        if not code_answers:   # a test cell above every answer cell: its own line
            code_answers.append(ExerciseResult("(before any answer cell)", [], NO_TESTS))
            exercises.append(code_answers[-1])
        outcome = run.results.get(cell["grade_id"], _Outcome(NOT_RUN, "not run: the cell is not in this file"))
        visible = has_visible_checks(cell.get("source") or "") if "source" in cell else True
        code_answers[-1].tests.append(TestCellResult(cell["grade_id"], cell["points"], outcome.status, outcome.message,
                                                     visible, outcome.ename))
    by_id = {exercise.grade_id: exercise for exercise in exercises}
    for error in run.other_errors:
        if error.kind == ANSWER and error.answer in by_id:
            by_id[error.answer].example_errors.append(error)
    for exercise in exercises:
        if not exercise.ta_points:
            exercise.status, exercise.message = _exercise_status(exercise)
    return exercises


def _written_answer(release_cell: NotebookCell, cell) -> ExerciseResult:
    """A written answer: no test can judge it; a TA grades it with a rubric once handed in."""
    from course_lib.handin.notebooks import is_blank_answer

    points = float(release_cell["points"]) or 0.0
    written = ExerciseResult(release_cell["grade_id"], [], BY_TA, ta_points=points)
    if cell is None:
        written.status, written.message = NOT_ATTEMPTED, "the cell is not in this file: write your answer in the released cell"
    elif is_blank_answer(cell.source):
        written.status, written.message, written.unchanged = NOT_ATTEMPTED, "your answer is still as released", True
    else:
        written.message = f"{_points(points)} points, from a rubric, after you hand it in; no check here can judge it"
    return written


def _exercise_status(exercise: ExerciseResult) -> tuple[str, str]:
    counted = [test for test in exercise.tests if test.status != SKIPPED_GPU]
    visible = [test for test in counted if test.visible]
    broken = f"{exercise.example_errors[0].text()}" if exercise.example_errors else ""
    if not exercise.tests:
        return (FAILED, broken) if broken else (NO_TESTS, "later test cells use it")
    if not counted:
        return SKIPPED_GPU, "its test cells need a GPU"
    ran = [test for test in counted if test.status != BLOCKED]
    if (ran and all(test.status == NOT_ATTEMPTED for test in ran)) or (exercise.unchanged and not visible):
        why = "the answer cell is as released" if exercise.unchanged else "your code still raises NotImplementedError"
        return NOT_ATTEMPTED, why
    passed = sum(test.status == PASSED for test in visible)
    failing = next((test for test in ran if test.status not in (PASSED, HIDDEN_ONLY)), None)
    if failing is not None:
        return FAILED, f"{failing.grade_id} ({passed} of {len(visible)} visible test cells pass): {failing.message}"
    if broken:
        return FAILED, f"its visible tests pass, but {broken}" if visible else broken
    blocked = next((test for test in counted if test.status == BLOCKED), None)
    if blocked is not None:
        return BLOCKED, f"{passed} of {len(visible)} visible test cells pass; {blocked.grade_id}: {blocked.message}"
    hidden = sum(test.points for test in counted if not test.visible)
    if not visible:
        return HIDDEN_ONLY, f"{_points(hidden)} points: no visible check, the hidden tests decide them"
    later = f"; {_points(hidden)} more points with hidden inputs only" if hidden else ""
    return PASSED, f"{len(visible)} visible test cell{'s' if len(visible) > 1 else ''}{later}"


# --------------------------------------------------------------------------------------------
# The whole check, and its report
# --------------------------------------------------------------------------------------------


def check_notebook(path, *, timeout: float = 300, gpu: bool | None = None, manifest: dict | None = None,
                   show: bool = True, progress: bool = True) -> CheckReport | None:
    """Check the saved file at ``path`` (see the module docstring); prints the report when ``show``.

    Returns the report (None when called inside a check's own kernel, where it does nothing).
    """
    path = Path(path)
    if os.environ.get(INSIDE_CHECK):
        print("course check: skipped (this cell runs inside a check of the notebook)")
        return None
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such notebook file (save the notebook first, and give its path "
                                f"relative to {Path.cwd()})")
    manifest = load_manifest() if manifest is None else manifest
    notebook, lab, name, file_checks = inspect_file(path, manifest)
    report = CheckReport(path, lab, name, file_checks)
    if notebook is None:
        report.note = "not run: the file is not a readable notebook"
    else:
        release = manifest[lab][name] if lab else None
        bar = _progress_bar(progress, sum(cell.cell_type == "code" for cell in notebook.cells))
        try:
            run = run_visible_tests(path, notebook, release, lab=lab, timeout=timeout, gpu=gpu,
                                    on_cell=(lambda done, total: bar.update(1)) if bar else None)
        finally:
            if bar:
                bar.close()
        report.ran, report.seconds, report.other_errors = True, run.seconds, run.other_errors
        report.cells_run, report.cells_raised = run.cells_run, run.cells_raised
        report.notes = earlier_chapter_notes(path, notebook, lab, manifest)
        report.exercises = _exercises(notebook, release, run)
    if show:
        print(report.text())
    return report


def _progress_bar(enabled: bool, total: int):
    if not enabled:
        return None
    from tqdm.auto import tqdm

    return tqdm(total=total, desc="course check: running cells", unit="cell", leave=False)


def _points(value: float) -> str:
    return f"{value:g}"


def _points_column(exercise: ExerciseResult) -> str:
    """Visible points, and in brackets the points only hidden tests decide: "3", "(2)", "3 +2"; a written
    answer's points are a TA's: "4 TA"."""
    if exercise.ta_points:
        return f"{_points(exercise.ta_points)} TA"
    if exercise.points and exercise.hidden_points:
        return f"{_points(exercise.points)} +{_points(exercise.hidden_points)}"
    if exercise.hidden_points:
        return f"({_points(exercise.hidden_points)})"
    return _points(exercise.points)


_OTHER_ERROR_NOTES = {
    EARLIER: "they need an earlier chapter's answers: see the NOTE at the top",
    KNOCK_ON: "knock-on errors: each names the cell that failed first, the one to fix",
    NOT_WRITTEN: "they run once you write the exercise they use",
    LOCKED: "the course's code reached a part this kit does not ship yet: not your fault, tell your instructor",
    EXAMPLE: "a worked example or experiment that stopped; read its message",
}


def format_report(report: CheckReport) -> str:
    from course_lib.exercises import lab_title

    saved = datetime.fromtimestamp(report.path.stat().st_mtime).strftime("%H:%M:%S") if report.path.exists() else "?"
    lines = [f"course check: {report.path} (as saved at {saved})"]
    if report.ran:
        where = f"{lab_title(report.lab)} chapter {report.notebook}" if report.lab else "this notebook"
        raised = (f"{report.cells_raised} of them raised (below)" if report.cells_raised else "none raised")
        lines.append(f"{where}: its {report.cells_run} code cells ran in a fresh kernel in {report.seconds:.1f} s; "
                     f"{raised}")
        lines += [f"NOTE: {note}" for note in report.notes]
        lines.append("")
        width = max([len("exercise"), *(len(ex.grade_id) for ex in report.exercises)])
        lines.append(f"  {'exercise':<{width}}  {'points':>6}  result")
        for exercise in report.exercises:
            message_lines = exercise.message.splitlines() or [""]
            head = f"{exercise.status}" + (f": {message_lines[0]}" if message_lines[0] else "")
            if exercise.status in (PASSED, NOT_ATTEMPTED, NO_TESTS, SKIPPED_GPU, HIDDEN_ONLY, BY_TA) and message_lines[0]:
                head = f"{exercise.status} ({message_lines[0]})"
            lines.append(f"  {exercise.grade_id:<{width}}  {_points_column(exercise):>6}  {head}")
            for extra in message_lines[1:] if exercise.status in (FAILED, BLOCKED) else []:
                lines.append(f"  {'':<{width}}  {'':>6}    {extra.strip()}")
        totals = report.totals
        lines.append(f"\nTotal: {totals.text()}." + (
            " In the points column, (N) and +N are points no visible check decides: the hidden tests decide them "
            "when your work is graded." if totals.hidden_only else "") + (
            " N TA: a written answer, graded by your TA with a rubric after you hand it in (a blank one scores 0)."
            if totals.by_ta else "")
            + " Grading also runs hidden tests with other inputs on every exercise.")
        unblamed = [error for error in report.other_errors if error.kind != ANSWER]
        blamed = [error for error in report.other_errors if error.kind == ANSWER]
        if blamed:
            lines.append("Cells that failed because of your answers (fix these: the grader runs the same cells):")
            lines += [f"  {error.text()}" for error in blamed[:8]]
        for kind, note in _OTHER_ERROR_NOTES.items():
            errors = [error for error in unblamed if error.kind == kind]
            if errors:
                lines.append(f"Other cells that raised ({note}):")
                lines += [f"  {error.text()}" for error in errors[:8]]
                if len(errors) > 8:
                    lines.append(f"  ... and {len(errors) - 8} more")
    elif report.note:
        lines.append(report.note)
    lines.append(f"\nThe file to hand in? {'yes' if report.ready else 'NO'}")
    for check in report.file_checks:
        lines.append(f"  {'ok ' if check.ok else 'FIX'}  {check.what}: {check.detail}")
    if report.ready:
        lines.append(f"Hand it in as <student id>/{report.lab}/{report.notebook}.ipynb: "
                     "`course submit --student <student id> --zip` packs it (see README.md).")
    return "\n".join(lines)
