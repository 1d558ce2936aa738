"""Autograding submissions of one lab in an nbgrader workspace: ``SUBMISSIONS/<student>/<lab>/<notebook>.ipynb``.

``discover_submissions`` finds the student and lab folders (anything else is reported, never
fatal). ``Grader`` grades students of one lab in a workspace where the lab's release was generated
(which also records the lab's test cells and points in nbgrader's gradebook), with the student
edition of ``course_lib`` for that lab (``build_editions``; its references stubbed, see ``edition``).
Each student's notebooks are validated, copied in, and autograded by nbgrader in a process of its
own with a time limit, so one hostile submission cannot stop the others. Inside it,
``execute.IsolatedExecute`` runs the student's code in a sandboxed kernel on the student edition and
the test cells in nbgrader's own process. Scores come from the gradebook; the reason for every lost
point comes from the autograded notebook's outputs. Feedback HTML is rendered with the hidden tests
scrubbed out.

A class is graded one (student, lab) at a time on Dask workers (``dispatch.grade``); each worker
keeps one workspace per lab and grades in it with a ``Grader`` (``worker.grade_task``).
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

from autograde.edition import build_edition
from autograde.execute import GradingSettings
from autograde.due import read_timestamp
from autograde.feedback import finish_page
from autograde.grader_limits import stopped_by_limit
from autograde.intake import match_chapter
from autograde.layout import COURSE_ID, LAB_NAME, SAFE_ID, GradingError, Workspace, gpu_available
from autograde.lost_points import read_record, record_path
from autograde.release import generate_release
from autograde.results import (NEEDS_GPU, CellResult, LabResult, NotebookResult, classify_cell,
                               missing_notebook, needs_gpu, written_cell)
from course_lib.handin.notebooks import MalformedNotebook, grade_cells, is_written_answer, nbgrader_meta, read_notebook


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
    """Grades the submissions of one lab in one workspace; see ``grade`` for the whole batch.

    All students of the lab are autograded by one nbgrader process (nbgrader grades them one
    after another, each notebook in a fresh kernel), which saves a few seconds of start-up per
    student. If that process fails or overruns its time limit, every student it did not finish
    is graded again in a process of their own, so one hostile submission costs only itself.
    """

    def __init__(self, solutions_dir: Path, out_dir: Path, workspace: Workspace, lab: str,
                 settings: GradingSettings, *, one_process: bool = False):
        self.one_process = one_process  # one student: autograde and feedback in one process (nbgrader_job)
        self.solutions_dir = solutions_dir
        self.out_dir = out_dir
        self.workspace = workspace
        self.lab = lab
        self.settings = settings
        self.sources = {path.stem: nbformat.read(path, as_version=4)
                        for path in sorted((solutions_dir / lab).glob("*.ipynb"))}
        self.code_cells: dict[str, list[int]] = {}   # student -> code cells of each staged notebook
        self.renamed: dict[str, dict[str, str]] = {}  # student -> {chapter: the file name graded as it}
        # student -> {notebook: the instructor's record of its lost points (lost_points)}: never in a result
        self.instructor_records: dict[str, dict[str, dict]] = {}

    def grade_all(self, submissions: list[Submission], *, release: bool = True) -> list[LabResult]:
        """Grade ``submissions``; ``release=False`` when generate_assignment already ran in this workspace."""
        if release:
            generate_release(self.solutions_dir, self.lab, self.workspace)
        self.workspace.extra_environment = self.settings.to_environment()
        results = {s.student: LabResult(s.student, s.lab) for s in submissions}
        for submission in submissions:   # no record of an earlier grading may pass for this one's
            shutil.rmtree(record_path(self.workspace.root, submission.student, self.lab, "x").parent, ignore_errors=True)
        staged = {s.student: self._stage(s, results[s.student]) for s in submissions}
        to_grade = [student for student, names in staged.items() if names]
        if self.one_process and len(to_grade) == 1:
            failures, feedback_failed = self._autograde_with_feedback(to_grade[0])
        else:
            failures, feedback_failed = self._autograde(to_grade), None
        for student in to_grade:
            for name in staged[student]:
                if failures.get(student):
                    results[student].notebooks.append(
                        missing_notebook(name, self.sources[name], "grading failed", failures[student]))
                else:
                    results[student].notebooks.append(self._collect(student, name))
                    record = read_record(record_path(self.workspace.root, student, self.lab, name))
                    if record is not None:
                        self.instructor_records.setdefault(student, {})[name] = record
        self._feedback([student for student in to_grade if not failures.get(student)], results,
                       failed=feedback_failed)
        order = list(self.sources)
        for result in results.values():
            result.notebooks.sort(key=lambda nb: order.index(nb.name))
            for notebook in result.notebooks:
                notebook.handed_in_as = self.renamed.get(result.student, {}).get(notebook.name)
        return [results[s.student] for s in submissions]

    def _stage(self, submission: Submission, result: LabResult) -> set[str]:
        """Copy the readable notebooks into the workspace; record missing and malformed ones.

        A chapter whose notebook is missing is looked for among the other notebooks handed in: a
        renamed copy (``01_tokenization-Copy1.ipynb``, ``01_Tokenization (1).ipynb``, or a notebook
        holding that chapter's cells) is graded as the chapter, and the result says so.
        """
        target = self.workspace.path("submitted", submission.student, self.lab)
        if target.exists():
            shutil.rmtree(target)
        target.mkdir(parents=True)
        staged = set()
        chosen = self._chapter_files(submission, result)
        for name, source in self.sources.items():
            path = chosen.get(name)
            if path is not None and path.is_symlink():
                result.notebooks.append(missing_notebook(name, source, "malformed",
                                                         f"{path.name} is a link, not a notebook: not graded"))
                continue
            if path is None or not path.is_file():
                result.notebooks.append(missing_notebook(name, source, "missing", f"{name}.ipynb was not submitted"))
                continue
            try:
                submitted = read_notebook(path)
            except MalformedNotebook as error:
                result.notebooks.append(missing_notebook(name, source, "malformed", f"{path.name} is unreadable: {error}"))
                continue
            shutil.copy2(path, target / f"{name}.ipynb")
            staged.add(name)
            if path.name != f"{name}.ipynb":
                self.renamed.setdefault(submission.student, {})[name] = path.name
            # Test cells nbgrader restores run too: count the larger of the two.
            self.code_cells.setdefault(submission.student, []).append(max(_code_cells(submitted), _code_cells(source)))
        timestamp_file = submission.folder / "timestamp.txt"
        if timestamp_file.is_file() and not timestamp_file.is_symlink():
            stamp, problem = read_timestamp(timestamp_file)
            if stamp:
                (target / "timestamp.txt").write_text(stamp + "\n", encoding="utf-8")
                result.timestamp = stamp
            if problem:
                result.problems.append(problem)
        return staged

    def _chapter_files(self, submission: Submission, result: LabResult) -> dict[str, Path]:
        """{chapter: the file graded as it}: its own name, else a renamed copy; the others are reported."""
        files = {path.name: path for path in submission.folder.glob("*.ipynb")}
        chosen = {name: files[f"{name}.ipynb"] for name in self.sources if f"{name}.ipynb" in files}
        ids = {name: frozenset(nbgrader_meta(cell).get("grade_id") for cell in source.cells
                               if nbgrader_meta(cell).get("grade_id")) for name, source in self.sources.items()}
        for file_name in sorted(set(files) - {path.name for path in chosen.values()}):
            missing = {name: ids[name] for name in self.sources if name not in chosen}
            chapter, how = match_chapter(Path(file_name).stem, missing, files[file_name], by_number=True) if missing \
                else (None, "")
            if chapter is not None:
                chosen[chapter] = files[file_name]
                result.problems.append(f"{file_name}: graded as {chapter}.ipynb (matched by {'name' if how == 'renamed' else how}; "
                                       f"no {chapter}.ipynb was handed in): renamed?")
                continue
            near, _ = match_chapter(Path(file_name).stem, ids, files[file_name], by_number=True)
            hint = f" (did you mean {near}.ipynb? that one was handed in too, and is the one graded)" if near else ""
            result.problems.append(f"{file_name}: not a notebook of {self.lab}; ignored{hint}")
        return chosen

    def _time_limit(self, students: list[str]) -> float:
        """How long the nbgrader process grading ``students`` may run: per notebook the smaller of its code
        cells each at the cell limit and the notebook limit, plus start-up (``KernelLimits.job_seconds``)."""
        limits = self.settings.limits
        return sum(limits.job_seconds(self.code_cells.get(student, [0]), self.workspace.timeout)
                   for student in students) + 60

    def _finished(self, student: str) -> bool:
        folder = self.workspace.path("autograded", student, self.lab)
        submitted = self.workspace.path("submitted", student, self.lab)
        return all((folder / path.name).is_file() for path in submitted.glob("*.ipynb"))

    def _autograde(self, students: list[str]) -> dict[str, str]:
        """Autograde ``students``: all in one process, then any unfinished one alone. Failure reasons by student."""
        if not students:
            return {}
        batch_error = self._run_autograde(students)
        unfinished = [s for s in students if not self._finished(s)] if batch_error else []
        if batch_error and len(students) == 1:
            return {students[0]: batch_error}
        return {s: error for s in unfinished if (error := self._run_autograde([s]))}

    def _run_autograde(self, students: list[str]) -> str | None:
        """One nbgrader autograde process; the failure reason, or None."""
        selection = ["--student", students[0]] if len(students) == 1 else []
        try:
            completed = self.workspace.run_nbgrader("autograde", self.lab, *selection, "--force",
                                                    timeout=self._time_limit(students))
        except Exception as error:  # subprocess.TimeoutExpired and OS errors alike
            return f"grading was stopped: {type(error).__name__}: {error}"
        if stopped := stopped_by_limit(completed.returncode, self.settings.limits):
            return stopped
        log = completed.stdout + completed.stderr
        if completed.returncode != 0 or "There was an error processing" in log:
            errors = [line for line in log.splitlines() if "| ERROR]" in line][-5:]
            return "nbgrader could not grade this submission: " + (" / ".join(errors) or f"exit code {completed.returncode}")
        return None

    def _autograde_with_feedback(self, student: str) -> tuple[dict[str, str], bool]:
        """Autograde one student and render the feedback in one process; (failure reasons, feedback failed)."""
        from autograde.nbgrader_job import MARKER

        limit = self._time_limit([student])   # feedback rendering included
        try:
            completed = self.workspace.run_module("autograde.nbgrader_job",
                                                  f"--config={self.workspace.config_path}", self.lab, student,
                                                  timeout=limit)
        except Exception as error:  # subprocess.TimeoutExpired and OS errors alike
            return {student: f"grading was stopped: {type(error).__name__}: {error}"}, True
        if stopped := stopped_by_limit(completed.returncode, self.settings.limits):
            return {student: stopped}, True
        lines = [line for line in completed.stdout.splitlines() if line.startswith(MARKER)]
        if not lines:
            tail = " / ".join((completed.stderr or "").strip().splitlines()[-3:])
            return {student: f"nbgrader could not grade this submission: exit code {completed.returncode} {tail}"}, True
        outcome = json.loads(lines[-1][len(MARKER):])
        if not outcome["autograde"]["success"]:
            detail = " / ".join(outcome["autograde"]["error"]) or f"exit code {completed.returncode}"
            return {student: f"nbgrader could not grade this submission: {detail}"}, True
        return {}, not (outcome.get("feedback") or {}).get("success")

    def _collect(self, student: str, name: str) -> NotebookResult:
        from nbgrader.api import Gradebook

        source = self.sources[name]
        path = self.workspace.path("autograded", student, self.lab, f"{name}.ipynb")
        if not path.is_file():
            return missing_notebook(name, source, "grading failed", "nbgrader produced no graded notebook")
        graded = nbformat.read(path, as_version=4)
        cells_by_id = {cell.metadata["nbgrader"]["grade_id"]: cell for cell in grade_cells(graded)}
        with Gradebook(f"sqlite:///{self.workspace.path('gradebook.db')}", COURSE_ID) as gradebook:
            notebook = gradebook.find_submission_notebook(name, self.lab, student)
            scores = {grade.name: (float(grade.score or 0.0), float(grade.max_score)) for grade in notebook.grades}
        result = NotebookResult(name=name, status="graded")
        gpu = gpu_available()
        for source_cell in grade_cells(source):
            grade_id = source_cell.metadata["nbgrader"]["grade_id"]
            points, max_points = scores.get(grade_id, (0.0, float(source_cell.metadata["nbgrader"]["points"])))
            if is_written_answer(source_cell):   # the source decides, never the submission's metadata
                result.cells.append(written_cell(grade_id, max_points, cells_by_id.get(grade_id)))
                continue
            if not gpu and needs_gpu(source_cell):
                result.cells.append(CellResult(grade_id, 0.0, max_points, NEEDS_GPU, "skipped: needs a GPU"))
                continue
            cell = cells_by_id.get(grade_id, source_cell)
            result.cells.append(classify_cell(cell, points, max_points, self.workspace.timeout))
        return result

    def _feedback(self, students: list[str], results: dict[str, LabResult], *, failed: bool | None = None) -> None:
        """Feedback HTML for every graded student, copied to the output folder: rendered in one nbgrader
        process, or (``failed`` not None) already rendered by ``_autograde_with_feedback``."""
        if not students:
            return
        if failed is None:
            selection = ["--student", students[0]] if len(students) == 1 else []
            completed = self.workspace.run_nbgrader("generate_feedback", self.lab, *selection, "--force", timeout=1800)
            failed = completed.returncode != 0
        for student in students:
            feedback_dir = self.workspace.path("feedback", student, self.lab)
            target = self.out_dir / "feedback" / student / self.lab
            written = False
            for notebook in results[student].notebooks:
                html = feedback_dir / f"{notebook.name}.html"
                if notebook.status == "graded" and html.is_file():
                    target.mkdir(parents=True, exist_ok=True)
                    page = finish_page(html.read_text(encoding="utf-8", errors="replace"), notebook)
                    (target / html.name).write_text(page, encoding="utf-8")
                    notebook.feedback = str((target / html.name).relative_to(self.out_dir))
                    written = True
            if not written and failed:
                results[student].problems.append("feedback HTML could not be generated (nbgrader generate_feedback failed)")


def _code_cells(notebook) -> int:
    return sum(cell.cell_type == "code" for cell in notebook.cells)


def locked_when_grading(lab: str, known_labs: list[str]) -> list[str]:
    """The labs a grading kernel for ``lab`` locks: that lab and every later one (earlier labs are past due)."""
    from course_lib.exercises import LABS

    return sorted(other for other in set(known_labs) | set(LABS) if other >= lab)


def build_editions(editions_dir: Path, labs: list[str], known_labs: list[str]) -> dict[str, Path]:
    """One student edition per lab to grade, each in ``editions_dir/<lab>`` (the folder put on PYTHONPATH)."""
    editions = {}
    for lab in sorted(set(labs)):
        build_edition(editions_dir / lab, locked_when_grading(lab, known_labs), grading=True)
        editions[lab] = editions_dir / lab
    return editions


