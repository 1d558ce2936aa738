"""``course check``: run a notebook's visible tests in a fresh kernel and say whether it is ready to hand in.

What nbgrader's "Validate" does, in the course's words. Two parts:

- **the file** (``inspect_file``, no kernel needed): valid notebook JSON; a name and a folder the
  grader expects (``<lab>/<notebook>.ipynb`` as released); every test cell present and as released
  (the checksums of the release manifest, ``manifest``); no cell copied with its nbgrader id (two
  cells with one id stop nbgrader);
- **the visible tests** (``run_visible_tests``): every code cell runs, top to bottom, in a fresh
  kernel on this edition of ``course_lib`` (what JupyterLab's "Restart and run all" does), the
  test cells as released. Each exercise (an answer cell and the test cells under it) is then
  *passed*, *failed* with the check's message (expected, got, hint), *not attempted* (its tests
  stop at ``NotImplementedError``: the cell is still the release's stub) or *skipped: needs a GPU*,
  with the points its test cells are worth.

``check_notebook(path)`` does both and prints the report; it is also what a notebook cell calls
(``from course_lib.handin import check_notebook; check_notebook("04_paging.ipynb")``). Visible
tests pass or fail exactly as in JupyterLab; the grader also runs hidden tests with other inputs.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

from course_lib.handin.manifest import NotebookCell, load_manifest

__all__ = ["CheckReport", "ExerciseResult", "FileCheck", "TestCellResult", "check_notebook", "inspect_file",
           "run_visible_tests"]

# Set in the kernel that `course check` runs, so a notebook cell that calls check_notebook does not
# start a check of its own (which would run the notebook again, and again...).
INSIDE_CHECK = "COURSE_CHECK_RUNNING"

PASSED, FAILED, NOT_ATTEMPTED, SKIPPED_GPU, NOT_RUN, NO_TESTS = (
    "passed", "failed", "not attempted", "skipped: needs a GPU", "not run", "no test cell of its own")


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


@dataclass
class ExerciseResult:
    """An answer cell and the test cells under it."""

    grade_id: str
    tests: list[TestCellResult]
    status: str
    message: str = ""
    unchanged: bool = False   # the answer cell is exactly as released

    @property
    def points(self) -> float:
        """Points at stake: the test cells that count on this machine (GPU-only ones need a GPU)."""
        return sum(test.points for test in self.tests if test.status != SKIPPED_GPU)

    @property
    def points_passed(self) -> float:
        return sum(test.points for test in self.tests if test.status == PASSED)


@dataclass(repr=False)
class CheckReport:
    path: Path
    lab: str | None = None
    notebook: str | None = None
    file_checks: list[FileCheck] = field(default_factory=list)
    exercises: list[ExerciseResult] = field(default_factory=list)
    other_errors: list[str] = field(default_factory=list)   # cells that are no test cell and raised
    seconds: float = 0.0
    ran: bool = False
    note: str = ""

    @property
    def ready(self) -> bool:
        """The file is the one to hand in: right name and folder, valid, test cells as released."""
        return bool(self.file_checks) and all(check.ok for check in self.file_checks)

    @property
    def all_passed(self) -> bool:
        return self.ran and all(ex.status in (PASSED, SKIPPED_GPU, NO_TESTS) for ex in self.exercises)

    def text(self) -> str:
        return format_report(self)

    def __repr__(self) -> str:   # what a notebook cell shows after the printed report: one line
        passed = sum(ex.points_passed for ex in self.exercises)
        stake = sum(ex.points for ex in self.exercises)
        return (f"CheckReport({self.path.name}: visible tests worth {passed:g} of {stake:g} points pass; "
                f"ready to hand in: {'yes' if self.ready else 'no'})")


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
        from course_lib.grading.notebooks import nbgrader_meta

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

    from course_lib.grading.notebooks import nbgrader_meta

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
    missing_answers = [cell["grade_id"] for cell in release if cell["kind"] == "answer" and cell["grade_id"] not in by_id]
    if missing_answers:
        checks.append(FileCheck(False, "answer cells", f"deleted: {', '.join(missing_answers)} (write your answer in "
                                                       "the released cell: a new cell is not graded)"))
    return checks


def inspect_file(path: Path, manifest: dict | None = None):
    """(notebook or None, lab, release notebook name, checks) for the file at ``path``; runs nothing."""
    from course_lib.grading.notebooks import MalformedNotebook, read_notebook

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


def _test_status(outputs: list[dict]) -> tuple[str, str]:
    errors = _error_outputs(outputs)
    if not errors:
        return PASSED, ""
    error = errors[-1]
    ename, evalue = error.get("ename", "Error"), str(error.get("evalue", "")).strip()
    if ename == "NeedsGPU":
        return SKIPPED_GPU, evalue
    if ename == "NotImplementedError":
        return NOT_ATTEMPTED, f"NotImplementedError{': ' + evalue if evalue else ''}"
    return FAILED, f"{ename}: {evalue}" if evalue else ename


def _workdir(path: Path, lab: str | None, scratch: Path) -> Path:
    """A scratch copy of the notebook's lab folder: its files and the lab's other saved notebooks.

    The other notebooks come along because a later chapter imports an earlier chapter's answers from
    its saved file (``course_lib.chapters.answers_from``), as it does in JupyterLab and when graded.
    """
    workdir = scratch / (lab or "notebook")
    if lab is not None and path.resolve().parent.name == lab:
        shutil.copytree(path.resolve().parent, workdir, symlinks=False,
                        ignore=shutil.ignore_patterns(".ipynb_checkpoints", "__pycache__", ".*"))
    else:
        workdir.mkdir()
    return workdir


def run_visible_tests(path: Path, notebook, release: list[NotebookCell] | None, *, lab: str | None = None,
                      timeout: float = 300, gpu: bool | None = None,
                      on_cell: Callable[[int, int], None] | None = None):
    """Run every code cell of ``notebook`` in a fresh kernel; returns (test results by grade_id, other errors, s).

    Test cells run as released (``release``'s sources) where the manifest knows them; GPU-only test
    cells are skipped on a machine without a GPU, as the grader does.
    """
    import course_lib
    from course_lib.grading.layout import gpu_available
    from course_lib.grading.notebooks import cell_label, nbgrader_meta
    from course_lib.grading.sandbox import NONE, Isolation
    from course_lib.grading.student import KernelDied, StudentKernel

    gpu = gpu_available() if gpu is None else gpu
    released = {cell["grade_id"]: cell for cell in release or [] if cell["kind"] == "test"}
    edition = Path(course_lib.__file__).resolve().parent.parent
    code_cells = [(index, cell) for index, cell in enumerate(notebook.cells) if cell.cell_type == "code"]
    results: dict[str, tuple[str, str]] = {}
    other_errors: list[str] = []
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="course-check-") as scratch:
        workdir = _workdir(Path(path), lab, Path(scratch))
        kernel = StudentKernel(edition=edition, workdir=workdir, gpu=gpu, isolation=Isolation(NONE, "course check"),
                               environment={INSIDE_CHECK: "1"})
        with kernel:
            died = None
            for done, (index, cell) in enumerate(code_cells):
                meta = nbgrader_meta(cell)
                grade_id = meta.get("grade_id") if meta.get("grade") else None
                if died is not None:
                    if grade_id:
                        results[grade_id] = (NOT_RUN, f"not run: the kernel died in {died}")
                    continue
                source = released[grade_id]["source"] if grade_id in released else cell.source
                if grade_id and released.get(grade_id, {}).get("needs_gpu") and not gpu:
                    results[grade_id] = (SKIPPED_GPU, "this machine has no GPU (the grader skips it there too)")
                    continue
                try:
                    outputs = kernel.run_cell(source, timeout)["outputs"]
                except KernelDied as error:
                    died = cell_label(cell, index)
                    outputs = [{"output_type": "error", "ename": "KernelDied", "evalue": str(error)}]
                if grade_id:
                    results[grade_id] = _test_status(outputs)
                else:
                    for error in _error_outputs(outputs):
                        first = (str(error.get("evalue", "")).strip().splitlines() or [""])[0]
                        other_errors.append(f"{cell_label(cell, index)}: {error.get('ename')}: {first}"[:200])
                if on_cell:
                    on_cell(done + 1, len(code_cells))
    return results, other_errors, time.perf_counter() - started


def _exercises(notebook, release: list[NotebookCell] | None, results: dict[str, tuple[str, str]]) -> list[ExerciseResult]:
    """Group test results under the answer cell above them (the release's order, else the file's)."""
    from nbgrader.utils import compute_checksum

    from course_lib.grading.notebooks import nbgrader_meta

    if release is None:
        release = []
        for cell in notebook.cells:
            meta = nbgrader_meta(cell)
            if meta.get("solution") or meta.get("grade"):
                release.append({"grade_id": meta["grade_id"], "kind": "test" if meta.get("grade") else "answer",
                                "points": float(meta.get("points") or 0), "checksum": ""})
    student_cells = {nbgrader_meta(cell).get("grade_id"): cell for cell in notebook.cells}
    exercises: list[ExerciseResult] = []
    for cell in release:
        if cell["kind"] == "answer":
            answer = student_cells.get(cell["grade_id"])
            unchanged = bool(answer is not None and cell["checksum"] and compute_checksum(answer) == cell["checksum"])
            exercises.append(ExerciseResult(cell["grade_id"], [], NO_TESTS, unchanged=unchanged))
            continue
        if not exercises:   # a test cell above every answer cell: its own line
            exercises.append(ExerciseResult("(before any answer cell)", [], NO_TESTS))
        status, message = results.get(cell["grade_id"], (NOT_RUN, "not run: the cell is not in this file"))
        exercises[-1].tests.append(TestCellResult(cell["grade_id"], cell["points"], status, message))
    for exercise in exercises:
        exercise.status, exercise.message = _exercise_status(exercise)
    return exercises


def _exercise_status(exercise: ExerciseResult) -> tuple[str, str]:
    counted = [test for test in exercise.tests if test.status != SKIPPED_GPU]
    if not exercise.tests:
        return NO_TESTS, "later test cells use it"
    if not counted:
        return SKIPPED_GPU, "its test cells need a GPU"
    if all(test.status == PASSED for test in counted):
        return PASSED, f"{len(counted)} test cell{'s' if len(counted) > 1 else ''}"
    if all(test.status == NOT_ATTEMPTED for test in counted):
        why = "the answer cell is as released" if exercise.unchanged else "your code still raises NotImplementedError"
        return NOT_ATTEMPTED, why
    failing = next(test for test in counted if test.status != PASSED)
    passed = sum(test.status == PASSED for test in counted)
    return FAILED, f"{failing.grade_id} ({passed} of {len(counted)} test cells pass): {failing.message}"


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
            results, report.other_errors, report.seconds = run_visible_tests(
                path, notebook, release, lab=lab, timeout=timeout, gpu=gpu,
                on_cell=(lambda done, total: bar.update(1)) if bar else None)
        finally:
            if bar:
                bar.close()
        report.ran = True
        report.exercises = _exercises(notebook, release, results)
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


def format_report(report: CheckReport) -> str:
    from course_lib.exercises import lab_title

    saved = datetime.fromtimestamp(report.path.stat().st_mtime).strftime("%H:%M:%S") if report.path.exists() else "?"
    lines = [f"course check: {report.path} (as saved at {saved})"]
    if report.ran:
        where = f"{lab_title(report.lab)} chapter {report.notebook}" if report.lab else "this notebook"
        lines.append(f"{where}: every cell ran in a fresh kernel in {report.seconds:.1f} s\n")
        width = max([len("exercise"), *(len(ex.grade_id) for ex in report.exercises)])
        lines.append(f"  {'exercise':<{width}}  points  result")
        for exercise in report.exercises:
            message_lines = exercise.message.splitlines() or [""]
            head = f"{exercise.status}" + (f": {message_lines[0]}" if message_lines[0] else "")
            if exercise.status in (PASSED, NOT_ATTEMPTED, NO_TESTS, SKIPPED_GPU) and message_lines[0]:
                head = f"{exercise.status} ({message_lines[0]})"
            lines.append(f"  {exercise.grade_id:<{width}}  {_points(exercise.points):>6}  {head}")
            for extra in message_lines[1:] if exercise.status == FAILED else []:
                lines.append(f"  {'':<{width}}  {'':>6}    {extra.strip()}")
        stake = sum(ex.points for ex in report.exercises)
        passed = sum(ex.points_passed for ex in report.exercises)
        gpu_points = sum(t.points for ex in report.exercises for t in ex.tests if t.status == SKIPPED_GPU)
        lines.append(f"\nVisible tests: test cells worth {_points(passed)} of {_points(stake)} points pass"
                     + (f" ({_points(gpu_points)} more need a GPU)" if gpu_points else "")
                     + ". Grading also runs hidden tests with other inputs.")
        if report.other_errors:
            lines.append("Other cells that raised (a worked example stops when an exercise it uses is not done):")
            lines += [f"  {error}" for error in report.other_errors[:8]]
            if len(report.other_errors) > 8:
                lines.append(f"  ... and {len(report.other_errors) - 8} more")
    elif report.note:
        lines.append(report.note)
    lines.append(f"\nThe file to hand in? {'yes' if report.ready else 'NO'}")
    for check in report.file_checks:
        lines.append(f"  {'ok ' if check.ok else 'FIX'}  {check.what}: {check.detail}")
    if report.ready:
        lines.append(f"Hand it in as <student id>/{report.lab}/{report.notebook}.ipynb: "
                     "`course submit --student <student id> --zip` packs it (see README.md).")
    return "\n".join(lines)
