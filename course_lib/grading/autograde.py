"""Autograding a folder of submissions: ``SUBMISSIONS/<student>/<lab>/<notebook>.ipynb``.

For each lab the release is generated in a grading workspace (which also records the lab's
test cells and points in nbgrader's gradebook). Each student's notebooks are validated, copied
in, and autograded by nbgrader in a process of their own with a time limit, so one hostile
submission cannot stop the batch. Scores come from the gradebook; the reason for every lost
point comes from the autograded notebook's outputs. Feedback HTML is rendered with the hidden
tests scrubbed out.
"""

from __future__ import annotations

import shutil
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat

from course_lib.grading.layout import COURSE_ID, LAB_NAME, SAFE_ID, GradingError, Workspace
from course_lib.grading.notebooks import MalformedNotebook, grade_cells, read_notebook
from course_lib.grading.release import generate_release
from course_lib.grading.results import LabResult, NotebookResult, classify_cell, missing_notebook


@dataclass
class Submission:
    student: str
    lab: str
    folder: Path


@dataclass
class Discovery:
    submissions: list[Submission] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)   # folders that were not graded, and why


def discover_submissions(submissions_dir: Path, known_labs: list[str], only_lab: str | None) -> Discovery:
    """Find <student>/<lab>/ folders; anything else is reported, never fatal."""
    if not submissions_dir.is_dir():
        raise GradingError(f"SUBMISSIONS folder {submissions_dir} does not exist or is not a folder")
    found = Discovery()
    for student_dir in sorted(p for p in submissions_dir.iterdir() if not p.name.startswith(".")):
        if not student_dir.is_dir():
            found.problems.append(f"{student_dir.name}: ignored (a file; expected a folder per student)")
            continue
        if not SAFE_ID.match(student_dir.name):
            found.problems.append(f"{student_dir.name}: ignored (student ids use letters, digits, . _ @ + -)")
            continue
        lab_dirs = sorted(p for p in student_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
        if not lab_dirs:
            found.problems.append(f"{student_dir.name}: no lab folders inside (expected {student_dir.name}/<lab>/)")
        for lab_dir in lab_dirs:
            if only_lab and lab_dir.name != only_lab:
                continue
            if lab_dir.name not in known_labs:
                hint = "" if LAB_NAME.match(lab_dir.name) else " (lab folders are named like lab01-text-to-tensors)"
                found.problems.append(f"{student_dir.name}/{lab_dir.name}: unknown lab{hint}; known: {', '.join(known_labs)}")
                continue
            found.submissions.append(Submission(student_dir.name, lab_dir.name, lab_dir))
    return found


class Grader:
    """Grades submissions lab by lab in one workspace; see ``grade`` for the whole batch."""

    def __init__(self, solutions_dir: Path, out_dir: Path, workspace: Workspace):
        self.solutions_dir = solutions_dir
        self.out_dir = out_dir
        self.workspace = workspace
        self._released: set[str] = set()

    def source_notebooks(self, lab: str) -> dict[str, object]:
        return {path.stem: nbformat.read(path, as_version=4)
                for path in sorted((self.solutions_dir / lab).glob("*.ipynb"))}

    def ensure_released(self, lab: str) -> None:
        if lab not in self._released:
            generate_release(self.solutions_dir, lab, self.workspace)
            self._released.add(lab)

    def grade_one(self, submission: Submission) -> LabResult:
        """Grade one student's lab; every failure mode ends in a LabResult, never an exception."""
        self.ensure_released(submission.lab)
        sources = self.source_notebooks(submission.lab)
        result = LabResult(submission.student, submission.lab)
        staged = self._stage(submission, sources, result)
        timestamp_file = submission.folder / "timestamp.txt"
        if timestamp_file.is_file():
            result.timestamp = timestamp_file.read_text().strip()
        failure = self._autograde(submission) if staged else None
        for name, source in sources.items():
            if name not in staged:
                continue  # its NotebookResult (missing or malformed) was recorded while staging
            if failure:
                result.notebooks.append(missing_notebook(name, source, "grading failed", failure))
            else:
                result.notebooks.append(self._collect(submission, name, source))
        order = list(sources)
        result.notebooks.sort(key=lambda nb: order.index(nb.name))
        if staged and not failure:
            self._feedback(submission, result)
        return result

    def _stage(self, submission: Submission, sources: dict, result: LabResult) -> set[str]:
        """Copy the readable notebooks into the workspace; record missing and malformed ones."""
        target = self.workspace.path("submitted", submission.student, submission.lab)
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        staged = set()
        for extra in sorted(p.name for p in submission.folder.glob("*.ipynb") if p.stem not in sources):
            result.problems.append(f"{extra}: not a notebook of {submission.lab}; ignored")
        for name, source in sources.items():
            path = submission.folder / f"{name}.ipynb"
            if not path.is_file():
                result.notebooks.append(missing_notebook(name, source, "missing", f"{name}.ipynb was not submitted"))
                continue
            try:
                read_notebook(path)
            except MalformedNotebook as error:
                result.notebooks.append(missing_notebook(name, source, "malformed", f"{name}.ipynb is unreadable: {error}"))
                continue
            shutil.copy2(path, target / path.name)
            staged.add(name)
        timestamp_file = submission.folder / "timestamp.txt"
        if timestamp_file.is_file():
            shutil.copy2(timestamp_file, target / "timestamp.txt")
        return staged

    def _autograde(self, submission: Submission) -> str | None:
        """Run nbgrader autograde for one student in its own process; the failure reason, or None."""
        cells = sum(len(nb.cells) for nb in self.source_notebooks(submission.lab).values())
        limit = self.workspace.timeout * (cells + 2) + 300
        try:
            completed = self.workspace.run_nbgrader(
                "autograde", submission.lab, "--student", submission.student, "--force", timeout=limit)
        except Exception as error:  # subprocess.TimeoutExpired and OS errors alike
            return f"grading was stopped: {type(error).__name__}: {error}"
        log = completed.stdout + completed.stderr
        if completed.returncode != 0 or "There was an error processing" in log:
            errors = [line for line in log.splitlines() if "| ERROR]" in line][-5:]
            return "nbgrader could not grade this submission: " + (" / ".join(errors) or f"exit code {completed.returncode}")
        return None

    def _collect(self, submission: Submission, name: str, source) -> NotebookResult:
        from nbgrader.api import Gradebook

        path = self.workspace.path("autograded", submission.student, submission.lab, f"{name}.ipynb")
        if not path.is_file():
            return missing_notebook(name, source, "grading failed", "nbgrader produced no graded notebook")
        graded = nbformat.read(path, as_version=4)
        cells_by_id = {cell.metadata["nbgrader"]["grade_id"]: cell for cell in grade_cells(graded)}
        with Gradebook(f"sqlite:///{self.workspace.path('gradebook.db')}", COURSE_ID) as gradebook:
            notebook = gradebook.find_submission_notebook(name, submission.lab, submission.student)
            scores = {grade.name: (float(grade.score or 0.0), float(grade.max_score)) for grade in notebook.grades}
        result = NotebookResult(name=name, status="graded")
        for source_cell in grade_cells(source):
            grade_id = source_cell.metadata["nbgrader"]["grade_id"]
            points, max_points = scores.get(grade_id, (0.0, float(source_cell.metadata["nbgrader"]["points"])))
            cell = cells_by_id.get(grade_id, source_cell)
            result.cells.append(classify_cell(cell, points, max_points, self.workspace.timeout))
        return result

    def _feedback(self, submission: Submission, result: LabResult) -> None:
        completed = self.workspace.run_nbgrader(
            "generate_feedback", submission.lab, "--student", submission.student, "--force", timeout=600)
        feedback_dir = self.workspace.path("feedback", submission.student, submission.lab)
        if completed.returncode != 0 or not feedback_dir.is_dir():
            result.problems.append("feedback HTML could not be generated (see the nbgrader log in the workspace)")
            return
        target = self.out_dir / "feedback" / submission.student / submission.lab
        target.mkdir(parents=True, exist_ok=True)
        for notebook in result.notebooks:
            html = feedback_dir / f"{notebook.name}.html"
            if html.is_file():
                shutil.copy2(html, target / html.name)
                notebook.feedback = str((target / html.name).relative_to(self.out_dir))


def grade(submissions_dir: Path, out_dir: Path, *, solutions_dir: Path, known_labs: list[str],
          only_lab: str | None = None, timeout: int = 120, workspace_dir: Path | None = None, jobs: int = 1,
          on_progress: Callable[[Submission, LabResult | None], None] | None = None
          ) -> tuple[list[LabResult], list[str], list[Workspace]]:
    """Grade every submission; returns the results (in discovery order), the folders that were not
    graded, and the workspaces used.

    ``jobs`` > 1 grades that many submissions at once, each worker in a workspace (and gradebook)
    of its own, so their nbgrader processes never contend for one database.
    """
    if jobs < 1:
        raise GradingError(f"jobs must be at least 1, got {jobs}")
    discovery = discover_submissions(submissions_dir, known_labs, only_lab)
    out_dir.mkdir(parents=True, exist_ok=True)
    jobs = max(1, min(jobs, len(discovery.submissions)))
    workspaces = [
        Workspace.create(None if workspace_dir is None else workspace_dir / f"worker-{index}", timeout=timeout)
        for index in range(jobs)
    ]
    shares = [discovery.submissions[index::jobs] for index in range(jobs)]
    results: dict[int, LabResult] = {}
    position = {id(submission): index for index, submission in enumerate(discovery.submissions)}

    def work(workspace: Workspace, share: list[Submission]) -> None:
        grader = Grader(solutions_dir, out_dir, workspace)
        for submission in share:
            if on_progress:
                on_progress(submission, None)
            result = _grade_safely(grader, submission)
            results[position[id(submission)]] = result
            if on_progress:
                on_progress(submission, result)

    if jobs == 1:
        work(workspaces[0], shares[0])
    else:
        with ThreadPoolExecutor(max_workers=jobs) as pool:
            for future in [pool.submit(work, ws, share) for ws, share in zip(workspaces, shares)]:
                future.result()  # re-raise a GradingError (a broken lab) from any worker
    return [results[index] for index in sorted(results)], discovery.problems, workspaces


def _grade_safely(grader: Grader, submission: Submission) -> LabResult:
    try:
        return grader.grade_one(submission)
    except GradingError:
        raise  # the lab itself is broken (generate_assignment failed): no grade would be fair
    except Exception as error:  # anything else is this submission's problem, not the batch's
        result = LabResult(submission.student, submission.lab,
                           problems=[f"grading crashed: {type(error).__name__}: {error}"])
        for name, source in grader.source_notebooks(submission.lab).items():
            result.notebooks.append(missing_notebook(name, source, "grading failed", result.problems[0]))
        return result
