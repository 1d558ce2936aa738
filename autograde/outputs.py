"""The one writer: grades.csv, report.json and one nbgrader gradebook.db, built from the result files.

Workers never write these. After a run (finished, stopped or resumed) this process reads every
``OUT/results/<lab>/<student>.json`` and writes the class's files, each to a temporary name renamed
into place, so a reader (or a crash) never meets a half-written one:

- ``grades.csv`` and ``report.json`` as before (``report``);
- ``gradebook.db``: nbgrader's gradebook with every lab (generate_assignment's cells and points) and
  every student's autograded scores, next to ``autograded/<student>/<lab>/`` and an
  ``nbgrader_config.py``, so ``OUT`` opens in formgrader for manual review.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from autograde.due import DueTimes
from autograde.layout import COURSE_ID, Workspace
from autograde.report import write_outputs
from autograde.results import LabResult
from autograde.store import ResultStore, StoredResult, atomic_write_bytes

__all__ = ["ClassOutputs", "merge_gradebook", "write_class_outputs"]

FORMGRADER_CONFIG = '''\
# Written by `course grade`: open this folder in formgrader (`jupyter lab` here, then Nbgrader > Formgrader)
# to review the autograded notebooks; gradebook.db holds every lab and every student's scores.
c = get_config()
c.CourseDirectory.root = {root!r}
c.CourseDirectory.course_id = {course_id!r}
'''


@dataclass
class ClassOutputs:
    grades: Path
    report: Path
    gradebook: Path | None
    results: list[LabResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)   # unreadable result files, cells the gradebook lacks


def merge_gradebook(out_dir: Path, solutions_dir: Path, stored: list[StoredResult],
                    due: DueTimes = DueTimes()) -> tuple[Path, list[str]]:
    """Build ``out_dir/gradebook.db`` from the result files; returns it and notes on what did not fit.

    With ``due``, each lab's due date is set, so formgrader shows how late each hand-in claims to be.
    """
    from nbgrader.api import Gradebook, MissingEntry
    from nbgrader.utils import parse_utc

    from autograde.release import generate_release
    from autograde.snapshot import prepared_earlier, write_workspace_files

    notes: list[str] = []
    labs = sorted({entry.result.lab for entry in stored})
    with tempfile.TemporaryDirectory(prefix="course-gradebook-") as scratch:
        workspace = Workspace.create(Path(scratch))
        prepared = prepared_earlier(solutions_dir, labs[0]) if len(labs) == 1 and (solutions_dir / labs[0]).is_dir() \
            else None
        if prepared:   # the gradebook this run prepared for its one lab: nbgrader need not run again
            write_workspace_files(workspace.root, prepared)
        for lab in labs if not prepared else []:
            if (solutions_dir / lab).is_dir():
                generate_release(solutions_dir, lab, workspace)   # the lab, its notebooks, cells and points
            else:
                notes.append(f"gradebook: {lab} is not in {solutions_dir}; its results are left out")
        database = workspace.path("gradebook.db")
        with Gradebook(f"sqlite:///{database}", COURSE_ID) as gradebook, warnings.catch_warnings():
            # nbgrader 0.9's update_or_create_submission trips SQLAlchemy 2's autoflush warning; harmless.
            warnings.simplefilter("ignore")
            known = {assignment.name for assignment in gradebook.assignments}
            for lab in known:
                if due.for_lab(lab) is not None:
                    gradebook.update_or_create_assignment(lab, duedate=due.for_lab(lab))
            for entry in stored:
                result = entry.result
                if result.lab not in known:
                    continue
                gradebook.update_or_create_student(result.student)
                timestamp = None
                if result.timestamp:
                    try:
                        timestamp = parse_utc(result.timestamp)
                    except Exception:
                        notes.append(f"gradebook: {result.student}/{result.lab}: timestamp "
                                     f"{result.timestamp!r} is not a date; left out")
                gradebook.update_or_create_submission(result.lab, result.student, timestamp=timestamp)
                for notebook in result.notebooks:
                    for cell in notebook.cells:
                        try:
                            grade = gradebook.find_grade(cell.grade_id, notebook.name, result.lab, result.student)
                        except MissingEntry:
                            notes.append(f"gradebook: {result.student}/{result.lab}: no cell {notebook.name}/"
                                         f"{cell.grade_id} in the lab's source any more; left out")
                            continue
                        grade.auto_score = cell.points
                        grade.needs_manual_grade = False
                gradebook.db.commit()
        target = out_dir / "gradebook.db"
        staging = out_dir / f".gradebook.db.{os.getpid()}.tmp"
        shutil.copyfile(database, staging)
        os.replace(staging, target)
    atomic_write_bytes(out_dir / "nbgrader_config.py",
                       FORMGRADER_CONFIG.format(root=str(out_dir.resolve()), course_id=COURSE_ID).encode())
    return target, notes


def write_class_outputs(out_dir: Path, solutions_dir: Path, *, problems: list[str], device: str, timeout: int,
                        gradebook: bool = True, limits: dict | None = None, due: DueTimes = DueTimes()) -> ClassOutputs:
    """grades.csv, report.json and (``gradebook``) gradebook.db from every result file in ``out_dir``."""
    stored, unreadable = ResultStore(out_dir).all()
    results = [entry.result for entry in stored]
    grades_path, report_path = write_outputs(out_dir, results, [*problems, *unreadable], device=device,
                                             timeout=timeout, limits=limits, due=due)
    outputs = ClassOutputs(grades_path, report_path, None, results, list(unreadable))
    if gradebook and stored:
        outputs.gradebook, notes = merge_gradebook(out_dir, solutions_dir, stored, due)
        outputs.notes += notes
    return outputs
